"""Frames of a payload appended under one store key (``transports/distributed.py``), and what a reader
spends on one key at most (issue 31, must-have 3).

A round's messages are appended under the sender's key, not set, so bytes another rank writes there
travel beside the sender's own frame instead of replacing it (the receivers' signature check then
refuses them). A frame is ``DGRPO1``, 8 lower-case hex digits of length and a JSON object.

Work is linear in the payload: :func:`unframe` never copies the rest of the payload at a header (a
claimed length is checked against the bytes there are before anything is sliced), and the JSON scan
that tests a candidate body stops at its first error, on one latin-1 view of the payload (byte i is
character i; no copy per frame). And a reader caps what it takes from one key per round
(:class:`KeyCaps`): frames, messages and bytes, each a small multiple of the sender's share; the
excess is refused once, named by the key.
"""

from __future__ import annotations

import json
import json.decoder
import re
import threading
from typing import NamedTuple

from dgrpo.swarm.validation import Limits, parse_message
from dgrpo.types import Message

_MAGIC = b"DGRPO1"
_HEADERS: dict[int, re.Pattern] = {}  # leading zeros → the header pattern (8 lower-case hex digits of length)
_SCANNER = json.JSONDecoder()
_STANDARD_ERROR = json.decoder.JSONDecodeError
CAP_FACTOR = 4  # what one key may carry per round, in multiples of its node's share (= protocol.FLOOD_FACTOR)
HEADER_FACTOR = 16  # candidate frame headers a reader looks at per frame it may take


def frame(payload: bytes) -> bytes:
    """One frame of a message payload: magic, 8 lower-case hex digits of length, the payload."""
    return _MAGIC + f"{len(payload):08x}".encode() + payload


class _ScanError(json.JSONDecodeError):
    """A JSON error that does not count the lines before it: the standard one counts every newline from the
    start of the document (O(position) per error, quadratic over a payload of failing candidates). The C
    scanner of CPython 3.11+ looks ``json.decoder.JSONDecodeError`` up at each error, so :func:`scan` puts
    this one there while it scans (a JSON error raised meanwhile in another thread has no line number)."""

    def __init__(self, msg, doc, pos):  # noqa: D107 - the fields of JSONDecodeError, without lineno/colno
        ValueError.__init__(self, f"{msg}: char {pos}")
        self.msg, self.doc, self.pos, self.lineno, self.colno = msg, doc, pos, None, None


_SWAP = threading.Lock()


class Scan(NamedTuple):
    """What :func:`scan` found: the frame bodies, the characters its JSON scans examined (the work beyond
    one pass of a regular expression: at most twice ``len(data)``, whatever the bytes; tests assert on it),
    whether it stopped at ``max_headers`` candidate headers, and the bytes its frames cover (headers
    included; a frame inside another counts once: ``len(data) - covered`` bytes lie outside every frame)."""

    frames: list[bytes]
    work: int
    stopped: bool = False
    covered: int = 0


def scan(data: bytes, max_frames: int | None = None, max_headers: int | None = None) -> Scan:
    """:func:`unframe`, stopping after ``max_frames`` frames or ``max_headers`` candidate headers (a header
    whose length fits the data and whose body looks like ``{ ... }``: each costs a little Python).

    A candidate body is scanned from its ``{`` to the end of the JSON value or the first error, on a
    latin-1 view of ``data``: the structure of JSON is ASCII, so a body that is a JSON object in UTF-8 is
    one here too (its UTF-8 is checked when the reader parses the body). A header can only lie inside a
    string of a scan that goes past it, and a scan for which it lies outside stops there, so at most two
    scans are under way at any byte: linear work.
    """
    with _SWAP:
        json.decoder.JSONDecodeError = _ScanError
        try:
            return _scan(data, max_frames, max_headers)
        finally:
            json.decoder.JSONDecodeError = _STANDARD_ERROR


def _scan(data: bytes, max_frames: int | None, max_headers: int | None) -> Scan:
    text = data.decode("latin-1")
    out, work, n, headers, covered, reach = [], 0, len(data), 0, 0, 0
    zeros = 8 - len(f"{n:x}")  # a length that fits in the data has at least these leading zeros
    pattern = _HEADERS.setdefault(zeros, re.compile(re.escape(_MAGIC) + b"(" + b"0" * zeros + b"[0-9a-f]{%d})" % (8 - zeros)))
    for header in pattern.finditer(data):  # (headers cannot overlap: "D" is no lower-case hex digit)
        if max_frames is not None and len(out) >= max_frames:
            break
        start = header.end()
        end = start + int(header.group(1), 16)
        if end > n or end - start < 2 or data[start] != 0x7B or data[end - 1] != 0x7D:  # { ... } within the data
            continue
        headers += 1
        if max_headers is not None and headers > max_headers:
            return Scan(out, work, True, covered)
        try:
            value, stop = _SCANNER.raw_decode(text, start)
        except json.JSONDecodeError as err:  # (an interpreter that raised the standard error paid O(pos): counted)
            value, stop = None, err.pos + (0 if isinstance(err, _ScanError) else start)
        except RecursionError:  # nested too deep: not a frame (the recursion limit bounds that scan)
            value, stop = None, start
        work += stop - start
        if stop == end and isinstance(value, dict):
            out.append(data[start:end])  # the next header is searched from inside it: frames there count too
            covered += max(0, end - max(header.start(), reach))
            reach = max(reach, end)
    return Scan(out, work, False, covered)


def unframe(data: bytes, max_frames: int | None = None) -> list[bytes]:
    """Every frame in ``data`` whose body is a JSON object, in order (the first ``max_frames``); other
    bytes are skipped. O(len(data)) (:func:`scan`).

    The search for the next frame starts inside the body of the last one, so a frame whose claimed
    length swallows the frames after it cannot hide them (each is parsed on its own; a frame found
    inside another's text only adds messages whose signatures are checked like any other).
    """
    return scan(data, max_frames).frames


class KeyCaps(NamedTuple):
    """What a reader takes from one store key in one round: ``frames`` frames, ``messages`` messages and
    ``bytes`` bytes (the first of each; the rest refused once, named by the key); it looks at no more than
    ``HEADER_FACTOR`` × ``frames`` candidate headers.

    :meth:`of` sizes them from the node's share: ``CAP_FACTOR`` × its slots messages (an honest node writes
    exactly its slots, in one frame), as many frames, and that many messages of the largest size the
    message limits allow (text JSON-escaped at 6 bytes a character, 12 bytes a token id, 1 kB of fields).
    """

    frames: int
    messages: int
    bytes: int

    @classmethod
    def of(cls, slots: int, limits: Limits) -> "KeyCaps":
        """Caps for a node with ``slots`` messages a round under ``limits``.

        Raises:
            ValueError: ``slots`` < 1.
        """
        if slots < 1:
            raise ValueError(f"slots: a node's share is at least 1 message a round, got {slots}")
        messages = CAP_FACTOR * slots
        return cls(messages, messages, messages * (6 * limits.max_chars + 12 * limits.max_tokens + 1024))


OPEN = KeyCaps(frames=1 << 20, messages=1 << 30, bytes=64 * 2**20)  # a transport's caps until sized from a share


def cap_of(tag: str, caps: KeyCaps, world_size: int) -> int:
    """Bytes a reader takes from one peer's value of exchange ``tag`` (from its share: ``caps``,
    :class:`~dgrpo.transports.framing.KeyCaps`): a round's frames, a relay of every node's, or 1 MiB."""
    if tag.startswith("r") and tag[1:].isdigit():
        return caps.bytes + 14 * caps.frames
    if tag.startswith("eq"):
        return min(caps.bytes * world_size + (1 << 16), OPEN.bytes)
    return 1 << 20


def capped(payload: bytes, caps: KeyCaps) -> tuple[list[dict], list[str]]:
    """The frames of one key's payload within ``caps`` as parsed objects, and the refusals (one per cap
    exceeded, one per frame that is not a JSON object with a ``messages`` list, and one ``junk`` for bytes
    outside every frame: an honest payload is its frames; the excess messages are cut from the last frame
    that reaches the message cap).

    Returns:
        (bodies, reasons): each body a dict with a ``messages`` list (and ``labels`` as sent).
    """
    reasons = []
    if len(payload) > caps.bytes:
        reasons.append(f"flood: {len(payload)} bytes under one key (cap {caps.bytes}: {CAP_FACTOR} × the node's share "
                       "of the largest messages); the rest is not read")
        payload = payload[:caps.bytes]
    found, more = scan(payload, caps.frames + 1, HEADER_FACTOR * caps.frames), False
    bodies = found.frames
    if bodies and not found.stopped and len(bodies) <= caps.frames and len(payload) > found.covered:
        reasons.append(f"junk: {len(payload) - found.covered} bytes outside every frame under one key; skipped")
    if found.stopped:
        reasons.append(f"flood: more than {HEADER_FACTOR * caps.frames} frame headers under one key; the rest are "
                       "not read")
    if len(bodies) > caps.frames:
        reasons.append(f"flood: more than {caps.frames} frames under one key; the rest are not read")
        bodies = bodies[:caps.frames]
    out, left = [], caps.messages
    for body in bodies or [payload]:  # (an unframed payload: one JSON object)
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as err:  # (not UTF-8, not JSON, nested too deep)
            reasons.append(f"schema: payload is not JSON ({type(err).__name__}: {str(err)[:80]})")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            reasons.append("schema: payload must be an object with a 'messages' list")
            continue
        if len(data["messages"]) > left:
            more, labels = True, data.get("labels")
            data = {**data, "messages": data["messages"][:left],
                    "labels": labels[:left] if isinstance(labels, list) and len(labels) == len(data["messages"]) else None}
        left -= len(data["messages"])
        out.append(data)
    if more:
        reasons.append(f"flood: more than {caps.messages} messages under one key (cap: {CAP_FACTOR} × the node's "
                       f"{caps.messages // CAP_FACTOR} slots); the excess is dropped")
    return out, reasons


def relayed(raw: bytes, limit: int) -> list[Message]:
    """The messages of a peer's relay (``{"messages": [...]}``); anything malformed is skipped (a relay
    is evidence: every message in it is checked by its signature before use)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    raws = data["messages"] if isinstance(data, dict) and isinstance(data.get("messages"), list) else []
    return [m for m in (parse_message(x)[0] for x in raws[:limit]) if m is not None]


def relay_refusals(raw: bytes) -> list[tuple[int | None, str]]:
    """The (node, reason) pairs a peer's relay reports its transport refused (a report, never evidence)."""
    try:
        items = json.loads(raw).get("rejected", [])
    except (ValueError, RecursionError, AttributeError):
        return []
    return [(n, r[:200]) for n, r in (x for x in items[:256] if isinstance(x, list) and len(x) == 2)
            if (n is None or isinstance(n, int)) and isinstance(r, str)] if isinstance(items, list) else []

