"""Review r31n G3, without a launch: (1) the main rank, which enters ``rec{n-1}`` between ``eq{n-1}`` and ``r{n}``,
still looks for a missing peer's wait note in ``eq{n-1}`` and ``r{n-1}`` (its peers' two exchanges before ``r{n}``),
not in ``rec{n-1}``; (2) a node keeps serving what it posted in earlier exchanges while a live peer has not caught up
(cut under ``on_peer_failure=continue``), so the laggard never finds its relay gone and accuses it."""

import time

from dgrpo.transports.waits import Schedule

from signed_ranks import _ranks


def test_a_round_payloads_notes_are_looked_for_in_the_peers_two_round_exchanges_before_it_never_in_rec():
    s = Schedule(5.0)
    for tag in ("r1", "eq1", "rec1", "r2"):  # (the main rank's order: it reads round records between eq1 and r2)
        s.enter(tag)
    assert s.noted_in("r2") == ["eq1", "r1"]  # (before the fix: ["rec1", "eq1"], and a note of r1 bought nothing)
    assert s.noted_in("eq2") == ["r2"]
    other = Schedule(5.0)
    for tag in ("r1", "eq1", "r2"):  # (every other node's order)
        other.enter(tag)
    assert other.noted_in("r2") == ["eq1", "r1"]


def _served(t, key: str) -> bool:
    with t.chan.lock:
        return key in t.chan.values


def test_what_a_node_posted_stays_served_while_a_live_peer_lags_and_goes_once_every_peer_caught_up():
    """3 ranks, timeout_s=2 (W = 0.6 s): node 2 posts nothing in eq0 and r1 (cut at node 0's deadlines, still live
    under continue); node 1 posts every exchange. Node 0's relay eq0 is still served after its r1 exchange (on the old
    code it was deleted as r1's collect returned: node 2, catching up, found it gone), and its r0 and eq0 go once
    every live peer posted a later exchange (node 2 catches up in eq1; r1 stays one exchange more in any case)."""
    ts, _ = _ranks(n=3, timeout_s=2.0)
    a, b, c = ts
    for tag in ("r0", "eq0", "r1"):
        b.exchanger.post(tag, f"{tag} of 1".encode())
    c.exchanger.post("r0", b"r0 of 2")
    assert a.exchange("r0", b"r0 of 0") == {0: b"r0 of 0", 1: b"r0 of 1", 2: b"r0 of 2"}
    assert set(a.exchange("eq0", b"eq0 of 0")) == {0, 1}  # (node 2 lags: cut here)
    assert _served(a, "r0/data/0") and _served(a, "eq0/data/0")
    assert set(a.exchange("r1", b"r1 of 0")) == {0, 1}
    assert 2 in a.alive  # (cut, not expelled: one accusation of 3 needed)
    assert _served(a, "eq0/data/0")  # (node 2, still in eq0, may read it yet)
    assert c.exchanger.collect("eq0", [0], time.monotonic() + 1.0, 1 << 20) == {0: b"eq0 of 0"}
    for tag in ("eq0", "r1", "eq1"):
        c.exchanger.post(tag, f"{tag} of 2".encode())
    b.exchanger.post("eq1", b"eq1 of 1")
    assert set(a.exchange("eq1", b"eq1 of 0")) == {0, 1, 2}  # (every live peer posted eq1: caught up)
    assert not _served(a, "r0/data/0") and not _served(a, "eq0/data/0")
    # (r1 one exchange more, to the end of r2: a peer that missed it as a fellow's reads it in eq1, review r31n G1)
    assert _served(a, "r1/data/0") and _served(a, "eq1/data/0")
