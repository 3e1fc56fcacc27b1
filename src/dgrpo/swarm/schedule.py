"""Which node writes which completions in a round: Algorithm 1 (horizontal) and 2 (vertical).

Prompt order is a seeded permutation of the training pool (an epoch), so every prompt is used once
before any repeats, and a round's choice depends only on (run seed, round[, node]): resuming a run
or running a node in another process gives the same prompts.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Sequence

from dgrpo.types import Problem, Slot


@lru_cache(maxsize=64)
def _epoch_order(n: int, key: str, epoch: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(f"{key}|epoch{epoch}").shuffle(order)
    return tuple(order)


def take(pool: Sequence[Problem], count: int, start: int, key: str) -> list[Problem]:
    """Items ``start .. start+count-1`` of an endless sequence of seeded epochs over ``pool``."""
    out = []
    for pos in range(start, start + count):
        epoch, offset = divmod(pos, len(pool))
        out.append(pool[_epoch_order(len(pool), key, epoch)[offset]])
    return out


def horizontal_prompts(pool: Sequence[Problem], batch: int, run_seed: int, round_idx: int) -> list[Problem]:
    """Alg.1 L3-4: the B global prompts of a round, the same on every node (shared seed)."""
    return take(pool, batch, round_idx * batch, f"global|{run_seed}")


def vertical_prompts(pool: Sequence[Problem], per_node: int, run_seed: int, round_idx: int, node: int) -> list[Problem]:
    """Alg.2 L3-4: the B/m prompts node ``node`` chooses locally in a round."""
    return take(pool, per_node, round_idx * per_node, f"local|{run_seed}|{node}")


def horizontal_slots(prompts: Sequence[Problem], group_size: int, nodes: int, node: int) -> list[Slot]:
    """Alg.1 L5: node ``node`` writes G/m completions of every global prompt."""
    share = group_size // nodes
    return [Slot(p, share, node * share) for p in prompts]


def vertical_slots(prompts: Sequence[Problem], group_size: int) -> list[Slot]:
    """Alg.2 L5: a node writes all G completions of each of its own prompts."""
    return [Slot(p, group_size, 0) for p in prompts]
