"""The attack protocol: what a malicious node sends instead of honest completions (paper §2-3),
and the base of attack configs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

from pydantic import Field

from dgrpo.registry import KindConfig, register
from dgrpo.tasks.base import Task
from dgrpo.types import AttackContext, Poison, Problem, Slot


class Attack(Protocol):
    """A malicious node's behaviour."""

    name: str

    def choose_prompts(self, pool: Sequence[Problem], count: int, run_seed: int, round_idx: int, node: int,
                       ctx: AttackContext | None = None) -> list[Problem]:
        """Vertical mode: the prompts this node picks (in-context attacks pick their targets).

        ``ctx`` is what the attacker knows this round (its weights among it): an attacker that samples
        before it chooses (prompt-choice grinding, :mod:`dgrpo.attacks.seed_grinding`) needs it; the
        swarm and the matrix always pass it.
        """

    def write(self, slots: Sequence[Slot], ctx: AttackContext) -> list[list[Poison]]:
        """The completions sent for each slot (``slot.count`` of them)."""

    def eval_problems(self, val: Sequence[Problem]) -> list[Problem]:
        """Validation problems on which attack success is measured."""

    def evaluate(self, completions: Sequence[str], problems: Sequence[Problem], task: Task) -> dict[str, float | None]:
        """Attack success metrics (``asr`` …) of honest completions of ``problems``."""


class AttackConfig(KindConfig):
    """Config of an attack kind (``attack.kind``); the nodes in ``swarm.malicious`` run it."""

    def check(self, run) -> None:
        if not run.swarm.malicious:
            raise ValueError(f"attack {self.kind!r} needs at least one node in swarm.malicious")


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

    def check(self, run) -> None:
        if run.swarm.malicious:
            raise ValueError("swarm.malicious lists nodes but attack.kind is none; choose an attack")


@dataclass(frozen=True)
class ClaimedPoison(Poison):
    """A poison that also says what its message claims: the token ids and sampling seed it travels with.

    An adaptive attacker sends the ids it sampled (not a re-encoding of the text, which may tokenise
    differently and leave the top-k) and the seed it ground for. ``None`` keeps the swarm's choice
    (the text's encoding; the seed assigned to the slot). The in-process swarm
    (:meth:`dgrpo.swarm.swarm.Swarm.write`) and :mod:`dgrpo.paper.matrix` send them as claimed.
    """

    token_ids: tuple[int, ...] | None = None
    seed: int | None = None
