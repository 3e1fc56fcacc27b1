"""The issue 31 reviewer's store attacks (results/review_31/), in real 4-rank swarms on loopback: rank 3 jams,
forges or replaces what honest node 0 writes in the shared c10d store. Each test: every rank finishes, nobody
honest is struck, banned or expelled, rounds end within ``swarm.timeout_s``, and the metrics equal the clean
in-process run's (every key but ``time/*``): the honest ranks trained on the same messages. With
``complete_shares`` and ``ban_after=2``, the strictest rules, where a removed message used to ban its signer."""

import json

import pytest
from distributed_helpers import comparable, launch
from test_distributed import B2, COMMON, in_process

from dgrpo.metrics.logger import read_metrics

TIMEOUT = 5
ARGS = ["swarm.nodes=4", *COMMON, B2, "rounds=2", "eval.every=10", f"swarm.timeout_s={TIMEOUT}",
        "swarm.startup_timeout_s=10", "swarm.on_peer_failure=continue", "swarm.protocol.ban_after=2",
        "swarm.protocol.complete_shares=true"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_model_dir):
    return in_process(tmp_path_factory.mktemp("ref"), "in", [f"model.name={tiny_model_dir}", *ARGS])


def run(tmp_path, tiny_model_dir, scenario, args=()):
    results = launch(4, ["run", f"model.name={tiny_model_dir}", *ARGS, *args, f"out_dir={tmp_path}", "name=d",
                         "swarm.transport=distributed"], scenario=scenario, timeout=120, log_dir=str(tmp_path))
    return results, tmp_path / "d"


def honest_outcome(results, run_dir, exchange_limit):
    """What must hold for the honest ranks whatever rank 3 did; returns the peers.jsonl records."""
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[1].output[-3000:]
    out = "".join(r.output for r in results)
    assert "out of the swarm" not in out and "banned node" not in out
    peers = [json.loads(line) for line in (run_dir / "peers.jsonl").read_text().splitlines()]
    assert all(p["banned"] == {} for p in peers)
    from dgrpo.swarm.accounting import peer_strikes

    assert all(peer_strikes(p["peers"][str(n)]) == 0 for p in peers for n in (0, 1, 2))
    records = read_metrics(run_dir)
    assert all(r["time/exchange"] < exchange_limit for r in records if "time/exchange" in r)
    return peers, records


@pytest.mark.parametrize("mode, limit", [("jam", TIMEOUT + 2.5), ("subset", 2.5), ("subseteq", 2.5), ("prepend", 2.5)])
def test_a_victims_round_keys_jammed_replaced_or_prepended(tmp_path, tiny_model_dir, reference, mode, limit):
    """A (jam): node 0's round status marks overwritten with junk every millisecond: its peers read its payload
    as found at the deadline, nobody accuses it. C/D (subset, subseteq): node 0's round payload replaced by
    its first message (and its relays emptied): the readers wait for the payload its signed mark names and
    node 0 writes it back. E (prepend): 7 junk messages under node 0's keys before it posts: never read."""
    results, run_dir = run(tmp_path, tiny_model_dir, f"store:3:{mode}:0")
    peers, records = honest_outcome(results, run_dir, limit)
    assert comparable(records) == [{k: v for k, v in r.items() if k != "swarm/invalid_transport"} | (
        {"swarm/invalid_transport": records[i]["swarm/invalid_transport"]} if "swarm/invalid_transport" in records[i]
        else {}) for i, r in enumerate(reference)]
    if mode == "jam":  # every reader says it read node 0's payload without a valid mark (the jammer is unknowable)
        for r in results[1:]:
            assert "exchange 'r0': node 0's payload read as found (no posted mark it signed" in r.output
        assert peers[0]["views"]["1"]["0"] == {"unverified": 1}
    elif mode != "prepend":
        assert "replaced r0/data/0" in results[3].output
        assert "node 0: its payload r0/data/0 was changed in the store by another rank; written again" in results[0].output


def test_an_unsigned_leave_mark_at_start_up_is_ignored(tmp_path, tiny_model_dir, reference):
    """B: rank 3 writes unsigned `left:` marks over node 0's start-up status keys (no key signs anything yet):
    they say nothing; the others take node 0's values once they stay put, and the run is the clean one."""
    results, run_dir = run(tmp_path, tiny_model_dir, "store:3:left:0")
    _, records = honest_outcome(results, run_dir, 2.5)
    for r in results[1:]:
        assert "node 0's payload read as found (no posted mark it signed" in r.output  # (role, config: as the jam wins)
    assert comparable(records) == reference


def test_honest_nodes_sampling_special_tokens_are_never_struck(tmp_path, tiny_model_dir):
    """F: no attacker. The tiny model samples special token ids under seed 2 (refused on receipt; with
    complete_shares the node's whole share): refused, never a strike, at ban_after=2 nobody is banned, and
    the run equals the in-process one."""
    args = ["seed=2", "rounds=4"]
    want = in_process(tmp_path / "in", "in", [f"model.name={tiny_model_dir}", *ARGS, *args])
    results, run_dir = run(tmp_path, tiny_model_dir, "", args)
    peers, records = honest_outcome(results, run_dir, 2.5)
    rules = {rule for p in peers for who in p["peers"].values() for rule in who["rejected"]}
    assert {"special token", "incomplete"} <= rules  # (the case happened)
    assert comparable(records) == want


def test_forgeries_under_the_main_ranks_own_key_are_named_and_banned_alike_by_every_honest_rank(tmp_path,
                                                                                                 tiny_model_dir):
    """G/E: rank 3 appends, under node 0's round-0 key, its messages re-addressed to node 0 (signed with its own
    key) and an unsigned one. Node 0 never reads its own key, yet the relays give it the signed forgeries: its
    peers.jsonl names node 3 (identity, a strike each), and every honest rank bans node 3 in round 0."""
    results, run_dir = run(tmp_path, tiny_model_dir, "forge:3:0")
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    peers = [json.loads(line) for line in (run_dir / "peers.jsonl").read_text().splitlines()]
    assert peers[0]["peers"]["3"]["rejected"] == {"identity": 2} and peers[0]["banned"] == {"3": 0}
    assert all(p["peers"].get(str(n), {}).get("rejected", {}) == {} for p in peers for n in (0, 1, 2))
    for r in results[:3]:
        assert "banned node 3 in round 0: 2 refused or rejected messages" in r.output
