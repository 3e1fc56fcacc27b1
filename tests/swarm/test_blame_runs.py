"""Issue 31 in whole in-process runs: 4 nodes, node 3 replays the honest nodes' signed messages (``attack.kind=replay``)
with ``swarm.protocol.ban_after=2``. Nobody honest is struck or banned, the attacker is named in ``peers.jsonl`` as
the node that delivered the replays, its own provable breach (one message beyond its slots a round) is its only
strike, and the honest training equals a run whose attacker replays nothing."""

import json

import pytest

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics

COMMON = ["rounds=2", "swarm.nodes=4", "swarm.malicious=[3]", "swarm.group_size=4", "swarm.prompts_per_round=2",
          "sampling.max_new_tokens=6", "eval.every=2", "eval.n_prompts=2", "eval.greedy=false", "eval.drift=false",
          "task.n_train=20", "task.n_val=4", "task.few_shot=0", "threads=1", "swarm.protocol.enforce_length=false",
          "swarm.protocol.ban_after=3"]


def _run(tmp_path, model, name, *extra):
    assert main(["run", f"model.name={model}", f"out_dir={tmp_path}", f"name={name}", *COMMON, *extra]) == 0
    peers = [json.loads(x) for x in (tmp_path / name / "peers.jsonl").read_text().splitlines()]
    bans = json.loads((tmp_path / name / "bans.json").read_text()) if (tmp_path / name / "bans.json").exists() else {}
    return read_metrics(tmp_path / name), peers, bans


def _training(records):
    return [{k: v for k, v in r.items() if k.startswith(("train/", "eval/"))} for r in records]


# of → (the rule its replays are dropped by, how many a round: 3 honest nodes × 2 slots × copies)
@pytest.mark.parametrize("of, rule, per_round", [("respelled", "malformed", 6 * 3), ("copies", "copy", 6 * 3),
                                                 ("other_run", "run", 6 * 3), ("other_round", "round", 6)])
def test_a_replaying_node_gets_nobody_honest_struck_and_is_named(tmp_path, tiny_model_dir, of, rule, per_round):
    recs, peers, bans = _run(tmp_path, tiny_model_dir, "r", "attack.kind=replay", f"attack.of={of}", "attack.copies=3")
    base, _, _ = _run(tmp_path, tiny_model_dir, "b", "attack.kind=injection")  # the same poisons, nothing replayed
    for p in peers:
        for n in ("0", "1", "2"):
            assert p["peers"][n]["accepted"] == 2 and set(p["peers"][n]["rejected"]) <= {"run", "round"}
        # the attacker is named: the replays it delivered, and its own breach (index beyond its slots, a seed strike)
        replays = per_round if of != "other_round" or p["round"] > 0 else 0
        carried = p["peers"]["3"]["transport"]
        if of == "other_round":  # 6 replayed once, the 2 further copies of each: copies of a dropped message
            assert carried == ({"round": 6, "copy": 12} if p["round"] > 0 else {})
        else:
            assert carried == ({rule: replays} if rule != "run" else {"run": 6, "copy": 12})
        assert p["peers"]["3"]["rejected"] == {"seed": 1}
    assert bans["strikes"] == {"3": 2} and bans["banned"] == {}  # the cheater: -1 a round; honest nodes: 0
    assert _training(recs) == _training(base)
    # The record counts what the round read of messages authenticated for this run, round and slot (swarm/messages:
    # accepted + refused): the replays and copies are the attacker's traffic, named in peers.jsonl only (above).
    # Every key but time/* is the run without them, but for node 3's one own message beyond its slots a round (signed
    # by it for this round: read and refused, `seed`). Before: swarm/messages and swarm/invalid counted the replays.
    own = [{**b, "swarm/messages": b["swarm/messages"] + 1, "swarm/invalid": b["swarm/invalid"] + 1}
           if "swarm/messages" in b else b for b in base]
    assert _rest(recs) == _rest(own) and not any("swarm/dropped" in r for r in recs)


def _rest(records):
    """Every key but time/*."""
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


@pytest.mark.parametrize("of", ["respelled", "other_run", "other_round"])
def test_replays_anyone_could_send_leave_the_record_of_the_run_without_them(tmp_path, tiny_model_dir, of):
    """Issue 31's Done-when in process: node 3 sends, beside its own messages (none beyond its slots), its peers' signed
    messages re-spelled, signed for another run, or of the last round, three times each. They verify for no slot of
    this run and round, so they are named in peers.jsonl only (above) and every key of metrics.jsonl but time/* is the
    run whose attacker sends only its own messages (before: swarm/messages and swarm/invalid counted them)."""
    recs, peers, _ = _run(tmp_path, tiny_model_dir, "r", "attack.kind=replay", f"attack.of={of}", "attack.copies=3",
                          "attack.overreach=false")
    base, _, _ = _run(tmp_path, tiny_model_dir, "b", "attack.kind=injection")
    assert sum(sum(p["peers"]["3"]["transport"].values()) for p in peers) >= 6  # (it did replay: named)
    assert _rest(recs) == _rest(base)


def test_sixteen_thousand_copies_leave_the_record_of_the_run_without_them(tmp_path, tiny_model_dir):
    """Issue 31's flood in process (review L1): node 3 sends, beside its own messages, 2,731 copies of each honest
    message of the round (16,386 a round; no message of its own beyond its slots). Every key of metrics.jsonl but
    time/* equals the run whose attacker sends only its own messages (before: swarm/dropped 16,386 a round); the
    copies are named under node 3 in peers.jsonl, and nobody is struck."""
    recs, peers, bans = _run(tmp_path, tiny_model_dir, "r", "attack.kind=replay", "attack.of=copies",
                             "attack.copies=2731", "attack.overreach=false")
    base, _, _ = _run(tmp_path, tiny_model_dir, "b", "attack.kind=injection")
    assert _rest(recs) == _rest(base)
    assert [p["peers"]["3"]["transport"] for p in peers] == [{"copy": 6 * 2731}] * 2
    assert all(p["peers"][n]["accepted"] == 2 and p["peers"][n]["rejected"] == {} for p in peers for n in "0123")
    assert bans == {} or bans["strikes"] == {}
