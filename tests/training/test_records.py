"""Merging per-node records on the main rank the way the in-process swarm combines its policies."""

from dgrpo.training.records import merge_records


def test_one_owner_is_its_own_record():
    rec = {"round": 0, "train/loss": 0.5, "time/defense": 0.1}
    assert merge_records({2: rec}) == rec


def test_several_owners_suffix_update_stats_sum_invalid_and_average_evaluation():
    a = {"round": 1, "train/reward/node0": 0.25, "train/loss": 0.5, "train/grad_norm": 1.0, "train/used": 8,
         "time/defense": 0.1, "time/defense/judge": 0.1, "swarm/invalid": 1, "eval/accuracy": 0.5, "eval/completion_tokens": 10.0,
         "attack/asr": 0.2, "defense/received": 16}
    b = {"round": 1, "train/reward/node0": 0.25, "train/loss": -0.5, "train/grad_norm": 3.0, "train/used": 6,
         "time/defense": 0.3, "swarm/invalid": 2, "eval/accuracy": 0.0, "eval/completion_tokens": 20.0,
         "attack/asr": None, "defense/received": 16}
    assert merge_records({2: b, 0: a}) == {
        "round": 1, "train/reward/node0": 0.25, "defense/received": 16,
        "train/loss/node0": 0.5, "train/loss/node2": -0.5, "train/grad_norm/node0": 1.0, "train/grad_norm/node2": 3.0,
        "train/used/node0": 8, "train/used/node2": 6, "time/defense/node0": 0.1, "time/defense/node2": 0.3,
        "time/defense/judge/node0": 0.1,
        "swarm/invalid": 3, "eval/accuracy": 0.25, "eval/completion_tokens": 15.0,
        "eval/accuracy/node0": 0.5, "eval/accuracy/node2": 0.0, "attack/asr": 0.2}


def test_evaluation_means_are_averaged_the_way_evaluate_averages_them():
    """Every per-policy evaluation mean — format rate included — is averaged over the owners."""
    a = {"round": 3, "eval/accuracy": 0.5, "eval/completion_tokens": 10.0, "eval/format_rate": 1.0}
    b = {"round": 3, "eval/accuracy": 0.25, "eval/completion_tokens": 30.0, "eval/format_rate": 0.5}
    merged = merge_records({0: a, 1: b})
    assert merged["eval/format_rate"] == 0.75 and merged["eval/completion_tokens"] == 20.0
    assert merged["eval/accuracy"] == 0.375 and merged["eval/accuracy/node1"] == 0.25


def test_merged_intervals_pool_every_policys_completions():
    from dgrpo.metrics.intervals import wilson

    a = {"round": 0, "eval/accuracy": 0.5, "eval/n": 4, "eval/accuracy_ci95_low": 0.0, "eval/accuracy_ci95_high": 1.0}
    b = {"round": 0, "eval/accuracy": 0.25, "eval/n": 4, "eval/accuracy_ci95_low": 0.0, "eval/accuracy_ci95_high": 1.0}
    merged = merge_records({0: a, 1: b})
    assert merged["eval/n"] == 8 and merged["eval/accuracy"] == 0.375
    assert (merged["eval/accuracy_ci95_low"], merged["eval/accuracy_ci95_high"]) == wilson(3, 8)  # 2 + 1 of 8
