"""What each honest receiver of an in-process swarm gets from a hosted protocol attacker.

The swarm hands the attacker what it holds in the round (:class:`Wire`); the attack itself chooses
what each receiver gets (:meth:`dgrpo.attacks.base.Attack.send`, the kinds of
:mod:`dgrpo.attacks.protocol`, each message with the label its completion counts under); the swarm
signs what the attacker sends with the attacker's own key (it holds no other) unless it goes out as
another node signed it, and records who delivered each message (:meth:`dgrpo.swarm.swarm.Swarm.route`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from dgrpo.types import Message

if TYPE_CHECKING:
    from dgrpo.swarm.protocol import Protocol
    from dgrpo.swarm.swarm import Swarm

OTHER_RUN = "previous-run|recorded"  # the context of a ``replay`` attacker's messages "from a previous run"


@dataclass(frozen=True)
class Sent:
    """One message a protocol attacker sends a receiver.

    Attributes:
        message: as sent (any ``node`` field; the swarm signs it with the attacker's key unless
            ``as_signed``).
        label: the simulation's truth for its completion (``honest`` / ``poisoned`` / ``malicious``);
            None with ``as_signed`` (another node's message keeps the label it was written with).
        as_signed: another node's signed message, sent as that node signed it (a replay).
    """

    message: Message
    label: str | None = None
    as_signed: bool = False


@dataclass(frozen=True)
class Wire:
    """What a hosted protocol attacker holds in a round when it chooses what each receiver gets.

    Attributes:
        node: the attacker's node id.
        round: the round.
        peers: the honest receivers, ascending.
        own: the messages the swarm built from its :meth:`~dgrpo.attacks.base.Attack.write` (its id,
            its indices), this round's.
        current: every message gathered this round (the others' as their signers signed them).
        previous: every message gathered last round (kept when the attack declares ``wants_seen``).
        alternative: what it would have sent honestly in its slots (sampled under the assigned seeds
            when it declares ``wants_alternative``, else empty).
        labels: message key → the label the swarm wrote it with (its own slots' among them).
        recorded: messages → the same messages as their signers signed them for another run under the
            same roster keys (context :data:`OTHER_RUN`: a simulation of messages an attacker
            recorded there; unchanged where the run signs nothing).
    """

    node: int
    round: int
    peers: Sequence[int]
    own: Sequence[Message]
    current: Sequence[Message]
    previous: Sequence[Message]
    alternative: Sequence[Message]
    labels: Mapping[tuple, str]
    recorded: Callable[[Sequence[Message]], list[Message]]


def recorded_elsewhere(protocol: "Protocol | None", messages: Sequence[Message]) -> list[Message]:
    """``messages`` as their signers (hosted here: an in-process swarm hosts all) signed them for another
    run (:data:`OTHER_RUN`); unchanged without a protocol."""
    if protocol is None:
        return list(messages)
    return [protocol.signers[m.node].for_context(OTHER_RUN).sign(m) for m in messages if m.node in protocol.signers]


def route(swarm: "Swarm", messages: Sequence[Message], receiver: int, round_idx: int) -> list[Message]:
    """:meth:`dgrpo.swarm.swarm.Swarm.route` (see there). Every message a protocol attacker sends is
    recorded as carried by it (``Swarm.carriers``: who delivered it, for the per-peer accounting)."""
    if round_idx not in swarm.gathered:  # a new round: forget what is older than the last one
        swarm.gathered = {r: m for r, m in swarm.gathered.items() if r >= round_idx - 1}
        swarm.gathered[round_idx] = list(messages)
        swarm.routed_labels = {m: label for m, label in swarm.routed_labels.items() if m.round >= round_idx}
    routers = {n: a for n, a in swarm.attacks.items() if a.routes}
    if not routers or receiver not in swarm.policies:
        return list(messages)
    out: list[Message] = []
    for node, attack in routers.items():
        own = [m for m in messages if m.node == node and m.round == round_idx]
        wire = Wire(node, round_idx, sorted(swarm.policies), own, list(messages), swarm.gathered.get(round_idx - 1, []),
                    swarm.alternatives.get(node, []) if own else [], swarm.labels,
                    lambda msgs: recorded_elsewhere(swarm.protocol, msgs))
        for sent in attack.send(wire)[receiver]:
            m = sent.message
            if not sent.as_signed:
                m = swarm.sign_as(node, m)
                swarm.routed_labels[m] = sent.label
            swarm.carriers[id(m)] = node
            out.append(m)
    return [m for m in messages if m.node not in routers] + out
