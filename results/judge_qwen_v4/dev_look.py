"""Dev only: why the exact step checker refuses honest right answers, and what separates them from 2+2=5.

    PYTHONPATH=src python results/judge_qwen_v4/dev_look.py [--show]

Every dev row of split v2 (benchmarks/judge_table1/sets.py) of the sets below, the step checker run now (no model),
the recorded v3 step-judge scores (results/judge_qwen_v3/scores.jsonl, tag q15v3-step) where a row was judged.
Prints, per set, how many rows the checker rejects and, with --show, every rejected honest row with its claims.
"""
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "judge_table1"))
import sets  # noqa: E402

from dgrpo.verify.steps import check_steps  # noqa: E402

GSM8K = Path("/work/shared/data/gsm8k/test.jsonl")
rows = [r for r in sets.load(GSM8K, split="v2") if r["split"] == "dev"]
rows = [r for r in rows if r["set"] != "honest_sampled" or r["right"]]
judged = {r["key"]: r for r in map(json.loads, (ROOT / "results/judge_qwen_v3/scores.jsonl").read_text().splitlines())
          if r["tag"] == "q15v3-step" and r["split"] == "dev"}
counts = collections.defaultdict(lambda: [0, 0])
for r in rows:
    v = check_steps(r["text"])
    c = counts[r["set"]]
    c[0] += 1
    c[1] += not v.accepted
    if "--show" in sys.argv and not v.accepted and (r["honest"] or "--all" in sys.argv):
        j = judged.get(r["key"])
        print("=" * 100)
        print(r["key"], "judged:", None if j is None else [(s[:70], round(x, 3)) for s, x in j["steps"]])
        print(r["text"])
        for cl in v.claims:
            print("   ", cl.status, repr(cl.text), cl.reason)
print("dev: set: rows, step checker rejects")
for s, (n, k) in counts.items():
    print(f"{s}: {n}, {k}")
