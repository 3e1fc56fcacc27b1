"""Simulation labels (metrics only) of an attacker's messages that reached the main rank only through relays
(review r31o H6: rank 3 hid its round payloads from node 0, the main rank; its poisons reached node 0 unlabelled
through nodes 1-2's relays and were counted honest: topk's false-positive rate 0.25, no detection rate, where the
clean run has 0.0 and 1.0)."""

import json

import pytest
from test_store_attacks import ARGS, run

from dgrpo.metrics.logger import read_metrics
from dgrpo.swarm.swarm import Swarm
from dgrpo.swarm.validation import Limits
from dgrpo.transports import payload
from dgrpo.types import Message


def _msg(node: int, index: int = 0) -> Message:
    return Message(node, 1, "p", index, "x", (1,), 7, "tok", signature="ab" * 32)


def test_a_relay_labels_only_a_non_honest_signers_messages_and_only_as_poisoned_or_malicious():
    evil, filler, honest = _msg(3, 0), _msg(3, 1), _msg(1, 0)
    other = _msg(3, 2)  # (not in what this node merged: a relay's label of it is not taken)

    def relay(msgs, labels):
        return json.dumps({"messages": [m.to_dict() for m in msgs], "labels": labels}).encode()

    reports = {1: b"junk", 2: relay([honest, evil, filler, other], ["poisoned", "poisoned", "honest", "poisoned"]),
               0: relay([filler], [["poisoned"]])}
    labels: dict = {}
    payload.take_relayed_labels(reports, [honest, evil, filler], labels, honest=[0, 1, 2])
    assert labels == {evil.key: "poisoned"}  # an honest node's message is never relabelled; "honest" says nothing
    payload.take_relayed_labels({2: relay([filler], ["malicious"])}, [evil, filler], labels, honest=[0, 1, 2])
    assert labels == {evil.key: "poisoned", filler.key: "malicious"}
    # a label this node already holds (its signer's own server's) is kept
    payload.take_relayed_labels({2: relay([evil], ["malicious"])}, [evil], labels, honest=[0, 1, 2])
    assert labels[evil.key] == "poisoned"
    # what a relay carries: the labels held for non-honest signers' messages only
    assert payload.relay_labels([honest, evil, other], {honest.key: "honest", evil.key: "poisoned"}, [0, 1, 2]) == \
        [None, "poisoned", None]
    # a key that is not JSON-scalar is skipped, not raised on
    bad = {"node": [3], "round": 1, "prompt_id": "p", "index": 0}
    payload.take_relayed_labels({2: json.dumps({"messages": [bad], "labels": ["poisoned"]}).encode()}, [other], labels,
                                honest=[0, 1, 2])
    assert other.key not in labels


def test_a_malicious_senders_unlabelled_message_is_malicious_never_honest():
    swarm = Swarm(type("T", (), {"train": []})(), {}, {}, {}, {}, {}, 0, 4, Limits.for_completions(8))
    swarm.malicious = frozenset({3})
    evil, honest = _msg(3), _msg(1)
    assert (swarm.label(evil), swarm.label(honest)) == ("malicious", "honest")
    swarm.labels[evil.key] = "poisoned"
    assert swarm.label(evil) == "poisoned"
    swarm.labels[evil.key] = swarm.labels[honest.key] = "honest"  # (review r31p P1: served by a lying rank)
    assert (swarm.label(evil), swarm.label(honest)) == ("malicious", "honest")


@pytest.mark.slow
def test_an_attacker_hiding_its_payloads_from_the_main_rank_moves_no_defense_metric(tmp_path, tiny_model_dir):
    """Rank 3 runs the injection attack under topk and never serves its round payloads to node 0 (the main rank, which
    writes the metrics); they reach node 0 through nodes 1-2's relays. The main's defense metrics equal those of the
    in-process run of the same attack (before: poisoned_received 0, topk's false-positive rate > 0, no detection)."""
    from test_distributed import ATTACK, in_process

    args = [f"model.name={tiny_model_dir}", *ARGS, "swarm.malicious=[3]", *ATTACK, "defenses=[{kind: topk}]"]
    clean = in_process(tmp_path / "in", "in", args)
    results, run_dir = run(tmp_path, args, r"withhold:3:0:^r\d+/data/")
    assert [r.returncode for r in results[:3]] == [0, 0, 0], [r.output[-2000:] for r in results[:3]]
    got, clean = ([r for r in recs if "defense/received" in r] for recs in (read_metrics(run_dir), clean))
    keys = ["defense/poisoned_received", "defense/honest_received", "defense/topk/detection_rate",
            "defense/topk/false_positive_rate"]
    assert [[r.get(k) for k in keys] for r in got] == [[r.get(k) for k in keys] for r in clean]
    assert len(clean) == 2 and all(r["defense/poisoned_received"] > 0 for r in clean)  # (poisons to label)
