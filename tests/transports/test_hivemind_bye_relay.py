"""A relay of byes in the commit's views (task h31t3; docs/hivemind.md, Churn): every honest node acts on a signed
``bye`` at one point, the commit, from what the agreed views carry, and under ``on_peer_failure=abort`` a failure
read in the payload phase stops a node only once the commit has decided it, alike at every honest node.

Before: node 3 hiding its payload from node 1 (and showing it its ``bye``, or not) made node 1 alone stop at the end
of its payload phase; nodes 0 and 2 then missed node 1's view and stopped naming honest node 1, never node 3; under
``continue`` node 1 took node 3 back and node 3 went unnamed.

Real DHT nodes in this process (:mod:`hivemind_swarm`), node 3 the attacker."""

import re

import pytest

pytest.importorskip("hivemind")

from hivemind_helpers import in_threads  # noqa: E402
from hivemind_swarm import (PAYLOADS, assert_honest_round_unharmed, dht_nodes, honest_round, named,  # noqa: E402
                            seen_by, swarm)

from dgrpo.errors import PeerFailure  # noqa: E402
from dgrpo.transports.dht import byes  # noqa: E402

WHY = "node 0 sent nothing for exchange 'r0' (made up)"
T = 12.0  # swarm.timeout_s of the cases with a bye: a node reads byes 1 s into its payload phase (T/4), on a loaded machine


@pytest.fixture(scope="module")
def dhts(tmp_path_factory):
    yield from dht_nodes(tmp_path_factory.mktemp("dht"))


def says_bye(t, why=WHY):
    """Node ``t`` stores its signed bye in the DHT (what a node stopping on an error does on its way out)."""
    assert t.signed.store(t.signed.key("bye"), byes.body(why), t.retention_s)


@pytest.mark.parametrize("on_peer_failure", ["abort", "continue"])
def test_a_bye_shown_to_one_honest_node_and_a_payload_to_the_others_is_decided_alike_and_named(dhts, on_peer_failure):
    ts = swarm(dhts, on_peer_failure, timeout_s=T)
    says_bye(ts[3])
    seen_by(ts[1], 3, "r0")  # (node 1 never reads node 3's payload: it reads its bye instead)
    out, _ = in_threads([lambda t=t: honest_round(t) for t in ts])
    # (node 1 reads the bye 1 s into its payload phase; nodes 0 and 2 read the payload at once, unless a loaded machine
    # holds their reads past 1 s: then they read the bye too, and the views say so, alike at every honest node)
    proof = re.compile(r"node 3 said bye \(signed; read by nodes \[(0, )?1(, 2)?\]\) while its payload reached nodes "
                       r"\[0?(, )?2?\] in exchange 'r0'; node 3 stopped first, saying \(signed\): \"" + re.escape(WHY) + r'"; aborted')
    if on_peer_failure == "abort":  # every honest node stops, on node 3, in the same line, quoting its bye
        assert all(isinstance(got, PeerFailure) for got in out[:3]), out
        assert len({str(got) for got in out[:3]}) == 1 and proof.match(str(out[0])), out[:3]
        assert "node 1 sent" not in str(out[0]) and "node 1 left" not in str(out[0])
    for t, got in zip(ts[:3], out[:3]):
        if on_peer_failure == "continue":  # every honest node drops node 3 (its payload too) and goes on: one message set
            assert got == {k: PAYLOADS[k] for k in (0, 1, 2)}, (t.rank, got)
            assert t.failed == {3: "r0"} and {0, 1, 2} <= t.alive
        assert named(t, 3, "equivocation: it said bye (signed; read by nodes ["), (t.rank, t.rejected)
        assert not [r for s, r in t.rejected if s in (0, 1, 2)], (t.rank, t.rejected)


def test_a_payload_hidden_from_one_honest_node_stops_nobody_under_abort(dhts):
    """Node 1 misses node 3's payload (no bye): the views keep it, node 1 reads it again from the relays and nobody
    stops (before: node 1 stopped alone, and its peers then named it)."""
    ts = swarm(dhts, "abort")
    seen_by(ts[1], 3, "r0")
    out, seconds = in_threads([lambda t=t: honest_round(t) for t in ts])
    assert_honest_round_unharmed(ts, out, seconds)
    assert all(not t.failed and not t.stops.pending for t in ts[:3]), [t.failed for t in ts]


def test_a_node_that_left_before_the_round_stops_every_honest_node_on_its_bye_under_abort(dhts):
    """Node 3 said bye and sent nothing: every honest node stops, naming it and quoting its bye (as before, now at
    the commit, from the byes the views relay)."""
    ts = swarm(dhts, "abort", timeout_s=T)
    says_bye(ts[3])
    out, _ = in_threads([lambda t=t: honest_round(t) for t in ts[:3]])
    for t, got in zip(ts[:3], out):
        assert isinstance(got, PeerFailure), (t.rank, got)
        assert str(got).startswith("node 3 left the swarm (its signed bye read by nodes [0, 1, 2]) in exchange 'r0'; "
                                   f'node 3 stopped first, saying (signed): "{WHY}"; aborted'), str(got)
