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
  (``evicted``); with none it is closed at once (``refused``).

An honest reader sends its request as it connects and reads the answer at once, so it is answered in
one pass of the loop whatever other connections do. The counts are logged every 10 s.
"""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import threading
import time
from typing import Callable, Iterable

log = logging.getLogger("dgrpo.transports.peerserve")

Respond = Callable[[str, dict], "tuple[int, bytes | Iterable[bytes]]"]
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


class _Conn:
    __slots__ = ("host", "sock", "state", "task")

    def __init__(self, host: str, sock: socket.socket):
        self.host, self.sock, self.state, self.task = host, sock, 0, None  # state: 0 no byte, 1 request, 2 answer


class BoundedServer:
    """A read-only HTTP/1.1 server on one asyncio loop (module docstring).

    Args:
        server_address: ``(host, port)`` to bind (port 0: one the OS picks; ``server_address`` is then the
            bound one).
        respond: ``respond(path, headers) -> (status, body)``, called on the loop thread (keep it quick):
            ``headers`` maps lower-case names to values; ``body`` is bytes (sent with Content-Length) or an
            iterable of bytes chunks (tests: an attacker's server; each ``next`` runs in a thread).

    :meth:`serve_forever` runs the loop (in a thread of the caller's); :meth:`shutdown` stops it and waits;
    :meth:`server_close` frees the socket. Attributes ``max_pending``, ``per_address``, ``request_s``,
    ``write_s``, ``max_request`` are the bounds; ``evicted``, ``refused``, ``idle``, ``slow`` the counts.
    """

    backlog = 128  # the listen backlog
    max_pending = 256
    per_address = 64
    request_s = 2.0  # seconds from the accept to the end of the request head, in total
    write_s = 10.0  # seconds to write the whole answer, in total
    max_request = 8192  # bytes of request head

    def __init__(self, server_address: tuple[str, int], respond: Respond):
        self.respond = respond
        family = socket.AF_INET6 if ":" in server_address[0] else socket.AF_INET
        self.socket = socket.create_server(server_address, family=family, backlog=self.backlog)
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()[:2]
        self.loop = asyncio.new_event_loop()
        self.conns: dict[str, dict[int, _Conn]] = {}  # host → its open connections, oldest first
        self.open = 0
        self.tasks: set[asyncio.Task] = set()
        self.evicted = self.refused = self.idle = self.slow = 0
        self._warned, self._ids = 0.0, 0
        self._stop: asyncio.Event | None = None
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
        self._running.set()
        try:
            await self._stop.wait()
        finally:
            self.loop.remove_reader(self.socket.fileno())
            tasks = list(self.tasks)  # (the evicted ones too, until they ended)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _accept(self) -> None:
        """Accept every waiting connection (the listening socket is readable)."""
        for _ in range(self.backlog // 4):  # (then the evicted ones are closed before more are accepted)
            try:
                sock, peer = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # (out of descriptors: the kernel keeps the rest queued)
                return
            host = peer[0] if isinstance(peer, tuple) else str(peer)
            if not self._admit(host):
                self.refused += 1
                sock.close()
                self._report(host)
                continue
            sock.setblocking(False)
            self._ids += 1
            conn = self.conns.setdefault(host, {})[self._ids] = _Conn(host, sock)
            self.open += 1
            conn.task = self.loop.create_task(self._serve(self._ids, conn))
            self.tasks.add(conn.task)
            conn.task.add_done_callback(self.tasks.discard)

    async def _serve(self, cid: int, conn: _Conn) -> None:
        try:
            try:
                head = await asyncio.wait_for(self._head(conn), self.request_s)
            except asyncio.TimeoutError:
                self.idle += 1
                return
            except ValueError:
                self.refused += 1
                return
            conn.state = 2
            try:
                await asyncio.wait_for(self._answer(conn.sock, *head), self.write_s)
            except asyncio.TimeoutError:
                self.slow += 1
        except Exception:  # noqa: BLE001 - the reader went away; nothing to report
            pass
        finally:
            self._forget(cid, conn)
            self._report(conn.host)

    async def _head(self, conn: _Conn) -> tuple[str, dict] | None:
        """The request's path and headers (lower-case names); ValueError if it is not an HTTP request."""
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = await self.loop.sock_recv(conn.sock, self.max_request)
            if not chunk:
                raise ConnectionError("closed")
            conn.state, buf = 1, buf + chunk
            if len(buf) > self.max_request:
                raise ValueError("request head over the cap")
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

    async def _answer(self, sock: socket.socket, path: str, headers: dict) -> None:
        status, body = self.respond(path, headers) if path else (400, b"")
        stream = not isinstance(body, (bytes, bytearray, memoryview))
        head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nConnection: close\r\n"
        head += "" if stream else f"Content-Length: {len(body)}\r\n"
        await self.loop.sock_sendall(sock, (head + "\r\n").encode("latin-1"))
        if not stream:  # (sock_sendall keeps a view of the value: nothing is copied per connection)
            return await self.loop.sock_sendall(sock, body)
        it, end = iter(body), object()
        while (chunk := await self.loop.run_in_executor(None, next, it, end)) is not end:
            await self.loop.sock_sendall(sock, chunk)

    def _forget(self, cid: int, conn: _Conn, close: bool = True) -> None:
        conns = self.conns.get(conn.host, {})
        if conns.pop(cid, None) is not None:
            self.open -= 1
            if not conns:
                del self.conns[conn.host]
        if close:  # (after its task let go of it: the loop no longer watches its descriptor)
            conn.sock.close()

    def _admit(self, host: str) -> bool:
        """Room for one more connection from ``host``, evicting one if a bound is reached (module docstring)."""
        own = len(self.conns.get(host, ()))
        if own < self.per_address and self.open < self.max_pending:
            return True
        victim = host if own >= self.per_address else max(self.conns, key=lambda h: len(self.conns[h]))
        conns = self.conns[victim]
        pick = next((cid for cid, c in conns.items() if c.state == 0 and not _waiting(c.sock)), None)
        for state in (1, 2):  # (nothing without a byte: the oldest mid-request, then the oldest being answered)
            pick = pick if pick is not None else next((cid for cid, c in conns.items() if c.state <= state), None)
        conn = conns[pick]
        self._forget(pick, conn, close=False)
        conn.task.cancel()  # (its task closes the socket as it ends, on the loop's next pass)
        self.evicted += 1
        return True

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
        if self._done.is_set() and not self.loop.is_closed():
            self.loop.close()


def _waiting(sock: socket.socket) -> bool:
    """Whether bytes (or the end of the stream) wait on ``sock``."""
    poll = select.poll()
    try:
        poll.register(sock, select.POLLIN)
        return bool(poll.poll(0))
    except (OSError, ValueError):
        return False
