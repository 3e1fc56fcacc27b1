"""Compare two runs of the README main job: every non-time key of metrics.jsonl, the samples and eval_reference."""
import json, sys, glob, math
a_dir, b_dir = sys.argv[1], sys.argv[2]
def run(d):
    return glob.glob(f"{d}/runs/*/")[0]
ra, rb = run(a_dir), run(b_dir)
A = [json.loads(l) for l in open(ra + "metrics.jsonl")]
B = [json.loads(l) for l in open(rb + "metrics.jsonl")]
print("records before", len(A), "after", len(B)); B = B[:len(A)]; A = A[:len(B)]
n = same = 0; diffs = []
for x, y in zip(A, B):
    keys = sorted(set(x) | set(y))
    for k in keys:
        if k.startswith("time/"):
            continue
        n += 1
        vx, vy = x.get(k), y.get(k)
        if vx == vy:
            same += 1
        else:
            rel = abs(vx - vy) / max(abs(vx), abs(vy), 1e-30) if isinstance(vx, float) and isinstance(vy, float) else None
            diffs.append((x.get("round"), k, vx, vy, rel))
print(f"records {len(A)}; non-time values {n}; equal {same}; different {len(diffs)}")
for d in diffs:
    print("  ", d)
for name in ("samples.jsonl",):
    print(name, "identical" if open(ra + name).read() == open(rb + name).read() else "DIFFERENT")
ea, eb = json.load(open(ra + "eval_reference/node0.json")), json.load(open(rb + "eval_reference/node0.json"))
ids_same = [x["completion_ids"] for x in ea] == [x["completion_ids"] for x in eb]
lp = max(abs(u - v) for x, y in zip(ea, eb) for u, v in zip(x["logp"], y["logp"])) if ids_same else None
print("eval_reference completion ids identical:", ids_same, "max |logp diff|:", lp)
times = lambda R: {k: round(sum(r.get(k, 0) for r in R), 1) for k in ("time/round", "time/generate", "time/update", "time/eval")}
print("sums before", times(A)); print("sums after ", times(B))
