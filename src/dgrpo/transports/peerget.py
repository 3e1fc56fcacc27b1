"""A read of a peer's server that ends by one deadline whatever the peer sends or withholds (issue 31, review r31h
F1, F2).

``http.client`` applies its timeout to each socket operation: a server that sends one byte of its status line or
headers every 0.5 s keeps every recv inside a 1 s timeout, and ``getresponse()`` did not return for as long as that
server's process lived (every honest reader of the attacker's round payload, record, accusations or wait note
hung in round 1). :class:`Connection` is an ``http.client.HTTPConnection`` whose socket reads and writes all run
against one total deadline ``end``: the connect, the request, the status line, the headers and the body each get
the time left (and at most ``idle`` seconds of silence a recv); a recv past ``end`` raises, so the whole exchange
ends by ``end`` (plus one recv's scheduling, milliseconds). A server that began its answer and did not finish it
by ``end`` raises :class:`Late` (its reader names it ``slow``, as one that serves too slowly); one that sent
nothing, or fell silent for ``idle`` seconds, raises ``TimeoutError`` (not served, as before).
The host must be an IP literal: the connect resolves no name (``getaddrinfo`` has no timeout, and a name a peer
signed as its address let its resolver hold every read of its keys past ``end``: review r31i F1); a name raises
``OSError`` (signed records naming one are refused earlier: :func:`dgrpo.transports.peeraddr.read_address`).
"""

from __future__ import annotations

import http.client
import io
import ipaddress
import socket
import time


class Late(TimeoutError):
    """The deadline passed after the peer's server had begun its answer (some bytes of it came, not all)."""


class _Reader(io.RawIOBase):
    """The answer's bytes as ``http.client`` reads them (status line, headers, body), each recv bounded by the time
    left until ``sock.end`` and by ``sock.idle``; counts the bytes in ``sock.got``."""

    def __init__(self, sock: "_Sock"):
        self.s = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        s = self.s
        left = s.end - time.monotonic()
        if left <= 0:
            raise s.past()
        s.sock.settimeout(min(left, s.idle))
        try:
            n = s.sock.recv_into(buf)
        except TimeoutError:
            if time.monotonic() >= s.end:
                raise s.past() from None
            raise  # (silent for idle seconds: not served)
        s.got += n
        return n

    def close(self) -> None:
        if not self.closed:
            super().close()
            self.s.release()


class _Sock:
    """The connected socket as ``http.client`` uses it (``sendall``, ``makefile``, ``close``, ``setsockopt``), every
    read and write bounded by the deadline ``end`` (``time.monotonic()`` seconds). The socket is closed once the
    connection and every reader made by :meth:`makefile` are closed (``http.client`` closes the connection before it
    reads the body of a ``Connection: close`` answer)."""

    def __init__(self, sock: socket.socket, end: float, idle: float):
        self.sock, self.end, self.idle = sock, end, idle
        self.got, self.refs, self.closing = 0, 0, False

    def past(self) -> TimeoutError:
        return Late(f"answer unfinished at its deadline ({self.got} bytes came)") if self.got else TimeoutError(
            "timed out: nothing came by the deadline")

    def sendall(self, data) -> None:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out: the request was not sent by the deadline")
        self.sock.settimeout(left)  # (sendall's timeout is the whole call's, not a send's)
        self.sock.sendall(data)

    def makefile(self, mode: str = "rb", *args, **kwargs):
        if mode != "rb":
            raise ValueError(f"peerget reads answers only (mode {mode!r})")
        self.refs += 1
        return io.BufferedReader(_Reader(self))

    def setsockopt(self, *args) -> None:
        self.sock.setsockopt(*args)

    def release(self) -> None:
        self.refs -= 1
        if self.closing and self.refs <= 0:
            self.sock.close()

    def close(self) -> None:
        self.closing = True
        if self.refs <= 0:
            self.sock.close()


class Connection(http.client.HTTPConnection):
    """``http.client.HTTPConnection(host, port)`` whose whole exchange (connect, request, answer) ends by ``end``
    (``time.monotonic()`` seconds), at most ``idle`` seconds of silence a recv (module docstring).

    Raises (from ``request``, ``getresponse`` or the response's reads): :class:`Late` when the answer began and was
    not whole by ``end``; ``TimeoutError`` when nothing came (by ``end`` or for ``idle`` s); other ``OSError`` /
    ``http.client.HTTPException`` as ``http.client`` does (refused, reset, not HTTP); ``OSError`` at once when
    ``host`` is not an IP literal (no name is resolved)."""

    def __init__(self, host: str, port: int, end: float, idle: float = 1.0):
        super().__init__(host, port, timeout=max(1e-3, min(end - time.monotonic(), idle)))
        self.end, self.idle = end, idle

    def connect(self) -> None:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out: not connected by the deadline")
        try:
            ip = ipaddress.ip_address(self.host)
        except ValueError:
            raise OSError(f"peerget reads IP addresses only, not the name {self.host[:60]!r}") from None
        sock = socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_STREAM)
        try:  # (no getaddrinfo: the connect is one call bounded by the time left)
            sock.settimeout(min(left, self.idle))
            sock.connect((str(ip), self.port))
        except BaseException:
            sock.close()
            raise
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # (not every OS has it: http.client ignores it too)
            pass
        self.sock = _Sock(sock, self.end, self.idle)
