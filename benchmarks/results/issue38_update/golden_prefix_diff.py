"""Golden runs (tests/recipes/test_golden.py) with the update's shared prefix off, on (the default: at least 16
shared tokens) and forced (at least 1): how many of each run's floats differ, and the largest relative difference.

    PYTHONPATH=src:tests:tests/recipes python benchmarks/results/issue38_update/golden_prefix_diff.py TINY_DIR RUN...

TINY_DIR: a saved tiny model and tokenizer (tests/conftest.py: build_model, build_tokenizer, save_pretrained).
"""
import json, sys, tempfile
from pathlib import Path
import torch
import test_golden as G
from dgrpo import registry
from dgrpo.cli import main
from dgrpo.grpo import learner
from dgrpo.policy import prefix

registry.register("task", "even_length", config=G.EvenLengthTaskConfig)(lambda: G.EvenLengthTask())
tiny = sys.argv[1]
orig = learner.common_prefix
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
for name in sys.argv[2:]:
    task, args = G.RUNS[name]
    args = [f"model.name={tiny}" if a == "MA" else a for a in args]
    out = {}
    for mode in ("off", "on", "forced"):
        learner.common_prefix = {"off": lambda p: 0, "on": orig, "forced": lambda p: prefix.common_prefix(p, minimum=1)}[mode]
        with tempfile.TemporaryDirectory() as tmp:
            torch.manual_seed(12345)
            assert main([*args, *([task] if task else []), f"out_dir={tmp}", f"name={name}"]) == 0
            out[mode] = G._collect(Path(tmp) / name)
    for mode in ("on", "forced"):
        diffs = [(abs(x - y) / max(abs(x), abs(y), 1e-30), p, x, y) for p, x, y in floats(out["off"], out[mode]) if x != y]
        n = sum(1 for _ in floats(out["off"], out[mode]))
        worst = max(diffs) if diffs else None
        print(json.dumps({"run": name, "prefix": mode, "floats": n, "different": len(diffs), "worst": worst}))
