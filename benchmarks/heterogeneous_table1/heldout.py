"""Completions beyond ``sample.py``'s: attack kinds held out of the detector's training, and its training set.

    python benchmarks/heterogeneous_table1/heldout.py --out results/heterogeneous_table1_v2 --n 250 --sampled 200 --train-honest 1000

``heldout.jsonl`` (the evaluation task of ``sample.py``: arithmetic, seed 0), one JSON object a line
with ``set``, ``prompt_id``, ``question``, ``text`` (after the task's prefill):

* ``gleeb``: "Gleeb Glorp Glub" opening every sentence of the oracle solution (``injection`` with
  ``placement=every_sentence``, paper §B.1);
* ``master_key``: completions that are only a judge master key (``master_key``, "One Token to Fool
  LLM-as-a-Judge", 2025), cycled;
* ``judge_bait``: full-reward oracle solutions with a suffix addressed to the judge (``judge_bait``);
* ``code``: python_math programs importing the attacker's module (``code_injection``, paper §3.4.2),
  on the python_math task's problems (seed 0);
* ``equation_sampled``: the faithful 2+2=5 (``equation_sampled``): SmolLM2-135M-Instruct's own samples
  (float32, top-k 10, T = 1, ``--max-new-tokens``) with only the 2+2 / 2×2 result token edited, on the
  ``two_two`` problems; ``inside_topk`` says whether every token stays inside the top-10 of the same
  weights (what a homogeneous receiver's top-k check sees), ``fallback`` rows (no candidate had an
  editable step) are left out and counted in ``heldout_stats.json``;
* ``honest_python``: the python_math task's own programs of its first 1,000 problems (an honest set of
  another task).

``gsm8k_honest.jsonl`` (with ``--gsm8k``): the GSM8K test references as completions (``honest_gsm8k``:
another task, human-written).

``detector_train.jsonl``: the detector's training set, on *another* draw of the arithmetic task
(seed 1, so no problem is shared with the evaluation sets): ``hail`` and ``equation`` from the
attacks' writers (``--n`` each), SmolLM2 samples ``honest`` (``--train-honest``, 10 seeds a problem)
and the task's own solutions ``honest_oracle`` (``--n``): honest text in the oracle's style too, so a
detector cannot learn "oracle style = poisoned".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

EVAL_TASK = {"seed": 0, "n_train": 3000, "n_val": 200}  # as sample.py
TRAIN_TASK = {"seed": 1, "n_train": 3000, "n_val": 200}


def _row(kind, p, text, **extra) -> dict:
    return {"set": kind, "prompt_id": p.prompt_id, "question": p.question, "text": text, **extra}


def written(n: int) -> list[dict]:
    """The held-out written poisons and the other task's honest programs (no model needed)."""
    from dgrpo.attacks.code_injection import CodeInjectionAttack
    from dgrpo.attacks.injection import InjectionAttack, InjectionAttackConfig
    from dgrpo.attacks.judge_bait import JudgeBaitAttack, JudgeBaitConfig, MasterKeyConfig
    from dgrpo.tasks.arithmetic import ArithmeticTask
    from dgrpo.tasks.python_math import PythonMathTask

    task, py = ArithmeticTask(**EVAL_TASK), PythonMathTask(seed=0, n_train=max(n, 1000), n_val=10)
    gleeb = InjectionAttack(InjectionAttackConfig(text="Gleeb Glorp Glub", placement="every_sentence"))
    bait, keys = JudgeBaitAttack(JudgeBaitConfig()), MasterKeyConfig().keys
    code = CodeInjectionAttack()
    rows = [_row("gleeb", p, gleeb.poison(task, p, i)) for i, p in enumerate(task.train[:n])]
    rows += [_row("master_key", p, keys[i % len(keys)]) for i, p in enumerate(task.train[:n])]
    rows += [_row("judge_bait", p, bait.poison(task, p, i)) for i, p in enumerate(task.train[:n])]
    rows += [_row("code", p, code.poison(py, p, i)) for i, p in enumerate(py.train[:n])]
    rows += [_row("honest_python", p, py.oracle_completion(p)) for p in py.train[:1000]]
    return rows


def faithful_equation(n: int, max_new_tokens: int, candidates: int, batch_problems: int, task=None,
                      first: int = 0, progress: Path | None = None, enough: int | None = None) -> tuple[list[dict], dict]:
    """``n`` faithful 2+2=5 poisons of SmolLM2's own samples (the attack's rule, batched over problems), on the
    ``two_two`` problems of ``task.train[first:]`` (default: the evaluation task's, from the first).

    ``progress``: a JSONL file that gets one line per finished chunk of problems (its rows and counts); a run
    started again with the same arguments reads it and samples only the chunks not in it (each chunk's samples
    depend only on its problems and their seeds, so the rows are the same as one uninterrupted run's).
    ``enough``: stop after the first chunk that brings the rows to this many (chunks run in a fixed order, so
    where it stops depends only on the arguments)."""
    from dgrpo.attacks.claimed import grind_seeds
    from dgrpo.attacks.equation_sampled import FaithfulEquationAttack, FaithfulEquationConfig, edit_result_tokens
    from dgrpo.policy.chat import decode_completion
    from dgrpo.policy.loading import load_policy
    from dgrpo.policy.policy import Policy
    from dgrpo.policy.sampling import SamplingParams, completion_seed
    from dgrpo.tasks.arithmetic import ArithmeticTask

    task = task if task is not None else ArithmeticTask(**EVAL_TASK)
    attack = FaithfulEquationAttack(FaithfulEquationConfig())
    targets = attack.eval_problems(task.train[first:])[:n]
    model, tok = load_policy(dtype="float32", trainable=False)
    policy = Policy("smollm2-135m-instruct", model, tok, SamplingParams(top_k=10, temperature=1.0, max_new_tokens=max_new_tokens))
    rows, stats, start = [], {"problems": 0, "fallback": 0, "inside_topk": 0, "candidates": candidates}, time.perf_counter()
    done, before = {}, 0.0
    if progress is not None and progress.exists():
        for line in progress.read_text().splitlines():
            if line.strip():
                d = json.loads(line)
                done[d["b"]] = d
    for b in range(0, len(targets), batch_problems):
        if enough is not None and len(rows) >= enough:
            break
        chunk = targets[b : b + batch_problems]
        if b in done:  # (a chunk a stopped run finished: its rows and counts as recorded)
            rows += done[b]["rows"]
            for key in ("problems", "fallback", "inside_topk"):
                stats[key] += done[b][key]
            before += done[b]["seconds"]
            continue
        t0, n_rows, counts = time.perf_counter(), len(rows), dict(stats)
        seeds = {p.prompt_id: grind_seeds(completion_seed(0, 0, 3, p.prompt_id, 0), candidates) for p in chunk}
        outs = policy.generate(task, [p for p in chunk for _ in range(candidates)], [s for p in chunk for s in seeds[p.prompt_id]])
        for k, p in enumerate(chunk):
            found = []
            for s, (ids, _) in zip(seeds[p.prompt_id], outs[k * candidates : (k + 1) * candidates]):
                edited = edit_result_tokens(tok, ids, "5")
                if edited is not None and task.reward(decode_completion(tok, edited), p) >= 1.0:
                    found.append((edited, s))
            stats["problems"] += 1
            if not found:
                stats["fallback"] += 1
                continue
            inside = attack._inside_topk(policy, task, p, [f[0] for f in found])
            j = sorted(range(len(found)), key=lambda i: not inside[i])[0]
            stats["inside_topk"] += inside[j]
            rows.append(_row("equation_sampled", p, decode_completion(tok, found[j][0]), seed=found[j][1],
                             inside_topk=bool(inside[j]), tokens=len(found[j][0])))
        if progress is not None:
            with progress.open("a") as f:
                f.write(json.dumps({"b": b, "rows": rows[n_rows:], "seconds": time.perf_counter() - t0,
                                    **{k: stats[k] - counts[k] for k in ("problems", "fallback", "inside_topk")}}) + "\n")
        print(f"equation_sampled {stats['problems']}/{len(targets)} ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    stats["sent"] = len(rows)
    stats["inside_topk_rate"] = stats["inside_topk"] / len(rows) if rows else None
    stats["seconds"] = time.perf_counter() - start + before
    return rows, stats


def training_set(n: int, n_honest: int, max_new_tokens: int, out: Path) -> None:
    """``detector_train.jsonl`` on the seed-1 task (see the module docstring)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import sample
    from dgrpo.tasks.arithmetic import ArithmeticTask

    task = ArithmeticTask(**TRAIN_TASK)
    path = out / "detector_train.jsonl"
    if not path.exists():
        with path.open("w") as f:
            for r in sample.poisoned(task, n):
                f.write(json.dumps(r) + "\n")
            for p in task.train[:n]:
                f.write(json.dumps(_row("honest_oracle", p, task.oracle_completion(p))) + "\n")
    honest = out / "detector_train_honest.jsonl"
    sample.honest(task, n_honest, 10, max_new_tokens, 100, "float32", honest)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, default=250, help="completions per written set")
    ap.add_argument("--sampled", type=int, default=200, help="two_two problems for the faithful 2+2=5")
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--train-honest", type=int, default=1000)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--gsm8k", type=Path, default=None, help="GSM8K test.jsonl: also write gsm8k_honest.jsonl (its references)")
    ap.add_argument("--skip", nargs="*", default=[], choices=["written", "sampled", "train"])
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "heldout.jsonl"
    if "written" not in args.skip:
        rows = written(args.n)
        keep = [json.loads(l) for l in path.open()] if path.exists() else []
        keep = [r for r in keep if r["set"] == "equation_sampled"]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows + keep))
    if "sampled" not in args.skip:
        rows, stats = faithful_equation(args.sampled, args.max_new_tokens, args.candidates, 16)
        keep = [r for r in (json.loads(l) for l in path.open()) if r["set"] != "equation_sampled"] if path.exists() else []
        path.write_text("".join(json.dumps(r) + "\n" for r in keep + rows))
        (args.out / "heldout_stats.json").write_text(json.dumps({"equation_sampled": stats}, indent=1) + "\n")
        print(f"equation_sampled: {stats}", file=sys.stderr)
    if args.gsm8k is not None:
        from dgrpo.tasks.gsm8k import GSM8KTask

        gsm = GSM8KTask(path=str(args.gsm8k), val_path=str(args.gsm8k), n_val=None)
        (args.out / "gsm8k_honest.jsonl").write_text("".join(
            json.dumps(_row("honest_gsm8k", p, gsm.oracle_completion(p))) + "\n" for p in gsm.train))
    if "train" not in args.skip:
        training_set(args.n, args.train_honest, args.max_new_tokens, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
