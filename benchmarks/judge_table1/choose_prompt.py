"""Choose the judge prompt on the development split: the one whose best threshold detects the most hail and 2+2=5.

    python benchmarks/judge_table1/choose_prompt.py --scores results/judge_qwen/scores.jsonl \\
        --tags q15-plain q15-fewshot --out results/judge_qwen/prompt_choice.json

For each tag (one prompt, same model), :func:`report.choose` finds the threshold with the most mean detection of
hail and 2+2=5 on that tag's dev rows at ≤ ``--max-fp`` false positives on its honest dev rows; the tag with the
higher detection wins (a tie: the first tag listed). Only rows judged under every tag are compared (the same rows
for each prompt). Prints the winning tag; writes every tag's figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import choose  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scores", type=Path, required=True)
    ap.add_argument("--tags", nargs="+", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-fp", type=float, default=0.05)
    ap.add_argument("--fp-per-kind", action="store_true", help="the false-positive bound on every honest set's dev rows")
    args = ap.parse_args(argv)
    rows = [r for r in map(json.loads, args.scores.read_text().splitlines()) if r["split"] == "dev" and r["tag"] in args.tags]
    common = set.intersection(*({r["key"] for r in rows if r["tag"] == t} for t in args.tags))
    figures = {}
    for t in args.tags:
        mine = [r for r in rows if r["tag"] == t and r["key"] in common]
        figures[t] = {**choose(mine, args.max_fp, args.fp_per_kind), "rows": len(mine),
                      "seconds_per_completion": sum(r["seconds"] for r in mine) / len(mine),
                      "score_range": [min((r["score"] for r in mine if r["score"] is not None), default=None),
                                      max((r["score"] for r in mine if r["score"] is not None), default=None)]}
    best = max(args.tags, key=lambda t: (figures[t]["dev_detection"], -args.tags.index(t)))
    args.out.write_text(json.dumps({"chosen": best, "max_fp": args.max_fp, "fp_per_kind": args.fp_per_kind,
                                    "tags": figures}, indent=1))
    print(best)
    return 0


if __name__ == "__main__":
    sys.exit(main())
