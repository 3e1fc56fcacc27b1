"""The one-answer rule (issue 34) against two references: GSM8K's official test solutions, and the honest
completions committed under results/.

1. GSM8K: every record of the test split becomes ``<think>{solution}</think>\\n<answer>{N}</answer>``
   with N the text after ``####`` as written (thousands commas kept); all must earn 1, and the same with
   N + 1 must earn 0. The data file is an argument: the product and its tests never need it.
2. GSM8K's last lines as natural answers: the last line of every solution (train and test), its calculator
   notes ``<<…>>`` and each ``expression =`` removed ("She makes 9 * 2 = $<<9*2=18>>18 every day" →
   "She makes $18 every day"); among the lines from which the rule without its closed grammar
   (docs/rewards.md) reads exactly the official answer, how many the grammar refuses, and which words
   stood before the number there. The grammar's words were read off the train lines; the test lines
   measure it.
3. Committed samples: every ``samples.jsonl`` of an arithmetic-task run under results/ is scored again
   (its problems regenerated from the run's ``config.yaml``); the completions whose reward changes
   are counted and the first ones printed. A change is a completion the old rule paid (its last
   number was right) that states more than one number.

    python benchmarks/one_answer.py --gsm8k /path/to/gsm8k/test.jsonl --gsm8k-train /path/to/gsm8k/train.jsonl \\
        --results results --out results/one_answer/one_answer.json
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from fractions import Fraction
from pathlib import Path

from dgrpo.config import read_config_file
from dgrpo.registry import lookup
from dgrpo.rewards.format import parse_completion
from dgrpo.rewards.math import math_reward, numbers_in, parse_oracle
from dgrpo.rewards.numbers import plain
from dgrpo.tasks.arithmetic import ArithmeticTaskConfig


def gsm8k(path: Path) -> dict:
    """(scored 1, scored 1 with N + 1, records) over the official solutions of ``path``."""
    right = off_by_one = n = 0
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        solution, written = rec["answer"].rsplit("####", 1)
        gold, written = parse_oracle(rec["answer"]), written.strip()
        plus = str(Fraction(gold) + 1)
        right += math_reward(f"<think>{solution.strip()}</think>\n<answer>{written}</answer>", gold) == 1.0
        off_by_one += math_reward(f"<think>{solution.strip()}</think>\n<answer>{plus}</answer>", gold) == 1.0
        n += 1
    return {"records": n, "official_answer_scores_1": right, "answer_plus_one_scores_1": off_by_one}


_EXPR = re.compile(r"(?:\$?\(?\s*\d[\d,]*(?:\.\d+)?\s*%?\s*\)?\s*[-+*/x×÷]\s*)+\$?\(?\s*\d[\d,]*(?:\.\d+)?\s*%?\s*\)?\s*=\s*")


def last_line(solution: str) -> str:
    """A GSM8K solution's last line as an answer sentence: calculator notes and ``expression =`` removed."""
    line = [s for s in solution.strip().splitlines() if s.strip()][-1]
    line = re.sub(r"<<[^>]*>>", "", line)
    for _ in range(4):
        line = _EXPR.sub("", line)
    return line.strip()


def gsm8k_lines(path: Path, show: int) -> dict:
    """The grammar's cost on GSM8K's last lines (module docstring, 2)."""
    from dgrpo.rewards import math as rule

    read = refused = plus_one = 0
    examples, before = [], collections.Counter()
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        solution, _ = rec["answer"].rsplit("####", 1)
        gold, text = Fraction(parse_oracle(rec["answer"])), last_line(solution)
        grammar, rule.well_formed = rule.well_formed, lambda *_: True
        try:
            loose = rule.one_number(text)
        finally:
            rule.well_formed = grammar
        if loose != gold:
            continue
        read += 1
        written = plain(text)
        m = rule.LITERAL.search(written)
        before[" ".join(written[:m.start()].rstrip(" $€£#*\"'([{").split()[-1:]).lower()] += 1
        if rule.one_number(text) != gold:
            refused += 1
            if len(examples) < show:
                examples.append(text)
        variant = written[:m.start()] + str(gold + 1) + written[m.end():]
        plus_one += math_reward(f"<think>x</think><answer>{variant}</answer>", str(gold)) == 1.0
    return {"records": len(path.read_text().splitlines()), "read_as_official_answer_without_grammar": read,
            "refused_by_grammar": refused, "with_n_plus_1_scores_1": plus_one, "refused_examples": examples,
            "word_before_number": dict(before.most_common(40))}


def committed(results: Path, show: int) -> dict:
    """Every arithmetic run's samples scored again with today's rule."""
    total = changed = paid_before = paid_now = 0
    examples, runs = [], 0
    for samples in sorted(results.rglob("samples.jsonl")):
        cfg_path = samples.parent / "config.yaml"
        if not cfg_path.is_file():
            continue
        raw = read_config_file(cfg_path)  # (older runs' configs may name fields this dgrpo no longer has)
        if (raw.get("task") or {}).get("kind", "arithmetic") != "arithmetic":
            continue
        task_cfg = ArithmeticTaskConfig.model_validate(raw.get("task") or {}).seeded(raw.get("seed", 0))
        task = lookup("task", "arithmetic").builder(**task_cfg.model_dump(exclude={"kind"}))
        answers = {p.prompt_id: p.answer for p in task.val}
        runs += 1
        for line in samples.read_text().splitlines():
            s = json.loads(line)
            if s.get("prompt_id") not in answers or s.get("reward") is None:
                continue
            now = math_reward(task.completion_prefix + s["completion"], answers[s["prompt_id"]])
            before = float(s["reward"]) >= 1.0
            total += 1
            paid_before += before
            paid_now += now == 1.0
            if before != (now == 1.0):
                changed += 1
                if len(examples) < show:
                    examples.append({"run": str(samples.parent), "answer": answers[s["prompt_id"]],
                                     "completion_end": s["completion"][-120:], "before": before, "now": now})
    return {"runs": runs, "completions": total, "paid_before": paid_before, "paid_now": paid_now,
            "changed": changed, "examples": examples}


def table1_samples(results: Path) -> dict:
    """The honest SmolLM2 samples of the Table 1 sets (``*honest*.jsonl`` with a question of the
    arithmetic task of seed 0 or 1), scored with today's rule: how many right answers it refuses."""
    from dgrpo.tasks.arithmetic import ArithmeticTask

    answers = {p.question: p.answer for seed in (0, 1) for split in ("train", "val")
               for p in getattr(ArithmeticTask(seed=seed, n_train=5000, n_val=200), split)}
    total = right = refused = 0
    examples = []
    for path in sorted(q for q in results.rglob("*honest*.jsonl") if not q.name.startswith("rejected")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("question") not in answers or "text" not in row:
                continue
            completion = "<think>" + row["text"]  # (the prefill the samples continue)
            gold = answers[row["question"]]
            parsed = parse_completion(completion)
            last_number_right = parsed is not None and _last_number(parsed.answer) == Fraction(gold)
            total += 1
            right += last_number_right
            if last_number_right and math_reward(completion, gold) != 1.0:
                refused += 1
                examples.append(parsed.answer[:80])
    return {"completions": total, "last_number_right": right, "refused_now": refused, "examples": examples[:10]}


def _last_number(text: str):
    found = [v for v in numbers_in(text) if v is not None]
    return found[-1] if found else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gsm8k", type=Path, help="GSM8K test.jsonl (official solutions)")
    p.add_argument("--gsm8k-train", type=Path, help="GSM8K train.jsonl (its last lines: the grammar's words)")
    p.add_argument("--results", type=Path, help="folder of committed runs (results/)")
    p.add_argument("--show", type=int, default=20)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    out = {}
    if args.gsm8k:
        out["gsm8k"] = gsm8k(args.gsm8k)
        out["gsm8k_test_last_lines"] = gsm8k_lines(args.gsm8k, args.show)
    if args.gsm8k_train:
        out["gsm8k_train_last_lines"] = gsm8k_lines(args.gsm8k_train, args.show)
    if args.results:
        out["committed_samples"] = committed(args.results, args.show)
        out["table1_honest_samples"] = table1_samples(args.results)
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
