"""Each rank serves its own round data; its peers read it over HTTP (issue 31, review r31b).

The c10d store lets any rank delete or overwrite any key, so round data kept there (payloads, relays,
accusations) can be withheld or padded by any rank and nobody can say who did it. Here every rank
runs a small read-only HTTP server (:class:`PeerChannel`, stdlib ``ThreadingHTTPServer`` in a daemon
thread) that serves only what this rank wrote into it; there is no write endpoint. A reader fetches
``GET /v/{key}`` from the key's owner with ``http.client``: a connect and read timeout, a wall-clock
budget per request and a byte cap (more is refused, never read). So a payload missing at the deadline
is its owner's doing (its own server did not serve it), and the only thing a rank can disturb is its
own server (and the start-up, through the store: :mod:`dgrpo.transports.rendezvous`).

Addresses: rank k publishes ``host:port`` under ``addr/{k}`` of the rendezvous store; a reader
resolves each peer once and keeps it; :meth:`DistributedTransport.check_startup` signs every rank's
map, so an address overwritten in the store stops the run at start-up instead of splitting it.
Host: ``DGRPO_SERVE_HOST`` or the local address that reaches ``MASTER_ADDR`` (127.0.0.1 on loopback);
port: ``DGRPO_SERVE_PORT`` (+ ``LOCAL_RANK``) or one the OS picks.
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

_CHUNK = 1 << 16


class _Handler(BaseHTTPRequestHandler):
    # A connection that sends no request (or stops reading) is closed after this many seconds, so a peer
    # holding idle connections open (slowloris) ties up a server thread for at most that long.
    timeout = 2.0

    def do_GET(self):  # noqa: N802 (http.server's name)
        chan: PeerChannel = self.server.channel  # type: ignore[attr-defined]
        key = unquote(self.path[3:]) if self.path.startswith("/v/") else None
        value = None if key is None else chan.serve(key, self.headers.get("X-Dgrpo-Reader", ""))
        if value is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        if isinstance(value, (bytes, bytearray)):
            self.send_header("Content-Length", str(len(value)))
        self.end_headers()
        try:
            for chunk in [value] if isinstance(value, (bytes, bytearray)) else value:  # (tests: an attacker streams)
                self.wfile.write(chunk)
                self.wfile.flush()
        except OSError:  # the reader gave up (its timeout or byte cap)
            pass

    def log_message(self, *args):  # no access log on stderr
        pass


def local_host() -> str:
    """``DGRPO_SERVE_HOST``, else the local interface address that routes to ``MASTER_ADDR`` (loopback: 127.0.0.1)."""
    if os.environ.get("DGRPO_SERVE_HOST"):
        return os.environ["DGRPO_SERVE_HOST"]
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # (no packet is sent)
            s.connect((master, int(os.environ.get("MASTER_PORT", "29500"))))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


class PeerChannel:
    """This rank's own read-only server, and reads of its peers' servers.

    Args:
        rank: this node's id.
        store: the rendezvous store (addresses are published and resolved there), or None.
        host / port: where to bind (default :func:`local_host`, an OS-chosen port).

    Writes (``set``, ``append``, ``delete_key``) change only this rank's served values. Reads:
    :meth:`fetch` (owner, key, byte cap, deadline) → ``(value or None, problem or None)``.
    """

    def __init__(self, rank: int, store=None, host: str | None = None, port: int | None = None):
        self.rank, self.store = rank, store
        self.values: dict[str, bytes] = {"accuse": b""}  # (served from the start: none yet, not "gone")
        self.lock = threading.Lock()
        self.addrs: dict[int, str] = {}
        self.readers: dict[str, set[int]] = {}
        self.frozen = False  # after the signed start-up check: addresses are never read again
        self.hook = None  # tests: hook(key, reader) -> bytes | None overrides what is served (an attacker's server)
        host = host or local_host()
        if port is None:
            base = os.environ.get("DGRPO_SERVE_PORT")
            port = int(base) + int(os.environ.get("LOCAL_RANK", "0")) if base else 0
        self.server = ThreadingHTTPServer((host, port), _Handler)
        self.server.daemon_threads = True
        self.server.channel = self  # type: ignore[attr-defined]
        self.address = f"{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, name=f"dgrpo-serve-{rank}", daemon=True).start()
        self.addrs[rank] = self.address
        if store is not None:
            store.set(f"addr/{rank}", self.address.encode())

    # ------------------------------------------------------------------ own values
    def serve(self, key: str, reader: str) -> bytes | None:
        if self.hook is not None:
            out = self.hook(key, reader)
            if out is not None:
                return out
        with self.lock:
            value = self.values.get(key)
            if value is not None and reader.isdigit():
                self.readers.setdefault(key, set()).add(int(reader))
            return value

    def read_by(self, key: str, nodes) -> bool:
        """Whether every node in ``nodes`` fetched ``key`` (as it says: a reader's own claim, for shutdown only)."""
        with self.lock:
            return set(nodes) <= self.readers.get(key, set())

    def set(self, key: str, value) -> None:
        with self.lock:
            self.values[key] = value.encode() if isinstance(value, str) else bytes(value)

    def append(self, key: str, value: bytes) -> None:
        with self.lock:
            self.values[key] = self.values.get(key, b"") + bytes(value)

    def delete_key(self, key: str) -> None:
        with self.lock:
            self.values.pop(key, None)
            self.readers.pop(key, None)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------ peers
    def address_of(self, owner: int) -> str | None:
        """A peer's address, read once from the store (``addr/{owner}``) and kept."""
        if owner not in self.addrs and not self.frozen and self.store is not None:
            try:
                if self.store.check([f"addr/{owner}"]):
                    self.addrs[owner] = self.store.get(f"addr/{owner}").decode(errors="replace")
            except Exception:  # noqa: BLE001 - the store is gone: the peer is unreachable
                return None
        return self.addrs.get(owner)

    def fetch(self, owner: int, key: str, cap: int, deadline: float, budget: float = 2.0) -> tuple[bytes | None, str | None]:
        """``owner``'s value of ``key``: (bytes, None); (None, None) not served (yet) or unreachable;
        (None, problem) it served more than ``cap`` bytes or too slowly (``budget`` seconds at most)."""
        if owner == self.rank:
            with self.lock:
                return self.values.get(key), None
        addr = self.address_of(owner)
        if addr is None:
            return None, None
        host, _, port = addr.rpartition(":")
        end = min(deadline, time.monotonic() + budget)
        left = end - time.monotonic()
        if left <= 0:
            return None, None
        conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=min(left, 1.0))
        try:
            conn.request("GET", "/v/" + quote(key, safe=""), headers={"X-Dgrpo-Reader": str(self.rank)})
            resp = conn.getresponse()
            if resp.status != 200:
                return None, None
            size = resp.getheader("Content-Length")
            if size is not None and size.isdigit() and int(size) > cap:
                return None, f"oversize: served {int(size)} bytes under {key} (cap {cap})"
            out = bytearray()
            while True:
                if time.monotonic() > end:
                    return None, f"slow: {key} not served within {budget:g} s"
                chunk = resp.read1(_CHUNK) if hasattr(resp, "read1") else resp.read(_CHUNK)
                if not chunk:
                    break
                out += chunk
                if len(out) > cap:
                    return None, f"oversize: served more than {cap} bytes under {key}"
            return bytes(out), None
        except (OSError, http.client.HTTPException, ValueError):
            return None, None
        finally:
            conn.close()
