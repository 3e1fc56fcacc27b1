"""The relay a node serves in ``eq{n}`` (:meth:`~dgrpo.transports.distributed.DistributedTransport.cross_check`),
built within the byte cap its readers apply whatever its peers sent (task h31q2, the limit review r31o H5's fix left).

A relay carries what this node read in the round: the signed messages (beside them their labels), the signed
departures, and what its transport refused. Its readers take at most :func:`~dgrpo.transports.framing.cap_of` bytes
of it (``world`` × a node's share cap + ``RESERVE``) and refuse one over that whole (``oversize``): what it carries is
lost to them. Built as it came, an honest relay could pass that cap by its peers' doing: a peer's messages are
re-encoded (JSON, ASCII: a 2-byte UTF-8 character served raw becomes a 6-byte escape, so a payload at its byte cap
becomes up to 3 × the cap: one attacker in a swarm of 2 or 3, several in a larger one), and refusals quote peers'
text (a name, a field, up to 200 characters, 12 bytes each escaped). So :func:`build` caps each part:

* messages, by *carrier* (the server that served them; this node's own: itself): each carrier's messages, with
  their labels, take at most its share cap (``caps.bytes``, less where ``cap_of`` is at its 64 MiB bound) of relay
  bytes, in order; a message past it is left out and counted. An honest peer's messages are within it (the same
  encoding as its round payload, which is within it), so only a peer that served more than an honest one can loses
  its own excess; messages that claim another signer count against the server that carried them.
* departures (each signed: cut, one verifies for nobody): whole, the smallest first, within what is left of the cap
  (at least ``RESERVE`` less the frame); the rest counted.
* refusals: the first ``MAX_REFUSALS``, each cut to ``REFUSAL_CHARS`` characters and at most ``REFUSAL_BYTES``
  bytes of JSON, in order, while they fit what is left of the cap; the rest counted.

What was left out is counted in the relay (``dropped``: {part: n}) and logged. So an honest relay is at most
``cap_of`` bytes whatever peers send (``tests/transports/test_relay_cap.py``).
"""

from __future__ import annotations

import json
import logging
from collections import Counter

from dgrpo.transports.framing import KeyCaps, cap_of
from dgrpo.types import Message

log = logging.getLogger(__name__)

RESERVE = 1 << 16  # the room cap_of leaves past world × a share cap: the relay's frame, departures, refusals
MAX_REFUSALS = 256  # refusals a relay carries at most (what framing.relay_refusals reads)
REFUSAL_CHARS = 200  # characters of one relayed refusal (what framing.relay_refusals keeps)
REFUSAL_BYTES = 400  # bytes of JSON of one relayed refusal's text, quotes included (a quoted character: up to 12)
_FRAME = 256  # the relay's keys, brackets and counts


def _size(value) -> int:
    """Bytes of ``value`` as ``json.dumps`` writes it (ASCII: one byte a character)."""
    return len(json.dumps(value))


def _cost(ch: str) -> int:
    """Bytes ``json.dumps`` (ensure_ascii) writes for ``ch``."""
    o = ord(ch)
    if 0x20 <= o < 0x7F:
        return 2 if ch in '"\\' else 1
    if ch in "\b\f\n\r\t":
        return 2
    return 12 if o > 0xFFFF else 6


def cut(text: str, chars: int = REFUSAL_CHARS, size: int = REFUSAL_BYTES) -> str:
    """``text`` cut to at most ``chars`` characters and ``size`` bytes of JSON (its quotes included)."""
    out, used = [], 2
    for ch in str(text)[:chars]:
        used += _cost(ch)
        if used > size:
            break
        out.append(ch)
    return "".join(out)


def build(rank: int, messages: list[Message], labels: list, carriers: dict[int, int], refused: list,
          departed: dict[str, dict], caps: KeyCaps, world: int, tag: str = "eq",
          left_out: list | None = None, skipped: dict[str, str] | None = None) -> bytes:
    """The relay of this node (``rank``) in exchange ``tag`` as bytes, at most ``cap_of(tag, caps, world)`` (module
    docstring).

    Args:
        messages / labels: the signed messages this node read and, beside each, its label
            (:func:`~dgrpo.transports.payload.relay_labels`).
        carriers: ``id(message)`` → the node whose server served it (this node's own messages: absent).
        refused: (node, reason) pairs this node's transport refused this round, in order.
        departed: the departures this node read (:func:`~dgrpo.transports.departures.relayed_departures`).
        caps: a node's share caps (:class:`~dgrpo.transports.framing.KeyCaps`); ``world``: the swarm's size.
        skipped: clocked rounds: node → its signed skip notice of this round that this node read
            (:meth:`~dgrpo.transports.skips.Skips.relayed`), carried under ``skipped`` while they fit (each a few
            hundred bytes, within ``RESERVE``).
        left_out: if given, each message left out is appended to it, with its carrier and its relay bytes
            (``(message, carrier, bytes)``): the caller leaves them out of its own set too (review h31r: a message
            no honest relay carries reaches no other honest node, so the node that kept it trained on another set).

    Raises:
        TypeError / ValueError: a field that is not JSON.
    """
    cap = cap_of("eq", caps, world)
    per = min(caps.bytes, max(0, cap - RESERVE) // max(1, world))  # (a carrier's room for its messages and labels)
    used: Counter = Counter()
    dropped: Counter = Counter()
    kept, kept_labels = [], []
    for msg, label in zip(messages, labels):
        d = msg.to_dict()
        n = _size(d) + _size(label) + 4  # (each with its ", ")
        carrier = carriers.get(id(msg), rank)
        if used[carrier] + n > per or sum(used.values()) + n > cap - _FRAME:  # (a carrier past world: still bounded)
            dropped["messages"] += 1
            if left_out is not None:
                left_out.append((msg, carrier, n))
            continue
        used[carrier] += n
        kept.append(d)
        kept_labels.append(label)
    room = cap - sum(used.values()) - _FRAME
    sizes = {k: _size(str(k)) + _size(ev) + 4 for k, ev in departed.items()}
    keep = set()
    for k in sorted(departed, key=lambda k: sizes[k]):
        if sizes[k] > room:
            break
        keep.add(k)
        room -= sizes[k]
    dropped["departed"] = len(departed) - len(keep)
    notices = {}
    for k, line in sorted((skipped or {}).items()):
        if _size(k) + _size(line) + 4 <= room:
            room -= _size(k) + _size(line) + 4
            notices[k] = line
    out_refused = []
    for node, reason in refused[:MAX_REFUSALS]:
        item = [node, cut(reason)]
        n = _size(item) + 2
        if n > room:
            continue
        room -= n
        out_refused.append(item)
    dropped["rejected"] = len(refused) - len(out_refused)
    relay = {"messages": kept, "rejected": out_refused, "labels": kept_labels,
             "departed": {str(k): ev for k, ev in departed.items() if k in keep}}
    if notices:
        relay["skipped"] = notices
    dropped = Counter({k: v for k, v in dropped.items() if v})
    if dropped:
        relay["dropped"] = dict(dropped)
        if dropped["messages"] or dropped["departed"]:
            log.warning("node %d: its relay %r leaves out %s to stay within its readers' cap (%d bytes; a carrier's "
                        "messages at most %d)", rank, tag, dict(dropped), cap, per)
    return json.dumps(relay).encode()
