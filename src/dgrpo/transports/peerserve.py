"""Each rank serves its own round data; its peers read it over HTTP (issue 31, review r31b).

The c10d store lets any rank delete or overwrite any key, so round data kept there (payloads, relays,
accusations) can be withheld or padded by any rank and nobody can say who did it. Here every rank
runs a small read-only HTTP server (:class:`PeerChannel`, one asyncio loop in a daemon thread, its
connections bounded by :class:`~dgrpo.transports.peerhttp.BoundedServer`) that serves only what this rank wrote into it; there
is no write endpoint. A reader fetches
``GET /v/{key}`` from the key's owner with ``http.client`` under one total deadline, connect to the last byte
of the body (:mod:`dgrpo.transports.peerget`: a per-recv timeout let a trickled head hold a read for ever, review
r31h F1), and a byte cap (more is refused, never read). So a payload missing at the deadline
is its owner's doing (its own server did not serve it), and the only thing a rank can disturb is its
own server (and the start-up, through the store: :mod:`dgrpo.transports.rendezvous`).

Addresses: rank k publishes ``{"addr": "host:port", "nonce": …, "sig": …}`` under ``addr/{k}`` of the
rendezvous store, signed with its roster key (:class:`AddressKeys`, with ``swarm.protocol.roster``) and
pushes the same record in the ``X-Dgrpo-Addr`` header of its own requests to its peers' servers, its address
challenges included (:meth:`PeerChannel.offer`: a record kept overwritten in the store still reaches them; a reader
keeps the newest an owner pushed, by the start time in its nonce, so older records pushed in its name cannot displace
it). A read of ``addr/{k}`` waits briefly for the key, so a rank deleting it every millisecond cannot keep it away.
A reader keeps only a record that verifies under k's key and whose server answers a fresh challenge for its nonce:
one whose server refuses is stale, one whose challenge goes unanswered is unproved and read again (never kept:
review r31j F1; :mod:`dgrpo.transports.peerresolve`); neither is counted against k, and the signer of any other
record (or ``unsigned``) is named in one log line.
:meth:`DistributedTransport.check_startup` then signs every rank's map. A rank that stops at start-up
says why, signed for its server's launch (:meth:`PeerChannel.announce_stop`: pushed to its peers' servers in
``X-Dgrpo-Stop``, where nobody else can delete it, and put in ``stop/{k}``), so its peers name it and its reason at
once instead of "node k sent nothing", also when its start-up check failed after theirs passed (without a roster
file, ``unsafe_key_exchange``, each record carries its signer's fresh public key: :meth:`AddressKeys.trial`).
A rank that stops later, on a peer failure under ``abort``, pushes its signed reason the same way (``X-Dgrpo-Why``,
kept by each peer's server per owner once its signature for the run and launch verifies: :meth:`PeerChannel.told_why`;
review r31m F1: junk on both sides of it buried the store's copy ``why/{k}``).
A read of a key a rank serves only until its peers read it (``why``, ``done/data/{k}``: :data:`ACKED`) counts as
that peer's only with its acknowledgement in ``X-Dgrpo-Ack``, signed by the reader for the run, its launch, the
owner and the key (:meth:`PeerChannel.acked`); the ``X-Dgrpo-Reader`` header alone is anyone's claim (review r31f
H5: a rank "read" a stopping node's reason in its peers' names, so it stopped serving it at once). Pushed headers are
checked off the serving loop, a bounded queue per sender (:mod:`dgrpo.transports.pushcheck`, review h31r2 item e).
Host: ``DGRPO_SERVE_HOST`` or the local address that reaches ``MASTER_ADDR`` (127.0.0.1 on loopback);
port: ``DGRPO_SERVE_PORT`` (+ ``LOCAL_RANK``) or one the OS picks.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import threading
import time
from urllib.parse import quote, unquote

from dgrpo.errors import peer_text
from dgrpo.transports.peeraddr import (AddressKeys, answers, launch_nonce, launch_time, numeric_host,  # noqa: F401
                                       read_address)
from dgrpo.transports.peerget import Connection, Late
from dgrpo.transports.peerhttp import BoundedServer
from dgrpo.transports.peerresolve import AddressBook
from dgrpo.transports.pushcheck import ACKED, PushChecks, challenged, wanted
from dgrpo.transports.sidereads import StoreCopies

_CHUNK = 1 << 16
log = logging.getLogger(__name__)


def _respond(chan: "PeerChannel"):
    """The server's answer to ``GET {path}``: ``(200, value)`` for ``/v/{quoted key}`` this rank serves, else
    ``(404, b"")``; run on the server's loop (:class:`~dgrpo.transports.peerhttp.BoundedServer`, which bounds how
    long a connection may take to send its request and to read the answer), which checks no signature: a request
    pushing headers (:data:`~dgrpo.transports.pushcheck.PUSHED`) is answered once the server's checks' thread
    checked them (:class:`~dgrpo.transports.pushcheck.PushChecks`, review h31r2 item e)."""

    def answer(path: str, headers: dict):
        key = unquote(path[3:]) if path.startswith("/v/") else None
        value = None if key is None else chan.serve(key, headers.get("x-dgrpo-reader", ""))
        return (404, b"") if value is None else (200, value)

    def check(name: str, sender: str, key: str | None, raw: str):  # (first the reason: served back at once)
        if name == "x-dgrpo-why":
            return chan.told_why(sender, raw)
        if name == "x-dgrpo-stop":
            return chan.told_stop(sender, raw)
        return chan.offer(sender, raw) if name == "x-dgrpo-addr" else chan.acked(key or "", sender, raw)

    chan.checks = PushChecks(chan.rank, check, answer, lambda name, sender, key: wanted(chan, name, sender, key),
                             lambda key: challenged(chan, key))

    def respond(path: str, headers: dict, host: str = ""):
        fut, plain = chan.checks.submit(host, path, headers)
        return (200, fut) if fut is not None else answer(path, plain)

    return respond


def local_host() -> str:
    """``DGRPO_SERVE_HOST`` (a name resolved here, once, to its first address: peers read IP addresses only,
    review r31i F1), else the local interface address that routes to ``MASTER_ADDR`` (loopback: 127.0.0.1).

    Raises:
        ConfigError: ``DGRPO_SERVE_HOST`` is a name that does not resolve (one line naming it and the fix)."""
    if host := os.environ.get("DGRPO_SERVE_HOST"):
        if numeric_host(host.strip("[]")):
            return host.strip("[]")
        try:
            return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
        except (OSError, UnicodeError) as err:
            from dgrpo.errors import ConfigError

            raise ConfigError(f"DGRPO_SERVE_HOST={host[:60]!r} does not resolve ({err}): set it to this machine's "
                             "IP address, one its peers reach") from None
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # (no packet is sent)
            s.connect((master, int(os.environ.get("MASTER_PORT", "29500"))))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


class PeerChannel(AddressBook):
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
        self.values: dict[str, bytes] = {"accuse": b""}  # (served from the start: none yet, not "gone")
        self.lock = threading.Lock()
        self._book()  # addrs, launches, offers, unproved, bad_addr (AddressBook)
        self.stops: dict[int, str] = {}  # owner → why it stopped, as it told this server (told_stop)
        self.departed: dict[int, dict] = {}  # peer → its own signed word that it stopped or left, as read here (relayed
        #                                        in this node's relays: DistributedTransport.cross_check, review r31n G5/G6)
        self.whys: dict[int, str] = {}  # owner → why it stopped on a peer failure, as it told this server (told_why)
        self.stopped = False  # this rank said it stops at start-up (announce_stop)
        self.readers: dict[str, set[int]] = {}  # key of ACKED → the peers whose signed acknowledgement came (acked)
        self.acks = None  # signs and checks read acknowledgements: a SignedStore (sign, valid); StoreExchange sets it
        self.frozen = False  # after the signed start-up check: addresses are never read again
        self.checked_in: float | None = None  # when this rank's check-in ended (join_group): its start-up budget's start
        self.group_wait: tuple[float, list[int], bool] | None = None  # (seconds, ranks missing, joined): join_group
        self.hook = None  # tests: hook(key, reader) -> bytes | None overrides what is served (an attacker's server)
        self.copies = None if store is None else StoreCopies(rank, store)  # (peers' values in the store, bounded)
        self.down: dict[int, float] = {}  # owner → when its server last failed to answer (fetch), till it answers
        host = host or local_host()
        if port is None:
            base = os.environ.get("DGRPO_SERVE_PORT")
            port = int(base) + int(os.environ.get("LOCAL_RANK", "0")) if base else 0
        self.server = BoundedServer((host, port), _respond(self))
        self.address = f"{host}:{self.server.server_address[1]}"
        self.nonce = launch_nonce()  # this server's launch (dated): only it answers a challenge with it, signed
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
        if challenged(self, key):  # (on the server's checks' thread: PushChecks.submit queues it)
            return self.keys.hello(self.nonce, key[6:])
        if key.startswith("why/") and key[4:].isdigit() and len(key) < 12 and int(key[4:]) in self.whys:
            return self.whys[int(key[4:])].encode()  # (a peer's stop reason it pushed here and this server kept)
        with self.lock:
            return self.values.get(key)

    def acked(self, key: str, reader: str, sig: str) -> bool | None:
        """Count a read of ``key`` (one of :data:`ACKED`, served now) as ``reader``'s if ``sig`` is its signature of
        ``read|{this rank}|{key}`` for this run and its launch (:meth:`fetch` sends it); anything else counts for
        nothing (run on the server's checks' thread: one signature check per digest, in the verifier's cache).
        Returns whether it verified (None: not checked)."""
        if self.acks is None or not ACKED.fullmatch(key) or not reader.isdigit() or len(sig) > 512:
            return None
        ok = self.acks.valid(int(reader), f"read|{self.rank}|{key}", sig)
        if ok:
            with self.lock:
                if key in self.values:
                    self.readers.setdefault(key, set()).add(int(reader))
        return ok

    def read_by(self, key: str, nodes) -> bool:
        """Whether every node in ``nodes`` read ``key`` (one of :data:`ACKED`), as its signed acknowledgement says
        (:meth:`acked`; a ``X-Dgrpo-Reader`` header alone counts for nothing)."""
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
        self.checks.close()

    # ------------------------------------------------------------------ peers: address_of, offer (AddressBook)

    # ------------------------------------------------------------------ a start-up stop, said by the one that stops
    def announce_stop(self, why: str, budget: float = 2.0) -> None:
        """Before this rank stops at start-up (an exchange missed, or its start-up check failed): say ``why``,
        signed for this server's launch, so that its peers name it and its reason at once instead of waiting and
        calling it silent (review r31c F3, issue 31). Pushed to every peer whose server this rank resolved, in the
        ``X-Dgrpo-Stop`` header of one request each (kept by the peer's own server, :meth:`told_stop`: nobody else
        can delete it there), within ``budget`` seconds in all; also put in the store (``stop/{rank}``) for a
        peer this rank cannot reach."""
        if self.keys is None:
            return
        self.stopped = True
        why = " ".join(str(why).split())[:600]
        rec = json.dumps({"why": why, "nonce": self.nonce, "sig": self.keys.sign(f"stop|{self.rank}|{why}|{self.nonce}")})
        if self.store is not None:
            try:
                self.store.set(f"stop/{self.rank}", rec.encode())
            except Exception:  # noqa: BLE001 - the store is gone: the pushes still tell its peers
                pass
        end = time.monotonic() + budget
        for t in self.push(sorted(self.addrs), f"stop/{self.rank}", {"X-Dgrpo-Stop": rec}, end)[0]:
            t.join(max(0.0, end - time.monotonic()))

    def push(self, nodes, key: str, headers: dict, end: float) -> tuple[list[threading.Thread], dict[int, bytes | None]]:
        """Send ``headers`` to each of ``nodes`` (this rank apart) on one request each for ``key``, each in a thread
        of its own ended by ``end``; returns the threads, started (the caller joins them), and node → its server's
        answer (at most 4 KiB; filled in as the threads end)."""
        got: dict[int, bytes | None] = {}

        def one(n: int) -> None:
            got[n] = self.fetch(n, key, 4096, end, max(0.0, end - time.monotonic()), extra=headers)[0]

        out = [threading.Thread(target=one, args=(n,), daemon=True) for n in nodes if n != self.rank]
        for t in out:
            t.start()
        return out, got

    def told_stop(self, reader: str, raw: str) -> bool | None:
        """A peer's stop notice pushed to this server (:meth:`announce_stop`): kept if its owner's key signed it for
        the launch this rank proved its server has (:attr:`launches`); anything else is ignored (a notice of an
        earlier launch, forged, or of a peer whose server this rank never resolved). Returns whether it was kept
        (None: not checked, its owner's launch not proved yet)."""
        if not reader.isdigit() or len(raw) > 4096:
            return False
        if self.keys is None or int(reader) not in self.launches:
            return None
        why = self._stop_text(int(reader), raw)
        if why is not None:
            self.stops.setdefault(int(reader), why)
            self.departed.setdefault(int(reader), {"stop": raw})
        return why is not None

    def told_why(self, reader: str, raw: str) -> bool | None:
        """A peer's stop reason on a peer failure pushed to this server (``X-Dgrpo-Why``:
        :meth:`StopReasons.say_stop <dgrpo.transports.stopwhy.StopReasons.say_stop>`, review r31m F1): kept, the first
        per owner, if it is ``{"why": …, "sig": …}`` with ``sig`` the owner's signature of ``why|{owner}|{why}`` for
        the run and the launch it signed its start-up record for (:attr:`acks`; checked out of the verifier's cache);
        anything else is ignored (forged, another launch's, before the keys exist, over 4 KiB). Nobody but its owner's
        key can put one here, and nobody can delete or bury it (unlike ``why/{k}`` in the store). Served back as
        ``why/{owner}``, so its owner knows this server holds it. Returns whether it was kept (None: not checked)."""
        acks = self.acks
        if None in (acks, getattr(acks, "keys", None), getattr(acks, "signer", None)) or len(raw) > 4096:
            return None
        try:
            owner, item = int(reader), json.loads(raw)
            if owner == self.rank or owner in self.whys:
                return None
            ok = isinstance(item["why"], str) and acks.valid(owner, f"why|{owner}|{item['why']}", item["sig"],
                                                             cache=False)
        except Exception:  # noqa: BLE001 - junk
            return False
        if ok:
            with self.lock:
                self.whys.setdefault(owner, peer_text(item["why"]))
        return ok

    def _stop_text(self, owner: int, raw) -> str | None:
        nonce = self.launches.get(owner)
        if self.keys is None or nonce is None or owner == self.rank:
            return None
        try:
            rec = json.loads(raw)
            why = str(rec["why"])
            ok = rec["nonce"] == nonce and self.keys.verifies(owner, f"stop|{owner}|{why}|{nonce}", rec["sig"])
        except Exception:  # noqa: BLE001 - junk
            return None
        return peer_text(why) if ok else None

    def stop_of(self, owner: int) -> str | None:
        """Why ``owner`` stopped at start-up, if it said so (:meth:`announce_stop`) signed for the launch whose
        server this rank resolved: as it told this rank's server, else, once its server does not answer (:attr:`down`),
        from the store (:attr:`copies`); None otherwise (a notice of an earlier launch, or forged, counts for
        nothing)."""
        if owner in self.stops:
            return self.stops[owner]
        if self.store is None or self.keys is None or owner not in self.launches or owner not in self.down:
            return None  # (its server answers: it pushed its notice there; review r31j F7)
        raw = self.copies.read(owner, f"stop/{owner}", time.monotonic() + 1.0)  # (bounded: transports/sidereads.py)
        why = None if raw is None else self._stop_text(owner, raw[:4096])
        if why is not None:
            self.departed.setdefault(owner, {"stop": raw[:4096].decode("utf-8", "replace")})
        return why

    def reassert(self) -> None:
        """While addresses are still read (start-up): put this rank's record back if it was overwritten or deleted."""
        if self.frozen or self.store is None:
            return
        try:
            self.store.set(f"addr/{self.rank}", self._record)  # (one write: cheaper than reading it first)
        except Exception:  # noqa: BLE001 - the store is gone: its reads fail as well
            pass

    def fetch(self, owner: int, key: str, cap: int, deadline: float, budget: float = 2.0,
              extra: dict | None = None, ack: bool = True) -> tuple[bytes | None, str | None]:
        """``owner``'s value of ``key``: (bytes, None); (None, None) not served (yet) or unreachable;
        (None, problem) it served more than ``cap`` bytes or too slowly (``budget`` seconds at most);
        ``extra``: more request headers (a stop notice); ``ack=False``: a read of an :data:`ACKED` key without this
        rank's acknowledgement (a look that leaves the owner serving it: the main's last record reads). Ends by
        ``min(deadline, now + budget)`` whatever the peer sends or withholds
        (:class:`~dgrpo.transports.peerget.Connection`: connect, request, status line, headers and body under one
        total deadline); an answer begun and unfinished then is ``slow`` (review r31h F1)."""
        if owner == self.rank:
            with self.lock:
                return self.values.get(key), None
        end = min(deadline, time.monotonic() + budget)  # (the address's challenge, at start-up, included)
        addr = self.address_of(owner, end)
        if addr is None:
            return None, None
        host, _, port = addr.rpartition(":")
        left = end - time.monotonic()
        if left <= 0:
            return None, None
        conn, resp = Connection(host.strip("[]"), int(port), end), None  # (the whole exchange ends by end: peerget)
        try:
            headers = {"X-Dgrpo-Reader": str(self.rank)}
            if self.keys is not None and not self.frozen:  # (its own signed record: offer)
                headers["X-Dgrpo-Addr"] = self._record.decode()
            if ack and self.acks is not None and ACKED.fullmatch(key):  # (its signed acknowledgement: acked)
                headers["X-Dgrpo-Ack"] = self.acks.sign(f"read|{owner}|{key}")
            headers.update(extra or {})
            conn.request("GET", "/v/" + quote(key, safe=""), headers=headers)
            resp = conn.getresponse()
            self.down.pop(owner, None)
            if resp.status != 200:
                return None, None
            size = resp.getheader("Content-Length")
            if size is not None and size.isdigit() and int(size) > cap:
                return None, f"oversize: served {int(size)} bytes under {key} (cap {cap})"
            out = bytearray()
            while True:
                if time.monotonic() > end:
                    return None, f"slow: {key} not served within {budget:.3g} s"
                chunk = resp.read1(_CHUNK) if hasattr(resp, "read1") else resp.read(_CHUNK)
                if not chunk:
                    break
                out += chunk
                if len(out) > cap:
                    return None, f"oversize: served more than {cap} bytes under {key}"
            return bytes(out), None
        except Late:  # (its answer began and was not whole by the end: a trickled status line, head or body)
            return None, f"slow: {key} not served within {budget:.3g} s"
        except (OSError, http.client.HTTPException, ValueError) as err:
            self.down.update({owner: time.monotonic()} if isinstance(err, OSError) else {})  # (refused, reset, silent)
            return None, None
        finally:
            if resp is not None:  # (its socket closes now, not when the response is collected)
                resp.close()
            conn.close()
