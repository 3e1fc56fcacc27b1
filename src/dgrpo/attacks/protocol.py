"""Protocol attacks (docs/THREATS.md, identity and shares classes) as attack kinds: what a malicious
node *emits* on the wire, not only what it writes.

Each kind writes the injection poison as its content (:class:`~dgrpo.attacks.injection.InjectionAttack`)
and adds :meth:`messages`, which turns the messages the swarm built for it into the messages it
actually sends, per receiving peer:

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

The in-process swarm routes :meth:`messages` to each receiving policy
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
from dgrpo.types import Message


class ForgedIdentityConfig(InjectionAttackConfig):
    """``attack.kind=forged_identity``: messages claim an honest sender."""

    kind: Literal["forged_identity"] = "forged_identity"
    victim: int = Field(0, ge=0, description="Honest node id the messages claim to come from.")


class FloodingConfig(InjectionAttackConfig):
    """``attack.kind=flooding``: more messages than slots."""

    kind: Literal["flooding"] = "flooding"
    factor: int = Field(4, ge=2, description="Messages sent per slot message.")


class ReplayedRoundConfig(InjectionAttackConfig):
    """``attack.kind=replayed_round``: re-send the previous round's honest messages."""

    kind: Literal["replayed_round"] = "replayed_round"
    as_current: bool = Field(True, description="Rewrite the round field to the current round (else send them unchanged).")


class EquivocationConfig(InjectionAttackConfig):
    """``attack.kind=equivocation``: different messages to different peers."""

    kind: Literal["equivocation"] = "equivocation"


class ReplayConfig(InjectionAttackConfig):
    """``attack.kind=replay``: re-send other nodes' signed messages (issue 31)."""

    kind: Literal["replay"] = "replay"
    of: Literal["respelled", "copies", "other_round", "other_run"] = Field(
        "respelled", description="What it re-sends: this round's messages with the signature in upper case, this "
        "round's unchanged, last round's, or this round's as signed for another run under the same roster keys.")
    copies: int = Field(1, ge=1, description="Times each replayed message is sent.")
    overreach: bool = Field(True, description="Also send one of its own messages at an index beyond its slots.")


class _Protocol(InjectionAttack):
    wants_alternative = False  # the swarm also samples honest messages for its slots (equivocation)
    wants_seen = False  # the swarm keeps (and checkpoints) the last round's messages for it (replayed_round)

    def messages(self, own: Sequence[Message], peers: Sequence[int], seen: Sequence[Message] = (),
                 alternative: Sequence[Message] = ()) -> dict[int, list[Message]]:
        """The messages sent to each peer.

        Args:
            own: the messages the swarm built from :meth:`write` (this node's id, its indices).
            peers: receiving node ids.
            seen: messages received in the previous round (replayed_round).
            alternative: honest-looking messages for the same slots (equivocation).
        """
        raise NotImplementedError


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

    @property
    def replays(self) -> str:
        """Which of the others' messages the swarm hands it (:func:`dgrpo.swarm.routing.replay_source`)."""
        return {"other_round": "previous", "other_run": "other_run"}.get(self.cfg.of, "current")

    @property
    def wants_seen(self) -> bool:
        return self.cfg.of == "other_round"

    def messages(self, own, peers, seen=(), alternative=()):
        spell = (lambda s: s.upper()) if self.cfg.of == "respelled" else (lambda s: s)  # noqa: E731
        replayed = [replace(m, signature=spell(m.signature)) for m in seen if m.signature] * self.cfg.copies
        width = 1 + max((m.index for m in own), default=0)
        over = [replace(own[0], index=own[0].index + width)] if own and self.cfg.overreach else []
        return {p: [*own, *replayed, *over] for p in peers}
