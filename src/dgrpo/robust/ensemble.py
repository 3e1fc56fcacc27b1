"""Ensemble of swarms decided by majority vote (ensemble FRL, Fang, Wang & Gong 2025).

The m nodes are split into K disjoint groups; each group trains its own swarm (any
aggregation rule inside), and at test time each group's model answers, and the K answers are
decided by majority vote (discrete answers) or geometric median (continuous outputs).

Guarantee (a counting argument, derived here; the paper certifies its ensemble in this spirit). Call a group
*corrupted* when it contains at least one malicious node; an uncorrupted group is honest and,
by assumption, outputs the honest answer a* (the guarantee says nothing when honest groups
disagree or fail to answer). With c corrupted groups, a* gets at least K − c votes and every
other answer at most c. If c < K/2, i.e. 2c < K, then K − c > c and a* wins outright, whatever
the corrupted groups say and however ties are broken. If 2c ≥ K the attackers can make a wrong
answer tie or win. One malicious node corrupts at most one group, so in the worst case
(attackers spread one per group) the vote survives any

    t = ⌊(K − 1) / 2⌋

malicious nodes, and some placement of t + 1 breaks it (when every group is non-empty).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Hashable, Iterable, Sequence, TypeVar

if TYPE_CHECKING:
    import torch

A = TypeVar("A", bound=Hashable)


def split_groups(node_ids: Iterable[int], k: int) -> list[list[int]]:
    """Split node ids into k disjoint, balanced, deterministic groups.

    The ids are sorted and cut into k contiguous runs; the first (m mod k) groups get one
    node more, so sizes differ by at most one. ``[0..6]``, k = 3 → ``[[0,1,2],[3,4],[5,6]]``.
    Contiguous runs keep nodes that share a host together; interleave ids beforehand to spread them.

    Args:
        node_ids: m distinct node ids.
        k: number of groups K, 1 ≤ K ≤ m (every group needs a node).

    Returns:
        K lists of ids; group g is ``groups[g]``.

    Raises:
        ValueError: duplicate ids, k < 1 or k > m.
    """
    ids = sorted(node_ids)
    if len(set(ids)) != len(ids):
        raise ValueError(f"node ids must be distinct, got {ids}")
    m = len(ids)
    if not 1 <= k <= m:
        raise ValueError(f"need 1 ≤ K ≤ m = {m} groups (each group needs a node), got K = {k}")
    base, extra = divmod(m, k)
    groups, start = [], 0
    for g in range(k):
        size = base + (1 if g < extra else 0)
        groups.append(ids[start : start + size])
        start += size
    return groups


def vote_counts(answers: Sequence[A | None]) -> Counter:
    """Votes per answer, None (no parsable answer) excluded."""
    return Counter(a for a in answers if a is not None)


def majority_vote(answers: Sequence[A | None]) -> A | None:
    """The answer with the most votes among K group answers (plurality vote).

    ``answers[g]`` is group g's parsed answer, None when it gave none; None never wins and is
    returned only when no group answered. Tie rule: among the answers with the top count, the
    one whose first vote comes from the lowest group index wins (deterministic and works for
    any hashable answer type). The guarantee of this module never relies on the tie rule: an
    honest strict majority wins every tie-break.

    Shape: K answers -> one answer.
    """
    counts = vote_counts(answers)
    if not counts:
        return None
    top = max(counts.values())
    for a in answers:  # group order: the first group voting for a top answer decides the tie
        if a is not None and counts[a] == top:
            return a
    raise AssertionError("unreachable")


def continuous_vote(outputs: torch.Tensor, **kw) -> torch.Tensor:
    """Geometric median of K continuous outputs (the paper's rule for continuous actions).

    Shape: (K, d) -> (d,). ``kw`` go to :func:`~dgrpo.robust.aggregators.geometric_median`.
    """
    from dgrpo.robust.aggregators import geometric_median  # (torch: the split and vote above load light)

    return geometric_median(outputs, 0, **kw)


def corrupted_groups(groups: Sequence[Sequence[int]], malicious: Iterable[int]) -> list[int]:
    """Indices of the groups holding at least one malicious node."""
    bad = set(malicious)
    return [g for g, members in enumerate(groups) if bad.intersection(members)]


def is_tolerated(groups: Sequence[Sequence[int]], malicious: Iterable[int]) -> bool:
    """True when this malicious set cannot change the vote: 2 · (#corrupted groups) < K.

    Assumes the uncorrupted groups all give the honest answer (module docstring).

    Raises:
        ValueError: no groups, or a malicious id that is in no group.
    """
    if not groups:
        raise ValueError("need at least one group")
    bad = set(malicious)
    members = {i for grp in groups for i in grp}
    if not bad <= members:
        raise ValueError(f"malicious ids {sorted(bad - members)} are in no group")
    return 2 * len(corrupted_groups(groups, bad)) < len(groups)


def tolerance(groups: Sequence[Sequence[int]]) -> int:
    """Worst-case number of malicious nodes the vote survives: ⌊(K − 1)/2⌋.

    Any set of at most this many malicious nodes corrupts at most that many groups (< K/2);
    one more node per group corrupts ⌊(K − 1)/2⌋ + 1 ≥ K/2 groups. It depends only on K, not on
    the group sizes, as long as every group is non-empty.

    Raises:
        ValueError: no groups, an empty group, or a node in two groups.
    """
    if not groups or any(len(grp) == 0 for grp in groups):
        raise ValueError("every group needs at least one node")
    flat = [i for grp in groups for i in grp]
    if len(set(flat)) != len(flat):
        raise ValueError("groups must be disjoint")
    return (len(groups) - 1) // 2
