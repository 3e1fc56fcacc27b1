"""Compare two run directories of the same job: every non-time value of metrics.jsonl, samples.jsonl,
and the drift reference (eval_reference/node0.json: completion ids, stored log-probs).

    python compare_runs.py BEFORE_RUN_DIR AFTER_RUN_DIR
"""
import json
import sys
from pathlib import Path

a, b = Path(sys.argv[1]), Path(sys.argv[2])
A = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines()]
B = [json.loads(line) for line in (b / "metrics.jsonl").read_text().splitlines()]
print("records", len(A), len(B))
n = same = 0
diffs = []
for x, y in zip(A, B):
    for k in sorted(set(x) | set(y)):
        if k.startswith("time/"):
            continue
        n += 1
        vx, vy = x.get(k), y.get(k)
        if vx == vy:
            same += 1
        else:
            rel = (abs(vx - vy) / max(abs(vx), abs(vy), 1e-30)
                   if isinstance(vx, float) and isinstance(vy, float) else None)
            diffs.append((x.get("round"), k, vx, vy, rel))
print(f"non-time values {n}; equal {same}; different {len(diffs)}")
for d in diffs:
    print("  round %s %s: %r -> %r (relative %s)" % d)
for name in ("samples.jsonl",):
    print(name, "identical" if (a / name).read_text() == (b / name).read_text() else "DIFFERENT")
ea = json.loads((a / "eval_reference" / "node0.json").read_text())
eb = json.loads((b / "eval_reference" / "node0.json").read_text())
ids_same = [x["completion_ids"] for x in ea] == [x["completion_ids"] for x in eb]
lp = max(abs(u - v) for x, y in zip(ea, eb) for u, v in zip(x["logp"], y["logp"])) if ids_same else None
print("eval_reference: completions", len(ea), "ids identical:", ids_same, "max |logp diff|:", lp)
