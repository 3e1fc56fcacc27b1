"""A peer whose round payload never comes whole is accused like one that never serves it (review r31o H5; issue 31:
transports/unserved.py). Before, a server that answered every round payload over its byte cap (its own
Content-Length) or a byte at a time (under the reader's 1 s recv silence, past its read budget) was named `transport`
and left out of each round, never accused: it contributed nothing and kept its vote in every quorum.

In-process ranks on one store (no launch): ranks 0-2 honest, rank 3's server misbehaves (``PeerChannel.hook``), with
the launch in test_unserved_launch.py."""

import threading
import time

from signed_ranks import _ranks

CAP = 1 << 16  # the byte cap the readers pass (a round payload's is from the share: framing.cap_of)


def _trickle():
    while True:  # (a byte every 0.5 s, each inside a reader's 1 s recv silence: never whole)
        yield b"{"
        time.sleep(0.5)


def _collect_all(ts, tag, readers=(0, 1, 2)):
    """Every rank posts ``tag``; ``readers`` collect it at once (threads); returns reader → what it got."""
    for t in ts:
        t.exchanger.post(tag, f"payload of {t.rank}".encode())
    got = {}

    def read(r):
        got[r] = ts[r].exchanger.collect(tag, range(len(ts)), time.monotonic() + 5, CAP)

    threads = [threading.Thread(target=read, args=(r,)) for r in readers]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    return got


def _named(t, node):
    return [reason for n, reason in t.rejected if n == node]


def _expelled(t, node):
    """(exchange, accusers) if a quorum expelled ``node`` as ``t`` reads every signer's accusations afresh, else None."""
    t.ledger.settle(2.0)  # (reads begun before the others accused: taken first)
    t.ledger.forget()
    t.ledger.settle(2.0)
    return t.ledger.expelled(node)


def test_a_round_payload_served_over_its_cap_is_accused_and_its_server_expelled_by_the_quorum():
    """Rank 3 serves r0 as 1 MiB of zeros with its own Content-Length (cap 64 KiB): each honest reader names it
    (`transport: ... oversize`) and accuses it; the three accusations are a quorum (3 of 4): node 3 is expelled by
    every honest node, no honest node is accused. Before: named, no accusation, ``expelled`` None."""
    ts, _ = _ranks(n=4, timeout_s=5.0)
    ts[3].chan.hook = lambda key, reader: b"\0" * (1 << 20) if key == "r0/data/3" else None
    got = _collect_all(ts, "r0")
    assert all(sorted(got[r]) == sorted({0, 1, 2} - {r}) for r in (0, 1, 2)), got
    for r in (0, 1, 2):
        assert any("transport" in x and "oversize: served 1048576 bytes under r0/data/3" in x for x in _named(ts[r], 3))
        assert _expelled(ts[r], 3) == ("r0", [0, 1, 2])
        assert all(_expelled(ts[r], n) is None for n in (0, 1, 2))


def test_a_relay_served_over_its_cap_is_accused_like_a_round_payload():
    """An honest relay eq{n} is built within its readers' cap whatever its peers sent (transports/relay.py,
    tests/transports/test_relay_cap.py), so one over it is its server's doing: named ``oversize`` and accused by each
    honest reader, a quorum. Before (while refusals quoting a peer's text could make an honest relay pass its cap) it
    was named only, never accused."""
    ts, _ = _ranks(n=4, timeout_s=5.0)
    ts[3].chan.hook = lambda key, reader: b"\0" * (CAP + 1) if key == "eq0/data/3" else None  # (a byte over it)
    _collect_all(ts, "eq0")
    for r in (0, 1, 2):
        assert any("oversize" in x for x in _named(ts[r], 3))
        assert _expelled(ts[r], 3) == ("eq0", [0, 1, 2])


def test_a_round_payload_trickled_until_its_deadline_is_accused_like_a_missing_one(caplog):
    """Rank 3 trickles r0 a byte every 0.5 s to every reader: the read runs until its deadline (the payload window
    W=1.5 s at timeout_s=5) and never comes whole, `slow`: named `transport` (slow) and accused
    by each honest reader, a quorum. Before: named `slow` at the first read and left out, never accused."""
    ts, _ = _ranks(n=4, timeout_s=5.0)
    ts[3].chan.hook = lambda key, reader: _trickle() if key == "r0/data/3" else None
    with caplog.at_level("WARNING"):
        _collect_all(ts, "r0")
    lines = [r.getMessage() for r in caplog.records]  # (the round's failed-peer line: too slow, not "sent nothing")
    assert sum("node 3 served exchange 'r0' over its byte cap or too slowly" in x for x in lines) == 3, lines
    assert not any("sent nothing" in x for x in lines), lines
    for r in (0, 1, 2):
        assert any(x.startswith("transport") and "slow: r0/data/3 not served" in x for x in _named(ts[r], 3)), \
            ts[r].rejected
        assert not any(x.startswith("missing payload") for x in _named(ts[r], 3))
        assert _expelled(ts[r], 3) == ("r0", [0, 1, 2])


def _stall():
    yield b"{"  # (one byte, then silence past a reader's 1 s recv timeout: that read ends, not served)
    time.sleep(3.0)


def _steady(payload: bytes, gap: float = 0.25):
    for i in range(len(payload)):  # (a byte every 0.25 s: whole after 12 x 0.25 = 3 s, past the old 2 s read budget)
        time.sleep(gap)
        yield payload[i:i + 1]


def test_a_server_stalled_once_then_whole_within_its_window_is_neither_named_nor_accused():
    """An honest server that stalled at one read (load: a byte, then silent past the reader's 1 s recv timeout) and
    served whole at a later one within its window: its payload is taken, it is neither accused nor named but `late`
    (no strike: true, it came over W/2 after the reader's post)."""
    ts, _ = _ranks(n=3, timeout_s=10.0)  # (W = 3.5 s)
    first = set()

    def once(key, reader):  # (each reader's first read of r0/data/2 stalls; the next ones are served whole)
        if key == "r0/data/2" and reader not in first:
            first.add(reader)
            return _stall()
        return None

    ts[2].chan.hook = once
    got = _collect_all(ts, "r0", readers=(0, 1))
    assert got[0] == {1: b"payload of 1", 2: b"payload of 2"} and got[1][2] == b"payload of 2"
    assert all(x.startswith("late") for r in (0, 1) for x in _named(ts[r], 2)), (ts[0].rejected, ts[1].rejected)
    assert _expelled(ts[0], 2) is None and ts[0].ledger.accusations(2) == {}


def test_a_payload_that_takes_longer_than_a_read_budget_but_comes_whole_by_its_deadline_is_taken():
    """Every read of node 2's r0 is answered steadily, a byte every 0.25 s, whole after 3 s (a loaded server's large
    payload: the read keeps receiving): read to its deadline (W = 8.5 s at timeout_s=20), it is taken, its server
    neither accused nor named but `late`. Before (task h31q2): each read was cut `slow` at its 2 s budget and begun
    again, never whole: node 2 accused by both readers (a quorum of 3: expelled) and its payload lost."""
    ts, _ = _ranks(n=3, timeout_s=20.0)
    ts[2].chan.hook = lambda key, reader: _steady(b"payload of 2") if key == "r0/data/2" else None
    got = _collect_all(ts, "r0", readers=(0, 1))
    assert got[0] == {1: b"payload of 1", 2: b"payload of 2"} and got[1] == {0: b"payload of 0", 2: b"payload of 2"}
    assert all(x.startswith("late") for r in (0, 1) for x in _named(ts[r], 2)), (ts[0].rejected, ts[1].rejected)
    assert all(_expelled(ts[r], 2) is None and ts[r].ledger.accusations(2) == {} for r in (0, 1))
