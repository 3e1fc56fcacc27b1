"""Protocol attack kinds in the in-process swarm (:meth:`Swarm.route`): what each receiver gets, with
the protocol's rules off (what the content defenses see alone) and on (signatures, seed binding, shares).

Every run: 4 nodes, node 3 malicious, horizontal, B=2 prompts × G=4, so each node owns one slot of each
prompt: 6 honest messages and 2 of the attacker's per round."""

import json

import pytest

from dgrpo.cli import main
from dgrpo.config import load_config
from dgrpo.metrics.logger import read_metrics
from dgrpo.swarm.schedule import horizontal_prompts, horizontal_slots
from dgrpo.training.build import build_run

COMMON = ["rounds=2", "swarm.nodes=4", "swarm.malicious=[3]", "swarm.group_size=4", "swarm.prompts_per_round=2",
          "sampling.max_new_tokens=6", "eval.every=2", "eval.n_prompts=2", "eval.greedy=false", "eval.drift=false",
          "task.n_train=20", "task.n_val=4", "task.few_shot=0", "swarm.protocol.enforce_length=false"]
OFF = ["swarm.protocol.sign=false", "swarm.protocol.enforce_shares=false", "swarm.protocol.bind_seeds=false"]


def _rounds(tmp_path, model, name, *extra) -> list[dict]:
    rc = main(["run", f"model.name={model}", f"out_dir={tmp_path}", f"name={name}", *COMMON, *extra])
    assert rc == 0
    return [r for r in read_metrics(tmp_path / name) if r["round"] < 2]


# received and labelled poisoned per round; refused per round (by a rule, named in peers.jsonl) and of those counted in
# the record (swarm/invalid: signed by their sender for this run, round and slot): hand-counted from each attack
@pytest.mark.parametrize("attack,rules,received,poisoned,refused,counted", [
    # factor 4: the 2 poisons and 6 copies under indices 4..15; shares refuse the copies (node 3 signed them)
    ("flooding", OFF, [14, 14], [8, 8], [0, 0], [0, 0]),
    ("flooding", [], [8, 8], [2, 2], [6, 6], [6, 6]),
    # claims node 0: accepted as node 0's without signatures; with them, "identity: signed by node 3" (another's slot)
    ("forged_identity", OFF, [8, 8], [2, 2], [0, 0], [0, 0]),
    ("forged_identity", [], [6, 6], [0, 0], [2, 2], [0, 0]),
    # round 1 re-sends round 0's 6 honest messages as current; signed by node 3, they claim nodes 0-2 (round 0)
    ("replayed_round", OFF, [8, 14], [2, 8], [0, 0], [0, 0]),
    ("replayed_round", [], [8, 8], [2, 2], [0, 6], [0, 0]),
])
def test_protocol_attacks_reach_the_learner_unless_the_protocol_refuses_them(tmp_path, tiny_model_dir, attack, rules,
                                                                             received, poisoned, refused, counted):
    recs = _rounds(tmp_path, tiny_model_dir, "r", f"attack.kind={attack}", *rules,
                   "defenses=[{kind: reward_outlier}]")  # (a defense, so the record counts what was received)
    assert [r["defense/received"] for r in recs] == received
    assert [r["defense/poisoned_received"] for r in recs] == poisoned
    peers = [json.loads(line) for line in (tmp_path / "r" / "peers.jsonl").read_text().splitlines()]
    assert [sum(n for p in line["peers"].values() for n in p["rejected"].values()) for line in peers] == refused
    assert [r["swarm/invalid"] for r in recs] == counted
    assert [r["swarm/messages"] for r in recs] == [n + c for n, c in zip(received, counted)]


def test_route_gives_each_receiver_its_view_and_labels_what_the_attacker_made(tmp_path, tiny_model_dir):
    cfg = load_config(None, [f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=e", *COMMON,
                             "attack.kind=equivocation"])
    run = build_run(cfg)
    swarm = run.swarm
    prompts = horizontal_prompts(run.task.train, 2, cfg.seed, 0)
    written = swarm.write({k: horizontal_slots(prompts, 4, 4, k) for k in swarm.hosted}, 0)
    gathered = [m for k in sorted(written) for m in written[k]]
    poison = {m.key: m.text for m in written[3]}
    views = {k: swarm.route(gathered, k, 0) for k in (0, 1, 2)}
    for k, view in views.items():
        theirs = [m for m in view if m.node == 3]
        assert len(view) == 8 and [m.key for m in theirs] == list(poison)
        # peers 0 and 2 (even positions) get the poison, peer 1 the sample of node 3's assigned seed
        assert all((m.text == poison[m.key]) == (k != 1) for m in theirs)
        assert all(swarm.routed_labels[m] == ("honest" if k == 1 else "poisoned") for m in theirs)
        assert all(swarm.protocol.verifier.identify(m) == (3, None) for m in theirs)  # re-signed by node 3
    assert views[0][:6] == gathered[:6]  # the honest messages pass unchanged, in order
    # an honest sample from the assigned seed: what node 3 would send honestly
    honest = swarm.policies[0].generate(run.task, [swarm.problems[m.prompt_id] for m in written[3]],
                                        [m.seed for m in written[3]])
    assert [m.text for m in views[1] if m.node == 3] == [t for _, t in honest]
    assert swarm.route(gathered, 3, 0) == gathered  # not an honest receiver: unchanged


def test_without_a_protocol_attacker_route_changes_nothing(tmp_path, tiny_model_dir):
    cfg = load_config(None, [f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=h", *COMMON,
                             "attack.kind=injection"])
    run = build_run(cfg)
    prompts = horizontal_prompts(run.task.train, 2, cfg.seed, 0)
    written = run.swarm.write({k: horizontal_slots(prompts, 4, 4, k) for k in run.swarm.hosted}, 0)
    gathered = [m for k in sorted(written) for m in written[k]]
    assert run.swarm.route(gathered, 0, 0) == gathered and not run.swarm.routed_labels


def test_skipping_the_first_evaluation_keeps_the_last(tmp_path, tiny_model_dir):
    evaluated, records = {}, {}
    for first in ("true", "false"):
        assert main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", f"name=first_{first}", *COMMON,
                     "eval.every=1", f"eval.first={first}", "attack.kind=injection"]) == 0
        records[first] = read_metrics(tmp_path / f"first_{first}")
        evaluated[first] = [r["round"] for r in records[first] if "eval/accuracy" in r]
    assert evaluated == {"true": [0, 1, 2], "false": [1, 2]}
    # the rounds and later evaluations do not depend on it (per-sequence seeds): the same numbers
    same = [k for k in records["true"][-1] if not k.startswith("time/")]
    assert {k: records["false"][-1].get(k) for k in same} == {k: records["true"][-1][k] for k in same}
    assert records["false"][0]["train/loss"] == records["true"][0]["train/loss"]


def test_a_forged_message_keeps_the_label_the_attacker_wrote_it_with(tmp_path, tiny_model_dir):
    """Vertical: node 3 writes G/2 poisons and G/2 wrong-answer fillers per group ("malicious", counted as
    neither poisoned nor honest); forged as node 0's, each keeps its own label."""
    from dgrpo.swarm.schedule import vertical_prompts, vertical_slots

    cfg = load_config(None, [f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=v", *COMMON, *OFF,
                             "swarm.mode=vertical", "swarm.prompts_per_round=4", "attack.kind=forged_identity"])
    run = build_run(cfg)
    swarm = run.swarm
    slots = {k: vertical_slots(swarm.attacks[k].choose_prompts(run.task.train, 1, cfg.seed, 0, k) if k in swarm.attacks
                               else vertical_prompts(run.task.train, 1, cfg.seed, 0, k), 4) for k in swarm.hosted}
    written = swarm.write(slots, 0)
    label = {(m.prompt_id, m.index, m.text): swarm.labels[m.key] for m in written[3]}
    assert sorted(label.values()) == ["malicious", "malicious", "poisoned", "poisoned"]
    gathered = [m for k in sorted(written) for m in written[k]]
    forged = [m for m in swarm.route(gathered, 0, 0) if (m.prompt_id, m.index, m.text) in label]
    assert {m.node for m in forged} == {0}
    assert {(m.prompt_id, m.index, m.text): swarm.routed_labels[m] for m in forged} == label


RESUME = [*COMMON, *OFF, "eval.every=2", "attack.kind=replayed_round", "defenses=[{kind: reward_outlier}]"]


def test_a_resumed_run_replays_what_a_straight_run_replays(tmp_path, tiny_model_dir):
    """The last round's messages travel in the checkpoint (replay_memory.json): 3 rounds straight equal
    2 rounds and a resume (round 0 replays nothing: 8 received, then 8 + the 6 honest re-sent)."""
    args = [f"model.name={tiny_model_dir}", *RESUME]
    assert main(["run", *args, "rounds=3", f"out_dir={tmp_path}", "name=straight"]) == 0
    assert main(["run", *args, "rounds=2", f"out_dir={tmp_path}", "name=part"]) == 0
    assert (tmp_path / "part" / "checkpoint" / "replay_memory.json").is_file()
    assert main(["resume", str(tmp_path / "part"), "rounds=3"]) == 0
    got = {n: [r.get("defense/received") for r in read_metrics(tmp_path / n) if "defense/received" in r]
           for n in ("straight", "part")}
    assert got["straight"] == [8, 14, 14] and got["part"] == got["straight"]


@pytest.mark.parametrize("damage", ["delete", "junk", "other_round"])
def test_a_missing_or_damaged_replay_memory_is_refused_in_one_line(tmp_path, tiny_model_dir, capsys, damage):
    import json

    assert main(["run", f"model.name={tiny_model_dir}", *RESUME, "rounds=2", f"out_dir={tmp_path}", "name=p"]) == 0
    path = tmp_path / "p" / "checkpoint" / "replay_memory.json"
    if damage == "delete":
        path.unlink()
    elif damage == "junk":
        path.write_text('{"round": 1, "messages": [{"node": "x"}]}')
    else:
        path.write_text(json.dumps({**json.loads(path.read_text()), "round": 0}))
    capsys.readouterr()
    assert main(["resume", str(tmp_path / "p"), "rounds=3"]) != 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "replay_memory.json" in line]
    assert len(lines) == 1 and lines[0].startswith("dgrpo: ") and "Traceback" not in err
