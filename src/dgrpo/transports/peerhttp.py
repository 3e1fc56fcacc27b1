"""The HTTP server each rank runs for its own round data (:mod:`dgrpo.transports.peerserve`), with a bound
on what a peer's connections can hold (issue 31).

stdlib ``ThreadingHTTPServer`` spawns a thread per connection, and a connection that sends no request
holds it (and a file descriptor) until the handler's timeout: a peer opening connections faster than
that ties up the server of an honest rank, whose payload then misses its peers' deadline and gets it
accused. Here (:class:`BoundedServer`) no thread is spent on a connection before its request arrives:

* the accept thread accepts and parks each new connection in an epoll set (``pending``);
* a watcher thread hands a connection whose request bytes have arrived to a pool of ``workers``
  threads (the stdlib handler serves it there, 2 s socket timeout), and closes a parked connection
  that sent nothing within ``idle_s``;
* at most ``max_pending`` connections are parked, ``per_address`` from one source address: one over a
  bound evicts (closes) the oldest parked connection with no byte waiting, from the address parking the
  most (its own address when that one is over its bound); with none such it is closed at once;
* at most ``max_queued`` requests wait for or are in a worker; one more is closed at once.

An honest reader sends its request as it connects, so its connection leaves the parked set at once;
a flood of idle connections closes only the flood's own, costs no thread, and at most ``max_pending``
descriptors. ``evicted`` / ``refused`` / ``idle`` count the closed ones (logged every 10 s).
Residual: a peer that sends requests and then reads the answers slowly holds a worker for up to the
2 s socket timeout each.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import HTTPServer

log = logging.getLogger("dgrpo.transports.peerserve")


class BoundedServer(HTTPServer):
    """An ``HTTPServer`` that parks connections until their request arrives (module docstring).

    Args: as ``HTTPServer`` (address, handler class). Attributes ``max_pending``, ``per_address``,
    ``workers``, ``idle_s`` are the bounds; ``evicted``, ``refused``, ``idle`` the counts.
    """

    request_queue_size = 128  # the listen backlog
    max_pending = 256
    per_address = 64
    workers = 16
    max_queued = 256  # requests handed to the workers and not yet answered; more are closed at once
    idle_s = 2.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending: dict[int, tuple[socket.socket, str, float, object]] = {}  # fd → (socket, host, since, address)
        self.lock = threading.Lock()
        self.epoll = select.epoll()
        self.pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="dgrpo-serve-worker")
        self.evicted = self.refused = self.idle = self.queued = 0
        self._warned, self._closed = 0.0, False
        threading.Thread(target=self._watch, name="dgrpo-serve-watch", daemon=True).start()

    # ------------------------------------------------------------------ accept thread
    def process_request(self, request, client_address) -> None:
        """Park ``request`` until its request bytes arrive (never spawns a thread)."""
        host = client_address[0] if isinstance(client_address, tuple) else str(client_address)
        with self.lock:
            own = sum(h == host for _, h, _, _ in self.pending.values())
            if (own >= self.per_address or len(self.pending) >= self.max_pending) and not self._evict(
                    host if own >= self.per_address else None):
                self.refused += 1
                self._close(request)
            else:
                self.pending[request.fileno()] = (request, host, time.monotonic(), client_address)
                self.epoll.register(request.fileno(), select.EPOLLIN | select.EPOLLRDHUP)
            self._report(host)

    def _evict(self, host: str | None) -> bool:
        """Close the oldest parked connection with no byte waiting, of ``host`` (None: of the address
        parking the most); False when there is none."""
        by_host: dict[str, list] = {}
        for fd, (sock, h, since, _) in self.pending.items():
            if host is None or h == host:
                by_host.setdefault(h, []).append((since, fd))
        for h in sorted(by_host, key=lambda h: -len(by_host[h])):
            for _, fd in sorted(by_host[h]):
                if not _waiting(fd):
                    self._drop(fd)
                    self.evicted += 1
                    return True
        return False

    def _report(self, host: str) -> None:
        if (self.refused or self.evicted) and time.monotonic() - self._warned > 10:
            self._warned = time.monotonic()
            log.warning("%s: closed %d parked connections over its bound (%d parked, %d per address), refused %d, "
                        "%d idle past %g s: a peer opening connections without requests? (last from %s)",
                        getattr(getattr(self, "channel", None), "address", "?"), self.evicted, self.max_pending,
                        self.per_address, self.refused, self.idle, self.idle_s, host)

    # ------------------------------------------------------------------ watcher thread
    def _watch(self) -> None:
        while not self._closed:
            try:
                events = self.epoll.poll(0.1)
            except (OSError, ValueError):  # closed
                return
            ready, now = [], time.monotonic()
            with self.lock:
                for fd, _ in events:
                    entry = self.pending.pop(fd, None)
                    if entry is not None:
                        self.epoll.unregister(fd)
                        ready.append(entry)
                for fd in [fd for fd, (_, _, since, _) in self.pending.items() if now - since > self.idle_s]:
                    self._drop(fd)
                    self.idle += 1
            for sock, _, _, address in ready:
                with self.lock:
                    full = self.queued >= self.max_queued
                    self.queued += not full
                    self.refused += full
                try:
                    if full:  # (requests faster than the workers answer: their descriptors stay bounded)
                        raise RuntimeError
                    self.pool.submit(self._serve, sock, address)
                except RuntimeError:  # over the bound, or the pool is shut down
                    self._close(sock)

    def _serve(self, sock, address) -> None:
        try:
            self.finish_request(sock, address)
        except Exception:  # noqa: BLE001 - the reader went away; nothing to report
            pass
        finally:
            self.shutdown_request(sock)
            with self.lock:
                self.queued -= 1

    def _drop(self, fd: int) -> None:
        sock = self.pending.pop(fd)[0]
        try:
            self.epoll.unregister(fd)
        except (OSError, ValueError):
            pass
        self._close(sock)

    @staticmethod
    def _close(sock) -> None:
        try:
            sock.close()
        except OSError:
            pass

    def server_close(self) -> None:
        self._closed = True
        super().server_close()
        self.pool.shutdown(wait=False)
        with self.lock:
            for fd in list(self.pending):
                self._drop(fd)
        self.epoll.close()


def _waiting(fd: int) -> bool:
    """Whether bytes (or the end of the stream) wait on ``fd`` (no recv: a socket with a timeout would wait)."""
    poll = select.poll()
    try:
        poll.register(fd, select.POLLIN)
        return bool(poll.poll(0))
    except (OSError, ValueError):
        return False
