"""Spot checks in a run, end to end through the CLI (tiny model): the round record counts what was checked,
a checked poisoned message is a rejection and a ban strike, and an unchecked one is accepted."""

import json

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics

COMMON = ["rounds=3", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=6",
          "eval.every=10", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0",
          "swarm.protocol.enforce_length=false", "swarm.malicious=[1]", "attack.kind=injection"]


def test_a_spot_checked_run_counts_checks_rejects_what_it_checks_and_bans(tmp_path, tiny_model_dir):
    rc = main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=s", *COMMON,
               "defenses=[{kind: replay, spot_fraction: 0.5, spot_seed: 4}]", "swarm.protocol.ban_after=1"])
    assert rc == 0
    records = read_metrics(tmp_path / "s")
    first = records[0]
    checked, skipped = first["defense/replay/spot_checked"], first["defense/replay/spot_skipped"]
    assert checked + skipped == first["defense/received"] == 8  # 4 honest and 4 poisoned messages reach replay
    assert 0 < checked < 8
    peers = [json.loads(line) for line in (tmp_path / "s" / "peers.jsonl").read_text().splitlines()]
    rejected = peers[0]["peers"]["1"]["defense"].get("replay", 0)
    assert rejected == first["defense/replay/rejected"] == round(first["defense/replay/detection_rate"] * 4)
    assert first["defense/any/false_positive_rate"] == 0.0 and rejected <= checked
    # with this secret 3 of the 4 poisoned messages were checked and rejected, one went through unchecked
    assert rejected == 3 and first["defense/replay/positions_checked"] == first["defense/replay/positions_total"]
    # a strike bans the attacker at ban_after 1: later rounds refuse it before any defense
    assert peers[0]["banned"] == {"1": 0} and peers[1]["peers"]["1"]["rejected"] == {"banned": 4}
    assert records[1]["defense/poisoned_received"] == 0


def test_a_spot_seed_is_refused_where_peers_are_other_processes(tmp_path, capsys):
    """Review u36 D: a spot_seed in a config a peer can read tells it which messages are checked (every one of 93
    poisons went through a seeded receiver unchecked); with separate processes it is refused before anything loads,
    in-process (simulations, these tests) it stays."""
    for transport, more in (("distributed", []), ("hivemind", ["swarm.hivemind.node=0"])):
        rc = main(["run", f"out_dir={tmp_path}", f"swarm.transport={transport}", *more,
                   "defenses=[{kind: tolerant_replay, spot_fraction: 0.1, spot_seed: 7}]"])
        err = capsys.readouterr().err
        assert rc == 2 and "spot_seed=7" in err and f"swarm.transport={transport} remove spot_seed" in err, err
        assert len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # nothing written


def test_spot_checks_are_refused_where_each_rank_holds_its_own_weights(tmp_path, capsys):
    """Review u36f: with one weight copy per rank, a poison one honest rank catches and another leaves unchecked
    enters only the other's update; one AdamW step apart (lr 2e-5, SmolLM2-135M), fast and tolerant replay
    rejected 12 of 16 of the other rank's honest completions. Until catches are shared, a spot fraction below 1 is
    refused in one line where peers are other processes (in-process the honest nodes share one copy: allowed)."""
    for transport, more in (("distributed", []), ("hivemind", ["swarm.hivemind.node=0"])):
        for share in ("spot_fraction: 0.5", "position_fraction: 0.5"):
            rc = main(["run", f"out_dir={tmp_path}", f"swarm.transport={transport}", *more,
                       f"defenses=[{{kind: replay, {share}}}]"])
            err = capsys.readouterr().err
            assert rc == 2 and f"swarm.transport={transport}: each rank checks its own share" in err, err
            assert "set spot_fraction=1 and position_fraction=1" in err and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # nothing written
