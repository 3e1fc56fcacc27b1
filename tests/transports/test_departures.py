"""A peer's own signed departure shown to one node only is relayed to every node, so the honest nodes keep one live
roster (review r31n G5, G6; transports/departures.py). 4 ranks on loopback, rank 3 attacks (slow set)."""

import pytest
from test_store_attacks import ARGS, run

from dgrpo.metrics.logger import read_metrics


@pytest.mark.slow
@pytest.mark.parametrize("scenario, said", [("selleave:3:0:r1", "it left the swarm (its signed leave mark)"),
                                            ("selstop:3:0:r1", "it stopped at start-up")])
def test_a_departure_shown_to_one_node_takes_its_signer_out_at_every_node_alike(tmp_path, tiny_model_dir, scenario,
                                                                               said):
    """Rank 3 serves its own signed leave mark of r1 (or pushes its signed stop notice as it posts r1) to node 0 only
    and hides r1 from it. Before, node 0 alone took it out ('left the swarm'), nodes 1-2 kept it: live rosters of 3 and
    4, and a rank that then withheld its payloads from everyone was never expelled (review r31n G6, 3 of 3 runs). Now
    node 0 relays the signed departure in eq1 and every honest node, node 0 included, takes rank 3 out there (task
    h31q3: node 0 took it out at r1, one exchange before the others, and counted a live roster of 3 through eq1): no
    honest rank exits, every honest node counts 3 live nodes from round 1's relay on, and no honest node is taken
    out."""
    results, run_dir = run(tmp_path, [f"model.name={tiny_model_dir}", *ARGS, "rounds=3"], scenario)
    assert [r.returncode for r in results[:3]] == [0, 0, 0], [r.output[-2000:] for r in results[:3]]
    for k in (0, 1, 2):
        assert f"node 3 is out of the swarm from exchange 'eq1': {said}" in results[k].output, results[k].output[-3000:]
        assert "as node 0's relay carries it" in results[k].output
    assert "node 3 is out of the swarm from exchange 'r1'" not in results[0].output
    records = read_metrics(run_dir)
    assert [r.get("swarm/nodes_alive") for r in records][:3] == [None, 3, 3], records
    assert [r.get("swarm/messages") for r in records][:3] == [8, 8, 6], records  # (r1: rank 3's, through the relays)
    out = "".join(r.output for r in results[:3])
    assert not any(f"node {k} is out of the swarm" in out or f"node {k} was declared failed" in out for k in (0, 1, 2))


@pytest.mark.slow
def test_a_stop_notice_pushed_to_one_node_while_its_signer_serves_everyone_takes_it_out_at_every_node_alike(
        tmp_path, tiny_model_dir):
    """Review r31o H3: rank 3 pushes its signed stop notice to node 0 alone as it posts r1 and goes on serving
    everyone. Node 0's relay eq1 carries it. Before, nodes 1-2 took rank 3 out at eq1 and node 0, which skipped its own
    relay, only at eq2 (from their relays): node 0 counted 4 live nodes in round 1's record, they 3. Now every honest
    node takes it out at eq1, as node 0's relay carries it."""
    results, run_dir = run(tmp_path, [f"model.name={tiny_model_dir}", *ARGS, "rounds=3"], "selstop:3:0:r1:shown")
    assert [r.returncode for r in results[:3]] == [0, 0, 0], [r.output[-2000:] for r in results[:3]]
    for k in (0, 1, 2):
        assert ("node 3 is out of the swarm from exchange 'eq1': it stopped at start-up" in results[k].output
                and "as node 0's relay carries it" in results[k].output), results[k].output[-3000:]
    records = read_metrics(run_dir)
    assert [r.get("swarm/nodes_alive") for r in records][:3] == [None, 3, 3], records


@pytest.mark.slow
def test_a_leave_mark_shown_to_one_node_in_a_relay_exchange_takes_its_signer_out_at_every_node_alike(
        tmp_path, tiny_model_dir):
    """Review r31o H3 (its d2 form): rank 3 hides its relay eq1 from node 0 and serves it its own signed leave mark
    of eq1, read after node 0 posted its relay. Before, node 0 took rank 3 out at eq1, nodes 1-2 only at eq2 (from
    node 0's relay): live rosters of 3 and 4 in round 2. Now node 0 notes it and every honest node takes rank 3 out at
    eq2, where node 0's relay carries the mark; no honest node is taken out."""
    results, run_dir = run(tmp_path, [f"model.name={tiny_model_dir}", *ARGS, "rounds=3"], "selleave:3:0:eq1")
    assert [r.returncode for r in results[:3]] == [0, 0, 0], [r.output[-2000:] for r in results[:3]]
    assert "rank 3: served its leave mark of eq1 to 0" in results[3].output  # (the attack took place)
    for k in (0, 1, 2):
        out = results[k].output
        assert "node 3 is out of the swarm from exchange 'eq2': it left the swarm (its signed leave mark), as node 0's " \
               "relay carries it" in out, out[-3000:]
        assert "from exchange 'eq1'" not in out
    records = read_metrics(run_dir)
    assert [r.get("swarm/nodes_alive") for r in records][:3] == [None, None, 3], records
    out = "".join(r.output for r in results[:3])
    assert not any(f"node {k} is out of the swarm" in out or f"node {k} was declared failed" in out for k in (0, 1, 2))


@pytest.mark.slow
def test_under_abort_every_honest_node_stopping_on_a_relayed_stop_notice_names_its_signer(tmp_path, tiny_model_dir):
    """Review r31o H2: under abort, rank 3 pushes its signed stop notice to node 0 alone as it posts r1 and serves
    everyone. Before, nodes 1-2 stopped at eq1 on node 0's relay without saying why, node 0 went on and stopped in r2
    naming honest nodes 1 and 2 alone ("nodes 1, 2 sent nothing"). Now every honest node stops in one line naming
    rank 3 (each acts on node 0's relay eq1, its reason said first); a line that names an honest node missing quotes
    that node's signed reason."""
    args = [f"model.name={tiny_model_dir}", *ARGS, "rounds=3", "swarm.on_peer_failure=abort"]
    results, _ = run(tmp_path, args, "selstop:3:0:r1:shown")
    assert "pushed a signed stop notice to [0] only" in results[3].output  # (the attack took place)
    assert [r.returncode for r in results[:3]] == [3, 3, 3], [r.output[-2000:] for r in results[:3]]
    for k in (0, 1, 2):
        errors = [x for x in results[k].output.splitlines() if x.startswith("dgrpo: error:")]
        print(f"rank {k}: {errors}")
        assert len(errors) == 1 and "node 3 said (signed) it stopped at start-up" in errors[0], errors
        for j in (0, 1, 2):
            assert f"node {j} sent nothing" not in errors[0] or f"node {j} stopped first, saying (signed)" in errors[0]


def test_a_relayed_departure_counts_only_signed_by_the_node_itself_for_this_launch():
    """No launch (transports/departures.py): node 1's own leave mark of r1 takes it out; the same mark signed by node
    3's key, for another exchange than it names, or of an earlier launch of the run, and malformed relays, count for
    nothing, so relaying can take out only a node that said it stopped."""
    import json

    from signed_ranks import _ranks

    from dgrpo.transports import departures

    old, keys = _ranks(n=4)
    stale = old[1].signed_store.sign("left|r1|1")  # (an earlier launch of the same run and roster)
    ts, _ = _ranks(n=4, keys=keys)
    own, forged = ts[1].signed_store.sign("left|r1|1"), ts[3].signed_store.sign("left|r1|1")
    assert departures.valid(ts[2], 1, {"tag": "r1", "left": own}) == "it left the swarm (its signed leave mark)"
    for ev in ({"tag": "r1", "left": forged}, {"tag": "r2", "left": own}, {"tag": "r1", "left": stale}):
        assert departures.valid(ts[2], 1, ev) is None
    relay = json.dumps({"departed": {"1": {"tag": "r1", "left": own}, "x": {}, "2": {"tag": "r1; rm", "left": own},
                                     "3": {"stop": "y" * 5000}}}).encode()
    assert departures.parse(relay, 4) == {1: {"tag": "r1", "left": own}}
    assert departures.parse(b"junk", 4) == {} and departures.parse(b'{"departed": [1]}', 4) == {}
    departures.act(ts[2], "eq1", {0: relay})
    assert ts[2].alive == {0, 2, 3} and ts[2].failed == {1: "eq1"}
    departures.act(ts[0], "eq1", {2: json.dumps({"departed": {"1": {"tag": "r1", "left": forged}}}).encode()})
    assert ts[0].alive == {0, 1, 2, 3}


def _leave_relay(t, tag):
    """A relay carrying node ``t``'s own signed leave mark of ``tag`` (as PeerChannel.departed holds it)."""
    import json

    return json.dumps({"departed": {str(t.rank): {"tag": tag, "left": t.signed_store.sign(f"left|{tag}|{t.rank}")}}}
                      ).encode()


def test_under_abort_a_node_that_stops_on_a_relayed_departure_says_why_first():
    """Review r31o H2: node 1 stops (abort) on node 3's signed leave mark relayed by node 0. Before, it raised unsaid:
    its peers then found it gone and named honest node 1 alone ("node 1 sent nothing"), never node 3. Now it says its
    reason first, signed and pushed to its live peers' servers (node 3, taken out, is not one), so they quote it; its
    peers had left the exchange (``end/eq2``), so it does not linger."""
    import time

    import pytest
    from signed_ranks import _ranks

    from dgrpo.errors import PeerFailure
    from dgrpo.transports import departures

    ts, _ = _ranks(n=4, timeout_s=0.3)
    ts[1].exchanger.on_peer_failure = "abort"
    for k in (0, 2):
        ts[k].chan.set("end/eq2", b"1")
    with pytest.raises(PeerFailure) as err:
        departures.act(ts[1], "eq2", {0: _leave_relay(ts[3], "eq1"), 1: b"{}"})
    want = ("node 3 said (signed) it left the swarm (its signed leave mark), as node 0's relay carries it; node 1 stops "
            "too in exchange 'eq2' (swarm.on_peer_failure=abort)")
    assert str(err.value) == want
    assert ts[0].chan.whys == ts[2].chan.whys == {1: want} and 1 not in ts[3].chan.whys
    assert ts[2].exchanger.notes.stop_of(1, time.monotonic() + 1) == want


def test_a_departure_in_this_node_s_own_relay_takes_its_signer_out_here_in_the_same_exchange():
    """Review r31o H3: rank 3 pushed its signed stop notice to node 0 alone while it served everyone. Node 0's relay
    eq1 carries it, so nodes 1 and 2 take rank 3 out at eq1; before, node 0 skipped its own relay and took rank 3 out
    only at eq2, from their relays (live rosters of 4 at node 0, 3 at the others for a round). Now every node, node 0
    included, takes it out at eq1."""
    import json

    from signed_ranks import _ranks

    from dgrpo.transports import departures

    ts, _ = _ranks(n=4)
    assert all(t.chan.address_of(k) is not None for t in ts for k in range(4))  # (each peer's launch proved)
    ch = ts[3].chan
    why = "node 3 could not load its model (start-up check failed)"
    ts[0].chan.told_stop("3", json.dumps({"why": why, "nonce": ch.nonce,
                                          "sig": ch.keys.sign(f"stop|3|{why}|{ch.nonce}")}))
    assert list(ts[0].chan.departed) == [3]
    own = json.dumps({"departed": departures.relayed_departures(ts[0].chan, 4)}).encode()
    reports = {0: own, 1: b"{}", 2: b"{}"}
    for k in (0, 1, 2):
        departures.act(ts[k], "eq1", reports)
        assert ts[k].alive == {0, 1, 2} and ts[k].failed == {3: "eq1"}, k


def test_a_leave_mark_read_while_collecting_a_relay_takes_its_signer_out_at_every_node_in_the_next_relay():
    """Review r31o H3 (r31n's selleave with an eq tag): rank 3 serves node 0 its own signed leave mark of eq1 and
    not its relay, after node 0 posted its own relay eq1; nodes 1, 2 got rank 3's relay. Before, node 0 took rank 3
    out at eq1, the others only at eq2 (from node 0's relay): live rosters of 3 and 4 in round 2. Now node 0 does not
    wait for rank 3 nor accuse it, keeps it in its view, and its relay eq2 carries the mark: every node, node 0
    included, takes rank 3 out at eq2. Under abort node 0 does not stop alone at eq1 either."""
    import json

    from dgrpo.transports import departures

    for policy in ("continue", "abort"):
        ts = _four_with_a_leave_mark(policy, "eq1")
        got = ts[0].collect("eq1", range(4))
        assert sorted(got) == [1, 2] and ts[0].alive == {0, 1, 2, 3} and ts[0].failed == {}, policy
        assert ts[0].ledger._own == [] and not any("missing payload" in r for _, r in ts[0].rejected)
        assert ts[0].chan.departed[3]["tag"] == "eq1"
        if policy == "abort":
            continue
        reports = {0: json.dumps({"departed": departures.relayed_departures(ts[0].chan, 4)}).encode(), 1: b"{}",
                   2: b"{}"}
        for k in (0, 1, 2):
            departures.act(ts[k], "eq2", reports)
            assert ts[k].alive == {0, 1, 2} and ts[k].failed == {3: "eq2"}, k


def test_a_leave_mark_read_in_a_round_exchange_takes_its_signer_out_at_every_node_at_that_round_s_relay():
    """Review r31o H3's remnant (task h31q3): rank 3 serves node 0 its own signed leave mark of r1 and no r1 payload.
    Before, node 0 took rank 3 out at once (at r1), nodes 1, 2 only at eq1 from node 0's relay: in eq1 node 0 counted a
    live roster of 3 (quorum 2, rank 3's accusations not counted) while the others counted 4 (quorum 3). Now node 0
    only notes it: not waited for in r1 nor in eq1, unaccused, still in its view (the roster of nodes 1, 2), and every
    node, node 0 included, takes rank 3 out at eq1, where node 0's relay carries the mark. Under abort node 0 does not
    stop alone at r1: every node stops at eq1 naming rank 3."""
    import json

    import pytest

    from dgrpo.errors import PeerFailure
    from dgrpo.transports import departures

    for policy in ("continue", "abort"):
        ts = _four_with_a_leave_mark(policy, "r1")
        assert sorted(ts[0].collect("r1", range(4))) == [1, 2], policy
        assert ts[0].alive == ts[1].alive == {0, 1, 2, 3} and ts[0].failed == {}, policy  # (one roster: 4 nodes)
        assert ts[0].chan.departed[3]["tag"] == "r1" and ts[0].exchanger.leaving == {3}
        for k in (1, 2):
            ts[k].chan.set(f"eq1/data/{k}", b"{}")
        assert sorted(ts[0].collect("eq1", range(4))) == [1, 2], policy  # (no eq1 mark: not waited for all the same)
        assert ts[0].alive == {0, 1, 2, 3} and ts[0].failed == {}, policy
        assert ts[0].ledger._own == [] and not any("missing payload" in r for _, r in ts[0].rejected), policy
        reports = {0: json.dumps({"departed": departures.relayed_departures(ts[0].chan, 4)}).encode(), 1: b"{}",
                   2: b"{}"}
        for k in (0, 1, 2):
            ts[k].chan.set("end/eq1", b"1")  # (its peers left eq1: nobody to linger for under abort)
        for k in (0, 1, 2):
            if policy == "abort":
                with pytest.raises(PeerFailure, match="node 3 said \\(signed\\) it left the swarm \\(its signed leave "
                                   f"mark\\), as node 0's relay carries it; node {k} stops too in exchange 'eq1'"):
                    departures.act(ts[k], "eq1", reports)
            else:
                departures.act(ts[k], "eq1", reports)
            assert ts[k].alive == {0, 1, 2} and ts[k].failed == {3: "eq1"}, (policy, k)


def test_a_departure_noted_in_the_last_relay_exchange_is_not_waited_for_at_shutdown(caplog):
    """Task h31q3: a departure node 0 reads in the run's last relay exchange (eq1 of 2 rounds) is never acted on (no
    relay follows: every node counts its signer in the last round alike). At shutdown (``done``) node 0 does not wait
    for the signer (it said, signed, that it left) nor name it "sent nothing"; before, it waited the whole timeout_s for
    a signer that left no mark of ``done`` and named it."""
    import logging

    from signed_ranks import _ranks

    ts, _ = _ranks(n=4, timeout_s=1.0)
    for t in ts:
        t.exchanger.on_peer_failure = "continue"
    for k in (1, 2):
        ts[k].chan.set(f"eq1/data/{k}", b"{}")
    ts[3].signed_store.leave(["eq1"])  # (its mark of eq1 only: none of done)
    assert sorted(ts[0].collect("eq1", range(4))) == [1, 2] and ts[0].chan.departed[3]["tag"] == "eq1"
    assert ts[0].alive == {0, 1, 2, 3}  # (noted, never acted on: no relay follows)
    for k in (1, 2):
        ts[k].chan.set(f"done/data/{k}", b"1")
    with caplog.at_level(logging.WARNING):
        assert sorted(ts[0].collect("done", range(4))) == [1, 2]
    assert "node 3 sent nothing" not in caplog.text and ts[0].ledger._own == [], caplog.text


def _four_with_a_leave_mark(policy: str, tag: str):
    """4 in-process ranks under ``policy``: nodes 1 and 2 serve exchange ``tag``, rank 3 its signed leave mark of it."""
    from signed_ranks import _ranks

    ts, _ = _ranks(n=4, timeout_s=1.0)
    for t in ts:
        t.exchanger.on_peer_failure = policy
    for k in (1, 2):
        ts[k].chan.set(f"{tag}/data/{k}", b"{}")
    ts[3].signed_store.leave([tag])
    return ts
