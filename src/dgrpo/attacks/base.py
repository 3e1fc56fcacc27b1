"""The attack protocol: what a malicious node sends instead of honest completions (paper §2-3),
what it declares the swarm does for it, and the base of attack configs."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, Mapping, Sequence

from pydantic import Field

from dgrpo.registry import KindConfig, register
from dgrpo.tasks.base import Task
from dgrpo.types import AttackContext, Poison, Problem, Slot

if TYPE_CHECKING:
    from dgrpo.swarm.routing import Sent, Wire


class Attack:
    """A malicious node's behaviour: the attack protocol every attack kind subclasses.

    A kind defines :meth:`choose_prompts`, :meth:`write`, :meth:`eval_problems` and :meth:`evaluate`,
    and declares what else the swarm does for it by the class attributes below, whose defaults fit a
    poisoning attack (it sends what it wrote, no more): the swarm and the matrix read these, never
    probe an attack for what it can do. :func:`dgrpo.attacks.build_attack` refuses a class that does
    not subclass this one.

    Attributes:
        name: the kind's name in metrics and logs.
        routes: a protocol attacker (:mod:`dgrpo.attacks.protocol`): what each honest receiver gets
            from it is :meth:`send`'s choice, not the messages it wrote (default False).
        wants_alternative: the swarm also samples, under the assigned seeds, what this node would
            have sent honestly in its slots, and hands them to :meth:`send` (``Wire.alternative``,
            equivocation; default False).
        wants_seen: the swarm keeps the last round's gathered messages for :meth:`send`
            (``Wire.previous``), and a checkpoint keeps them so a resumed run re-sends the same
            (replayed_round; default False).
        stats: counters the attack keeps of its own work (e.g. ``{"poisons": 12, "ground": 3}``),
            reported by ``dgrpo paper matrix``; default empty.
    """

    name: str = "attack"
    routes: bool = False
    wants_alternative: bool = False
    wants_seen: bool = False
    stats: Mapping[str, float] = MappingProxyType({})

    def choose_prompts(self, pool: Sequence[Problem], count: int, run_seed: int, round_idx: int, node: int,
                       ctx: AttackContext | None = None) -> list[Problem]:
        """Vertical mode: the prompts this node picks (in-context attacks pick their targets).

        ``ctx`` is what the attacker knows this round (its weights among it): an attacker that samples
        before it chooses (prompt-choice grinding, :mod:`dgrpo.attacks.seed_grinding`) needs it; the
        swarm and the matrix always pass it.
        """
        raise NotImplementedError(f"{type(self).__name__}.choose_prompts")

    def write(self, slots: Sequence[Slot], ctx: AttackContext) -> list[list[Poison]]:
        """The completions sent for each slot (``slot.count`` of them; a :class:`~dgrpo.types.Poison`
        may name the token ids and seed its message claims)."""
        raise NotImplementedError(f"{type(self).__name__}.write")

    def eval_problems(self, val: Sequence[Problem]) -> list[Problem]:
        """Validation problems on which attack success is measured."""
        raise NotImplementedError(f"{type(self).__name__}.eval_problems")

    def evaluate(self, completions: Sequence[str], problems: Sequence[Problem], task: Task) -> dict[str, float | None]:
        """Attack success metrics (``asr`` …) of honest completions of ``problems``."""
        raise NotImplementedError(f"{type(self).__name__}.evaluate")

    def send(self, wire: Wire) -> dict[int, list[Sent]]:
        """With ``routes``: receiver → what this node sends it this round, given what it holds
        (:class:`~dgrpo.swarm.routing.Wire`: its written messages, the round's and the last round's
        gathered messages, its honest alternative). Each :class:`~dgrpo.swarm.routing.Sent` names
        the label its completion counts under and whether it goes out as another node signed it
        (else the swarm signs it with this node's key: it holds no other)."""
        raise NotImplementedError(f"{type(self).__name__} declares routes but defines no send")


def routed_elsewhere(kind: str, transport: str) -> str:
    """The one line refusing ``attack.kind=kind`` (a routing attack, :attr:`Attack.routes`) on ``swarm.transport=
    transport``: only the in-process swarm hands each receiver what the attacker sends it (``Swarm.route``); a rank or
    hivemind process sends the messages it wrote, so the run would silently be the plain injection of its poison."""
    alone = " (a torch.distributed rank that forges, floods, replays and equivocates: benchmarks/protocol_attack_torchrun.py)"
    return (f"attack.kind={kind} is routed by the in-process swarm only (what it sends each receiver); over "
            f"swarm.transport={transport} a malicious process sends the messages it wrote unchanged, so what {kind} "
            f"sends would never be sent and the run would be a plain injection: set swarm.transport=inprocess, or "
            f"attack.kind=injection for the poison alone{alone if transport == 'distributed' else ''}")


class AttackConfig(KindConfig):
    """Config of an attack kind (``attack.kind``); the nodes in ``swarm.malicious`` run it."""

    def check(self, run) -> None:
        """Refuses a run the attack cannot act in (ValueError, one line naming the field and the fix): no
        malicious node, or a routing attack (:attr:`Attack.routes`) on a transport of one node per process."""
        if not run.swarm.malicious:
            raise ValueError(f"attack {self.kind!r} needs at least one node in swarm.malicious")
        from dgrpo.registry import lookup  # (the attack's class: its module is light, attacks/__init__.py)

        if getattr(lookup("attack", self.kind).builder, "routes", False) and run.swarm.transport != "inprocess":
            raise ValueError(routed_elsewhere(self.kind, run.swarm.transport))

    def success_metric(self) -> str | None:
        """The metric that is this attack's success (``attack/asr``); None where success is not a
        payload's share (an attack config declares its own, e.g. a DoS measured by length)."""
        return "attack/asr"


class PoisoningConfig(AttackConfig):
    """Config of an attack that places c poisoned completions in each group it writes into.

    ``poisoned_per_group`` is c of the paper (§B.2). ``None`` means: horizontal mode, all of the
    attacker's G/m slots; vertical mode, G/2 (the rest deliberately wrong, to maximise the poisoned
    advantage, §3.4.1). ``duplicate`` sends one poisoned completion c times (duplicate
    amplification) instead of c different ones.
    """

    poisoned_per_group: int | None = Field(None, ge=0, description="c: poisoned completions per group the attacker writes into (None = all its slots horizontally, G/2 vertically).")
    duplicate: bool = Field(False, description="Send one poisoned completion c times (duplicate amplification) instead of c distinct ones.")


@register("attack", "none")
class NoAttackConfig(AttackConfig):
    """``attack.kind=none`` (the default): every node is honest."""

    kind: Literal["none"] = "none"

    def success_metric(self) -> str | None:
        return None  # nothing to succeed

    def check(self, run) -> None:
        if run.swarm.malicious:
            raise ValueError("swarm.malicious lists nodes but attack.kind is none; choose an attack")


@dataclass(frozen=True)
class ClaimedPoison(Poison):
    """A poison that says what its message claims (``token_ids``, ``seed``: fields of every
    :class:`~dgrpo.types.Poison`): the name the adaptive attackers write theirs under.

    An adaptive attacker sends the ids it sampled (not a re-encoding of the text, which may tokenise
    differently and leave the top-k) and the seed it ground for. ``None`` keeps the swarm's choice
    (the text's encoding; the seed assigned to the slot). The in-process swarm
    (:meth:`dgrpo.swarm.swarm.Swarm.write`) and :mod:`dgrpo.paper.matrix` send them as claimed.
    """
