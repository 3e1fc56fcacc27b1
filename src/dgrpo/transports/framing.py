"""Frames of a payload appended under one store key (``transports/distributed.py``).

A round's messages are appended under the sender's key, not set, so bytes another rank writes there
travel beside the sender's own frame instead of replacing it (the receivers' signature check then
refuses them). A frame is ``DGRPO1``, 8 hex digits of length and a JSON object.
"""

from __future__ import annotations

import json

from dgrpo.swarm.validation import parse_message
from dgrpo.types import Message

_MAGIC = b"DGRPO1"


def frame(payload: bytes) -> bytes:
    """One frame of a message payload: magic, 8 hex digits of length, the payload."""
    return _MAGIC + f"{len(payload):08x}".encode() + payload


def unframe(data: bytes) -> list[bytes]:
    """Every frame in ``data`` whose body is a JSON object, in order; other bytes are skipped.

    The search for the next frame starts inside the body of the last one, so a frame whose claimed
    length swallows the frames after it cannot hide them (each is parsed on its own; a frame found
    inside another's text only adds messages whose signatures are checked like any other).
    """
    out, pos = [], data.find(_MAGIC)
    while pos >= 0:
        start = pos + len(_MAGIC) + 8
        try:
            length = int(data[pos + len(_MAGIC):start], 16)
            body = data[start:start + length]
            if len(body) == length and isinstance(json.loads(body), dict):
                out.append(body)
                pos = data.find(_MAGIC, start)
                continue
        except (ValueError, RecursionError):
            pass
        pos = data.find(_MAGIC, pos + 1)
    return out


def relayed(raw: bytes, limit: int) -> list[Message]:
    """The messages of a peer's relay (``{"messages": [...]}``); anything malformed is skipped (a relay
    is evidence: every message in it is checked by its signature before use)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    raws = data["messages"] if isinstance(data, dict) and isinstance(data.get("messages"), list) else []
    return [m for m in (parse_message(x)[0] for x in raws[:limit]) if m is not None]
