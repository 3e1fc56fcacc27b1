"""Protocol attacks (docs/THREATS.md, identity and shares classes) as attack kinds: what a malicious
node *emits* on the wire, not only what it writes.

Each kind writes the injection poison as its content (:class:`~dgrpo.attacks.injection.InjectionAttack`),
declares ``routes`` (:class:`~dgrpo.attacks.base.Attack`) and adds :meth:`messages`, which turns the
messages the swarm built for it into the messages it actually sends, per receiving peer; ``send``
labels them (the simulation's truth) for :mod:`dgrpo.swarm.routing`:

* ``forged_identity``: its messages claim to come from ``victim`` (an honest node), with the victim's
  indices, so a receiver that trusts the ``node`` field credits the victim.
* ``flooding``: ``factor`` × its share: extra copies under indices beyond its slots.
* ``replayed_round``: besides its own, it re-sends honest messages it saw in the previous round
  (``as_current``: with the round field rewritten to the current round).
* ``equivocation``: different content to different peers: even peers get the poison, odd peers an
  honest-looking sample (so no single receiver sees both).
* ``replay`` (issue 31): besides its own, it re-sends other nodes' signed messages *as they are
  signed* (``of``: this round's with the signature re-spelled in upper case, this round's unchanged
  ``copies`` times, the previous round's, or the same messages signed for another run under the same
  keys), and, with ``overreach``, one of its own messages at an index beyond its slots: nothing it
  replays may cost the honest signers a strike; the overreach is its own provable breach.

The in-process swarm routes what ``send`` chooses to each receiving policy
(:meth:`dgrpo.swarm.swarm.Swarm.route`: the attacker re-signs what it sends with its own key, so the
protocol refuses forged senders by signature, extra copies and stale prompts by share, and cannot
see equivocation in one process — the distributed transport's signed headers do);
:mod:`dgrpo.paper.matrix` feeds them to message validation on receipt. Over torch.distributed or
hivemind an attacker rank sends its written messages unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, Sequence

from pydantic import Field

from dgrpo.attacks.injection import InjectionAttack, InjectionAttackConfig
from dgrpo.registry import register
from dgrpo.swarm.routing import Sent, Wire
from dgrpo.types import Message


IN_PROCESS = ("A protocol attack: the in-process swarm routes what it sends each receiver; refused over "
              "swarm.transport=distributed or hivemind, where a malicious process sends what it wrote unchanged "
              "(docs/protocol.md, \"Protocol attack kinds in a training run\").")


class ForgedIdentityConfig(InjectionAttackConfig):
    """``attack.kind=forged_identity``: messages claim an honest sender."""

    kind: Literal["forged_identity"] = Field("forged_identity", description=IN_PROCESS)
    victim: int = Field(0, ge=0, description="Honest node id the messages claim to come from.")


class FloodingConfig(InjectionAttackConfig):
    """``attack.kind=flooding``: more messages than slots."""

    kind: Literal["flooding"] = Field("flooding", description=IN_PROCESS)
    factor: int = Field(4, ge=2, description="Messages sent per slot message.")


class ReplayedRoundConfig(InjectionAttackConfig):
    """``attack.kind=replayed_round``: re-send the previous round's honest messages."""

    kind: Literal["replayed_round"] = Field("replayed_round", description=IN_PROCESS)
    as_current: bool = Field(True, description="Rewrite the round field to the current round (else send them unchanged).")


class EquivocationConfig(InjectionAttackConfig):
    """``attack.kind=equivocation``: different messages to different peers."""

    kind: Literal["equivocation"] = Field("equivocation", description=IN_PROCESS)


class ReplayConfig(InjectionAttackConfig):
    """``attack.kind=replay``: re-send other nodes' signed messages (issue 31)."""

    kind: Literal["replay"] = Field("replay", description=IN_PROCESS)
    of: Literal["respelled", "copies", "other_round", "other_run"] = Field(
        "respelled", description="What it re-sends: this round's messages with the signature in upper case, this "
        "round's unchanged, last round's, or this round's as signed for another run under the same roster keys.")
    copies: int = Field(1, ge=1, description="Times each replayed message is sent.")
    overreach: bool = Field(True, description="Also send one of its own messages at an index beyond its slots.")


class _Protocol(InjectionAttack):
    routes = True  # what each receiver gets is send's choice (dgrpo.swarm.routing)
    verbatim = False  # re-sends others' messages as they signed them (replay), not re-signed as its own

    def messages(self, own: Sequence[Message], peers: Sequence[int], seen: Sequence[Message] = (),
                 alternative: Sequence[Message] = ()) -> dict[int, list[Message]]:
        """The messages sent to each peer.

        Args:
            own: the messages the swarm built from :meth:`write` (this node's id, its indices).
            peers: receiving node ids.
            seen: the other nodes' messages it holds to re-send (:meth:`seen`).
            alternative: honest-looking messages for the same slots (equivocation).
        """
        raise NotImplementedError

    def seen(self, wire: Wire) -> list[Message]:
        """The other nodes' messages it may re-send: the last round's (replayed_round)."""
        return [m for m in wire.previous if m.node != wire.node]

    def send(self, wire: Wire) -> dict[int, list[Sent]]:
        """:meth:`messages` for each receiver, each labelled: its own slot's label (a forged or flooded
        copy of its slot keeps that slot's label; a slot it never wrote, ``poisoned``), another node's
        message re-sent ``poisoned``, an equivocator's honest variant ``honest``; with ``verbatim``,
        another node's message goes out as that node signed it (and keeps its own label)."""
        seen = self.seen(wire)
        replayed = {(m.node, m.prompt_id, m.index, m.text) for m in seen}
        honest_variant = {m.key: m.text for m in wire.alternative}

        def labelled(m: Message) -> Sent:
            if self.verbatim and m.node != wire.node:
                return Sent(m, as_signed=True)
            if (m.node, m.prompt_id, m.index, m.text) in replayed:
                return Sent(m, "poisoned")
            if honest_variant.get(m.key) == m.text:
                return Sent(m, "honest")
            return Sent(m, wire.labels.get((wire.node, m.round, m.prompt_id, m.index), "poisoned"))

        sent = self.messages(wire.own, wire.peers, seen, wire.alternative)
        return {peer: [labelled(m) for m in msgs] for peer, msgs in sent.items()}


@register("attack", "forged_identity", config=ForgedIdentityConfig)
class ForgedIdentityAttack(_Protocol):
    name = "forged_identity"

    def messages(self, own, peers, seen=(), alternative=()):
        forged = [replace(m, node=self.cfg.victim) for m in own]
        return {p: list(forged) for p in peers}


@register("attack", "flooding", config=FloodingConfig)
class FloodingAttack(_Protocol):
    name = "flooding"

    def messages(self, own, peers, seen=(), alternative=()):
        width = 1 + max((m.index for m in own), default=0)
        flood = [replace(m, index=m.index + copy * width) for copy in range(self.cfg.factor) for m in own]
        return {p: list(flood) for p in peers}


@register("attack", "replayed_round", config=ReplayedRoundConfig)
class ReplayedRoundAttack(_Protocol):
    name = "replayed_round"
    wants_seen = True

    def messages(self, own, peers, seen=(), alternative=()):
        current = own[0].round if own else 0
        replayed = [replace(m, round=current) if self.cfg.as_current else m for m in seen]
        return {p: [*own, *replayed] for p in peers}


@register("attack", "equivocation", config=EquivocationConfig)
class EquivocationAttack(_Protocol):
    name = "equivocation"
    wants_alternative = True

    def messages(self, own, peers, seen=(), alternative=()):
        return {p: list(own if i % 2 == 0 or not alternative else alternative) for i, p in enumerate(peers)}


@register("attack", "replay", config=ReplayConfig)
class ReplayAttack(_Protocol):
    name = "replay"

    verbatim = True

    @property
    def wants_seen(self) -> bool:
        return self.cfg.of == "other_round"

    def seen(self, wire: Wire) -> list[Message]:
        """The other nodes' signed messages it holds: this round's, last round's (``other_round``), or this
        round's as their signers signed them for another run under the same keys (``other_run``, a
        simulation: a real attacker recorded them there, ``Wire.recorded``)."""
        current = [m for m in wire.current if m.node != wire.node and m.round == wire.round]
        if self.cfg.of == "other_round":
            return super().seen(wire)
        return wire.recorded(current) if self.cfg.of == "other_run" else current

    def messages(self, own, peers, seen=(), alternative=()):
        spell = (lambda s: s.upper()) if self.cfg.of == "respelled" else (lambda s: s)  # noqa: E731
        replayed = [replace(m, signature=spell(m.signature)) for m in seen if m.signature] * self.cfg.copies
        width = 1 + max((m.index for m in own), default=0)
        over = [replace(own[0], index=own[0].index + width)] if own and self.cfg.overreach else []
        return {p: [*own, *replayed, *over] for p in peers}
