"""Carry split v1's judgments of rows that are dev in split v2 into a v2 scores file, and list rows to compare on.

    python benchmarks/judge_table1/carry_v1.py --gsm8k /work/shared/data/gsm8k/test.jsonl \\
        --v1 results/judge_qwen/scores.jsonl --v1-tag q15-plain --tag q15v2-plain \\
        --out results/judge_qwen_v2/scores.jsonl --keys-out results/judge_qwen_v2/compare_keys.txt --per-set 20

Every v1 judgment under ``--v1-tag`` whose row is dev in split v2 (all of them: sets.resplit_v2 puts every judged
row's problem on dev) is appended to ``--out`` with ``tag`` = ``--tag``, ``split`` = dev and ``carried`` = the v1
file and tag (same model, prompt and server; v1 ran llama.cpp with 2 threads). Rows already in ``--out`` under
``--tag`` are not appended twice. ``--keys-out``: up to ``--per-set`` evenly spaced carried keys of each set in
``--sets`` (the rows another prompt is judged on, for a comparison on the same rows).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sets as judge_sets  # noqa: E402
from score import spaced  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--v1", type=Path, required=True)
    ap.add_argument("--v1-tag", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gsm8k", type=Path, default=None)
    ap.add_argument("--keys-out", type=Path, required=True)
    ap.add_argument("--per-set", type=int, default=20)
    ap.add_argument("--sets", nargs="+", default=["hail", "equation", "honest_sampled", "honest_oracle",
                                                   "honest_gsm8k", "honest_python"])
    args = ap.parse_args(argv)
    dev = {r["key"]: r for r in judge_sets.load(args.gsm8k, split="v2") if r["split"] == "dev"}
    old = [d for d in map(json.loads, args.v1.read_text().splitlines()) if d["tag"] == args.v1_tag and d["key"] in dev]
    have = set()
    if args.out.exists():
        have = {d["key"] for d in map(json.loads, args.out.read_text().splitlines()) if d["tag"] == args.tag}
    with args.out.open("a") as f:
        for d in old:
            if d["key"] not in have:
                f.write(json.dumps({**d, "split": "dev", "tag": args.tag, "carried": f"{args.v1}:{args.v1_tag}"}) + "\n")
    order = {k: i for i, k in enumerate(dev)}  # sets.load's order
    keys = []
    for s in args.sets:
        keys += spaced(sorted((d["key"] for d in old if d["set"] == s), key=order.get), args.per_set)
    args.keys_out.write_text("".join(k + "\n" for k in keys))
    print(f"{len(old)} v1 judgments are v2 dev rows; {len(keys)} keys listed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
