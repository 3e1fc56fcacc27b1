"""A node's round payload, one codec for every networked transport (distributed and hivemind).

A payload is JSON: ``{"messages": [Message.to_dict(), ...], "labels": ["honest" | "poisoned" | "malicious", ...]}``,
the labels the sender's simulation ground truth beside its messages (metrics only: nothing decides on them). Peers'
payloads arrive as frames (:mod:`dgrpo.transports.framing`) and every message is schema-checked
(:func:`dgrpo.swarm.validation.parse_message`); signatures are checked later by the swarm's receive.
"""

from __future__ import annotations

import json
import logging

from dgrpo.transports.framing import KeyCaps, capped
from dgrpo.swarm.validation import parse_message
from dgrpo.types import Message

log = logging.getLogger(__name__)

LABELS = frozenset({"honest", "poisoned", "malicious"})  # simulation ground truth (metrics only)


def encode(messages: list[Message], labels: dict[tuple, str]) -> bytes:
    """This node's payload: its messages and, beside them, their ground-truth labels (metrics only; a message
    missing from ``labels`` is ``honest``)."""
    return json.dumps({"messages": [m.to_dict() for m in messages],
                       "labels": [labels.get(m.key, "honest") for m in messages]}).encode()


def decode(sender: int, payload: bytes, *, caps: KeyCaps, max_messages: int, labels: dict[tuple, str],
           verifier: object | None, rejected: list[tuple[int, str]], carriers: dict[int, int]) -> list[Message]:
    """Parse the frames under a peer's key; refuse (and log) anything malformed.

    ``sender`` names the server that served it: the messages' authors are decided by their signatures
    (:meth:`dgrpo.swarm.swarm.Swarm.receive`), since a rank's server can serve anything. ``caps`` bound the frames,
    messages and bytes under one key; past ``max_messages`` messages the excess is dropped. Updated in place: each
    refusal appended to ``rejected`` as ``(sender, reason)``; a new message's label set in ``labels`` when
    :func:`labels_from` takes it; ``carriers[id(msg)] = sender`` for every message returned.
    """
    def refuse(reason: str) -> None:
        log.warning("rejected message from node %d: %s", sender, reason)
        rejected.append((sender, reason))

    out = []
    bodies, reasons = capped(payload, caps)  # frames, messages and bytes under one key (issue 31)
    for reason in reasons:
        refuse(reason)
    for data in bodies:
        raws, served = data["messages"], data.get("labels")
        served = served if isinstance(served, list) and len(served) == len(raws) else [None] * len(raws)
        if len(raws) > max_messages:
            refuse(f"size: {len(raws)} messages (limit {max_messages}); the excess is dropped")
            raws = raws[: max_messages]
        for raw, label in zip(raws, served):
            msg, reason = parse_message(raw)
            if msg is None:
                refuse(reason)
                continue
            if msg.key not in labels and labels_from(sender, msg, verifier) and str(label) in LABELS:  # (metrics only;
                labels[msg.key] = label  # none served or not a label: Swarm.label's default, by the sender's role)
            out.append(msg)
            carriers[id(msg)] = sender  # who delivered it (accounting only: Swarm.carriers)
    return out


def labels_from(sender: int, msg: Message, verifier: object | None) -> bool:
    """Whether the label ``sender`` served beside ``msg`` is its simulation truth: only the signer's own
    server's, for a message that verifies under its key for this run (review r31c F2: an unsigned
    copy of another node's slot, or its genuine message relayed by a rank, labels nothing; the
    verification is cached, so receive does not repeat it). ``verifier``: the run's
    :class:`dgrpo.swarm.identity.SignatureVerifier`, or None when the run signs nothing."""
    return sender == msg.node and (verifier is None or verifier.identify(msg)[1] is None)


def relay_labels(messages: list[Message], labels: dict[tuple, str], honest) -> list[str | None]:
    """The labels this node's relay carries beside ``messages``: those it holds for messages of a node not in
    ``honest`` (an attacker rank's own claim, as its server served it), None for the rest (metrics only)."""
    return [labels.get(m.key) if m.node not in honest else None for m in messages]


def take_relayed_labels(reports: dict[int, bytes], merged: list[Message], labels: dict[tuple, str], honest) -> None:
    """Labels of the signed messages of non-honest nodes in ``merged`` that this node got only from peers' relays
    (review r31o H6: a rank that hid its payload from the main rank alone left its poisons unlabelled there, counted
    as honest: a false-positive rate of 0.25 and no detection rate where the clean run has 0 and 1.0). Only
    ``poisoned`` / ``malicious`` are taken, and only for a non-honest signer's message, so no relay can relabel an
    honest node's message; ``labels`` is updated in place (metrics only)."""
    wanted = {m.key for m in merged if m.node not in honest and m.key not in labels}
    for raw in (reports[n] for n in sorted(reports)):
        if not wanted:
            return
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        raws, served = (data.get("messages"), data.get("labels")) if isinstance(data, dict) else (None, None)
        if not (isinstance(raws, list) and isinstance(served, list) and len(raws) == len(served)):
            continue
        for one, label in zip(raws, served):
            if str(label) in ("poisoned", "malicious") and isinstance(one, dict):
                key = tuple(one.get(f) for f in ("node", "round", "prompt_id", "index"))
                if all(isinstance(v, (int, str)) for v in key) and key in wanted:
                    labels[key] = label
                    wanted.discard(key)
