"""Node identity: Ed25519 keys, the roster fixed before round 0, signed messages (issue 13, point 1).

Every node holds an Ed25519 key pair (RFC 8032, through ``cryptography``); the roster maps node id →
public key and is fixed before round 0 (a file written by ``dgrpo keys`` for a deployment, fresh keys
made in the process for in-process runs). A message is signed over :func:`signed_bytes`: a canonical
JSON encoding of every field of the message (text and token ids through their SHA-256) together with
the run context (run id, config fingerprint and, once the run has started, the launch id), so a signature
is valid for one message of one launch of one run only. Receivers verify it before anything else (:meth:`SignatureVerifier.identify`); the sender is the node
whose roster key verifies the signature, never the message's ``node`` field nor the transport.

Every signed thing has exactly one accepted encoding (issue 31): a signature is 128 lower-case hex
digits (64 bytes), a public key 64 (32 bytes), a digest 64 (SHA-256). Anything else, e.g. the same
signature in upper case, is refused as ``malformed`` before any verification (:func:`canonical_hex`):
a re-encoded copy of someone's message must not count as a second, different message. Copies are
recognised by :func:`message_digest` (the SHA-256 of the signed bytes), never by a string, and
:class:`SignatureVerifier` verifies a signature once per (signer, digest, signature).

A header (:func:`signed_header`) holds everything the signature covers with the content replaced by
its digest: it is what receivers exchange to prove equivocation (two valid signatures of one sender
for one slot with different content) without sending the text again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dgrpo.types import Message

VERSION = "dgrpo-message-v1"
ROSTER_FILE = "roster.json"
SIGNATURE_HEX, KEY_HEX, DIGEST_HEX = 128, 64, 64  # the one accepted length of each (lower-case hex)
_HEX = {n: re.compile(f"[0-9a-f]{{{n}}}") for n in (SIGNATURE_HEX, KEY_HEX)}


def canonical_hex(value, digits: int) -> bytes | None:
    """The bytes of ``value`` when it is exactly ``digits`` lower-case hex digits, else None (no other
    spelling is accepted: upper case, spaces, a ``0x`` prefix, another length)."""
    if not isinstance(value, str) or len(value) != digits or not _HEX[digits].fullmatch(value):
        return None
    return bytes.fromhex(value)


def _text_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate is bytes too (it is still rejected later)


def content_digest(msg: Message) -> str:
    """SHA-256 (hex) of the message's text and token ids."""
    h = hashlib.sha256(_text_bytes(msg.text))
    h.update(b"\x00" + json.dumps(list(msg.token_ids)).encode())
    return h.hexdigest()


def signed_header(msg: Message) -> dict:
    """Every field the signature covers, with the text and token ids as their digest (JSON-ready); a
    TOPLOC proof as its SHA-256 under ``proof`` (absent when the message carries none, so a message
    without one signs the same bytes as before proofs existed)."""
    header = {"v": VERSION, "context": msg.context, "node": msg.node, "round": msg.round, "prompt_id": msg.prompt_id,
              "index": msg.index, "seed": msg.seed, "tokenizer": msg.tokenizer, "content": content_digest(msg)}
    if msg.proof:
        header["proof"] = hashlib.sha256(msg.proof.encode("utf-8", "surrogatepass")).hexdigest()
    return header


def header_bytes(header: Mapping) -> bytes:
    """The canonical encoding of a header: sorted keys, no spaces, ASCII only."""
    return json.dumps(dict(header), sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def signed_bytes(msg: Message) -> bytes:
    """The bytes a message's signature covers (:func:`header_bytes` of :func:`signed_header`)."""
    return header_bytes(signed_header(msg))


def message_digest(msg: Message) -> str:
    """SHA-256 (64 lower-case hex digits) of :func:`signed_bytes`: what makes two messages copies of one
    another, whatever their signatures' spelling."""
    return hashlib.sha256(signed_bytes(msg)).hexdigest()


def run_context(run_id: str, config_fingerprint: str, launch: str = "") -> str:
    """The run context every message of a run is signed for: ``<run id>|<config fingerprint>``, and with
    ``launch`` (the transport's launch id, :meth:`dgrpo.transports.base.Transport.check_startup`)
    ``<run id>|<config fingerprint>|<launch>``, so a rerun or resume of the same name and config signs
    for another context than any earlier launch (issue 31)."""
    return f"{run_id}|{config_fingerprint}" + (f"|{launch}" if launch else "")


# ---------------------------------------------------------------------- keys and roster
def public_hex(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


@dataclasses.dataclass(frozen=True)
class Roster:
    """Node id → Ed25519 public key (32 raw bytes, hex), fixed before round 0."""

    keys: Mapping[int, str]

    def __post_init__(self):
        bad = sorted(n for n, k in self.keys.items() if canonical_hex(k, KEY_HEX) is None)
        if bad:
            raise ValueError(f"roster: the public key of node {bad[0]} is not {KEY_HEX} lower-case hex digits "
                             f"({ascii(self.keys[bad[0]])[:70]}); write the roster with `dgrpo keys`")
        object.__setattr__(self, "_public", {n: Ed25519PublicKey.from_public_bytes(bytes.fromhex(k))
                                             for n, k in self.keys.items()})

    @classmethod
    def of(cls, private: Mapping[int, Ed25519PrivateKey]) -> "Roster":
        return cls({n: public_hex(k) for n, k in sorted(private.items())})

    @property
    def fingerprint(self) -> str:
        """SHA-256 (first 16 hex digits) of the roster's canonical JSON."""
        data = json.dumps({str(n): k for n, k in sorted(self.keys.items())}, sort_keys=True).encode()
        return hashlib.sha256(data).hexdigest()[:16]

    def public(self, node: int) -> Ed25519PublicKey | None:
        return self._public.get(node)

    def to_json(self, **extra) -> str:
        """The roster file's text (``extra``: more top-level fields, e.g. the run context)."""
        return json.dumps({"nodes": {str(n): k for n, k in sorted(self.keys.items())},
                           "fingerprint": self.fingerprint, **extra}, indent=1)

    @classmethod
    def load(cls, path: str | Path) -> "Roster":
        """Read a roster file (:func:`write_keys`).

        Raises:
            ValueError: the file is not a roster (names the file and what is wrong).
        """
        try:
            data = json.loads(Path(path).read_text())
            roster = cls({int(n): str(k) for n, k in data["nodes"].items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"swarm.protocol.roster: {path} is not a roster file written by `dgrpo keys` "
                             f"({type(err).__name__}: {err})") from err
        return roster


def generate_keys(nodes: int) -> dict[int, Ed25519PrivateKey]:
    """Fresh key pairs for nodes ``0 .. nodes-1`` (in-process and local runs)."""
    return {n: Ed25519PrivateKey.generate() for n in range(nodes)}


def key_path(key_dir: str | Path, node: int) -> Path:
    return Path(key_dir) / f"node{node}.key"


def write_keys(out_dir: str | Path, nodes: int) -> Roster:
    """``dgrpo keys``: one private key file per node (PEM, mode 0600: copy each to its node only) and
    the roster every node loads (``roster.json``)."""
    out = Path(out_dir)
    existing = [p.name for p in (out / ROSTER_FILE, *(key_path(out, n) for n in range(nodes))) if p.exists()]
    if existing:  # never overwrite a deployment's keys: its nodes would no longer match the roster
        raise ValueError(f"{out} already holds {', '.join(existing[:3])}; write the keys to a new folder "
                         "(or delete the old keys first)")
    out.mkdir(parents=True, exist_ok=True)
    private = generate_keys(nodes)
    for n, key in private.items():
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        fd = os.open(key_path(out, n), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
    roster = Roster.of(private)
    (out / ROSTER_FILE).write_text(roster.to_json())
    return roster


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """This node's private key from a PEM file written by ``dgrpo keys``.

    Raises:
        ValueError: unreadable, or not an Ed25519 private key.
    """
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(f"swarm.protocol.key_dir: cannot read the private key {path} ({err})") from err
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"swarm.protocol.key_dir: {path} is not an Ed25519 private key")
    return key


# ---------------------------------------------------------------------- signing and verifying
class Signer:
    """Signs the messages of one node for one run context."""

    def __init__(self, node: int, key: Ed25519PrivateKey, context: str):
        self.node, self._key, self.context = node, key, context

    def for_context(self, context: str) -> "Signer":
        """This node's signer for another run context (tests and the ``replay`` attack's simulation of a
        message recorded in another run under the same roster key)."""
        return Signer(self.node, self._key, context)

    def sign(self, msg: Message) -> Message:
        """``msg`` with this run's context and the node's signature (hex) filled in."""
        msg = dataclasses.replace(msg, context=self.context, signature=None)
        return dataclasses.replace(msg, signature=self._key.sign(signed_bytes(msg)).hex())

    def sign_bytes(self, data: bytes) -> str:
        """This node's Ed25519 signature of ``data`` (128 lower-case hex digits), for what it signs besides
        messages (the distributed transport's leave marks, accusations and start-up record:
        :class:`dgrpo.transports.signedstore.SignedStore`)."""
        return self._key.sign(data).hex()


MALFORMED_SIGNATURE = f"malformed: signature is not {SIGNATURE_HEX} lower-case hex digits"


class SignatureVerifier:
    """Checks signatures against the roster for one run context.

    Each (node, SHA-256 of the signed bytes, signature) is verified once (:attr:`verified` counts the
    Ed25519 verifications done): a flood of copies costs a digest each, not a verification each. The
    cache holds at most ``cache_size`` entries (emptied when full)."""

    def __init__(self, roster: Roster, context: str, cache_size: int = 1 << 16):
        self.roster, self.context, self.cache_size = roster, context, cache_size
        self._cache: dict[tuple[int, bytes, bytes], bool] = {}
        self.verified = 0

    def valid(self, node: int, data: bytes, sig: str | None, cache: bool = True) -> bool:
        """Whether ``sig`` (in its canonical spelling, :func:`canonical_hex`) is ``node``'s roster key's
        signature of ``data``. ``cache=False``: verified without entering the cache (what anyone can make up
        without bound and nobody needs twice, e.g. junk stop reasons, must not empty it for the message path:
        review r31m F3); an entry already there still answers."""
        raw, pub = canonical_hex(sig, SIGNATURE_HEX), self.roster.public(node) if isinstance(node, int) else None
        if raw is None or pub is None:
            return False
        key = (node, hashlib.sha256(data).digest(), raw)
        if key not in self._cache:
            self.verified += 1
            try:
                pub.verify(raw, data)
                ok = True
            except InvalidSignature:
                ok = False
            if not cache:
                return ok
            if len(self._cache) >= self.cache_size:
                self._cache.clear()
            self._cache[key] = ok
        return self._cache[key]

    def identify(self, msg: Message, data: bytes | None = None) -> tuple[int | None, str | None]:
        """Who signed ``msg``, and why it is refused (None: signed by the node it names, for this run).

        Returns:
            (signer, reason): signer is the node whose key verifies the signature (None when no roster
            key does, or the signature is not spelled canonically: attributed to "unsigned"); reason
            starts with ``malformed:`` (checked before any verification), ``signature:``, ``run:`` or
            ``identity:`` (a signer's key signed for another node of this run), or is None.
            ``data``: :func:`signed_bytes` of ``msg`` when the caller has it already.
        """
        if msg.signature is None:
            return None, "signature: unsigned message"
        if canonical_hex(msg.signature, SIGNATURE_HEX) is None:
            return None, MALFORMED_SIGNATURE
        data = signed_bytes(msg) if data is None else data
        signer = msg.node if self.valid(msg.node, data, msg.signature) else next(
            (n for n in self.roster.keys if n != msg.node and self.valid(n, data, msg.signature)), None)
        if signer is None:
            return None, "signature: no roster key verifies it"
        if msg.context != self.context:  # before identity: the key may have been another node's there
            return signer, f"run: signed for another run, config or launch ({msg.context[:90]!r})"
        if signer != msg.node:
            return signer, f"identity: claims node {msg.node} but is signed by node {signer}"
        return signer, None
