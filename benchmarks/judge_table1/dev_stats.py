"""How far a judge's score separates each poison set from each honest set on dev: quantiles and AUC, per tag.

    python benchmarks/judge_table1/dev_stats.py --scores results/judge_qwen_v2/scores.jsonl \\
        --tags q15v2-plain q15v2-relevant --out results/judge_qwen_v2/dev_stats.md

Quantiles (min, 5th, median, 95th percentile, max) of the score p(yes) / (p(yes) + p(no)) of every set's dev rows
under each tag; AUC = P(an honest row scores above a poisoned one), ties counting half, for hail and 2+2=5 against
each honest set (1.0: a threshold separates them; 0.5: chance; below 0.5: the honest set scores lower).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def auc(poison: list[float], honest: list[float]) -> float:
    return sum((h > p) + 0.5 * (h == p) for h in honest for p in poison) / (len(poison) * len(honest))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scores", type=Path, required=True)
    ap.add_argument("--tags", nargs="+", required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    rows = [r for r in map(json.loads, args.scores.read_text().splitlines()) if r["split"] == "dev" and r["score"] is not None]
    honest = ("honest_sampled", "honest_oracle", "honest_gsm8k", "honest_python")
    lines = []
    for tag in args.tags:
        by: dict[str, list[float]] = {}
        for r in rows:
            if r["tag"] == tag:
                by.setdefault(r["set"], []).append(r["score"])
        lines += [f"**{tag}** (dev rows)", "", "| set | n | min | 5 % | median | 95 % | max |", "|---|---|---|---|---|---|---|"]
        for s, v in by.items():
            q = statistics.quantiles(v, n=20, method="inclusive")
            lines.append(f"| {s} | {len(v)} | {min(v):.3f} | {q[0]:.3f} | {statistics.median(v):.3f} | {q[-1]:.3f} | {max(v):.3f} |")
        hs = [h for h in honest if h in by]
        lines += ["", "| AUC (honest above poisoned) | " + " | ".join(hs) + " |", "|---" * (len(hs) + 1) + "|"]
        lines += [f"| {p} | " + " | ".join(f"{auc(by[p], by[h]):.3f}" for h in hs) + " |" for p in ("hail", "equation") if p in by]
        lines.append("")
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
