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
    # swarm/messages counts the copies as delivered; swarm/dropped says how many of them were dropped unread (review
    # r31d F5): the copies peers.jsonl names under the attacker, round by round, and no key at all without copies
    copies = {p["round"]: p["peers"]["3"]["transport"].get("copy", 0) for p in peers}
    assert {r["round"]: r.get("swarm/dropped", 0) for r in recs if "swarm/messages" in r} == copies
    assert all("swarm/dropped" not in r for r in base) and any(copies.values()) == (of != "respelled")
