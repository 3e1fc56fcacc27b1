"""Node identity: Ed25519 keys, the roster fixed before round 0, signed messages (issue 13, point 1).

Every node holds an Ed25519 key pair (RFC 8032, through ``cryptography``); the roster maps node id →
public key and is fixed before round 0 (a file written by ``dgrpo keys`` for a deployment, fresh keys
made in the process for in-process runs). A message is signed over :func:`signed_bytes`: a canonical
JSON encoding of every field of the message (text and token ids through their SHA-256) together with
the run context (run id and config fingerprint), so a signature is valid for one message of one run
only. Receivers verify it before anything else (:meth:`Verifier.identify`); the sender is the node
whose roster key verifies the signature, never the message's ``node`` field nor the transport.

A header (:func:`signed_header`) holds everything the signature covers with the content replaced by
its digest: it is what receivers exchange to prove equivocation (two valid signatures of one sender
for one slot with different content) without sending the text again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Mapping

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dgrpo.types import Message

VERSION = "dgrpo-message-v1"
ROSTER_FILE = "roster.json"


def _text_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate is bytes too (it is still rejected later)


def content_digest(msg: Message) -> str:
    """SHA-256 (hex) of the message's text and token ids."""
    h = hashlib.sha256(_text_bytes(msg.text))
    h.update(b"\x00" + json.dumps(list(msg.token_ids)).encode())
    return h.hexdigest()


def signed_header(msg: Message) -> dict:
    """Every field the signature covers, with the text and token ids as their digest (JSON-ready)."""
    return {"v": VERSION, "context": msg.context, "node": msg.node, "round": msg.round, "prompt_id": msg.prompt_id,
            "index": msg.index, "seed": msg.seed, "tokenizer": msg.tokenizer, "content": content_digest(msg)}


def header_bytes(header: Mapping) -> bytes:
    """The canonical encoding of a header: sorted keys, no spaces, ASCII only."""
    return json.dumps(dict(header), sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def signed_bytes(msg: Message) -> bytes:
    """The bytes a message's signature covers (:func:`header_bytes` of :func:`signed_header`)."""
    return header_bytes(signed_header(msg))


def run_context(run_id: str, config_fingerprint: str) -> str:
    """The run context every message of a run is signed for."""
    return f"{run_id}|{config_fingerprint}"


# ---------------------------------------------------------------------- keys and roster
def public_hex(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    pub = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


@dataclasses.dataclass(frozen=True)
class Roster:
    """Node id → Ed25519 public key (32 raw bytes, hex), fixed before round 0."""

    keys: Mapping[int, str]

    def __post_init__(self):
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

    def sign(self, msg: Message) -> Message:
        """``msg`` with this run's context and the node's signature (hex) filled in."""
        msg = dataclasses.replace(msg, context=self.context, signature=None)
        return dataclasses.replace(msg, signature=self._key.sign(signed_bytes(msg)).hex())


def _signature(sig) -> bytes | None:
    if not isinstance(sig, str) or len(sig) != 128:
        return None
    try:
        return bytes.fromhex(sig)
    except ValueError:
        return None


class Verifier:
    """Checks signatures against the roster for one run context."""

    def __init__(self, roster: Roster, context: str):
        self.roster, self.context = roster, context

    def valid(self, node: int, data: bytes, sig: str | None) -> bool:
        """Whether ``sig`` is ``node``'s roster key's signature of ``data``."""
        raw, pub = _signature(sig), self.roster.public(node) if isinstance(node, int) else None
        if raw is None or pub is None:
            return False
        try:
            pub.verify(raw, data)
            return True
        except InvalidSignature:
            return False

    def identify(self, msg: Message) -> tuple[int | None, str | None]:
        """Who signed ``msg``, and why it is refused (None: signed by the node it names, for this run).

        Returns:
            (signer, reason): signer is the node whose key verifies the signature (None when no roster
            key does: attributed to "unsigned"); reason starts with ``signature:``, ``identity:`` or
            ``run:``, or is None.
        """
        if msg.signature is None:
            return None, "signature: unsigned message"
        data = signed_bytes(msg)
        if self.valid(msg.node, data, msg.signature):
            if msg.context != self.context:
                return msg.node, f"run: signed for another run or config ({msg.context[:60]!r})"
            return msg.node, None
        for node in self.roster.keys:
            if node != msg.node and self.valid(node, data, msg.signature):
                return node, f"identity: claims node {msg.node} but is signed by node {node}"
        return None, "signature: no roster key verifies it"
