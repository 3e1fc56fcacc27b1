"""A packaged model's tokenizer, chat template and exact sampling on every task's prompt, on the real weights.

    python benchmarks/packaged_models/check.py --model qwen2.5-coder-0.5b-instruct --out results/packaged_models

For each task (arithmetic, python_math, and gsm8k when ``--gsm8k`` gives a file), ``--prompts`` prompts are
rendered through the model's chat template (:meth:`dgrpo.policy.policy.Policy.prompt_ids`), sampled with the
swarm's sampler (seeded Gumbel top-k 10, T = 1, float32) in one padded batch and one by one, then rescored by
a receiver in one forward pass (:func:`dgrpo.policy.scoring.group_logits`). Checked, as the unit tests check
on tiny models: the same tokens alone and in a batch; no token outside the rescored top-10
(:func:`dgrpo.verify.topk.first_outside_topk`); exact seeded replay (:func:`dgrpo.verify.replay.replay_mismatch`);
every completion ends with eos or at the length limit; and the task's reward of the decoded text.
Writes ``<model>.json`` (figures) and ``<model>_samples.jsonl`` (the completions).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--gsm8k", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    from dgrpo.policy.chat import decode_completion
    from dgrpo.policy.loading import load_policy
    from dgrpo.policy.policy import Policy
    from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
    from dgrpo.policy.scoring import group_logits
    from dgrpo.tasks.arithmetic import ArithmeticTask
    from dgrpo.tasks.python_math import PythonMathTask
    from dgrpo.verify.replay import replay_mismatch
    from dgrpo.verify.topk import first_outside_topk

    start = time.perf_counter()
    model, tok = load_policy(args.model, "float32", trainable=False)
    load_s = time.perf_counter() - start
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=args.max_new_tokens)
    policy = Policy(args.model, model, tok, params)
    eos, pad = tok.eos_token_id, tok.pad_token_id
    tasks = [ArithmeticTask(seed=0, n_train=50, n_val=5), PythonMathTask(seed=0, n_train=50, n_val=5)]
    if args.gsm8k:
        from dgrpo.tasks.gsm8k import GSM8KTask

        tasks.append(GSM8KTask(path=str(args.gsm8k), val_path=str(args.gsm8k), n_val=None, n_train=50))
    out = {"model": args.model, "load_s": round(load_s, 1), "class": type(model).__name__,
           "parameters": sum(p.numel() for p in model.parameters()), "tokenizer": type(tok).__name__, "vocab": len(tok),
           "special": {k: [getattr(tok, k), getattr(tok, f"{k}_id")] for k in ("bos_token", "eos_token", "pad_token")},
           "tasks": {}}
    samples = []
    for task in tasks:
        problems = task.train[: args.prompts]
        prompts = [policy.prompt_ids(task, p) for p in problems]
        seeds = [completion_seed(0, 0, 0, p.prompt_id, 0) for p in problems]
        t0 = time.perf_counter()
        batch = sample(model, prompts, seeds, params, eos, pad)
        batch_s = time.perf_counter() - t0
        alone = [sample(model, [p], [s], params, eos, pad)[0] for p, s in zip(prompts, seeds)]
        outside, replay, ended, rewards = [], [], [], []
        with torch.no_grad():
            for prompt, ids, seed in zip(prompts, batch, seeds):
                logits = group_logits(model, prompt, [ids], pad)
                outside.append(first_outside_topk(logits, [ids], eos, 10)[0])
                replay.append(replay_mismatch(logits[0], ids, seed, params, eos))
                ended.append(ids[-1] == eos)
        for p, ids in zip(problems, batch):
            text = decode_completion(tok, ids)
            rewards.append(task.reward(text, p))
            samples.append({"task": task.name, "prompt_id": p.prompt_id, "tokens": len(ids), "text": text})
        out["tasks"][task.name] = {
            "prompt_tokens": [len(p) for p in prompts],
            "template_head": tok.decode(prompts[0])[:160], "template_tail": tok.decode(prompts[0])[-80:],
            "batch_equals_alone": batch == alone, "first_outside_top10": outside, "replay_mismatch": replay,
            "ended_with_eos": ended, "completion_tokens": [len(b) for b in batch], "rewards": rewards,
            "batch_seconds": round(batch_s, 1)}
        print(json.dumps(out["tasks"][task.name]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.model}.json").write_text(json.dumps(out, indent=1, default=str))
    with (args.out / f"{args.model}_samples.jsonl").open("w") as f:
        f.writelines(json.dumps(s) + "\n" for s in samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
