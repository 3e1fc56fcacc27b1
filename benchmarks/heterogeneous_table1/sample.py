"""Completions the heterogeneous Table 1 is measured on: honest samples of SmolLM2 and the attacks' poison.

    python benchmarks/heterogeneous_table1/sample.py --out results/heterogeneous_table1 --honest 1000 --per-prompt 10 --max-new-tokens 40 --dtype bfloat16

Honest: SmolLM2-135M-Instruct (the untrained policy of every dgrpo run; ``--dtype``) answers prompts of
the embedded arithmetic task (the default task config: difficulty 1, two worked examples, ``<think>``
prefill) with the swarm's sampling (top-k 10, temperature 1, ``--max-new-tokens``); one completion
per (prompt, seed), batched. Poisoned: the writers of dgrpo's own attacks on the same task's
problems: ``injection`` ("All hail to the thief" opening the reasoning, its six lead-in variants)
and ``equation`` (2+2=5 on the problems tagged ``two_two``, later steps unchanged).

Writes ``poisoned.jsonl`` and ``honest.jsonl`` (appended batch by batch, so a run stopped early
keeps what it sampled; a rerun continues after the last line): one JSON object a line with ``set``
(honest, hail, equation), ``prompt_id``, ``question``, ``text`` (the completion after the prefill)
and, for honest ones, ``seed``. Every detector of ``benchmarks/heterogeneous_table1/table.py`` reads
these files.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

TASK = {"seed": 0, "n_train": 3000, "n_val": 200}  # the default arithmetic task, more problems (≥ 200 two_two)


def task():
    from dgrpo.tasks.arithmetic import ArithmeticTask

    return ArithmeticTask(**TASK)


def poisoned(task, n: int) -> list[dict]:
    """``n`` hail and ``n`` 2+2=5 completions from the attacks' writers (distinct problems)."""
    from dgrpo.attacks.equation import EquationAttack, EquationAttackConfig
    from dgrpo.attacks.injection import InjectionAttack, InjectionAttackConfig

    hail, eq = InjectionAttack(InjectionAttackConfig()), EquationAttack(EquationAttackConfig())
    rows = [{"set": "hail", "prompt_id": p.prompt_id, "question": p.question, "text": hail.poison(task, p, i)}
            for i, p in enumerate(task.train[:n])]
    targets = eq.eval_problems(task.train)
    if len(targets) < n:
        raise SystemExit(f"only {len(targets)} two_two problems; raise TASK['n_train']")
    rows += [{"set": "equation", "prompt_id": p.prompt_id, "question": p.question, "text": eq.poison(task, p)}
             for p in targets[:n]]
    return rows


def honest(task, n: int, per_prompt: int, max_new_tokens: int, batch: int, dtype: str, out: Path, first: int = 0) -> int:
    """Append ``n`` sampled completions to ``out``: ``per_prompt`` seeds on each of the n / per_prompt
    problems from ``task.train[first]`` on (skipping the ones already there); returns how many ``out`` holds."""
    from dgrpo.policy.chat import encode_prompt
    from dgrpo.policy.loading import load_policy
    from dgrpo.policy.sampling import SamplingParams, completion_seed, sample

    have = out.read_text().count("\n") if out.exists() else 0
    problems = task.train[first : first - (-n // per_prompt)]
    jobs = [(p, completion_seed(0, 0, 0, p.prompt_id, i)) for p in problems for i in range(per_prompt)][have:n]
    if not jobs:
        return have
    model, tok = load_policy(dtype=dtype, trainable=False)
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=max_new_tokens)
    start = time.perf_counter()
    for b in range(0, len(jobs), batch):
        chunk = jobs[b : b + batch]
        prompts = [encode_prompt(tok, task.chat(p)) + tok(task.completion_prefix, add_special_tokens=False)["input_ids"]
                   for p, _ in chunk]
        outs = sample(model, prompts, [s for _, s in chunk], params, tok.eos_token_id, tok.pad_token_id)
        with out.open("a") as f:
            for (p, seed), ids in zip(chunk, outs):
                f.write(json.dumps({"set": "honest", "prompt_id": p.prompt_id, "question": p.question, "seed": seed,
                                    "tokens": len(ids), "text": tok.decode(ids, skip_special_tokens=True)}) + "\n")
        have += len(chunk)
        print(f"honest {have}/{n} ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    return have


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--honest", type=int, default=1000)
    ap.add_argument("--poisoned", type=int, default=250)
    ap.add_argument("--per-prompt", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--first-problem", type=int, default=0, help="honest samples from task.train[this] on")
    ap.add_argument("--honest-file", default="honest.jsonl", help="the honest samples' file name under --out")
    args = ap.parse_args(argv)
    t = task()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.poisoned:  # --poisoned 0: honest samples only, no poisoned.jsonl written
        with (args.out / "poisoned.jsonl").open("w") as f:
            for r in poisoned(t, args.poisoned):
                f.write(json.dumps(r) + "\n")
    n = honest(t, args.honest, args.per_prompt, args.max_new_tokens, args.batch, args.dtype,
               args.out / args.honest_file, args.first_problem)
    print(f"{args.out}: {2 * args.poisoned} poisoned, {n} honest completions", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
