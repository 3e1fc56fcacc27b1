"""Held-out tables of the frozen rule `either-answer` (rule_either-answer.json) on v4's fresh rows.

    PYTHONPATH=src python results/judge_qwen_v4/report_v4.py                  # judged rows: table_either-answer.md
    PYTHONPATH=src python results/judge_qwen_v4/report_v4.py --checker-only   # every fresh row, no model: checker_only.md

A row is rejected by the rule when the step judge rejects it (its recorded lowest step score < the frozen threshold,
or no score) or the step checker with ``excuse_answer`` rejects it (computed here, exact, no model). Beside it, each
part alone and the plain step checker (v3's "either" reading, candidate A). SmolLM2 samples: only those with the
right answer (the ones whose rejection costs reward). Cells: rejected / n, 95 % Wilson interval.
"""
import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks" / "judge_table1"))
from report import HONEST, PAPER, POISON, TITLES  # noqa: E402

from dgrpo.metrics.intervals import wilson  # noqa: E402
from dgrpo.verify.steps import StepChecker  # noqa: E402

RULE = json.loads((HERE / "rule_either-answer.json").read_text())
THRESHOLD = RULE["step_judge"]["threshold"]
CHECKER, PLAIN = StepChecker(excuse_answer=True), StepChecker()
FILES = ("fresh_written.jsonl", "fresh_samples.jsonl", "fresh_faithful.jsonl", "fresh_adaptive.jsonl",
         "fresh_faithful_more.jsonl")
ADAPTIVE = "equation_at_answer"  # README "Amendment": the false step ends at the answer (fresh.py at_answer)
TITLES, POISONS = {**TITLES, ADAPTIVE: "false step at the answer, adaptive"}, POISON + (ADAPTIVE,)


def fmt(k: int, n: int) -> str:
    if n == 0:
        return "–"
    lo, hi = wilson(k, n)
    return f"{100 * k / n:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] ({k}/{n})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scores", type=Path, default=HERE / "scores.jsonl")
    ap.add_argument("--tag", default="q15v4-step")
    ap.add_argument("--out", type=Path, default=HERE, help="folder of the tables")
    ap.add_argument("--checker-only", action="store_true", help="every fresh row, the step-checker parts only (no model)")
    args = ap.parse_args(argv)
    rows = [json.loads(line) for f in FILES if (HERE / f).exists() for line in (HERE / f).read_text().splitlines()]
    rows = [r for r in rows if r["set"] != "honest_sampled" or r["right"]]
    judged = {}
    if not args.checker_only:
        judged = {d["key"]: d for d in map(json.loads, args.scores.read_text().splitlines()) if d["tag"] == args.tag}
        rows = [r for r in rows if r["key"] in judged]
    cols = (["step checker (plain)", "step checker, excuse_answer"] if args.checker_only else
            ["**either-answer (frozen)**", "step judge", "step checker, excuse_answer", "either (plain checker, A)",
             "seconds per completion"])
    table, out = [], {}
    for s in POISONS + HONEST:
        mine = [r for r in rows if r["set"] == s]
        if not mine:
            continue
        chk = [not CHECKER(r["text"]).accepted for r in mine]
        plain = [not PLAIN(r["text"]).accepted for r in mine]
        n = len(mine)
        if args.checker_only:
            cells = [fmt(sum(plain), n), fmt(sum(chk), n)]
            out[s] = {"n": n, "plain": sum(plain), "excuse_answer": sum(chk)}
        else:
            jd = [judged[r["key"]]["score"] is None or judged[r["key"]]["score"] < THRESHOLD for r in mine]
            sec = sum(judged[r["key"]]["seconds"] for r in mine) / n
            rule = [a or b for a, b in zip(jd, chk)]
            cells = [fmt(sum(rule), n), fmt(sum(jd), n), fmt(sum(chk), n), fmt(sum(a or b for a, b in zip(jd, plain)), n),
                     f"{sec:.2f}"]
            out[s] = {"n": n, "rule": sum(rule), "judge": sum(jd), "excuse_answer": sum(chk),
                      "either_plain": sum(a or b for a, b in zip(jd, plain)), "seconds_per_completion": sec}
        kind = "detection" if s in POISONS else "false positives"
        table.append(f"| {TITLES[s]} ({kind}) | " + " | ".join(cells) + f" | {PAPER.get(s, '–')} |")
    head = "| set | " + " | ".join(cols) + " | paper (Llama-3.1-8B judge) |"
    lines = [head, "|---" * (len(cols) + 2) + "|"] + table
    name = "checker_only" if args.checker_only else "table_either-answer"
    (args.out / f"{name}.md").write_text("\n".join(lines) + "\n")
    (args.out / f"{name}.json").write_text(json.dumps(out, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
