"""The HTTP server each rank runs for its own round data (:mod:`dgrpo.transports.peerserve`), with a bound
on what a peer's connections can hold (issue 31, review r31c F1).

A server with a thread per connection (or a pool of workers that each serve one connection with a
per-recv socket timeout) is held by a peer that opens connections and sends nothing, or trickles its
request one byte a second, or reads the answer one byte a second: the honest rank's payload then misses
its peers' deadline and the honest rank gets expelled and blamed. Here (:class:`BoundedServer`) one
asyncio event loop (stdlib, one thread) serves every connection; nothing blocks on one connection, so a
slow or idle connection costs only its socket (the answer is sent from the value itself, never copied):

* a connection's whole request head (``GET /v/{key} HTTP/1.1`` and its headers, at most ``max_request``
  bytes) must arrive within ``request_s`` seconds of its accept, in total (not per recv): a trickled or
  idle request is closed then (``idle``), a longer one at once (``refused``);
* the whole answer must be sent within ``write_s`` seconds in total: a reader that reads slowly is closed
  then (``slow``);
* at most ``max_pending`` connections are open, ``per_address`` from one source address: one over a bound
  evicts (closes) the oldest connection of the address holding the most (its own address when that one
  is over its bound), those with no request byte first, then those mid-request, then those being answered
  (``evicted``).

A connection flood is a race for the kernel's accept queue: while it is full, the kernel drops every new
SYN, an honest reader's too, which then waits out its 1 s connect timeout and tries again. So a
connection costs the loop about what the attacker's ``connect`` costs it: it is accepted in a batch (the
whole queue), read at once (an honest reader's request is usually there already, and is answered in the
same pass with one ``sendmsg``), else registered in one epoll set the loop watches (one syscall, none of
asyncio's per-reader bookkeeping; closing it unregisters it) and closed by one sweep of the parked
connections when its deadline passes; a task (with its timer) is made only for an answer that does not
fit the socket's buffer. (The first asyncio server made two tasks, a timer and an asyncio reader per
accepted connection and accepted 32 per pass: under one process's flood on loopback it accepted 12k of
104k connections in 8 s, the kernel dropped 93k, and 1-2 of 12 honest reads missed a 5 s deadline;
this one accepted 79k of 81k: results/peerserve_flood_h31d.) The counts are logged every 10 s. An answer another
thread makes (a request whose pushed headers are checked off the loop: :mod:`dgrpo.transports.pushcheck`) is sent
by the loop as soon as it is made (one callback, no task), ``write_s`` at most after the request.
"""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from typing import Callable, Iterable

log = logging.getLogger("dgrpo.transports.peerserve")

Respond = Callable[[str, dict, str], "tuple[int, bytes | Iterable[bytes] | Future]"]
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


class _Conn:
    __slots__ = ("cid", "host", "sock", "state", "buf", "end", "watched", "task", "closed", "wait")

    def __init__(self, cid: int, host: str, sock: socket.socket, end: float):
        self.cid, self.host, self.sock, self.end = cid, host, sock, end  # end: the request's deadline
        self.state, self.buf, self.watched, self.task, self.closed = 0, b"", False, None, False
        self.wait: Future | None = None  # an answer another thread makes (respond returned a Future)
        # state: 0 no byte, 1 part of a request, 2 being answered


class BoundedServer:
    """A read-only HTTP/1.1 server on one asyncio loop (module docstring).

    Args:
        server_address: ``(host, port)`` to bind (port 0: one the OS picks; ``server_address`` is then the
            bound one).
        respond: ``respond(path, headers, host) -> (status, body)``, called on the loop thread (keep it quick):
            ``headers`` maps lower-case names to values, ``host`` is the connection's source address; ``body`` is
            bytes (sent with Content-Length), an iterable of bytes chunks (tests: an attacker's server; each
            ``next`` runs in a thread), or a :class:`concurrent.futures.Future` of ``(status, body)`` made in
            another thread (the answer is sent once it is made, ``write_s`` at most, without holding the loop:
            :mod:`dgrpo.transports.pushcheck`).

    :meth:`serve_forever` runs the loop (in a thread of the caller's); :meth:`shutdown` stops it and waits;
    :meth:`server_close` frees the socket. Attributes ``max_pending``, ``per_address``, ``request_s``,
    ``write_s``, ``max_request`` are the bounds; ``evicted``, ``refused``, ``idle``, ``slow`` the counts.
    """

    backlog = 1024  # the listen backlog (the kernel caps it at net.core.somaxconn)
    accept_batch = 512  # most connections accepted in one pass of the loop
    max_pending = 256
    per_address = 64
    request_s = 2.0  # seconds from the accept to the end of the request head, in total
    write_s = 10.0  # seconds to write the whole answer, in total
    max_request = 8192  # bytes of request head
    sweep_s = 0.1  # how often parked connections are checked against their deadline

    def __init__(self, server_address: tuple[str, int], respond: Respond):
        self.respond = respond
        family = socket.AF_INET6 if ":" in server_address[0] else socket.AF_INET
        self.socket = socket.create_server(server_address, family=family, backlog=self.backlog)
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()[:2]
        self.loop = asyncio.new_event_loop()
        self.conns: dict[str, dict[int, _Conn]] = {}  # host → its open connections, oldest first
        self.parked: OrderedDict[int, _Conn] = OrderedDict()  # waiting for their request, by deadline
        self.epoll = select.epoll()  # the parked connections' sockets (one watched by the loop: a flood's
        self.byfd: dict[int, _Conn] = {}  # connection costs one register, none of asyncio's bookkeeping)
        self.open = 0
        self.tasks: set[asyncio.Task] = set()
        self.waiting: dict[int, _Conn] = {}  # connections whose answer another thread makes
        self.evicted = self.refused = self.idle = self.slow = 0
        self._warned, self._ids = 0.0, 0
        self._stop: asyncio.Event | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._running, self._done = threading.Event(), threading.Event()

    # ------------------------------------------------------------------ loop thread
    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown` (blocks the calling thread)."""
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        finally:
            self._done.set()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self.loop.add_reader(self.socket.fileno(), self._accept)
        self.loop.add_reader(self.epoll.fileno(), self._ready)
        self._sweeper = self.loop.call_later(self.sweep_s, self._sweep)
        self._running.set()
        try:
            await self._stop.wait()
        finally:
            self.loop.remove_reader(self.socket.fileno())
            self.loop.remove_reader(self.epoll.fileno())
            self._sweeper.cancel()
            for conn in [*self.parked.values(), *self.waiting.values()]:
                self._end(conn)
            tasks = list(self.tasks)  # (the evicted ones too, until they ended)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _accept(self) -> None:
        """Accept the waiting connections (the listening socket is readable) and read each at once."""
        now = time.monotonic()
        for _ in range(self.accept_batch):
            try:
                sock, peer = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # (out of descriptors: the kernel keeps the rest queued)
                return
            host = peer[0] if isinstance(peer, tuple) else str(peer)
            self._admit(host)
            sock.setblocking(False)
            self._ids += 1
            conn = self.conns.setdefault(host, {})[self._ids] = _Conn(self._ids, host, sock, now + self.request_s)
            self.open += 1
            self.parked[conn.cid] = conn
            self._read(conn)
            if not conn.closed and conn.state < 2:
                self.epoll.register(sock.fileno(), select.EPOLLIN)
                self.byfd[sock.fileno()] = conn
                conn.watched = True

    def _ready(self) -> None:
        """Read the parked connections that have bytes (or their end) waiting."""
        for fd, _ in self.epoll.poll(0, 256):
            conn = self.byfd.get(fd)
            if conn is not None:
                self._read(conn)

    def _read(self, conn: _Conn) -> None:
        """Read what arrived of ``conn``'s request; answer it once its head is whole."""
        try:
            chunk = conn.sock.recv(self.max_request + 1 - len(conn.buf))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:  # (the reader went away)
            return self._end(conn)
        conn.state, conn.buf = 1, conn.buf + chunk
        if len(conn.buf) > self.max_request:
            self.refused += 1
            return self._end(conn)
        if b"\r\n\r\n" not in conn.buf:
            return None
        self._unpark(conn)
        conn.state = 2
        try:
            path, headers = _head(conn.buf)
            status, body = self.respond(path, headers, conn.host) if path else (400, b"")
        except ValueError:  # not an HTTP request
            self.refused += 1
            return self._end(conn)
        except Exception:  # noqa: BLE001 - a respond hook that failed: the reader gets nothing
            return self._end(conn)
        if isinstance(body, Future):  # (answered once another thread made it, in one hop: pushcheck)
            conn.wait = body
            self.waiting[conn.cid] = conn
            self.loop.call_later(self.write_s, self._deliver, conn, None)
            body.add_done_callback(lambda f: self._hop(self._deliver, conn, f))
            return None
        self._answer(conn, status, body)
        return None

    def _hop(self, fn, *args) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # (the loop is closed: the server stopped)
            pass

    def _deliver(self, conn: _Conn, fut: Future | None) -> None:
        """Send the answer ``fut`` made for ``conn``; None: ``write_s`` passed without one (closed)."""
        if conn.closed or conn.wait is None:
            return
        if fut is None or fut.cancelled() or fut.exception() is not None:
            return self._end(conn)
        self.waiting.pop(conn.cid, None)
        conn.wait = None
        self._answer(conn, *fut.result())
        return None

    def _answer(self, conn: _Conn, status: int, body) -> None:
        """Send the answer: in this pass when it fits the socket's buffer, else from a task (``write_s``)."""
        stream = not isinstance(body, (bytes, bytearray, memoryview))
        head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nConnection: close\r\n"
        head = (head + ("" if stream else f"Content-Length: {len(body)}\r\n") + "\r\n").encode("latin-1")
        views = [memoryview(head)] + ([] if stream else [memoryview(body)])  # (the value itself: never copied)
        try:
            sent = conn.sock.sendmsg(views)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return self._end(conn)
        rest = _after(views, sent)
        if not rest and not stream:
            return self._end(conn)
        conn.task = self.loop.create_task(self._finish(conn, rest, body if stream else None))
        self.tasks.add(conn.task)
        conn.task.add_done_callback(self.tasks.discard)
        return None

    async def _finish(self, conn: _Conn, rest: list, stream) -> None:
        try:
            await asyncio.wait_for(self._write(conn.sock, rest, stream), self.write_s)
        except asyncio.TimeoutError:
            self.slow += 1
        except Exception:  # noqa: BLE001 - the reader went away (or the connection was evicted)
            pass
        finally:
            self._end(conn)

    async def _write(self, sock: socket.socket, rest: list, stream) -> None:
        for view in rest:
            await self.loop.sock_sendall(sock, view)
        if stream is not None:
            it, end = iter(stream), object()
            while (chunk := await self.loop.run_in_executor(None, next, it, end)) is not end:
                await self.loop.sock_sendall(sock, chunk)

    def _sweep(self) -> None:
        """Close the parked connections whose request deadline passed (``idle``); runs every ``sweep_s``."""
        now = time.monotonic()
        while self.parked:
            conn = next(iter(self.parked.values()))
            if conn.end > now:
                break
            self.idle += 1
            self._end(conn)
        self._sweeper = self.loop.call_later(self.sweep_s, self._sweep)

    def _unpark(self, conn: _Conn, closing: bool = False) -> None:
        self.parked.pop(conn.cid, None)
        if conn.watched:
            conn.watched = False
            fd = conn.sock.fileno()
            self.byfd.pop(fd, None)
            if not closing:  # (closing its only descriptor takes it out of the epoll set)
                self.epoll.unregister(fd)

    def _end(self, conn: _Conn, close: bool = True) -> None:
        """``conn`` no longer counts as open; its socket is closed (``close``; else by its task as it ends)."""
        self._unpark(conn, closing=close and not conn.closed)
        if conn.wait is not None:  # (an answer another thread makes: not needed now)
            conn.wait.cancel()
            conn.wait = None
            self.waiting.pop(conn.cid, None)
        conns = self.conns.get(conn.host, {})
        if conns.pop(conn.cid, None) is not None:
            self.open -= 1
            if not conns:
                del self.conns[conn.host]
            self._report(conn.host)
        if close and not conn.closed:
            conn.closed = True
            conn.sock.close()

    def _admit(self, host: str) -> None:
        """Room for one more connection from ``host``: evicts one if a bound is reached (module docstring)."""
        own = len(self.conns.get(host, ()))
        if own < self.per_address and self.open < self.max_pending:
            return
        victim = host if own >= self.per_address else max(self.conns, key=lambda h: len(self.conns[h]))
        conns = self.conns[victim]
        pick = next((c for c in conns.values() if c.state == 0 and not _waiting(c.sock)), None)
        for state in (1, 2):  # (nothing without a byte: the oldest mid-request, then the oldest being answered)
            pick = pick if pick is not None else next((c for c in conns.values() if c.state <= state), None)
        self.evicted += 1
        if pick.task is not None:  # (its task closes the socket as it ends, after the loop let go of it)
            self._end(pick, close=False)
            pick.task.cancel()
        else:
            self._end(pick)

    def _report(self, host: str) -> None:
        if (self.evicted or self.refused or self.idle or self.slow) and time.monotonic() - self._warned > 10:
            self._warned = time.monotonic()
            log.warning("%s:%s: closed %d connections over its bound (%d open, %d per address), refused %d, "
                        "%d without a whole request within %g s, %d not read within %g s: a peer holding "
                        "connections? (last from %s)", *self.server_address, self.evicted, self.max_pending,
                        self.per_address, self.refused, self.idle, self.request_s, self.slow, self.write_s, host)

    # ------------------------------------------------------------------ other threads
    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait (5 s at most) until it returned."""
        if self._running.wait(5) and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._stop.set)
            self._done.wait(5)

    def server_close(self) -> None:
        self.socket.close()
        self.epoll.close()
        if self._done.is_set() and not self.loop.is_closed():
            self.loop.close()


def _head(buf: bytes) -> tuple[str, dict]:
    """The request's path ("" unless GET) and headers (lower-case names); ValueError if it is not HTTP."""
    line, *rest = buf.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError(line[:80])
    headers = {}
    for h in rest:
        name, sep, value = h.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return (parts[1] if parts[0] == "GET" else ""), headers


def _after(views: list[memoryview], sent: int) -> list[memoryview]:
    """What of ``views`` is left once their first ``sent`` bytes went out."""
    out = []
    for v in views:
        if sent >= len(v):
            sent -= len(v)
            continue
        out.append(v[sent:])
        sent = 0
    return out


def _waiting(sock: socket.socket) -> bool:
    """Whether bytes (or the end of the stream) wait on ``sock``."""
    poll = select.poll()
    try:
        poll.register(sock, select.POLLIN)
        return bool(poll.poll(0))
    except (OSError, ValueError):
        return False
