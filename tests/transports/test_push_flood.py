"""Headers pushed to a rank's server are checked off its serving loop, in a bounded queue per sender
(transports/pushcheck.py; issue 31 point 3, review h31r2 item e: a peer pushing junk ``X-Dgrpo-Why``, stop notices,
address records and read acknowledgements cost the loop that serves the owner's own round payload one Ed25519
verification each)."""

import http.client
import json
import logging
import secrets
import socket
import threading
import time

import pytest
from signed_ranks import _ranks

from dgrpo.transports.peeraddr import launch_nonce


class _Counting:
    """A roster whose public keys record the thread of each verification."""

    def __init__(self, roster, threads: list):
        self.roster, self.keys, self.threads = roster, roster.keys, threads

    def public(self, node):
        pub, threads = self.roster.public(node), self.threads

        class _Pub:
            def verify(self, sig, data):
                threads.append(threading.current_thread().name)
                return pub.verify(sig, data)

        return None if pub is None else _Pub()


def _junk(nonce: str, i: int) -> dict:
    """Every header a peer can push, well formed, each with a fresh signature that verifies for nobody."""
    sig = secrets.token_hex(64)
    return {"X-Dgrpo-Reader": "3", "X-Dgrpo-Why": json.dumps({"why": f"junk {i}", "sig": sig}),
            "X-Dgrpo-Stop": json.dumps({"why": f"junk {i}", "nonce": nonce, "sig": sig}),
            "X-Dgrpo-Addr": json.dumps({"addr": "127.0.0.1:9", "nonce": launch_nonce(), "sig": sig}),
            "X-Dgrpo-Ack": secrets.token_hex(64)}


def test_a_flood_of_pushed_headers_costs_the_serving_loop_no_verification(caplog):
    """Rank 3 pushes every kind of header (a fresh junk signature each, so no cache answers it) to node 0's server
    from 32 connections at once, 640 requests, while node 1 reads node 0's round payload and node 2 pushes its own
    signed stop reason. Every verification runs on the server's checks' thread, none on its serving loop (before: 7
    a request there, a junk address record tried under every roster key: 4,514 for these 640); node 1 reads the
    payload every time; node 2's reason is kept and served back to it (its queue is its own); rank 3's excess is
    dropped and named once, and its junk costs node 0's verifier at most one verification a header (fewer: what is
    over its queue is never checked)."""
    ts, _ = _ranks(n=4)
    owner = ts[0].chan
    threads: list[str] = []
    verifier = ts[0].signed_store.keys
    verifier.roster = _Counting(verifier.roster, threads)  # (stop reasons, acknowledgements)
    owner.keys.roster = _Counting(owner.keys.roster, threads)  # (stop notices, address records)
    owner.launches[3] = ts[3].chan.nonce  # (its server proved: its stop notices are checked)
    owner.set("r0/data/0", b"payload" * 1000)
    owner.set("why", b"node 0's own reason\n")  # (a key whose reads count by acknowledgement)
    host, port = owner.address.rsplit(":", 1)
    answered, reads, problems = [], [], []

    def flood(k: int) -> None:
        for i in range(20):
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            try:
                conn.request("GET", "/v/why", headers=_junk(ts[3].chan.nonce, 100 * k + i))
                answered.append(conn.getresponse().status)
            except OSError:
                pass
            finally:
                conn.close()

    def read() -> None:
        for _ in range(30):  # (30 s a read: under a loaded test run the 34 threads of this one process share one GIL)
            value, problem = ts[1].chan.fetch(0, "r0/data/0", 1 << 16, time.monotonic() + 30, 30.0)
            reads.append(value)
            if problem:
                problems.append(problem)

    caplog.set_level(logging.WARNING, logger="dgrpo.transports.peerserve")
    attackers = [threading.Thread(target=flood, args=(k,)) for k in range(32)]
    reader = threading.Thread(target=read)
    for t in [*attackers, reader]:
        t.start()
    line = json.dumps({"why": "node 1 sent nothing", "sig": ts[2].signed_store.sign("why|2|node 1 sent nothing")})
    pushes, got = ts[2].chan.push([0], "why/2", {"X-Dgrpo-Why": line}, time.monotonic() + 20)
    for t in [*pushes, *attackers, reader]:
        t.join(60)
    assert len(threads) > 1 and threads.count("dgrpo-serve-0") == 0, {n: threads.count(n) for n in set(threads)}
    assert reads == [b"payload" * 1000] * 30, problems
    assert owner.whys == {2: "node 1 sent nothing"} and got == {0: b"node 1 sent nothing"}
    dropped = owner.checks.dropped.get(("127.0.0.1", "3"), 0)
    assert dropped > 0 and answered == [200] * 640  # (dropped ones are answered at once, their headers unread)
    assert len([r for r in caplog.records if "claiming node 3" in r.getMessage()]) == 1
    assert threads.count("dgrpo-push-0") <= 3 + 4 * (640 - dropped)  # (node 2's reason, nodes 1-2 records; 4 a junk)
    owner.close()


def test_the_queue_is_bounded_per_sender_checked_in_turn_and_refused_digests_are_not_checked_again(caplog):
    """PushChecks alone, its thread held in the first check: 18 more requests from one (address, sender) queue 16
    and drop 2 (named once), another sender's request is checked right after the first (in turn, not after the
    flooder's 16), a request whose connection went away (cancelled) is never checked, and 50 copies of a header
    refused once are dropped unread at submit (a signature is verified once per digest)."""
    from dgrpo.transports.pushcheck import PushChecks

    held, calls = threading.Event(), []

    def check(name, sender, key, value):
        calls.append((sender, value))
        held.wait(10)
        return False

    checks = PushChecks(0, check, lambda path, headers: (200, b"ok"), lambda name, sender, key: True)
    caplog.set_level(logging.WARNING, logger="dgrpo.transports.peerserve")
    push = {"x-dgrpo-reader": "3", "x-dgrpo-why": "first"}
    first, _ = checks.submit("h", "/v/x", push)
    while not calls:
        time.sleep(0.01)
    futs = [checks.submit("h", "/v/x", {**push, "x-dgrpo-why": f"junk {i}"})[0] for i in range(18)]
    assert [f is None for f in futs] == [False] * 16 + [True] * 2 and checks.dropped == {("h", "3"): 2}
    assert [r.getMessage().count("claiming node 3 from h") for r in caplog.records] == [1]
    other, _ = checks.submit("h", "/v/x", {"x-dgrpo-reader": "1", "x-dgrpo-why": "node 1's"})
    futs[7].cancel()
    held.set()
    assert first.result(10) == (200, b"ok") and other.result(10) == (200, b"ok")
    assert all(f.result(10) == (200, b"ok") for f in futs[:7] + futs[8:16])
    assert [c[0] for c in calls[:3]] == ["3", "3", "1"] and ("3", "junk 7") not in calls and len(calls) == 17
    fut, plain = checks.submit("h", "/v/x", {**push, "x-dgrpo-why": "junk 3"})
    assert fut is None and plain == {"x-dgrpo-reader": "3"}  # (refused once: answered at once, unread)
    for _ in range(50):
        checks.submit("h2", "/v/x", {**push, "x-dgrpo-why": "junk 3"})
    assert checks.copies == 51 and len(calls) == 17
    checks.close()


def test_a_peer_holding_every_queue_from_a_few_addresses_loses_its_own_not_an_honest_senders():
    """All :attr:`PushChecks.max_queues` queues taken by one peer from 5 source addresses, each claiming 13 roster
    names (a roster of 14; nothing checked meanwhile: the checks' thread is held in its first check). Before, the first
    64 (source, claimed sender) pairs kept every later one out: honest node 1, pushing from its own address, had its
    pushes dropped. Now the address holding the most queues loses its fullest one: node 1's push is queued and
    checked; the flooder's cancelled requests are answered by nothing (their connections closed)."""
    from dgrpo.transports.pushcheck import PushChecks

    held, seen = threading.Event(), []

    def check(name, sender, key, value):
        held.wait(10)
        seen.append(sender)
        return False

    checks = PushChecks(0, check, lambda path, headers: (404, b""), lambda name, sender, key: True)
    try:
        flood = [checks.submit(f"10.0.0.{h}", "/v/r0/data/0", {"x-dgrpo-reader": str(s), "x-dgrpo-ack": f"j{h}.{s}.{i}"})
                 for h in range(5) for s in range(1, 14) for i in range(2)]
        assert len(checks.queues) == checks.max_queues
        fut, plain = checks.submit("10.0.1.1", "/v/r0/data/0", {"x-dgrpo-reader": "1", "x-dgrpo-ack": "mine"})
        assert fut is not None and plain is None  # (before: None, dropped)
        assert ("10.0.1.1", "1") in checks.queues and len(checks.queues) <= checks.max_queues
        assert any(f is not None and f.cancelled() for f, _ in flood)  # (the flooder's own, crowded out)
        held.set()
        assert fut.result(timeout=10) == (404, b"") and "1" in seen
    finally:
        checks.close()


def _held_checks(caplog):
    """PushChecks with one pending a queue, a record of 8 dropped pairs and a check that records its sender and holds
    the checks' thread until ``held`` is set: (checks, held, calls)."""
    from dgrpo.transports.pushcheck import PushChecks

    held, calls = threading.Event(), []

    def check(name, sender, key, value):
        calls.append(sender)
        held.wait(10)
        return False

    checks = PushChecks(0, check, lambda path, headers: (404, b""), lambda name, sender, key: True)
    checks.per_sender, checks.dropped_max = 1, 8
    caplog.set_level(logging.WARNING, logger="dgrpo.transports.peerserve")
    return checks, held, calls


def test_the_record_of_dropped_pairs_is_bounded_and_forgets_the_least_recently_dropped_first(caplog):
    """A flood from fresh (source address, claimed sender) pairs, each dropped once (its queue full: one pending a
    queue here, the checks' thread held in its first check), kept every pair in :attr:`PushChecks.dropped` for ever
    (before: 40 pairs of 40, any number a flood of fresh addresses made). Now at most ``dropped_max`` are kept, the
    least recently dropped forgotten first; a pair dropped again stays (it moves last); a forgotten pair dropped
    again is counted from 1 and named again (one more log line, nothing else)."""
    checks, held, calls = _held_checks(caplog)
    pairs = [(f"10.0.{i}.1", str(1 + i % 3)) for i in range(40)]
    try:
        checks.submit("10.1.0.1", "/v/why", {"x-dgrpo-reader": "4", "x-dgrpo-why": "first"})
        while not calls:  # (the checks' thread held in this one: nothing else is taken off a queue)
            time.sleep(0.01)
        for i, (host, sender) in enumerate(pairs):
            for j in range(2):  # (the first queued, the second over the queue's bound: dropped)
                checks.submit(host, "/v/why", {"x-dgrpo-reader": sender, "x-dgrpo-why": f"junk {i}.{j}"})
            if i == 35:  # (pair 30 dropped again: it moves last)
                checks.submit(pairs[30][0], "/v/why", {"x-dgrpo-reader": pairs[30][1], "x-dgrpo-why": "again"})
        assert list(checks.dropped) == pairs[33:36] + [pairs[30]] + pairs[36:]  # (before: all 40)
        assert checks.dropped[pairs[30]] == 2 and set(checks.dropped.values()) == {1, 2}
        assert len([r for r in caplog.records if "claiming node" in r.getMessage()]) == 40
        checks.submit(pairs[0][0], "/v/why", {"x-dgrpo-reader": pairs[0][1], "x-dgrpo-why": "forgotten"})
        assert checks.dropped[pairs[0]] == 1 and len(checks.dropped) == 8 and pairs[33] not in checks.dropped
        assert len([r for r in caplog.records if "claiming node" in r.getMessage()]) == 41
    finally:
        held.set()
        checks.close()


class _Signing:
    """A private key that records the thread of each signature it makes."""

    def __init__(self, key, threads: list):
        self.key, self.threads = key, threads

    def sign(self, data):
        self.threads.append(threading.current_thread().name)
        return self.key.sign(data)

    def __getattr__(self, name):
        return getattr(self.key, name)


def test_a_flood_of_challenges_makes_the_serving_loop_sign_only_what_the_queues_do_not_hold():
    """Rank 3 asks node 0's server for challenge answers (``GET /v/hello/{fresh}``, each answer node 0's signature
    of its launch nonce for it) from 32 connections at once, 640 requests, while node 1 reads node 0's round payload
    and node 2 challenges node 0's address. Before: the serving loop signed every one (640 signatures there, one a
    request, ~0.07 ms each; nothing bounded them per source). Now a challenge is answered from the checks' thread, in
    the queue of its (source, claimed reader) as a pushed header is checked (pushcheck.py); only one over its queue's
    bound is signed on the loop (review r31m F1: closed unanswered, one claiming an honest reader's name from the
    same address kept that reader's challenge out), one signature each. Node 2's challenge
    is answered, node 1 reads the payload every time, and no flood request costs more than one signature."""
    from dgrpo.transports.peeraddr import answers

    ts, _ = _ranks(n=4)
    owner = ts[0].chan
    threads: list[str] = []
    owner.keys.key = _Signing(owner.keys.key, threads)
    owner.set("r0/data/0", b"payload" * 1000)
    host, port = owner.address.rsplit(":", 1)
    answered, reads, problems = [], [], []

    def flood(k: int) -> None:
        for _ in range(20):
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            try:
                conn.request("GET", f"/v/hello/{secrets.token_hex(16)}", headers={"X-Dgrpo-Reader": "3"})
                answered.append(conn.getresponse().status)
            except (OSError, http.client.HTTPException):
                answered.append(None)  # (closed unanswered: over its queue's bound)
            finally:
                conn.close()

    def read() -> None:
        for _ in range(30):
            value, problem = ts[1].chan.fetch(0, "r0/data/0", 1 << 16, time.monotonic() + 30, 30.0)
            reads.append(value)
            if problem:
                problems.append(problem)

    attackers = [threading.Thread(target=flood, args=(k,)) for k in range(32)]
    reader = threading.Thread(target=read)
    for t in [*attackers, reader]:
        t.start()
    proved = []
    for _ in range(20):  # (an unanswered challenge proves nothing: asked again, as peerresolve does)
        proved.append(answers(ts[2].chan.keys, 0, owner.address, owner.nonce, 2))
        if proved[-1] is not None:
            break
    for t in [*attackers, reader]:
        t.join(60)
    on_loop = threads.count("dgrpo-serve-0")
    dropped = sum(owner.checks.dropped.values())  # (over their queue's bound: signed on the loop, one each)
    assert on_loop == dropped < 640, ({n: threads.count(n) for n in set(threads)}, dropped)  # (before h31m: 640)
    assert proved[-1] is True and reads == [b"payload" * 1000] * 30, (proved, problems)
    assert len(answered) == 640 and set(answered) <= {200, None}
    # (one a challenge at most: the flood's, node 2's, and node 1's own of node 0's address before its first read)
    assert answered.count(200) <= len(threads) - 1 and len(threads) <= 640 + len(proved) + 1
    owner.close()


def _hold_first_answer(owner):
    """Hold node 0's checks' thread in the first answer it makes (as a flood's work keeps it busy), until released."""
    held, began, answer = threading.Event(), threading.Event(), owner.checks.answer

    def slow(path, headers):
        if not began.is_set():
            began.set()
            held.wait(10)
        return answer(path, headers)

    owner.checks.answer = slow
    return held, began


def _pending(host: str, port: str, reader: str) -> socket.socket:
    """A challenge of node 0's server claiming ``reader``, sent and left open, unread (it waits in its queue)."""
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(f"GET /v/hello/{secrets.token_hex(16)} HTTP/1.1\r\nHost: x\r\nX-Dgrpo-Reader: {reader}\r\n\r\n".encode())
    return s


@pytest.mark.parametrize("claims", ["the honest reader's name", "64 other names"])
def test_a_flood_claiming_names_from_one_host_does_not_close_an_honest_readers_challenge(claims):
    """Review r31m F1 (c1b60c5). On one host every peer's source address is 127.0.0.1, so the (source, claimed
    reader) queue of a challenge is anyone's: rank 3 sends node 0's server 16 challenges claiming node 2's name (or
    one claiming each of 64 other names, taking every queue: on one address ``_evict`` frees none) while its checks'
    thread is busy. Node 2's own challenge of node 0 is then closed unanswered at once (``answers`` -> None), every
    time the flood keeps the queue full; in ``launchproof.settle`` node 2 then stops the start-up naming the honest
    node 0 ("did not answer node 2's challenge ... or its server withheld the answer"). Wanted: node 2's challenge
    waits its turn and is answered once the thread is free (here 0.5 s later, well inside its 2 s)."""
    from dgrpo.transports.peeraddr import answers

    ts, _ = _ranks(n=4)
    owner = ts[0].chan
    host, port = owner.address.rsplit(":", 1)
    held, began = _hold_first_answer(owner)
    socks = [_pending(host, port, "3")]
    try:
        assert began.wait(10)
        names = ["2"] * 16 if claims == "the honest reader's name" else [str(100 + i) for i in range(64)]
        socks += [_pending(host, port, name) for name in names]
        deadline = time.monotonic() + 60  # (a loaded default set once queued 2 of 64 in 10 s; alone: well under 1 s)
        while sum(map(len, owner.checks.queues.values())) < len(names) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sum(map(len, owner.checks.queues.values())) == len(names), (owner.server.evicted, owner.checks.dropped)
        threading.Timer(0.5, held.set).start()
        proved = answers(ts[2].chan.keys, 0, owner.address, owner.nonce, 2)
        assert proved is True, (proved, owner.checks.dropped)  # (now: None, closed unanswered at once)
    finally:
        held.set()
        for s in socks:
            s.close()
        owner.close()


def test_a_flood_rotating_more_pairs_than_the_record_keeps_does_not_log_a_line_a_request(caplog):
    """Review r31m F3 (61dbd1a). The record of dropped (source, claimed sender) pairs forgets the least recently dropped
    first, and a pair forgotten is named again. A flood that rotates through one pair more than the record keeps
    (``dropped_max`` + 1; a claimed name is any number of up to 6 digits, so one address has 10^6) makes every drop a
    first one: one warning line a request, written from the serving loop (about 330 bytes: at a flood's few thousand
    requests a second, about 1 MB of log a second, for as long as it lasts). Wanted: the lines naming pairs are
    bounded per interval (the counts go on)."""
    checks, held, calls = _held_checks(caplog)
    pairs = [("127.0.0.1", str(100 + i)) for i in range(checks.dropped_max + 1)]
    try:
        checks.submit("127.0.0.1", "/v/why", {"x-dgrpo-reader": "4", "x-dgrpo-why": "first"})
        while not calls:
            time.sleep(0.01)
        for i, (host, sender) in enumerate(pairs):  # (each queue holds one: the next of its pair is dropped)
            checks.submit(host, "/v/why", {"x-dgrpo-reader": sender, "x-dgrpo-why": f"queued {i}"})
        for i in range(50):
            for host, sender in pairs:
                checks.submit(host, "/v/why", {"x-dgrpo-reader": sender, "x-dgrpo-why": f"junk {i}"})
        lines = [r for r in caplog.records if "claiming node" in r.getMessage()]
        assert len(checks.dropped) == checks.dropped_max
        assert len(lines) <= getattr(checks, "lines_max", 32), len(lines)  # (before: 450, one a drop)
    finally:
        held.set()
        checks.close()


def test_the_record_of_refused_digests_is_bounded_and_forgets_the_oldest_first():
    """Refused header digests are kept so that a copy is dropped unread (a signature verified once per digest). The
    record was emptied whole when full: 4,096 fresh junk headers made every digest refused before checked again. Now
    at most ``refused_max`` are kept, the oldest forgotten first: with a bound of 3 and 5 headers refused in turn
    (v0 … v4), copies of v2, v3, v4 are dropped unread and copies of v0, v1 are checked again (hand-counted: 5 + 2
    checks, 3 copies; before: v3 emptied the record, and only copies of v3, v4 were dropped). The kept copies are
    pushed first: a re-check of v0 refuses it again and forgets v2."""
    from dgrpo.transports.pushcheck import PushChecks

    calls = []

    def check(name, sender, key, value):
        calls.append(value)
        return False

    checks = PushChecks(0, check, lambda path, headers: (200, b"ok"), lambda name, sender, key: True)
    checks.refused_max = 3
    try:
        for i in range(5):
            fut, _ = checks.submit("h", "/v/x", {"x-dgrpo-reader": "3", "x-dgrpo-why": f"v{i}"})
            assert fut.result(10) == (200, b"ok")
        assert len(checks.refused) == 3 and calls == [f"v{i}" for i in range(5)]
        again = [checks.submit("h", "/v/x", {"x-dgrpo-reader": "3", "x-dgrpo-why": f"v{i}"})[0] for i in (2, 3, 4, 0, 1)]
        assert [f is None for f in again] == [True, True, True, False, False] and checks.copies == 3
        assert all(f.result(10) == (200, b"ok") for f in again[3:])
        assert calls == [f"v{i}" for i in range(5)] + ["v0", "v1"] and len(checks.refused) == 3
    finally:
        checks.close()
