"""Each rank serves its own round data; its peers read it over HTTP (issue 31, review r31b).

The c10d store lets any rank delete or overwrite any key, so round data kept there (payloads, relays,
accusations) can be withheld or padded by any rank and nobody can say who did it. Here every rank
runs a small read-only HTTP server (:class:`PeerChannel`, one asyncio loop in a daemon thread, its
connections bounded by :class:`~dgrpo.transports.peerhttp.BoundedServer`) that serves only what this rank wrote into it; there
is no write endpoint. A reader fetches
``GET /v/{key}`` from the key's owner with ``http.client``: a connect and read timeout, a wall-clock
budget per request and a byte cap (more is refused, never read). So a payload missing at the deadline
is its owner's doing (its own server did not serve it), and the only thing a rank can disturb is its
own server (and the start-up, through the store: :mod:`dgrpo.transports.rendezvous`).

Addresses: rank k publishes ``{"addr": "host:port", "nonce": …, "sig": …}`` under ``addr/{k}`` of the
rendezvous store, signed with its roster key (:class:`AddressKeys`, with ``swarm.protocol.roster``) and
pushes the same record in the ``X-Dgrpo-Addr`` header of its own requests to its peers' servers
(:meth:`PeerChannel.offer`: a record kept overwritten in the store still reaches them). A reader takes
only a record that verifies under k's key and whose server answers a fresh challenge for its nonce (one
of an earlier launch is stale: named, never counted against k), names the signer of any other (or
``unsigned``) in one log line and reads again while k puts its record back; it keeps the first valid one.
:meth:`DistributedTransport.check_startup` then signs every rank's map. A rank that stops at start-up
says why in ``stop/{k}``, signed for its launch (:meth:`PeerChannel.announce_stop`), so its peers name
its reason instead of "node k sent nothing" (without a roster file nothing is signed before the start-up
check: the ``unsafe_key_exchange`` opt-in).
Host: ``DGRPO_SERVE_HOST`` or the local address that reaches ``MASTER_ADDR`` (127.0.0.1 on loopback);
port: ``DGRPO_SERVE_PORT`` (+ ``LOCAL_RANK``) or one the OS picks.
"""

from __future__ import annotations

import datetime
import http.client
import json
import logging
import os
import secrets
import socket
import threading
import time
from urllib.parse import quote, unquote

from dgrpo.transports.peerhttp import BoundedServer

_CHUNK = 1 << 16
log = logging.getLogger(__name__)


def _respond(chan: "PeerChannel"):
    """The server's answer to ``GET {path}``: ``(200, value)`` for ``/v/{quoted key}`` this rank serves, else
    ``(404, b"")`` (run on the server's loop: :class:`~dgrpo.transports.peerhttp.BoundedServer`, which bounds
    how long a connection may take to send its request and to read the answer)."""

    def respond(path: str, headers: dict):
        key = unquote(path[3:]) if path.startswith("/v/") else None
        value = None if key is None else chan.serve(key, headers.get("x-dgrpo-reader", ""))
        if "x-dgrpo-addr" in headers:
            chan.offer(headers.get("x-dgrpo-reader", ""), headers["x-dgrpo-addr"])
        return (404, b"") if value is None else (200, value)

    return respond


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


class AddressKeys:
    """Signs this rank's server address and checks its peers' (issue 31: nothing read from the store is
    trusted unsigned).

    Args:
        rank: this node; key: its Ed25519 private key; roster: the run's
            :class:`~dgrpo.swarm.identity.Roster`; bound: what every record is bound to (the config
            fingerprint: a record of another config does not verify).

    A record is ``{"addr": "host:port", "nonce": 32 hex digits, "sig": 128 hex digits}``, the signature over
    ``dgrpo/addr|{node}|{addr}|{nonce}|{bound}``; ``nonce`` is drawn fresh by each server (process), so a
    reader can tell a record of this launch from one kept from an earlier run: only the server that drew
    it answers a challenge with it, signed (:meth:`hello`, review r31c F3).
    """

    def __init__(self, rank: int, key, roster, bound: str):
        self.rank, self.key, self.roster, self.bound = rank, key, roster, bound

    def _text(self, node: int, addr: str) -> bytes:
        return self._bound(f"addr|{node}|{addr}")

    def _bound(self, what: str) -> bytes:
        return f"dgrpo/{what}|{self.bound}".encode()

    def record(self, addr: str, nonce: str = "") -> bytes:
        return json.dumps({"addr": addr, "nonce": nonce,
                           "sig": self.key.sign(self._text(self.rank, f"{addr}|{nonce}")).hex()}).encode()

    def hello(self, nonce: str, challenge: str) -> bytes:
        """This rank's answer to a reader's ``challenge``: its signature of its server's ``nonce`` for it."""
        return self.sign(f"hello|{self.rank}|{nonce}|{challenge}").encode()

    def sign(self, what: str) -> str:
        """This rank's signature (128 hex digits) of ``dgrpo/{what}|{bound}`` (the check-in's marks and views)."""
        return self.key.sign(self._bound(what)).hex()

    def signer(self, node: int, addr: str, sig) -> int | None:
        """The roster node whose key signed ``addr`` as ``node``'s address (``node`` first), else None."""
        return self.signed_by(node, f"addr|{node}|{addr}", sig)

    def signed_by(self, node: int, what: str, sig) -> int | None:
        """The roster node whose key signed ``what`` (bound as :meth:`sign` binds it; ``node``'s key tried
        first), else None (malformed or foreign)."""
        from cryptography.exceptions import InvalidSignature

        from dgrpo.swarm.identity import SIGNATURE_HEX, canonical_hex

        raw = canonical_hex(sig, SIGNATURE_HEX)
        for n in [node, *sorted(set(self.roster.keys) - {node})] if raw is not None else []:
            try:
                self.roster.public(n).verify(raw, self._bound(what))
                return n
            except InvalidSignature:
                continue
        return None


def read_address(keys: AddressKeys | None, owner: int, raw: bytes) -> tuple[str | None, str | None]:
    """(``host:port|nonce``, None) from ``owner``'s record in the store, or (None, why it is refused):
    without ``keys`` (no roster file) any well-formed record is taken."""
    try:
        rec = json.loads(raw)
        addr, sig, nonce = rec["addr"], rec["sig"], rec.get("nonce", "")
        if not isinstance(addr, str) or addr.count(":") < 1 or len(addr) > 300 or "|" in addr:
            raise ValueError(addr)
        if not isinstance(nonce, str) or len(nonce) > 64 or not nonce.isalnum() and nonce:
            raise ValueError(nonce)
    except (ValueError, KeyError, TypeError, RecursionError, AttributeError):
        return None, f"is not a signed address record ({ascii(raw[:40])}; unsigned: its writer cannot be named)"
    if keys is None:
        return f"{addr}|{nonce}", None
    by = keys.signer(owner, f"{addr}|{nonce}", sig)
    if by == owner:
        return f"{addr}|{nonce}", None
    return None, (f"is signed by node {by}, not node {owner}" if by is not None else
                  f"is not signed by node {owner} (unsigned: its writer cannot be named)")


def answers(keys: AddressKeys, owner: int, addr: str, nonce: str, reader: int = -1) -> bool | None:
    """Whether the server at ``addr`` answers a fresh challenge with ``nonce`` signed by ``owner`` (bound as
    ``keys`` binds: its config fingerprint): True; False when nothing listens there or the answer is not
    that; None when the server is up but did not answer (busy, timed out: proves nothing)."""
    challenge = secrets.token_hex(16)
    host, _, port = addr.rpartition(":")
    try:
        conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=2.0)
    except ValueError:
        return False
    try:
        conn.request("GET", f"/v/hello/{challenge}", headers={"X-Dgrpo-Reader": str(reader)})
        resp = conn.getresponse()
        sig = resp.read(256).decode(errors="replace") if resp.status == 200 else ""
    except ConnectionRefusedError:  # nothing listens there: a record of an earlier launch (or a dead server)
        sig = ""
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()
    return keys.signed_by(owner, f"hello|{owner}|{nonce}|{challenge}", sig) == owner


class PeerChannel:
    """This rank's own read-only server, and reads of its peers' servers.

    Args:
        rank: this node's id.
        store: the rendezvous store (addresses are published and resolved there), or None.
        host / port: where to bind (default :func:`local_host`, an OS-chosen port).

    Writes (``set``, ``append``, ``delete_key``) change only this rank's served values. Reads:
    :meth:`fetch` (owner, key, byte cap, deadline) → ``(value or None, problem or None)``.
    """

    def __init__(self, rank: int, store=None, host: str | None = None, port: int | None = None,
                 keys: AddressKeys | None = None):
        self.rank, self.store, self.keys = rank, store, keys
        self.bad_addr: dict[int, str] = {}  # owner → why its record in the store was refused (last seen)
        self.values: dict[str, bytes] = {"accuse": b""}  # (served from the start: none yet, not "gone")
        self.lock = threading.Lock()
        self.addrs: dict[int, str] = {}
        self.offers: dict[int, dict[bytes, None]] = {}  # owner → records it pushed (offer), oldest first
        self.launches: dict[int, str] = {}  # owner → its server's nonce, as its server answered a challenge for it
        self.readers: dict[str, set[int]] = {}
        self.frozen = False  # after the signed start-up check: addresses are never read again
        self.hook = None  # tests: hook(key, reader) -> bytes | None overrides what is served (an attacker's server)
        host = host or local_host()
        if port is None:
            base = os.environ.get("DGRPO_SERVE_PORT")
            port = int(base) + int(os.environ.get("LOCAL_RANK", "0")) if base else 0
        self.server = BoundedServer((host, port), _respond(self))
        self.address = f"{host}:{self.server.server_address[1]}"
        self.nonce = secrets.token_hex(16)  # this server's launch: only it answers a challenge with it, signed
        threading.Thread(target=self.server.serve_forever, name=f"dgrpo-serve-{rank}", daemon=True).start()
        self.addrs[rank], self.launches[rank] = self.address, self.nonce
        self._record = (keys.record(self.address, self.nonce) if keys else
                        json.dumps({"addr": self.address, "sig": ""}).encode())
        if store is not None:
            store.set(f"addr/{rank}", self._record)

    # ------------------------------------------------------------------ own values
    def serve(self, key: str, reader: str) -> bytes | None:
        if self.hook is not None:
            out = self.hook(key, reader)
            if out is not None:
                return out
        if key.startswith("hello/") and self.keys is not None and key[6:].isalnum() and len(key) <= 70:
            return self.keys.hello(self.nonce, key[6:])
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
        """A peer's address: the first record ``owner`` signed, under ``addr/{owner}`` in the store or pushed by
        ``owner`` itself in a request to this server (:meth:`offer`), whose server answers for its launch
        (:func:`read_address`, :meth:`_stale`), kept; a refused record in the store is named in one log line
        (read again later)."""
        if owner not in self.addrs and not self.frozen and self.store is not None:
            raws = []
            try:
                if self.store.check([f"addr/{owner}"]):
                    self.store.set_timeout(datetime.timedelta(seconds=2))  # (deleted between check and get)
                    raws.append(self.store.get(f"addr/{owner}"))
            except Exception:  # noqa: BLE001 - deleted meanwhile, or the store is gone
                pass
            with self.lock:
                pushed = list(reversed(self.offers.get(owner, {})))
            for i, raw in enumerate(raws + pushed):
                addr, problem = read_address(self.keys, owner, raw)
                if addr is not None:
                    addr, nonce = addr.rsplit("|", 1)
                    problem = self._stale(owner, addr, nonce)
                if problem is None:
                    self.addrs[owner] = addr
                    break
                if i < len(raws) and self.bad_addr.get(owner) != problem:  # (named: what is in the store)
                    self.bad_addr[owner] = problem
                    log.warning("node %d: refused the server address of node %d in the store (addr/%d): it %s",
                                self.rank, owner, owner, problem)
        return self.addrs.get(owner)

    def offer(self, reader: str, raw: str) -> None:
        """A peer's own address record, pushed in a request it sent this server (``X-Dgrpo-Addr``): kept (16
        distinct ones per claimed owner at most, the latest first) if it verifies under that owner's key,
        so an address kept overwritten in the store still resolves once its owner read this rank (review
        r31c F3); whether it is of this launch is checked as a store record's is (:meth:`address_of`)."""
        if self.frozen or self.keys is None or not reader.isdigit() or len(raw) > 1024:
            return
        owner = int(reader)
        if owner in self.addrs or owner == self.rank or owner not in self.keys.roster.keys:
            return
        if read_address(self.keys, owner, raw.encode("latin-1", "replace"))[0] is None:
            return
        with self.lock:
            kept = self.offers.setdefault(owner, {})
            kept.pop(raw.encode("latin-1", "replace"), None)
            kept[raw.encode("latin-1", "replace")] = None
            while len(kept) > 16:
                kept.pop(next(iter(kept)))

    def _stale(self, owner: int, addr: str, nonce: str) -> str | None:
        """None when the server at ``addr`` answers a fresh challenge with ``nonce`` signed by ``owner``
        (the record is of this launch); else why the record (its owner's signature, valid) is stale."""
        if self.keys is None:
            return None  # (no roster file: nothing is signed before the start-up check)
        if answers(self.keys, owner, addr, nonce, self.rank) is not False:
            # (True; or None: a server that is up but busy, whose flood evicts, resets or times out the
            # challenge, is not proven stale: the owner's signed record is kept (a flood must not stop address
            # resolution; test_peerserve's flood test). A dead port behind a firewall that drops packets looks
            # the same.)
            self.launches[owner] = nonce
            return None
        return (f"is signed by node {owner} but its server at {addr} does not answer for that record's launch (a "
                "record of an earlier run or launch, or a dead server; not counted against node "
                f"{owner})")

    # ------------------------------------------------------------------ a start-up stop, said by the one that stops
    def announce_stop(self, why: str) -> None:
        """Before this rank stops at start-up: put ``why`` in the store (``stop/{rank}``), signed for this
        server's launch, so that its peers say why it left instead of "node k sent nothing" (review r31c F3)."""
        if self.keys is None or self.store is None:
            return
        why = " ".join(str(why).split())[:600]
        rec = {"why": why, "nonce": self.nonce, "sig": self.keys.sign(f"stop|{self.rank}|{why}|{self.nonce}")}
        try:
            self.store.set(f"stop/{self.rank}", json.dumps(rec).encode())
        except Exception:  # noqa: BLE001 - the store is gone: its peers find that out too
            pass

    def stop_of(self, owner: int) -> str | None:
        """Why ``owner`` stopped at start-up, if it said so (:meth:`announce_stop`) signed for the launch whose
        server this rank resolved; None otherwise (a notice of an earlier launch, or forged, counts for nothing)."""
        nonce = self.launches.get(owner)
        if self.keys is None or self.store is None or nonce is None:
            return None
        try:
            if not self.store.check([f"stop/{owner}"]):
                return None
            rec = json.loads(self.store.get(f"stop/{owner}")[:4096])
            why = str(rec["why"])
            ok = rec["nonce"] == nonce and self.keys.signed_by(owner, f"stop|{owner}|{why}|{nonce}", rec["sig"]) == owner
        except Exception:  # noqa: BLE001 - junk, deleted meanwhile, or the store is gone
            return None
        return why if ok else None

    def reassert(self) -> None:
        """While addresses are still read (start-up): put this rank's record back if it was overwritten or deleted."""
        if self.frozen or self.store is None:
            return
        try:
            self.store.set(f"addr/{self.rank}", self._record)  # (one write: cheaper than reading it first)
        except Exception:  # noqa: BLE001 - the store is gone: its reads fail as well
            pass

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
            headers = {"X-Dgrpo-Reader": str(self.rank)}
            if self.keys is not None and not self.frozen:  # (its own signed record: offer)
                headers["X-Dgrpo-Addr"] = self._record.decode()
            conn.request("GET", "/v/" + quote(key, safe=""), headers=headers)
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
