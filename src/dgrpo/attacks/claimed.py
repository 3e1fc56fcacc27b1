"""Slot filling for adaptive attackers whose poisons carry their own token ids and seed
(:class:`~dgrpo.attacks.base.ClaimedPoison`); fillers as every poisoning attack writes them
(:func:`dgrpo.attacks.common.write_poisoned`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from dgrpo.attacks.base import ClaimedPoison
from dgrpo.attacks.common import poisoned_count, write_poisoned
from dgrpo.types import AttackContext, Poison, Problem, Slot


def write_claimed(slots: Sequence[Slot], ctx: AttackContext, c: int | None,
                  make_poison: Callable[[Problem, int, int], ClaimedPoison]) -> list[list[Poison]]:
    """c poisons per slot from ``make_poison(problem, message index, assigned seed)``, then filler.

    Raises:
        ValueError: the attacker holds no policy (adaptive attackers sample from their weights).
    """
    from dgrpo.policy.sampling import completion_seed  # (torch: attack modules load light)

    if ctx.policy is None:
        raise ValueError("an adaptive attacker needs the policy weights it samples from")
    out = []
    for slot in slots:
        n_poison = poisoned_count(slot, ctx, c)
        poisons: list[Poison] = []
        for i in range(slot.first, slot.first + n_poison):
            seed = completion_seed(ctx.run_seed, ctx.round_idx, ctx.node, slot.problem.prompt_id, i)
            poisons.append(make_poison(slot.problem, i, seed))
        if slot.count > n_poison:
            rest = replace(slot, count=slot.count - n_poison, first=slot.first + n_poison)
            poisons += write_poisoned([rest], ctx, 0, False, lambda p, v: "")[0]
        out.append(poisons)
    return out


def grind_seeds(assigned: int, tries: int) -> list[int]:
    """The seeds an attacker tries for one message: the assigned one first (it passes seed binding),
    then ``tries − 1`` others derived from it."""
    from dgrpo.policy.sampling import completion_seed

    return [assigned] + [completion_seed(assigned, 0, 0, "grind", j) for j in range(1, tries)]
