import itertools

import pytest
import torch

from dgrpo.robust.ensemble import (
    continuous_vote,
    corrupted_groups,
    is_tolerated,
    majority_vote,
    split_groups,
    tolerance,
)


def test_split_groups_balanced_disjoint_deterministic():
    assert split_groups(range(7), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_groups([6, 2, 4, 0, 5, 1, 3], 3) == split_groups(range(7), 3)  # order-free
    for m in range(1, 12):
        for k in range(1, m + 1):
            groups = split_groups(range(m), k)
            sizes = [len(g) for g in groups]
            assert len(groups) == k and max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
            assert sorted(i for g in groups for i in g) == list(range(m))


def test_split_groups_errors():
    with pytest.raises(ValueError, match="distinct"):
        split_groups([1, 1, 2], 2)
    with pytest.raises(ValueError, match="K"):
        split_groups(range(3), 4)
    with pytest.raises(ValueError, match="K"):
        split_groups(range(3), 0)


def test_majority_vote_counts_and_none():
    assert majority_vote(["42", "42", "7"]) == "42"
    assert majority_vote([None, None, "7"]) == "7"  # None never wins
    assert majority_vote([None, None]) is None  # ... except when nobody answered
    assert majority_vote([]) is None
    assert majority_vote([3, None, 5, 5]) == 5


def test_majority_vote_tie_goes_to_the_first_group():
    assert majority_vote(["7", "5", "5", "7"]) == "7"
    assert majority_vote([None, "5", "7"]) == "5"
    assert majority_vote([3, 2]) == 3  # first group order, not the smaller value
    assert majority_vote(["b", "a", None, "a", "b", "c"]) == "b"


HONEST, WRONG = "18", ("19", "20")


def _vote_survives(groups, malicious):
    """Brute force: honest groups answer HONEST; corrupted groups answer anything in
    {HONEST, 19, 20, None}. The vote survives when HONEST wins for every such assignment, both in
    group order and with the corrupted groups moved first (the worst case for the tie rule)."""
    bad = set(malicious)
    corrupted = [g for g, members in enumerate(groups) if bad & set(members)]
    for choice in itertools.product((HONEST, *WRONG, None), repeat=len(corrupted)):
        answers = [HONEST] * len(groups)
        for g, a in zip(corrupted, choice):
            answers[g] = a
        worst_order = [answers[g] for g in corrupted] + [a for g, a in enumerate(answers) if g not in corrupted]
        if majority_vote(answers) != HONEST or majority_vote(worst_order) != HONEST:
            return False
    return True


@pytest.mark.parametrize("k", [3, 4, 5])
def test_tolerance_bound_by_brute_force_over_all_malicious_sets(k):
    nodes = list(range(k + 2))  # two groups of two, the rest of one: unequal sizes on purpose
    groups = split_groups(nodes, k)
    survives_all_up_to = None
    for size in range(len(nodes) + 1):
        sets = list(itertools.combinations(nodes, size))
        outcomes = [_vote_survives(groups, s) for s in sets]
        for s, ok in zip(sets, outcomes):
            assert is_tolerated(groups, s) == ok, (groups, s)
        if not all(outcomes) and survives_all_up_to is None:
            survives_all_up_to = size - 1
    assert tolerance(groups) == survives_all_up_to == (k - 1) // 2
    assert {3: 1, 4: 1, 5: 2}[k] == tolerance(groups)


def test_corrupted_groups_and_concentrated_attackers():
    groups = split_groups(range(9), 3)  # [[0,1,2],[3,4,5],[6,7,8]]
    assert corrupted_groups(groups, {0, 2, 7}) == [0, 2]
    # the worst case tolerates 1 node, but 3 attackers inside one group are harmless
    assert is_tolerated(groups, {3, 4, 5}) and not is_tolerated(groups, {0, 7})
    with pytest.raises(ValueError, match="in no group"):
        is_tolerated(groups, {42})
    with pytest.raises(ValueError, match="at least one node"):
        tolerance([[0], []])
    with pytest.raises(ValueError, match="disjoint"):
        tolerance([[0, 1], [1]])


def test_continuous_vote_is_a_geometric_median():
    honest = torch.tensor([[1.0, 0.0], [1.1, 0.1], [0.9, -0.1]], dtype=torch.float64)
    outputs = torch.cat([honest, torch.full((2, 2), 1e3, dtype=torch.float64)])  # 2 of 5 groups corrupted
    assert (continuous_vote(outputs) - honest.mean(dim=0)).norm() < 0.2
