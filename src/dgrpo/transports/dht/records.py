"""Signed DHT records: who wrote a record is proved by an Ed25519 signature, never declared.

A node stores its payload of an exchange under the exchange's key with the subkey
``dgrpo:{node}:{public key hex}`` and the value ``signature (64 bytes) || expiry signature (64 bytes) || expiry
(8 bytes, big-endian IEEE double, DHT time) || body``. The signature covers a domain tag, the key's DHT id, the subkey
and the SHA-256 of the body, so a record cannot be
moved to another key (another round or run) or another subkey, and (digest, signature) alone proves
what a node signed for a key: a commit view carries them (:mod:`dgrpo.transports.dht.commit`), so no
view can claim another digest for an honest node. The expiry signature covers the signature and the expiry the writer
stored the record with (review r31i F2, F4-F7): the DHT keeps, per subkey, the copy that expires last, and before, the
expiry was not signed, so any node could store another node's signed record again with an expiry far ahead and the
DHT refused that node's every later record under the key. Now a record whose DHT expiry is not the signed one is
refused, and so is one whose signed expiry lies more than :data:`MAX_TTL_S` (+ :data:`CLOCK_S`) ahead; an honest
node's refresh carries a later signed expiry than any copy of its earlier records, so a replay can neither outlast
nor outrank it (the storer of a replay is not known to a reader: such a refusal names nobody, never the signer).
A record under a key every launch of a namespace shares (``{namespace}/heard``, ``/launch``) lives
:data:`SHARED_TTL_S`, whatever the config (review r31j F6): when its lifetime came from the config, a node's record
of an earlier launch whose config gave it a longer life (``startup_timeout_s``, ``timeout_s``), stored again with
exactly its signed expiry (a valid copy), expired after the node's current one, and the DHT kept it in place of the
current one. With one lifetime for all, the copy signed last expires last, so no earlier copy outranks a current one.
Two checks use :func:`verify`:

* :class:`SignedRecordValidator`, inside every node's DHT: a record whose signature does not verify
  with the key named in its own subkey, whose value is above the size one record may hold, or (once
  the roster is known) whose key is not the roster's for its node id, is refused when a peer asks to store it and when a peer
  returns it (hivemind's ``RecordValidatorBase``; the same idea as its ``RSASignatureValidator``,
  with Ed25519 keys and the node id in the subkey). Nobody can overwrite another key's subkey, and
  a forged value never reaches the application.
* the transport, on read: the key in the subkey must be the roster's key for that node id
  (:mod:`dgrpo.transports.hivemind`), so a node that signs a record for another node's slot with its
  own key is named and refused.

These signatures are the transport's own (who wrote a DHT record), beside any message-level
signatures of the swarm (issue 13): :func:`verify` is a pure function of bytes. Values and subkeys reach it through
msgpack as hivemind stores them. Keys are files in the node's identity folder (``signing.key``,
PKCS#8 PEM, mode 0600).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import struct
from collections import OrderedDict, deque
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import DHTRecord, RecordValidatorBase
from hivemind.utils.serializer import MSGPackSerializer
from hivemind.utils.timed_storage import get_dht_time

log = logging.getLogger(__name__)

DOMAIN = b"dgrpo/dht-record/v1\x00"
EXPIRY_DOMAIN = b"dgrpo/dht-expiry/v1\x00"
SIGNATURE_BYTES = 64
HEADER_BYTES = 2 * SIGNATURE_BYTES + 8  # signature, expiry signature, expiry
MAX_TTL_S = 86400.0  # the furthest ahead a record may expire (s): every TTL the transport stores is cut to this
SHARED_TTL_S = MAX_TTL_S  # the life (s) of every record under a key all launches of a namespace share: one
#                          constant, so a node's copy signed later expires later (module docstring; r31j F6)
CLOCK_S = 3.0  # hivemind.utils.timed_storage.MAX_DHT_TIME_DISCREPANCY_SECONDS: peers' clocks differ by at most this
DHT_MESSAGE_BYTES = 4 << 20  # libp2p message limit: a read returns every node's record of a key at once
_SUBKEY = re.compile(r"dgrpo:(0|[1-9][0-9]{0,5}):([0-9a-f]{64})")


# ---------------------------------------------------------------------- keys
def load_or_create_key(path: str | Path) -> Ed25519PrivateKey:
    """The Ed25519 key in ``path`` (PKCS#8 PEM), created with mode 0600 if the file does not exist.

    Raises:
        ValueError: the file exists but is not an unencrypted Ed25519 PEM key (names the file).
    """
    path = Path(path)
    if path.exists():
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{path} is not an unencrypted PEM private key ({err}); move it away to make a new one") from err
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{path} holds a {type(key).__name__}, not an Ed25519 key; move it away to make a new one")
        return key
    path.parent.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    os.replace(tmp, path)
    return key


def public_hex(key: Ed25519PrivateKey) -> str:
    """The raw 32-byte public key as 64 hex digits (what subkeys and rosters carry)."""
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


# ---------------------------------------------------------------------- records
def record_limit(nodes: int) -> int:
    """Bytes of one node's payload per exchange: (4 MiB − 64 KiB) / ``nodes``, so a key's records fit one read."""
    return (DHT_MESSAGE_BYTES - (64 << 10)) // max(nodes, 1)


def subkey_for(node: int, pub: str) -> str:
    return f"dgrpo:{node}:{pub}"


def parse_subkey(subkey) -> tuple[int, str] | None:
    """(node, public key hex) of a dgrpo subkey; None for anything else."""
    m = _SUBKEY.fullmatch(subkey) if isinstance(subkey, str) else None
    return (int(m.group(1)), m.group(2)) if m else None


def key_id(key: str) -> bytes:
    """The DHT id of ``key`` as hivemind computes it (what a validator sees as the record's key)."""
    return DHTID.generate(source=key).to_bytes()


def _signed_digest(key_id_bytes: bytes, subkey_bytes: bytes, digest: bytes) -> bytes:
    return b"".join((DOMAIN, len(key_id_bytes).to_bytes(2, "big"), key_id_bytes,
                     len(subkey_bytes).to_bytes(2, "big"), subkey_bytes, digest))


def _signed_bytes(key_id_bytes: bytes, subkey_bytes: bytes, body: bytes) -> bytes:
    """What a record's signature covers: domain, key id, subkey and the body's SHA-256."""
    return _signed_digest(key_id_bytes, subkey_bytes, hashlib.sha256(body).digest())


def _expiry_bytes(sig: bytes, packed: bytes) -> bytes:
    """What a record's expiry signature covers: its domain, the record signature and the packed expiry."""
    return EXPIRY_DOMAIN + sig + packed


def seal(private_key: Ed25519PrivateKey, key: str, node: int, body: bytes, expiration: float) -> tuple[str, bytes]:
    """(subkey, value) to store ``body`` as node ``node``'s record under ``key`` with DHT expiry ``expiration``
    (DHT time, seconds; the record must be stored with exactly this expiry); ``value[:64]`` is the signature."""
    subkey = subkey_for(node, public_hex(private_key))
    sig = private_key.sign(_signed_bytes(key_id(key), MSGPackSerializer.dumps(subkey), body))
    packed = struct.pack(">d", float(expiration))
    return subkey, sig + private_key.sign(_expiry_bytes(sig, packed)) + packed + body


def signed_expiry(value: bytes) -> float:
    """The expiry a sealed ``value`` carries (DHT time, s; unchecked: :func:`verify` checks it)."""
    return struct.unpack(">d", value[2 * SIGNATURE_BYTES:HEADER_BYTES])[0]


def signed_digest(key: str, node: int, pub: str, digest: str, signature: str) -> bool:
    """Whether ``signature`` (128 lower-case hex digits) is node ``node``'s (key ``pub``) on a record under
    ``key`` whose body has SHA-256 ``digest`` (64 lower-case hex digits): what a commit view claims."""
    if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest) and isinstance(signature, str)
            and re.fullmatch(r"[0-9a-f]{128}", signature)):
        return False
    signed = _signed_digest(key_id(key), MSGPackSerializer.dumps(subkey_for(node, pub)), bytes.fromhex(digest))
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(pub)).verify(bytes.fromhex(signature), signed)
    except (InvalidSignature, ValueError):
        return False
    return True


def verify(key_id_bytes: bytes, subkey, value, expiration: float | None = None,
           now: float | None = None) -> tuple[int, str, bytes] | str:
    """Check one record: (node, public key hex, body), or the reason it is refused.

    Args:
        key_id_bytes: the record key's DHT id (:func:`key_id`).
        subkey: the subkey as stored (a ``dgrpo:{node}:{pub}`` string).
        value: the stored value (``signature || expiry signature || expiry || body`` bytes).
        expiration: the record's DHT expiry as stored or read (DHT time, s); None: not checked. It must equal the
            signed expiry (else the record was re-stored by another node with another expiry: refused).
        now: DHT time (s) against which the signed expiry is capped at ``now + MAX_TTL_S + CLOCK_S``; None: not
            checked.
    """
    parsed = parse_subkey(subkey)
    if parsed is None:
        return f"subkey {str(subkey)[:80]!r} is not dgrpo:NODE:PUBLIC_KEY"
    if not isinstance(value, bytes) or len(value) < HEADER_BYTES:
        return f"value of node {parsed[0]}'s record is not signature + expiry + body bytes"
    node, pub = parsed
    sig, esig, packed, body = (value[:SIGNATURE_BYTES], value[SIGNATURE_BYTES:2 * SIGNATURE_BYTES],
                               value[2 * SIGNATURE_BYTES:HEADER_BYTES], value[HEADER_BYTES:])
    try:
        public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(pub))
        public.verify(sig, _signed_bytes(key_id_bytes, MSGPackSerializer.dumps(subkey), body))
    except (InvalidSignature, ValueError):
        return f"signature of node {node}'s record does not verify with the key of its subkey ({pub[:12]}…)"
    try:
        public.verify(esig, _expiry_bytes(sig, packed))
    except InvalidSignature:
        return f"expiry signature of node {node}'s record does not verify with the key of its subkey ({pub[:12]}…)"
    signed = struct.unpack(">d", packed)[0]
    if expiration is not None and expiration != signed:
        return (f"a copy of node {node}'s record stored with expiry {float(expiration):.3f}, not its signed "
                f"{signed:.3f}: re-stored by another node (its storer is not known)")
    if now is not None and not signed <= now + MAX_TTL_S + CLOCK_S:
        return f"node {node}'s record claims expiry {signed:.3f}, more than {MAX_TTL_S:g} s ahead"
    return node, pub, body


def replayed(reason: str) -> bool:
    """Whether a :func:`verify` refusal is one any node could cause with its signer's record (a re-stored copy):
    it names nobody."""
    return reason.startswith("a copy of node ")


class SignedRecordValidator(RecordValidatorBase):
    """Inside the DHT: accept only dgrpo records whose signature verifies with their subkey's key.

    Plain values (no subkey) are refused too: one could otherwise replace a whole round's
    dictionary of records. A value above ``max_value_bytes`` is refused before it is verified, and
    once :attr:`allowed` holds the roster's (node, public key hex) pairs (:meth:`allow`: from a roster
    file at start, else at launch), a record under any other pair (issue 31: every record of a key
    travels in one libp2p message of at most 4 MiB, so records under fresh keys or oversized ones
    would make every read of a round key fail). So a DHT node keeps only its own swarm's records
    (swarms sharing a bootstrap node keep theirs on their own nodes). Before the roster is known
    (trust on first use, until the launch), the records a node takes under one key are capped at
    ``max_key_bytes`` (what one message carries, counted per subkey): a node that took records under
    fresh keys past that answered every later read of the key with a message above libp2p's limit,
    and every reader and storer of the key waited hivemind's 3 s RPC time-out on it (issue 31). Each
    distinct refusal is logged once and kept in :attr:`rejections` (node claimed, reason) until the
    transport drains it.
    """

    def __init__(self, max_kept: int = 1000, max_value_bytes: int | None = None, allowed: dict[int, str] | None = None,
                 max_key_bytes: int = DHT_MESSAGE_BYTES - (32 << 10)):
        self.rejections: deque[tuple[int | None, str]] = deque(maxlen=max_kept)
        self._seen: set[int] = set()
        self.max_value_bytes, self.max_key_bytes = max_value_bytes, max_key_bytes
        self.allowed: set[tuple[int, str]] = set((allowed or {}).items())
        self._taken: OrderedDict[bytes, list] = OrderedDict()  # key id → [bytes, {subkey: bytes}], the last 4096 keys

    def allow(self, roster: dict[int, str]) -> None:
        """Accept records of ``roster``'s (node, public key hex) pairs, and from now on no others."""
        self.allowed |= set(roster.items())

    def check(self, key_id_bytes: bytes, subkey, value, expiration: float | None = None) -> tuple[int, str, bytes] | str:
        """:func:`verify` (with the record's DHT ``expiration`` and the DHT time now), then the size and roster rules:
        (node, public key hex, body) or the reason it is refused."""
        if self.max_value_bytes is not None and isinstance(value, bytes) and len(value) > self.max_value_bytes:
            parsed = parse_subkey(subkey)
            return (f"value of node {parsed[0] if parsed else '?'}'s record has {len(value)} bytes, above the "
                    f"{self.max_value_bytes} one record may hold")
        result = verify(key_id_bytes, subkey, value, expiration, get_dht_time())
        if isinstance(result, tuple) and self.allowed and result[:2] not in self.allowed:
            return f"node {result[0]}'s record is signed by {result[1][:12]}…, not by its roster key"
        return result

    def validate(self, record: DHTRecord) -> bool:
        try:
            subkey = MSGPackSerializer.loads(record.subkey)
            value = MSGPackSerializer.loads(record.value)
        except Exception:  # noqa: BLE001 - any undecodable record is simply refused
            subkey, value = None, None
        result = self.check(record.key, subkey, value, record.expiration_time)
        if isinstance(result, tuple):
            result = self._charge(record, result[0])
        if isinstance(result, tuple):
            return True
        digest = hash((record.key, record.subkey, record.value))
        if len(self._seen) > 10 * (self.rejections.maxlen or 1000):
            self._seen.clear()  # a flood of distinct forgeries costs log lines, not memory
        if digest not in self._seen:
            self._seen.add(digest)
            parsed = parse_subkey(subkey)
            node = parsed[0] if parsed and not replayed(result) else None  # (a replay's storer is not its signer)
            self.rejections.append((node, result))
            log.warning("DHT refused a record%s: %s", f" for node {node}" if node is not None else "", result)
        return False


    def _charge(self, record: DHTRecord, node: int) -> tuple | str:
        """Count ``record`` (subkey, value and 64 bytes) against its key's ``max_key_bytes``; the reason it is refused
        when the key's records would pass it. A subkey counts once, at its largest record."""
        taken = self._taken.setdefault(record.key, [0, {}])
        self._taken.move_to_end(record.key)
        if len(self._taken) > 4096:
            self._taken.popitem(last=False)
        cost, before = len(record.subkey) + len(record.value) + 64, taken[1].get(record.subkey, 0)
        if cost > before and taken[0] + cost - before > self.max_key_bytes:
            return f"node {node}'s record would take its key past the {self.max_key_bytes} bytes one read carries"
        if cost > before:
            taken[0], taken[1][record.subkey] = taken[0] + cost - before, cost
        return (node,)


def load_roster(path: str | Path) -> dict[int, str]:
    """A roster file: JSON ``{"0": "<64 hex digits>", ...}`` (node id → Ed25519 public key).

    Raises:
        ValueError: unreadable, not such an object, or a key listed twice (names the file and entry).
    """
    import json

    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"swarm.hivemind.roster: cannot read {path} ({err})") from err
    if not isinstance(data, dict):
        raise ValueError(f"swarm.hivemind.roster: {path} must hold an object {{node id: public key hex}}")
    roster = {}
    for node, pub in data.items():
        if not (isinstance(node, str) and node.isdigit() and isinstance(pub, str) and re.fullmatch(r"[0-9a-f]{64}", pub)):
            raise ValueError(f"swarm.hivemind.roster: entry {node!r}: {str(pub)[:20]!r} is not node id → 64 hex digits")
        roster[int(node)] = pub
    if len(set(roster.values())) < len(roster):
        raise ValueError(f"swarm.hivemind.roster: {path} gives one key to several nodes")
    return roster


if __name__ == "__main__":  # python -m dgrpo.transports.dht.records IDENTITY_DIR: print (and create) a node's public key
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m dgrpo.transports.dht.records IDENTITY_DIR")
    print(public_hex(load_or_create_key(Path(sys.argv[1]) / "signing.key")))
