"""Signed ``posted`` marks: what a reader of the c10d store may believe about a peer's payload (issue 31).

Any rank can write any store key, so a status mark is a hint unless its node signed it. A node that
posts exchange ``tag`` writes under ``{tag}/status/{k}``::

    posted:{sha256 of its payload, 64 lower-case hex}:{Ed25519 signature of "posted|tag|k|digest"}

(the signature bound to the run context; empty before the keys exist at start-up). A reader that finds
a valid mark takes from ``{tag}/data/{k}`` exactly the payload with that digest (the whole value, or one
of its frames, read first: bytes another rank appended or prepended come after it, within the key's
caps, and are judged by their own signatures), and keeps polling while the
value there is not it (the owner writes its keys and marks again when they change). A mark that is
missing, forged or jammed is no evidence of anything: the reader falls back on the data as found at the
deadline. Nothing unsigned or absent expels or strikes anyone.
"""

from __future__ import annotations

import hashlib

from dgrpo.swarm.identity import DIGEST_HEX, canonical_hex
from dgrpo.transports.framing import HEADER_FACTOR, KeyCaps, scan

PREFIX = "posted:"


def digest(payload: bytes) -> str:
    """SHA-256 of a payload, 64 lower-case hex digits."""
    return hashlib.sha256(payload).hexdigest()


def statement(tag: str, node: int, hexdigest: str) -> str:
    """What a posted mark's signature covers (``StoreExchange._signed`` binds it to the run)."""
    return f"posted|{tag}|{node}|{hexdigest}"


def make_mark(hexdigest: str, signature: str) -> bytes:
    return f"{PREFIX}{hexdigest}:{signature}".encode()


def parse_mark(raw: bytes) -> tuple[str, str] | None:
    """(digest, signature) of a posted mark spelled canonically, else None (junk, a jam, the old bare mark)."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    if not text.startswith(PREFIX) or text.count(":") != 2:
        return None
    _, hexdigest, sig = text.split(":")
    return (hexdigest, sig) if canonical_hex(hexdigest, DIGEST_HEX) is not None else None


def match(value: bytes, hexdigest: str, caps: KeyCaps) -> bytes | None:
    """The payload with ``hexdigest`` in a key's ``value``: the whole value, or one of its first frames
    (within ``caps``: linear in the bytes), else None."""
    if digest(value) == hexdigest:
        return value
    found = scan(value[: caps.bytes], caps.frames, HEADER_FACTOR * caps.frames)
    return next((body for body in found.frames if digest(body) == hexdigest), None)
