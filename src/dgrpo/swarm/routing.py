"""What each honest receiver of an in-process swarm gets from a hosted protocol attacker
(:meth:`dgrpo.swarm.swarm.Swarm.route`; the attacks are :mod:`dgrpo.attacks.protocol`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from dgrpo.types import Message

if TYPE_CHECKING:
    from dgrpo.swarm.swarm import Swarm

OTHER_RUN = "previous-run|recorded"  # the context of a ``replay`` attacker's messages "from a previous run"


def replay_source(swarm: "Swarm", attack, node: int, messages: Sequence[Message], round_idx: int) -> list[Message]:
    """The other nodes' signed messages a ``replay`` attacker (``attack.replays``) holds in ``round_idx``:
    ``current`` those of this round, ``previous`` those of the last round, ``other_run`` this round's as
    their signers signed them for another run under the same roster keys (a simulation: a real attacker
    recorded them there; here the swarm's own signers make them, for the context :data:`OTHER_RUN`)."""
    current = [m for m in messages if m.node != node and m.round == round_idx]
    if attack.replays == "previous":
        return [m for m in swarm._gathered.get(round_idx - 1, []) if m.node != node]
    if attack.replays == "other_run" and swarm.protocol is not None:
        signers = swarm.protocol.signers
        return [signers[m.node].for_context(OTHER_RUN).sign(m) for m in current if m.node in signers]
    return current


def route(swarm: "Swarm", messages: Sequence[Message], receiver: int, round_idx: int) -> list[Message]:
    """:meth:`dgrpo.swarm.swarm.Swarm.route` (see there). Every message a protocol attacker sends is
    recorded as carried by it (``Swarm.carriers``: who delivered it, for the per-peer accounting)."""
    if round_idx not in swarm._gathered:  # a new round: forget what is older than the last one
        swarm._gathered = {r: m for r, m in swarm._gathered.items() if r >= round_idx - 1}
        swarm._gathered[round_idx] = list(messages)
        swarm.routed_labels = {m: label for m, label in swarm.routed_labels.items() if m.round >= round_idx}
    protocol = {n: a for n, a in swarm.attacks.items() if callable(getattr(a, "messages", None))}  # attacks.protocol
    if not protocol or receiver not in swarm.policies:
        return list(messages)
    peers = sorted(swarm.policies)
    out: list[Message] = []
    for node, attack in protocol.items():
        own = [m for m in messages if m.node == node and m.round == round_idx]
        verbatim = getattr(attack, "replays", None) is not None  # sends others' messages with their signatures
        seen = (replay_source(swarm, attack, node, messages, round_idx) if verbatim else
                [m for m in swarm._gathered.get(round_idx - 1, []) if m.node != node])
        alternative = swarm._alternative.get(node, []) if own and own[0].round == round_idx else []
        sent = attack.messages(own, peers, seen, alternative)[receiver]
        honest_variant = {m.key: m.text for m in alternative}
        replayed = {(m.node, m.prompt_id, m.index, m.text) for m in seen}
        for m in sent:
            # its own slot's label (a forged or flooded copy of a poison or of filler), as paper/matrix.py
            label = swarm.labels.get((node, m.round, m.prompt_id, m.index), "poisoned")
            if (m.node, m.prompt_id, m.index, m.text) in replayed:
                label = "poisoned"  # another node's message re-sent
            elif honest_variant.get(m.key) == m.text:
                label = "honest"
            if verbatim and m.node != node:  # another's message as signed: it keeps its own label
                swarm.carriers[id(m)] = node
                out.append(m)
                continue
            m = swarm._sign_as(node, m)
            swarm.routed_labels[m] = label
            swarm.carriers[id(m)] = node
            out.append(m)
    routed = set(protocol)
    return [m for m in messages if m.node not in routed] + out
