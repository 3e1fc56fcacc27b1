"""Reading only (after the freeze): the exact step checker beside the frozen step judge on the judged dev rows.

    PYTHONPATH=src python results/judge_qwen_v3/step_checker_beside.py [--split dev|heldout]
"""
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "judge_table1"))
import sets  # noqa: E402

from dgrpo.verify.steps import check_steps  # noqa: E402

R = ROOT / "results" / "judge_qwen_v3"
text = {r["key"]: r["text"] for r in sets.load(Path("/work/shared/data/gsm8k/test.jsonl"), split="v2")}
t = json.loads((R / "rule_q15v3-step.json").read_text())["threshold"]
split = sys.argv[sys.argv.index("--split") + 1] if "--split" in sys.argv else "dev"
counts = collections.defaultdict(lambda: [0, 0, 0, 0])
for r in map(json.loads, (R / "scores.jsonl").read_text().splitlines()):
    if r["tag"] != "q15v3-step" or r.get("split", "dev") != split:
        continue
    checker = not check_steps(text[r["key"]]).accepted
    judge = r["score"] is None or r["score"] < t
    c = counts[r["set"]]
    c[0] += 1; c[1] += checker; c[2] += judge; c[3] += checker or judge  # noqa: E702
print(f"{split}: set: n, step checker rejects, step judge rejects (threshold %.4f), either rejects" % t)
for s, c in counts.items():
    print(f"{s}: {c[0]}, {c[1]}, {c[2]}, {c[3]}")
