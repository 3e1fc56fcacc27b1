"""benchmarks/anchors.py's one-run table: fractions of the same-run limit worked by hand."""

from bench_script import load_script

anchors = load_script("", "anchors", "bench")


def test_the_table_divides_every_rate_by_the_best_kernels_limit_and_keeps_the_goals():
    generation = {
        "compute": {"limit_tokens_per_s": {"mkl": 400.0, "onednn": 800.0}},           # the limit: 800
        "generation": {"completions": 32, "variants": {"after": {"median_tokens_per_s": 200.0}}},
        "batch_size_curve": [{"completions": 64, "tokens_per_s": 320.0}],
        "stream": [{"rows": 32, "requests": 128, "refill": {"median_tokens_per_s": 440.0},
                    "batches": {"median_tokens_per_s": 360.0}}],
        "update": {"variants": {"after": {"median_seconds": 9.5, "fraction_of_peak": {"mkl": 0.31, "onednn": 0.42}}}},
    }
    llamacpp = {"requests": 32, "median_tokens_per_s": {"llama.cpp": 1200.0, "dgrpo": 180.0}}
    trl = {"ratio_dgrpo_over_trl": 0.25, "dgrpo_seconds_per_round": 20.0, "trl_seconds_per_step": 80.0}
    table = {r["what"]: r for r in anchors.rows(generation, llamacpp, trl)}
    assert table["float32 compute limit (best GEMM)"]["value"] == 800.0
    whole = table["a whole round's requests (32 completions, one sample call)"]
    assert (whole["fraction_of_limit"], whole["goal"]) == (0.25, ">= 0.5")            # 200 / 800
    assert table["batch 64 (one call, no refill)"]["fraction_of_limit"] == 0.4        # 320 / 800
    refill = table["128 requests through 32 rows, refill"]
    assert (refill["fraction_of_limit"], refill["goal"]) == (0.55, ">= 0.5")          # 440 / 800
    assert table["128 requests through 32 rows, batches"]["goal"] == ""
    update = table["update (Learner.step, groups packed)"]
    assert (update["value"], update["fraction_of_limit"]) == (9.5, 0.42)              # the better kernel's fraction
    assert table["llama.cpp, 32 requests (llamacpp_generation.py)"]["fraction_of_limit"] == 1.5
    assert table["dgrpo round / TRL GRPOTrainer step"]["fraction_of_limit"] is None
    md = anchors.markdown(anchors.rows(generation, None, None))
    assert md.count("\n") == 2 + 6 and "TRL" not in md and "| 0.550 |" in md         # header, rule, 6 rows
