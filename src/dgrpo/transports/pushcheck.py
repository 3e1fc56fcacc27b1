"""Headers a peer pushes to a rank's server are checked, and challenges signed, off the serving loop, in a bounded queue
per sender (issue 31 point 3, review h31r2 item e, task h31m).

A request to a rank's server (:class:`~dgrpo.transports.peerserve.PeerChannel`) may carry what its sender pushes:
a stop reason (``X-Dgrpo-Why``), a start-up stop notice (``X-Dgrpo-Stop``), its address record (``X-Dgrpo-Addr``)
and its acknowledgement of a read (``X-Dgrpo-Ack``), each kept only once its signature verifies. Those checks ran on
the server's one event loop (:class:`~dgrpo.transports.peerhttp.BoundedServer`), about 0.15-1 ms of Ed25519 a header
(up to four a request), so a peer pushing junk headers as fast as the loop answered them held the loop that serves
this rank's own round payload: its honest readers could miss it at their deadline and accuse it. Now
(:class:`PushChecks`):

* the loop does O(1) work for a pushed header: a few dictionary lookups (:func:`wanted`: a header that could change
  nothing is dropped unread, e.g. a second stop reason of an owner whose first is kept) and a SHA-256 of at most 4 KiB
  (a copy of a header refused once is dropped: a signature is verified once per digest); it verifies nothing;
* a request with a header left is put in the queue of its (source address, claimed sender), at most
  :attr:`PushChecks.per_sender` pending each and :attr:`PushChecks.max_queues` queues (an honest node has a few
  requests to one server at once; past the queue bound, the source address holding the most queues loses its fullest
  one, :meth:`PushChecks._evict`); one over a bound is answered at once without its pushed headers (dropped), named
  once per queue in a log line and counted against nobody (no strike: the ``X-Dgrpo-Reader`` name is anyone's claim;
  the pairs named are remembered up to :attr:`PushChecks.dropped_max`, the least recently dropped forgotten first);
* a challenge (``GET /v/hello/{challenge}``, answered with this rank's signature of its launch nonce for it:
  :func:`challenged`) is queued the same way, under its (source address, claimed reader), and signed on the checks'
  thread (task h31m: the loop signed each, one Ed25519 signature a request, however many a source sent); one over a
  bound is signed on the loop, as every challenge was before (review r31m F1: closed unanswered, on one host, where
  every peer has one source address, a flood claiming a reader's name kept that reader's challenges unanswered for
  as long as it lasted, and its start-up stopped naming the honest server; the loop signs only what the queues do
  not hold, one signature a request, as before task h31m);
* one thread of the server's own checks the queues in turn, one request of each queue at a time (a flooding sender
  delays another sender's check by one of its own), then answers the request from the loop (the answer says whether
  the header was kept, e.g. ``why/{owner}`` served back); it runs at most :attr:`PushChecks.share` of the time (it
  sleeps the rest, 0.1 s at most a request), so under a flood the loop keeps most of the interpreter's time.

What this does not bound: on one host every peer has the same source address, so a peer pushing in another node's
name there fills that node's queue and the node's own pushes to this server are dropped meanwhile (the stop reason
and notice have their copies in the store; an acknowledgement dropped keeps the owner serving that key until its
wait ends; an address record dropped leaves the store's copy, which any rank may overwrite with an earlier launch's
(review r31j F1), so a start-up flood in the owner's name beside that overwrite can leave the owner unresolved here,
treated as absent: review r31s); on hosts of their own, the claim fills the claimer's queue. A peer with
``max_queues`` source addresses or more still takes every queue.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import Future
from typing import Callable

log = logging.getLogger("dgrpo.transports.peerserve")

ACKED = re.compile(r"why|done/data/\d+")  # keys whose reads count only with the reader's signed acknowledgement
PUSHED = ("x-dgrpo-why", "x-dgrpo-stop", "x-dgrpo-addr", "x-dgrpo-ack")  # checked in this order, then served
_LIMITS = {"x-dgrpo-why": 4096, "x-dgrpo-stop": 4096, "x-dgrpo-addr": 1024, "x-dgrpo-ack": 512}  # bytes


def wanted(chan, name: str, sender: str, key: str | None) -> bool:
    """Whether pushed header ``name`` from claimed ``sender`` could change anything at ``chan`` (no verification, no
    lock: run on the loop): it names a roster node, is within its size, and its owner's slot is open (no reason or
    notice kept yet, an address not proved yet, a served key that counts reads by acknowledgement)."""
    if not sender.isdigit() or len(sender) > 6 or int(sender) == chan.rank:
        return False
    node = int(sender)
    if chan.keys is not None and not chan.keys.knows(node):
        return False
    if name == "x-dgrpo-why":
        return chan.acks is not None and node not in chan.whys
    if name == "x-dgrpo-stop":
        return chan.keys is not None and node in chan.launches and node not in chan.stops
    if name == "x-dgrpo-addr":
        return chan.keys is not None and not chan.frozen and node not in chan.addrs
    return chan.acks is not None and key is not None and ACKED.fullmatch(key) is not None and key in chan.values


def challenged(chan, key: str | None) -> bool:
    """Whether ``chan`` answers ``key`` with a signature (a challenge ``hello/{challenge}``, at most 64 letters or
    digits: :meth:`~dgrpo.transports.peeraddr.AddressKeys.hello`): answered on the checks' thread, never on the loop."""
    return (key is not None and chan.keys is not None and key.startswith("hello/") and len(key) <= 70
            and key[6:].isalnum())


class PushChecks:
    """The queue of requests whose pushed headers wait for their check, and the thread that checks them (module
    docstring).

    Args:
        rank: the server's node (named in log lines).
        check: ``check(name, sender, key, value) -> bool | None``, run on the checks' thread: True kept, False
            refused (its digest is kept: a copy is dropped unread), None undecided (checked again if pushed again).
        answer: ``answer(path, headers) -> (status, body)``, the request's answer once its headers are checked (on
            the checks' thread).
        want: ``want(name, sender, key) -> bool`` (:func:`wanted`), on the loop.
        signs: ``signs(key) -> bool`` (:func:`challenged`), on the loop: whether ``answer`` signs for ``key``
            (queued as a pushed header is; signed on the loop only over a bound; default: never).

    Counts: :attr:`dropped` ((source, sender) → requests answered without their pushed headers, over a bound; the
    :attr:`dropped_max` pairs dropped last: a pair not dropped since is forgotten first, and only logged again if it
    is dropped again), :attr:`checked` (requests checked), :attr:`copies` (headers dropped as copies of a refused one).
    """

    per_sender = 16  # requests with pushed headers pending per (source address, claimed sender)
    max_queues = 64  # queues at once
    share = 0.25  # the checks' thread uses at most this share of a CPU (it sleeps 3 x its CPU time a request)
    refused_max = 4096  # digests of refused headers kept (the oldest forgotten first)
    dropped_max = 1024  # (source, sender) pairs whose drops are counted (and named once): the last dropped kept
    lines_max, lines_s = 64, 10.0  # at most this many lines naming pairs per this many seconds (review r31m F3)

    def __init__(self, rank: int, check: Callable, answer: Callable, want: Callable, signs: Callable | None = None):
        self.rank, self.check, self.answer, self.want = rank, check, answer, want
        self.signs = signs or (lambda key: False)
        self.queues: OrderedDict[tuple[str, str], deque] = OrderedDict()  # (source, sender) → pending, in turn
        self.refused: dict[bytes, None] = {}
        self.dropped: OrderedDict[tuple[str, str], int] = OrderedDict()  # (least recently dropped first)
        self.checked = self.copies = 0
        self._window, self._lines, self._unnamed = float("-inf"), 0, 0  # (the log lines' window: _drop)
        self.closed = False
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._run, name=f"dgrpo-push-{rank}", daemon=True)
        self.thread.start()

    def submit(self, host: str, path: str, headers: dict) -> tuple[Future | None, dict]:
        """On the loop: (a future of the answer, None) if ``headers`` push something to check or ``path`` asks for a
        signed answer (a challenge, ``signs``): queued; else (None, ``headers`` without their pushed ones: answer at
        once). A challenge over a bound is answered at once too (signed on the loop: closed unanswered, an honest
        reader's challenge could be kept out by requests claiming its name, review r31m F1). Else O(1): no
        verification, no signature."""
        key = _key(path)
        signs = self.signs(key)
        if not signs and not any(h in headers for h in PUSHED):
            return None, headers
        sender = headers.get("x-dgrpo-reader", "")
        plain = {h: v for h, v in headers.items() if h not in PUSHED}
        keep = {}
        for h in PUSHED:
            if h in headers and len(headers[h]) <= _LIMITS[h] and self.want(h, sender, key):
                if _digest(h, sender, key, headers[h]) in self.refused:
                    self.copies += 1
                else:
                    keep[h] = headers[h]
        if not keep and not signs:
            return None, plain
        q = (host, sender if sender.isdigit() and len(sender) <= 6 else "?")  # (a challenger's name is unchecked)
        with self.cond:
            queue = self.queues.get(q)
            if self.closed or (len(queue) >= self.per_sender if queue is not None else
                               len(self.queues) >= self.max_queues and not self._evict(host)):
                self._drop(q)
                return None, plain  # (a challenge: signed on the loop, as before task h31m: review r31m F1)
            fut: Future = Future()
            self.queues.setdefault(q, deque()).append((fut, path, sender, key, keep, plain))
            self.cond.notify()
        return fut, None

    def _evict(self, host: str) -> bool:
        """All queues taken (:attr:`max_queues`): make room for a new queue from ``host`` by cancelling the fullest
        queue of the source address holding the most queues, if it holds more than ``host`` would (True); else
        False (the new one is dropped). Before, the first 64 (source, claimed sender) pairs kept every later one out:
        a peer with a few addresses, claiming every roster name from each, had every honest sender's pushes dropped
        at this server (review r31s); now it crowds out only its own, as connections are evicted
        (:meth:`~dgrpo.transports.peerhttp.BoundedServer._admit`)."""
        held: dict[str, int] = {}
        for h, _ in self.queues:
            held[h] = held.get(h, 0) + 1
        busiest = max(held, key=held.__getitem__)
        if held[busiest] <= held.get(host, 0) + 1:
            return False
        q = max((q for q in self.queues if q[0] == busiest), key=lambda q: len(self.queues[q]))
        for item in self.queues.pop(q):
            item[0].cancel()  # (its connection closed by the loop, unanswered)
            self._drop(q)
        return True

    def _drop(self, q: tuple[str, str]) -> None:
        """Count a request of ``q`` dropped, naming ``q`` in a log line the first time. At most :attr:`dropped_max`
        pairs are kept, the least recently dropped forgotten first (before, every pair ever dropped was kept: a flood
        from fresh source addresses or claimed names grew it without bound). At most :attr:`lines_max` lines name pairs
        every :attr:`lines_s` seconds, the rest summed up in one line (a flood rotating through more pairs than are
        kept made every drop a first one: a line a request from the loop, review r31m F3)."""
        self.dropped[q] = self.dropped.pop(q, 0) + 1
        while len(self.dropped) > self.dropped_max:
            self.dropped.popitem(last=False)
        if self.dropped[q] == 1:
            now = time.monotonic()
            if now - self._window >= self.lines_s:
                if self._unnamed:
                    log.warning("node %d: %d more (source address, claimed sender) pairs had requests dropped in %g s, "
                                "not named (%d lines at most every %g s)", self.rank, self._unnamed, self.lines_s,
                                self.lines_max, self.lines_s)
                self._window, self._lines, self._unnamed = now, 0, 0
            if self._lines >= self.lines_max:
                self._unnamed += 1
                return
            self._lines += 1
            log.warning("node %d: requests claiming node %s from %s pushed headers or challenges faster than this "
                        "server checks or signs them (%d pending at most): the excess is dropped (answered without its "
                        "headers; a challenge signed at once), counted against nobody: the name in a request is "
                        "anyone's claim", self.rank, q[1][:8], q[0], self.per_sender)

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.queues and not self.closed:
                    self.cond.wait()
                if self.closed:
                    return
                q, queue = next(iter(self.queues.items()))  # (in turn: its first request, then the queue goes last)
                fut, path, sender, key, keep, plain = queue.popleft()
                del self.queues[q]
                if queue:
                    self.queues[q] = queue
            if not fut.set_running_or_notify_cancel():  # (the loop gave up on it: its connection is gone)
                continue
            began = time.thread_time()  # (this thread's CPU time: waits for the interpreter lock do not count)
            try:
                for h, value in keep.items():
                    if self.check(h, sender, key, value) is False:
                        while len(self.refused) >= self.refused_max:  # (the oldest refused forgotten first: a
                            self.refused.pop(next(iter(self.refused)), None)  # bound, not a reset of every digest)
                        self.refused[_digest(h, sender, key, value)] = None
                out = self.answer(path, plain)
            except Exception:  # noqa: BLE001 - a check or hook that failed: the reader gets nothing
                out = (404, b"")
            self.checked += 1
            fut.set_result(out)
            time.sleep(min(0.1, (time.thread_time() - began) * (1 - self.share) / self.share))

    def close(self) -> None:
        """Stop the checks' thread; pending requests are cancelled (their connections closed by the loop)."""
        with self.cond:
            self.closed = True
            for queue in self.queues.values():
                for item in queue:
                    item[0].cancel()
            self.queues.clear()
            self.cond.notify()


def _key(path: str) -> str | None:
    from urllib.parse import unquote

    return unquote(path[3:]) if path.startswith("/v/") else None


def _digest(name: str, sender: str, key: str | None, value: str) -> bytes:
    return hashlib.sha256(f"{name}\0{sender}\0{key if name == 'x-dgrpo-ack' else ''}\0{value}".encode(
        "utf-8", "surrogateescape")).digest()
