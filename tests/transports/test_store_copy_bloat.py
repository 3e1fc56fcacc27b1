"""A store copy bloated past COPY_CAP hides none of its owner's signed lines (review r31k F4): before, a value over
COPY_CAP was dropped and its key family of that owner never read again, so 65 KiB of junk appended once to why/{k}
hid an honest node's stop reason for the run (its peers named it alone). Now the first and last COPY_CAP / 2 bytes
of it are read, and the family again after a wait that doubles (0.5 s up to 8 s): the reads stay bounded (review
r31j F7, tests/transports/test_wait_loop_reads.py)."""

import json
import time

import pytest

from dgrpo.errors import PeerFailure
from dgrpo.transports import sidereads
from dgrpo.transports.sidereads import COPY_CAP, StoreCopies

from signed_ranks import _ranks

PAD = b'{"pad": "' + b"x" * 1000 + b'"}\n'  # 1 KiB lines of JSON that are no reason
FAKES = b"".join(json.dumps({"why": f"node 0 sent nothing {i}", "sig": "ab" * 64}).encode() + b"\n" for i in range(70))
QUOTE = "node 1 stopped first, saying (signed): \"node 2 sent nothing for exchange 'r0'"


@pytest.mark.parametrize("where", ["before it", "after it", "read before it was there"])
def test_junk_over_copy_cap_around_a_stop_reason_hides_nothing(where):
    """Under abort node 1 stops (node 2 never posts for it), its own server no longer serves its reason, and rank 2
    put 80 KiB of JSON junk and 70 well-formed reasons with bad signatures in why/1 (over COPY_CAP): before node 1
    appended its reason, or after; or node 0 read why/1 while only the junk was there. Node 0 quotes node 1's signed
    reason (before: "node 1 sent nothing", node 1 named alone)."""
    ts, _ = _ranks(n=3, timeout_s=0.3)
    for t in ts:
        t.exchanger.on_peer_failure = "abort"
    junk = FAKES + PAD * 80
    if where != "after it":
        ts[2].store.append("why/1", junk)
        assert len(ts[2].store.get("why/1")) > COPY_CAP
    if where == "read before it was there":
        assert ts[0].exchanger.notes.stop_of(1, time.monotonic() + 0.2, 0.1) is None  # (nothing of node 1 yet)
    with pytest.raises(PeerFailure):
        ts[1].collect("r0", [2])
    if where == "after it":
        ts[2].store.append("why/1", junk)
    ts[1].chan.delete_key("why")  # (its server gone: only the store's copy)
    if where == "read before it was there":
        time.sleep(0.6)  # (the family is read again after its first wait, 0.5 s)
    with pytest.raises(PeerFailure) as then:
        ts[0].collect("eq0", [1])
    assert QUOTE in str(then.value), str(then.value)


def test_small_junk_on_both_sides_of_a_stop_reason_hides_nothing():
    """Review r31l F1: rank 2 puts 40 well-formed reasons with bad signatures in why/1 before node 1 appends its
    signed reason and 40 more after it (6.5 KiB in all: no byte cap involved). Before r31l, 64 signatures were checked,
    32 from each end, and the 41st line never: node 0 named node 1 alone. A store read checks 64 again (review r31m
    F3), so the store's copy alone would still hide it; node 1 pushed its reason to node 0's server (review r31m F1)."""
    ts, _ = _ranks(n=3, timeout_s=0.3)
    for t in ts:
        t.exchanger.on_peer_failure = "abort"
    fakes = [json.dumps({"why": f"node 0 sent nothing {i}", "sig": f"{i:02x}" * 64}).encode() + b"\n" for i in range(80)]
    ts[2].store.append("why/1", b"".join(fakes[:40]))
    with pytest.raises(PeerFailure):
        ts[1].collect("r0", [2])
    ts[2].store.append("why/1", b"".join(fakes[40:]))
    ts[1].chan.delete_key("why")  # (its server gone: only the store's copy)
    lines = ts[0].store.get("why/1").splitlines()
    assert len(lines) == 81 and b"node 2 sent nothing" in lines[40]  # (the reason is the middle line)
    with pytest.raises(PeerFailure) as then:
        ts[0].collect("eq0", [1])
    assert QUOTE in str(then.value), str(then.value)


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


def test_a_bloated_copy_is_read_head_and_tail_and_its_family_again_after_a_doubling_wait(monkeypatch, caplog):
    """StoreCopies: a value over COPY_CAP comes back as its first and last COPY_CAP / 2 bytes joined by a newline
    (logged once); the same owner's keys of that family are not got from the store before the wait (0.5 s, doubling
    at each oversized read up to 8 s), another owner's or family's are; a value back under the cap is read whole and
    ends the wait."""
    import torch.distributed as dist

    clock = _Clock()
    monkeypatch.setattr(sidereads, "time", clock)
    gets = []

    class Counted:  # (a store that records every get)
        def __init__(self):
            self.s = dist.HashStore()

        def __getattr__(self, name):
            return getattr(self.s, name)

        def get(self, key):
            gets.append(key)
            return self.s.get(key)

        def clone(self):  # (no clone: StoreCopies reads through this client)
            raise RuntimeError("no clone")

    store = Counted()
    copies, far = StoreCopies(0, store), 1e12
    big = b"H" * COPY_CAP + b"M" * 10 + b"T" * COPY_CAP
    store.set("why/1", big)
    store.set("stop/2", b"small")
    assert copies.read(1, "why/1", far) == b"H" * (COPY_CAP // 2) + b"\n" + b"T" * (COPY_CAP // 2)
    got_at = [clock.now]
    for step in [0.125] * 320:  # (40 s of reads every 0.125 s: exact in binary)
        clock.now += step
        n = len(gets)
        out = copies.read(1, "why/1", far)
        if len(gets) > n:
            got_at.append(clock.now)
            assert out is not None and len(out) == COPY_CAP + 1
        else:
            assert out is None
    waits = [b - a for a, b in zip(got_at, got_at[1:])]
    assert waits[:5] == [0.5, 1.0, 2.0, 4.0, 8.0] and set(waits[5:]) == {8.0}, waits
    assert copies.read(2, "stop/2", far) == b"small" and copies.read(1, "stop/1", far) is None  # (others: read)
    assert copies.read(1, "why/2", far) is None  # (absent)
    clock.now += 8.0
    store.set("why/1", b"small now")
    assert copies.read(1, "why/1", far) == b"small now"
    clock.now += 0.01
    assert copies.read(1, "why/1", far) == b"small now"  # (under the cap: no wait)
    lines = [r.getMessage() for r in caplog.records if "junk" in r.getMessage()]
    assert lines == [f"node 0: the store's why/1 holds {2 * COPY_CAP + 10} bytes (over {COPY_CAP}: junk some rank "
                     f"wrote there, which the store cannot name); only its first and last {COPY_CAP // 2} bytes are "
                     "read, node 1's values there at most every 0.5-8 s"]


@pytest.mark.parametrize("where", ["before it", "after it"])
def test_junk_over_copy_cap_around_a_leave_mark_hides_nothing(where):
    """Node 2 appends 80 KiB of junk under node 1's leave mark of r0 before or after node 1 leaves (its server gone:
    node 0 reads the store's copy, as the wait loop does, sidereads._gone): node 1 left. Before, junk before it hid
    it (the copy over COPY_CAP was dropped, and a whole read was looked at in its first 4 KiB only: node 1 was waited
    for to its deadline); junk after it held before too (kept as a guard)."""
    ts, _ = _ranks(n=3)
    far = time.monotonic() + 5
    if where == "before it":
        ts[2].store.append("r0/status/1", PAD * 80)
    ts[1].signed_store.leave(["r0"])
    if where == "after it":
        ts[2].store.append("r0/status/1", PAD * 80)
    raw = ts[0].chan.copies.read(1, "r0/status/1", far)
    assert ts[0].signed_store.status("r0", 1, far, raw) == "left"


def _junk(signer, first, count):
    """``count`` distinct well-formed reasons claiming to be node 1's, each signed (a real signature) by ``signer``'s
    own key: each costs a reader a full verification, none verifies as node 1's (review r31m's x_whysand)."""
    return [json.dumps({"why": f"node 0 sent nothing for exchange 'r0' ({i})",
                        "sig": signer.sign(f"why|1|node 0 sent nothing for exchange 'r0' ({i})")}).encode() + b"\n"
            for i in range(first, first + count)]


def test_junk_over_32_kib_on_both_sides_of_the_stores_copy_hides_no_pushed_reason():
    """Review r31m F1: rank 2 puts 250 distinct junk reasons (real signatures, its own key) in why/1 before node 1
    appends its signed reason and 250 more after it: over COPY_CAP / 2 on each side, so StoreCopies returns the first
    and last 32 KiB and the reason in the middle is never parsed; node 1's own server no longer serves it. Before,
    node 0 named node 1 alone ("node 1 sent nothing"); now node 1 pushed its reason to node 0's server as it stopped
    (X-Dgrpo-Why, PeerChannel.told_why), where rank 2 can neither bury nor delete it, and node 0 quotes it."""
    ts, _ = _ranks(n=3, timeout_s=0.3)
    for t in ts:
        t.exchanger.on_peer_failure = "abort"
    before, after = _junk(ts[2].signed_store, 0, 250), _junk(ts[2].signed_store, 250, 250)
    ts[2].store.append("why/1", b"".join(before))
    with pytest.raises(PeerFailure):
        ts[1].collect("r0", [2])  # node 2 never posts for node 1: node 1 stops, saying why
    ts[2].store.append("why/1", b"".join(after))
    ts[1].chan.delete_key("why")  # (its server no longer serves it)
    value = ts[0].store.get("why/1")
    at = value.index(b"node 2 sent nothing")
    assert len(value) > COPY_CAP and at > COPY_CAP // 2 and len(value) - at > COPY_CAP // 2  # (the middle: never read)
    assert b"node 2 sent nothing" not in ts[0].chan.copies.read(1, "why/1", time.monotonic() + 5)
    ts[0].chan.copies.junk.clear()  # (that read started the family's wait: the collect below reads it again)
    with pytest.raises(PeerFailure) as then:
        ts[0].collect("eq0", [1])
    assert QUOTE in str(then.value), str(then.value)


def test_a_pushed_stop_reason_is_kept_only_signed_by_its_owner_for_this_launch():
    """PeerChannel.told_why keeps a reason pushed in X-Dgrpo-Why under the reader it names only if that node's key
    signed it for this run and launch: rank 2 pushing, as node 1, a reason it signed itself, junk, or node 1's own
    reason of an earlier launch (same roster) changes nothing; node 1's push is kept, and its first only."""
    ts, keys = _ranks(n=3)
    far, chan = time.monotonic() + 5, ts[2].chan

    def push(line, reader="1"):
        chan.fetch(0, "why/1", 256, far, 2.0, extra={"X-Dgrpo-Reader": reader, "X-Dgrpo-Why": line})

    def line(t, why, owner=1):
        return json.dumps({"why": why, "sig": t.signed_store.sign(f"why|{owner}|{why}")})

    old, _ = _ranks(n=3, keys=keys)  # (the same roster, another launch)
    push(line(ts[2], "node 0 sent nothing"))  # (rank 2's key, as node 1)
    push('{"why": "node 0 sent nothing", "sig": "' + "ab" * 64 + '"}')
    push("junk")
    push(line(old[1], "node 0 sent nothing"))
    push(line(ts[2], "node 1 sent nothing", owner=2), reader="2")  # (rank 2's own, honest in form: kept)
    assert ts[0].chan.whys == {2: "node 1 sent nothing"}
    push(line(ts[1], "node 2 sent nothing"))
    push(line(ts[1], "node 0 sent nothing"))
    assert ts[0].chan.whys == {2: "node 1 sent nothing", 1: "node 2 sent nothing"}
    assert ts[0].exchanger.notes.stop_of(1, far) == "node 2 sent nothing"  # (read first, before any other copy)


def test_junk_why_lines_are_checked_outside_the_shared_signature_cache_at_most_64_a_read():
    """Review r31m F3: each distinct junk reason entered the SignatureVerifier cache the message path relies on
    (emptied when full: 65,536), and every line of a read was checked (~430 in what StoreCopies returns). Now a read
    checks at most 64 lines (32 from each end, alternately), out of the shared cache; a line checked once is not
    checked again (a small cache of its own). Node 1's line after 300 junk lines is found at the 2nd check, before
    300 others at the 1st (checked already: no signature); between 300 and 300, 64 checks and not found (the store's
    copy alone is buried: its limit, docs/distributed.md); read again, none; the shared cache never grows."""
    ts, _ = _ranks(n=3)
    notes, verifier = ts[0].exchanger.notes, ts[0].signed_store.keys
    honest = json.dumps({"why": "node 2 sent nothing", "sig": ts[1].signed_store.sign("why|1|node 2 sent nothing")})
    honest = honest.encode() + b"\n"
    size, count = len(verifier._cache), verifier.verified
    assert notes._why(1, b"".join(_junk(ts[2].signed_store, 0, 300)) + honest) == "node 2 sent nothing"
    assert verifier.verified - count == 2 and len(verifier._cache) == size
    count = verifier.verified
    assert notes._why(1, honest + b"".join(_junk(ts[2].signed_store, 1000, 300))) == "node 2 sent nothing"
    assert verifier.verified - count == 0  # (the first line checked: node 1's, checked already)
    count = verifier.verified
    sandwich = b"".join(_junk(ts[2].signed_store, 2000, 300)) + honest + b"".join(_junk(ts[2].signed_store, 3000, 300))
    assert notes._why(1, sandwich) is None
    assert verifier.verified - count == 64
    count = verifier.verified
    assert notes._why(1, sandwich) is None and verifier.verified == count  # (the same lines: checked already)
    assert len(verifier._cache) == size
