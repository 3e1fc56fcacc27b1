"""Golden runs (tests/recipes/test_golden.py) with the update's groups packed into one forward (the default,
``Learner.pack_rows``) and one forward per group (``pack_rows = 0``): how many of each run's floats differ, the
largest relative difference, and how many packed forwards the run made.

    PYTHONPATH=src:tests:tests/recipes python benchmarks/results/issue38_update/golden_packing_diff.py TINY_DIR [RUN...]

TINY_DIR: a saved tiny model and tokenizer (tests/conftest.py: build_model, build_tokenizer, save_pretrained);
without RUN, every run that needs only the tiny model (not MODELS or JUDGES).
"""
import json, sys, tempfile
from pathlib import Path
import torch
import test_golden as G
from dgrpo import registry
from dgrpo.cli import main
from dgrpo.grpo import learner

registry.register("task", "even_length", config=G.EvenLengthTaskConfig)(lambda: G.EvenLengthTask())
tiny = sys.argv[1]
default, packed_calls = learner.PACKED_ROWS, []
original = learner.groups_token_logprobs
learner.groups_token_logprobs = lambda *a, **k: (packed_calls.append(len(a[1])), original(*a, **k))[1]
def floats(a, b, path=""):
    if isinstance(a, float) and isinstance(b, (int, float)):
        yield path, a, b
    elif isinstance(a, dict):
        for k in a:
            if k in b and not k.startswith("time/"):
                yield from floats(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from floats(x, y, f"{path}[{i}]")
names = sys.argv[2:] or [n for n, (_, args) in G.RUNS.items() if "MODELS" not in args and "JUDGES" not in args]
for name in names:
    task, args = G.RUNS[name]
    args = [f"model.name={tiny}" if a == "MA" else a for a in args]
    out, calls = {}, {}
    for mode in ("off", "on"):
        learner.Learner.pack_rows = default if mode == "on" else 0
        packed_calls.clear()
        with tempfile.TemporaryDirectory() as tmp:
            torch.manual_seed(12345)
            assert main([*args, *([task] if task else []), f"out_dir={tmp}", f"name={name}"]) == 0
            out[mode] = G._collect(Path(tmp) / name)
        calls[mode] = list(packed_calls)
    diffs = [(abs(x - y) / max(abs(x), abs(y), 1e-30), p, x, y) for p, x, y in floats(out["off"], out["on"]) if x != y]
    n = sum(1 for _ in floats(out["off"], out["on"]))
    print(json.dumps({"run": name, "floats": n, "different": len(diffs), "worst": max(diffs) if diffs else None,
                      "packed_forwards": len(calls["on"]), "groups_packed": sum(calls["on"]),
                      "golden_ok": G._close(out["on"], G.GOLDEN[name], name) is None}), flush=True)
