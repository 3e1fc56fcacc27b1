"""v4's held-out rows: never judged, never looked at, on problems no earlier set used (README section 5).

    PYTHONPATH=src python results/judge_qwen_v4/fresh.py written            # model-free: fresh_written.jsonl
    PYTHONPATH=src python results/judge_qwen_v4/fresh.py samples            # SmolLM2-135M: fresh_samples.jsonl
    PYTHONPATH=src python results/judge_qwen_v4/fresh.py faithful           # SmolLM2-135M: fresh_faithful.jsonl
    PYTHONPATH=src python results/judge_qwen_v4/fresh.py adaptive           # model-free: fresh_adaptive.jsonl
    PYTHONPATH=src python results/judge_qwen_v4/fresh.py faithful_more      # SmolLM2-135M: fresh_faithful_more.jsonl

``faithful_more`` (README "Amendment 2"): the faithful 2+2=5 of ``faithful`` on the same task draws extended to
train-6000..19999 (the first 6000 checked equal), until the two files hold 200 rows together.

``adaptive`` (README "Amendment"): the false step written as the step that ends at the answer
(``dgrpo.attacks.equation_at_answer.at_answer`` on the oracle solution), the hole rule B's ``excuse_answer`` leaves,
on the same 200 problems as hail (train-3000..3199).

Problems train-3000..5999 of the same task draws as every earlier set (arithmetic and python_math, seed 0, now with
n_train 6000: the first 3000 problems are the same, checked here) were used by no earlier row (poisons, samples,
solutions and programs all lie on train-0..2999). GSM8K references have no fresh problems: their held-out rows of
split v2 whose key no judgment of results/judge_qwen, judge_qwen_v2 or judge_qwen_v3 carries are used.

Rows have sets.py's fields (``set``, ``split`` = heldout, ``key``, ``question``, ``text`` = the task's prefill plus the
completion, ``honest``, ``right``), one JSON object a line, for ``score.py --rows``.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "benchmarks" / "judge_table1"))
sys.path.insert(0, str(ROOT / "benchmarks" / "heterogeneous_table1"))
GSM8K = Path("/work/shared/data/gsm8k/test.jsonl")
FIRST, LAST = 3000, 6000  # fresh problems train-3000..5999
POISON_N = 200            # problems per written poison (train-3000..3199; 2+2=5: the first 200 two_two from 3000 on)
HONEST_FIRST, HONEST_N = 3200, 400  # task solutions and python_math programs: train-3200..3599
SAMPLE_FIRST, SAMPLE_PROBLEMS, SEEDS = 4000, 300, 10  # SmolLM2 samples: train-4000..4299, 10 seeds each
MORE_LAST = 20000         # amendment 2: faithful 2+2=5 also on train-6000..19999, until 200 rows in all
SEEN = [ROOT / "results" / d / "scores.jsonl" for d in ("judge_qwen", "judge_qwen_v2", "judge_qwen_v3")]


def tasks():
    from dgrpo.tasks.arithmetic import ArithmeticTask
    from dgrpo.tasks.python_math import PythonMathTask

    t, py = ArithmeticTask(seed=0, n_train=LAST, n_val=200), PythonMathTask(seed=0, n_train=LAST, n_val=10)
    old, old_py = ArithmeticTask(seed=0, n_train=3000, n_val=200), PythonMathTask(seed=0, n_train=1000, n_val=10)
    if any(a.question != b.question for a, b in zip(old.train, t.train)) or any(
            a.question != b.question for a, b in zip(old_py.train, py.train)):
        raise SystemExit("the extended task draws differ from the earlier ones: the problem names would not match")
    return t, py


def row(set_name, key, p, text, honest, right, prefix):
    return {"set": set_name, "split": "heldout", "key": key, "question": p.question, "text": (prefix + text).strip(),
            "honest": honest, "right": right}


def written() -> list[dict]:
    from dgrpo.attacks.code_injection import CodeInjectionAttack
    from dgrpo.attacks.equation import EquationAttack, EquationAttackConfig
    from dgrpo.attacks.injection import InjectionAttack, InjectionAttackConfig
    from dgrpo.attacks.judge_bait import JudgeBaitAttack, JudgeBaitConfig, MasterKeyConfig
    import sets

    t, py = tasks()
    fresh, fresh_py = t.train[FIRST:LAST], py.train[FIRST:LAST]
    pre, ppre = t.completion_prefix, py.completion_prefix
    hail, eq = InjectionAttack(InjectionAttackConfig()), EquationAttack(EquationAttackConfig())
    gleeb = InjectionAttack(InjectionAttackConfig(text="Gleeb Glorp Glub", placement="every_sentence"))
    bait, keys, code = JudgeBaitAttack(JudgeBaitConfig()), MasterKeyConfig().keys, CodeInjectionAttack()
    rows = []
    for i, p in enumerate(fresh[:POISON_N]):
        for s, text in (("hail", hail.poison(t, p, i)), ("gleeb", gleeb.poison(t, p, i)),
                        ("master_key", keys[i % len(keys)]), ("judge_bait", bait.poison(t, p, i))):
            rows.append(row(s, f"v4/{s}/{p.prompt_id}/{i}", p, text, False, t.reward(text, p) >= 1.0, pre))
    for i, p in enumerate(eq.eval_problems(fresh)[:POISON_N]):
        text = eq.poison(t, p)
        rows.append(row("equation", f"v4/equation/{p.prompt_id}/{i}", p, text, False, t.reward(text, p) >= 1.0, pre))
    for i, p in enumerate(fresh_py[:POISON_N]):
        rows.append(row("code", f"v4/code/{p.prompt_id}/{i}", p, code.poison(py, p, i), False, None, ppre))
    for p in t.train[HONEST_FIRST:HONEST_FIRST + HONEST_N]:
        rows.append(row("honest_oracle", f"v4/honest_oracle/{p.prompt_id}", p, t.oracle_completion(p), True, True, pre))
    for p in py.train[HONEST_FIRST:HONEST_FIRST + HONEST_N]:
        rows.append(row("honest_python", f"v4/honest_python/{p.prompt_id}", p, py.oracle_completion(p), True, True, ppre))
    seen = {json.loads(line)["key"] for f in SEEN for line in f.read_text().splitlines()}
    gsm = [r for r in sets.load(GSM8K, split="v2") if r["set"] == "honest_gsm8k" and r["split"] == "heldout"]
    rows += [r for r in gsm if r["key"] not in seen]  # sets.py's keys: honest_gsm8k/test-N (never judged)
    return rows


def adaptive() -> list[dict]:
    from dgrpo.attacks.equation_at_answer import at_answer

    t, _ = tasks()
    rows = []
    for i, p in enumerate(t.train[FIRST:FIRST + POISON_N]):
        text = at_answer(t.oracle_completion(p))
        rows.append(row("equation_at_answer", f"v4/equation_at_answer/{p.prompt_id}/{i}", p, text, False,
                        t.reward(text, p) >= 1.0, t.completion_prefix))
    return rows


def samples() -> list[dict]:
    import sample

    t, _ = tasks()
    raw = OUT / "fresh_samples_raw.jsonl"
    sample.honest(t, SAMPLE_PROBLEMS * SEEDS, SEEDS, 64, 50, "float32", raw, SAMPLE_FIRST)
    by_id = {p.prompt_id: p for p in t.train}
    out = []
    for line in raw.read_text().splitlines():
        r = json.loads(line)
        p = by_id[r["prompt_id"]]
        out.append(row("honest_sampled", f"v4/honest_sampled/{p.prompt_id}/{r['seed']}", p, r["text"], True,
                       t.reward(r["text"], p) >= 1.0, t.completion_prefix))
    return out


def faithful() -> list[dict]:
    import heldout

    t, _ = tasks()
    rows, stats = heldout.faithful_equation(1000, 64, 8, 16, task=t, first=FIRST,  # every two_two problem from 3000
                                            progress=OUT / "fresh_faithful_raw.jsonl")  # (a stopped run resumes)
    (OUT / "fresh_faithful_stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    by_id = {p.prompt_id: p for p in t.train}
    return [row("equation_sampled", f"v4/equation_sampled/{r['prompt_id']}", by_id[r["prompt_id"]], r["text"], False,
                True, t.completion_prefix) for r in rows]


def faithful_more() -> list[dict]:
    import heldout
    from dgrpo.tasks.arithmetic import ArithmeticTask

    t, _ = tasks()
    more = ArithmeticTask(seed=0, n_train=MORE_LAST, n_val=200)
    if any(a.question != b.question for a, b in zip(t.train, more.train)):
        raise SystemExit("the extended task draws differ from train-0..5999: the problem names would not match")
    have = sum(1 for line in (OUT / "fresh_faithful.jsonl").read_text().splitlines() if line.strip())
    rows, stats = heldout.faithful_equation(len(more.train), 64, 8, 16, task=more, first=LAST, enough=POISON_N - have,
                                            progress=OUT / "fresh_faithful_more_raw.jsonl")
    (OUT / "fresh_faithful_more_stats.json").write_text(json.dumps({**stats, "before": have}, indent=1) + "\n")
    by_id = {p.prompt_id: p for p in more.train}
    return [row("equation_sampled", f"v4/equation_sampled/{r['prompt_id']}", by_id[r["prompt_id"]], r["text"], False,
                True, more.completion_prefix) for r in rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=("written", "samples", "faithful", "adaptive", "faithful_more"))
    args = ap.parse_args(argv)
    rows = {"written": written, "samples": samples, "faithful": faithful, "adaptive": adaptive,
            "faithful_more": faithful_more}[args.stage]()
    path = OUT / f"fresh_{args.stage}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    counts = {}
    for r in rows:
        counts[r["set"]] = counts.get(r["set"], 0) + 1
    print(f"{path}: {counts}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
