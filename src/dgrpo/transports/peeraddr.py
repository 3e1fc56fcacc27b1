"""Signed server addresses of the distributed transport's ranks (:class:`AddressKeys`), the check of a record
read from the store or pushed by its owner (:func:`read_address`), and the challenge that tells a record of this
launch from one kept from an earlier run (:func:`answers`; issue 31, review r31c F3). Used by
:mod:`dgrpo.transports.peerserve` and the check-in (:mod:`dgrpo.transports.checkin`).
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import secrets
import threading
import time

from dgrpo.transports.peerget import Connection

_DATED = re.compile(r"[0-9a-f]{32}")
_AHEAD_NS = 86_400 * 10**9  # a record dated more than a day after the reader's clock is refused (not a clock)
_LEARN = threading.Lock()  # AddressKeys.learn: reads of several peers run in threads


def launch_nonce() -> str:
    """A server's launch nonce: 32 lower-case hex digits, the first 16 its start time (``time.time_ns()``), the
    rest random, so that of two records one node signed, the later launch's is the one dated later
    (:func:`launch_time`; :meth:`PeerChannel.offer` keeps only the newest a peer pushed)."""
    return f"{time.time_ns():016x}{secrets.token_hex(8)}"


def launch_time(nonce: str) -> int | None:
    """The start time (ns since the epoch) a :func:`launch_nonce` carries; None for any other nonce, or one dated
    more than a day after this machine's clock."""
    if not isinstance(nonce, str) or _DATED.fullmatch(nonce) is None:
        return None
    when = int(nonce[:16], 16)
    return when if when <= time.time_ns() + _AHEAD_NS else None


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

    Without a roster file (``swarm.unsafe_key_exchange``: :meth:`fresh`, ``world`` set) the roster starts with this
    rank's own fresh key and each record also carries its signer's public key (``"pub"``, 64 hex digits): a reader
    learns node k's key from the first record of k that verifies under the key it carries and whose server answers
    a challenge for it (:meth:`trial`, :meth:`learn`), and keeps it (review r31h F6: from the check-in on, every
    start-up value is signed as with a roster file). Before a reader learned k's key, anyone who writes k's record
    first with its own key and server speaks as k to that reader: the one thing this mode cannot guard.
    """

    def __init__(self, rank: int, key, roster, bound: str, world: int | None = None):
        self.rank, self.key, self.roster, self.bound = rank, key, roster, bound
        self.world = world  # unsafe key exchange: the swarm's size (peers' keys are learned); None: a roster file

    @classmethod
    def fresh(cls, rank: int, bound: str, world: int) -> "AddressKeys":
        """Keys of a launch without a roster file (``swarm.unsafe_key_exchange``): a fresh Ed25519 key for this rank,
        the roster holding only its public half until the peers' are learned (:meth:`learn`)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        from dgrpo.swarm.identity import Roster, public_hex

        key = Ed25519PrivateKey.generate()
        return cls(rank, key, Roster({rank: public_hex(key)}), bound, world)

    def knows(self, node: int) -> bool:
        """Whether ``node`` may sign a record this rank reads: in the roster file, or (unsafe key exchange) a rank
        of the swarm (``0 <= node < world``)."""
        return node in self.roster.keys or (self.world is not None and 0 <= node < self.world)

    def trial(self, owner: int, raw) -> "AddressKeys":
        """The keys to check ``owner``'s record ``raw`` (bytes or text) with: these, or (unsafe key exchange, owner's
        key not learned yet) these plus the public key ``raw`` carries, kept only by :meth:`learn` once the record
        verified and its server answered for it. A record without a well-formed key gets these keys (it fails)."""
        if self.world is None or owner in self.roster.keys or not 0 <= owner < self.world:
            return self
        from dgrpo.swarm.identity import Roster

        try:
            roster = Roster({**self.roster.keys, owner: json.loads(raw)["pub"]})
        except (ValueError, KeyError, TypeError, RecursionError, AttributeError):
            return self
        return AddressKeys(self.rank, self.key, roster, self.bound, self.world)

    def learn(self, owner: int, trial: "AddressKeys") -> bool:
        """Keep ``owner``'s key from ``trial`` (:meth:`trial`) unless one is kept already (the first key wins);
        whether the key kept is ``trial``'s."""
        with _LEARN:
            if trial is not self and owner not in self.roster.keys and owner in trial.roster.keys:
                from dgrpo.swarm.identity import Roster

                self.roster = Roster({**self.roster.keys, owner: trial.roster.keys[owner]})
            return self.roster.keys.get(owner) == trial.roster.keys.get(owner)

    def _text(self, node: int, addr: str) -> bytes:
        return self._bound(f"addr|{node}|{addr}")

    def _bound(self, what: str) -> bytes:
        return f"dgrpo/{what}|{self.bound}".encode()

    def record(self, addr: str, nonce: str = "") -> bytes:
        """This rank's signed address record (JSON bytes; with ``"pub"``, its public key, without a roster file)."""
        pub = {"pub": self.roster.keys[self.rank]} if self.world is not None else {}
        return json.dumps({"addr": addr, "nonce": nonce, **pub,
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

    def verifies(self, node: int, what: str, sig) -> bool:
        """Whether ``node``'s key alone signed ``what`` (bound as :meth:`sign` binds it): one verification, where
        only that key can count (review h31r2: :meth:`signed_by` tries every roster key, a junk notice pushed to a
        server cost its serving loop ``world`` verifications)."""
        from cryptography.exceptions import InvalidSignature

        from dgrpo.swarm.identity import SIGNATURE_HEX, canonical_hex

        raw, pub = canonical_hex(sig, SIGNATURE_HEX), self.roster.public(node)
        if raw is None or pub is None:
            return False
        try:
            pub.verify(raw, self._bound(what))
            return True
        except InvalidSignature:
            return False

    def signed_by(self, node: int, what: str, sig) -> int | None:
        """The roster node whose key signed ``what`` (bound as :meth:`sign` binds it; ``node``'s key tried
        first), else None (malformed or foreign)."""
        from cryptography.exceptions import InvalidSignature

        from dgrpo.swarm.identity import SIGNATURE_HEX, canonical_hex

        raw, roster = canonical_hex(sig, SIGNATURE_HEX), self.roster
        for n in [node, *sorted(set(roster.keys) - {node})] if raw is not None else []:
            pub = roster.public(n)
            if pub is None:  # (unsafe key exchange: node's key not learned yet)
                continue
            try:
                pub.verify(raw, self._bound(what))
                return n
            except InvalidSignature:
                continue
        return None


def numeric_host(host: str) -> bool:
    """Whether ``host`` is an IPv4 or IPv6 literal (brackets stripped), which reads without name resolution."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def read_address(keys: AddressKeys | None, owner: int, raw: bytes, named: bool = True) -> tuple[str | None, str | None]:
    """(``host:port|nonce``, None) from ``owner``'s record in the store, or (None, why it is refused):
    without ``keys`` (no roster file) any well-formed record is taken. The host must be an IP literal: a name,
    even signed by ``owner``, is refused naming ``owner`` (its readers would wait on a resolver with no deadline,
    review r31i F1; ``DGRPO_SERVE_HOST`` is resolved once at start-up: :func:`~dgrpo.transports.peerserve.local_host`).
    ``named=False``: only ``owner``'s key is tried (one verification; a record signed by another key is refused
    without naming its signer: a pushed record, review h31r2)."""
    try:
        rec = json.loads(raw)
        addr, sig, nonce = rec["addr"], rec["sig"], rec.get("nonce", "")
        if not isinstance(addr, str) or addr.count(":") < 1 or len(addr) > 300 or "|" in addr:
            raise ValueError(addr)
        if not isinstance(nonce, str) or len(nonce) > 64 or not nonce.isalnum() and nonce:
            raise ValueError(nonce)
    except (ValueError, KeyError, TypeError, RecursionError, AttributeError):
        return None, f"is not a signed address record ({ascii(raw[:40])}; unsigned: its writer cannot be named)"
    if keys is None or named:
        by = None if keys is None else keys.signer(owner, f"{addr}|{nonce}", sig)
    else:
        by = owner if keys.verifies(owner, f"addr|{owner}|{addr}|{nonce}", sig) else None
    if keys is None or by == owner:
        host = addr.rpartition(":")[0].strip("[]")
        if not numeric_host(host):
            return None, (f"{'is signed by' if keys is not None else 'is from'} node {owner} but names the host "
                          f"{ascii(host)[:60]}, not an IP address: node {owner} must set DGRPO_SERVE_HOST to an IP")
        return f"{addr}|{nonce}", None
    return None, (f"is signed by node {by}, not node {owner}" if by is not None else
                  f"is not signed by node {owner} (unsigned: its writer cannot be named)")


def answers(keys: AddressKeys, owner: int, addr: str, nonce: str, reader: int = -1,
            end: float | None = None, record: bytes | None = None) -> bool | None:
    """Whether the server at ``addr`` answers a fresh challenge with ``nonce`` signed by ``owner`` (bound as
    ``keys`` binds: its config fingerprint): True; False when nothing listens there or the answer is not
    that; None when it did not answer (busy, timed out, unreachable, a listener that never answers: proves
    nothing, and a record is never taken on it, review r31j F1). The whole exchange ends by ``end``
    (``time.monotonic()``), 2 s from now at most, whatever the server sends (:class:`Connection`: a server
    trickling its answer held this read for ever, review r31h F1). ``record``: the reader's own signed address
    record, sent in ``X-Dgrpo-Addr`` (so the challenged rank learns the reader's address from the reader itself)."""
    challenge = secrets.token_hex(16)
    host, _, port = addr.rpartition(":")
    try:
        conn = Connection(host.strip("[]"), int(port), min(time.monotonic() + 2.0, end or float("inf")), idle=2.0)
    except ValueError:
        return False
    try:
        mine = {"X-Dgrpo-Addr": record.decode()} if record else {}
        conn.request("GET", f"/v/hello/{challenge}", headers={"X-Dgrpo-Reader": str(reader), **mine})
        resp = conn.getresponse()
        sig = resp.read(256).decode(errors="replace") if resp.status == 200 else ""
    except ConnectionRefusedError:  # nothing listens there: a record of an earlier launch (or a dead server)
        sig = ""
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()
    return keys.signed_by(owner, f"hello|{owner}|{nonce}|{challenge}", sig) == owner
