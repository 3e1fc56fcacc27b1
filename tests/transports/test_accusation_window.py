"""Accusations and proofs are served as a bounded window of the newest lines (review r31k F3).

Before, a node appended one line per accusation to its served ``accuse`` value for the whole run and its readers
kept the *first* 256 lines: after 256 accusations its newer ones were invisible to its peers (their live sets split),
and past the 128 KiB fetch cap its peers named it "serves junk as its accusations" and never read it again. Its
signed copy in the store (``accuse/by/{k}``) grew past the store copies' cap the same way.
"""

import json
import time

import pytest
from test_store_attacks import _swarm_of

from dgrpo.errors import PeerFailure
from dgrpo.transports.accusations import _ACCUSE_LINES, _PROOF_LINES
from dgrpo.transports.sidereads import COPY_CAP


def _close(ts):
    for t in ts:
        try:
            t.chan.close()
        except Exception:  # noqa: BLE001 - already closed
            pass


def test_a_node_with_many_accusations_is_read_newest_first_and_never_named_junk():
    ts = _swarm_of(n=3)
    try:
        n = 800  # (one lone accusation a round against a peer hiding from node 1 alone, for 800 rounds)
        for i in range(n):
            ts[1].ledger.accuse(2, f"r{i}")
        seen = ts[0].ledger.accusations(2, time.monotonic() + 30)
        assert seen.get(f"r{n - 1}") == {1}  # (before: 0 seen at 800 lines, the newest past line 256 never)
        assert 1 not in ts[0].ledger.junk and [r for r in ts[0].rejected if r[0] == 1] == []
        assert len(seen) == _ACCUSE_LINES  # (the window: the newest _ACCUSE_LINES of its accusations)
        assert set(seen) == {f"r{i}" for i in range(n - _ACCUSE_LINES, n)}
        served = ts[1].chan.serve("accuse", "0")
        assert len(served.splitlines()) == _ACCUSE_LINES and len(served) < COPY_CAP
        copy = ts[0].store.get("accuse/by/1")  # (the store's signed copy: the same window, under the copies' cap)
        assert copy == served
        # node 1's server gone: node 0 reads the store's copy, the newest line included
        ts[1].chan.close()
        ts[0].ledger.forget()
        ts[0].chan.down[1] = time.monotonic()
        assert ts[0].ledger.accusations(2, time.monotonic() + 30).get(f"r{n - 1}") == {1}
    finally:
        _close(ts)


def test_a_proof_is_served_as_a_window_of_the_newest_lines():
    ts = _swarm_of(n=3)
    try:
        led = ts[0].ledger
        for i in range(_PROOF_LINES + 10):  # (more proofs than the window: each proof line stands alone)
            led._sigs.setdefault(1, {})[(2, f"r{i}")] = ts[1].signed_store.sign(f"accuse|r{i}|2")
            led._prove(2, f"r{i}", [1])
        lines = [json.loads(x) for x in ts[0].chan.serve("expel", "1").splitlines()]
        assert len(lines) == _PROOF_LINES and lines[-1]["tag"] == f"r{_PROOF_LINES + 9}"
        assert ts[0].store.get("expel/by/0") == ts[0].chan.serve("expel", "1")
    finally:
        _close(ts)



@pytest.mark.parametrize("mode", ["continue", "abort"])
def test_a_node_whose_live_peers_all_are_gone_stops_rather_than_train_alone(mode):
    """Review r31k F5 residue: a node whose every live peer's server is gone and who got nothing of its exchange
    (its peers crashed, or expelled it while it stalled and their proofs were deleted from the store) went on with
    "sent nothing ... continuing without it this round" (continue) and trained alone, exit code 0. Now it stops with
    one line saying it is alone, under either ``on_peer_failure``; one live peer still answering keeps it in."""
    ts = _swarm_of(n=3)
    for t in ts:
        t.exchanger.on_peer_failure = mode
    ts[0].chan.close()  # (node 0 crashed; node 1 answers but posts nothing)
    if mode == "continue":
        assert ts[2].exchange("r0", b"x2") == {2: b"x2"}  # (not alone: the round goes on without them)
    else:
        with pytest.raises(PeerFailure, match="sent nothing") as err:
            ts[2].exchange("r0", b"x2")
        assert "alone" not in str(err.value)
    _close(ts)
    ts = _swarm_of(n=3)
    for t in ts:
        t.exchanger.on_peer_failure = mode
    ts[0].chan.close()
    ts[1].chan.close()  # (both peers crashed)
    with pytest.raises(PeerFailure, match=r"^node 2 is alone in exchange 'r0': no server of its live peers \(nodes 0, "
                                          r"1\) answers and none served the exchange within swarm.timeout_s=0.3s; nodes "
                                          r"0, 1 crashed or left; node 2 is no longer in a swarm and stops rather than "
                                          r"train alone$"):
        ts[2].exchange("r0", b"x2")  # (before, continue: {2: b"x2"}, trained alone)
    assert 2 not in ts[2].alive
    _close(ts)


def test_a_node_back_from_a_stall_to_find_its_peers_gone_says_it_stalled():
    """The same, after a stall longer than timeout_s between two posts (review r31k F5, deletion variant: the peers
    expelled it and finished, their proofs in the store deleted): the line says it stalled."""
    ts = _swarm_of(n=3)
    ts[2].exchanger.on_peer_failure = "continue"
    ts[0].chan.close()
    ts[1].chan.close()
    ts[2].exchanger.schedule.enter("eq0")
    ts[2].exchanger.schedule.posted["eq0"] = time.monotonic() - 30  # (its last post, 30 s ago)
    with pytest.raises(PeerFailure, match=r"node 2 is alone in exchange 'r1'.*; node 2 stalled 30 s between two posts, "
                                          r"more than swarm.timeout_s=0.3s: its peers most likely declared it failed"):
        ts[2].exchange("r1", b"x2")
    _close(ts)
