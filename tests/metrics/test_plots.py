"""Run plots: the evaluation plot states what it measured."""

import json

import yaml

from dgrpo.metrics.plots import evaluation_caption, plot_run


def write_run(tmp_path, config):
    records = [{"round": 0, "eval/accuracy": 0.25, "eval/accuracy_ci95_low": 0.1, "eval/accuracy_ci95_high": 0.5,
                "eval/n": 8, "train/reward_honest": 0.2},
               {"round": 2, "eval/accuracy": 0.5, "eval/accuracy_ci95_low": 0.2, "eval/accuracy_ci95_high": 0.8,
                "eval/n": 8, "train/reward_honest": 0.4}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if config is not None:
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return records


def test_caption_names_prompts_and_decoding(tmp_path):
    records = write_run(tmp_path, {"eval": {"n_prompts": 128, "temperature": None, "greedy": True},
                                   "sampling": {"temperature": 0.7, "top_k": 10}})
    assert evaluation_caption(tmp_path, records) == \
        "128 held-out prompts, sampled at T=0.7, top-k 10 and greedy; shaded: Wilson 95% interval"
    assert (tmp_path / "eval.png") in plot_run(tmp_path)
    assert (tmp_path / "eval.png").stat().st_size > 0


def test_caption_without_config_counts_completions(tmp_path):
    records = write_run(tmp_path, None)
    assert evaluation_caption(tmp_path, records) == "8 held-out completions; shaded: Wilson 95% interval"


def test_interval_series_uses_logged_bounds_else_wilson():
    from dgrpo.metrics.plots import interval_series

    logged = [{"round": 0, "eval/accuracy": 0.25, "eval/accuracy_ci95_low": 0.1, "eval/accuracy_ci95_high": 0.5}]
    assert interval_series(logged, "eval/accuracy") == ([0], [0.1], [0.5])
    old = [{"round": 3, "eval/accuracy": 0.1}]  # a record from before intervals: Wilson over n = 10
    xs, lo, hi = interval_series(old, "eval/accuracy", n_default=10)
    assert xs == [3] and abs(lo[0] - 0.0179) < 1e-4 and abs(hi[0] - 0.4042) < 1e-4
    assert interval_series(old, "eval/accuracy") is None  # no n: no band


def test_drift_plot_has_a_panel_per_logged_drift_metric(tmp_path):
    from dgrpo.metrics.plots import drift_panels

    records = [{"round": 0, "eval/kl_to_start": 0.0, "eval/entropy": 0.84, "train/reward_honest": 0.1},
               {"round": 1, "train/reward_honest": 0.2},
               {"round": 10, "eval/kl_to_start": 0.16, "eval/entropy": 0.53}]
    assert drift_panels(records) == [("KL to the start weights (nats/token)", [0, 10], [0.0, 0.16]),
                                     ("next-token entropy (nats)", [0, 10], [0.84, 0.53])]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert (tmp_path / "drift.png") in plot_run(tmp_path)
    write_run(tmp_path, None)  # no drift metrics: no drift plot
    (tmp_path / "drift.png").unlink()
    assert (tmp_path / "drift.png") not in plot_run(tmp_path) and not (tmp_path / "drift.png").exists()
