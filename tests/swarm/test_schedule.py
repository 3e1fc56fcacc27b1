"""Which prompts a round uses and which completions each node writes (Algorithms 1 and 2, L3-5)."""

from collections import Counter

from dgrpo.swarm.schedule import horizontal_prompts, horizontal_slots, take, vertical_prompts, vertical_slots
from dgrpo.types import Problem, Slot

POOL = [Problem(f"p{i}", f"q{i}", str(i), "") for i in range(7)]


def test_every_prompt_is_used_once_per_epoch_before_any_repeats():
    seq = take(POOL, 21, 0, "k")  # three epochs of 7
    for epoch in range(3):
        assert sorted(p.prompt_id for p in seq[7 * epoch: 7 * epoch + 7]) == sorted(p.prompt_id for p in POOL)
    assert [p.prompt_id for p in seq[:7]] != [p.prompt_id for p in seq[7:14]]  # each epoch its own order


def test_a_window_is_the_same_slice_of_the_endless_sequence():
    full = take(POOL, 20, 0, "k")
    assert take(POOL, 5, 9, "k") == full[9:14]  # round 3 of 3-prompt rounds, e.g., depends on nothing else
    assert take(POOL, 5, 9, "other key") != full[9:14]


def test_horizontal_rounds_share_prompts_across_nodes_and_differ_between_rounds():
    r0, r1 = horizontal_prompts(POOL, 3, 5, 0), horizontal_prompts(POOL, 3, 5, 1)
    assert r0 == take(POOL, 3, 0, "global|5") and r1 == take(POOL, 3, 3, "global|5")
    assert r0 != r1 and r0 != horizontal_prompts(POOL, 3, 6, 0)  # another run seed, other prompts


def test_vertical_nodes_choose_their_own_prompts():
    a, b = vertical_prompts(POOL, 2, 5, 1, 0), vertical_prompts(POOL, 2, 5, 1, 1)
    assert a == take(POOL, 2, 2, "local|5|0") and b == take(POOL, 2, 2, "local|5|1")
    assert a != b


def test_horizontal_slots_split_each_group_into_disjoint_index_ranges():
    prompts = POOL[:2]
    slots = [s for node in range(4) for s in horizontal_slots(prompts, 8, 4, node)]
    assert slots[:2] == [Slot(POOL[0], 2, 0), Slot(POOL[1], 2, 0)]  # node 0: indices 0-1 of each prompt
    indices = Counter((s.problem.prompt_id, i) for s in slots for i in range(s.first, s.first + s.count))
    assert len(indices) == 16 and set(indices.values()) == {1}  # G = 8 indices per prompt, each written once


def test_vertical_slots_give_a_node_whole_groups():
    assert vertical_slots(POOL[:2], 8) == [Slot(POOL[0], 8, 0), Slot(POOL[1], 8, 0)]
