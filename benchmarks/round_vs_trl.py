"""One GRPO round of dgrpo against TRL's GRPOTrainer: same model, same prompts, same batch.

    python benchmarks/round_vs_trl.py --prompts 4 --group 8 --max-new-tokens 64 --steps 3 --pairs 2 --threads 2

Both train SmolLM2-135M-Instruct (float32, CPU) on the same P prompts of the embedded arithmetic
task (chat template, two worked examples, ``<think>`` prefill) with G completions each, top-k 10,
temperature 1, at most T new tokens, beta 0, lr 5e-5, one optimizer step per generation. dgrpo
runs a 1-node swarm (so nothing is exchanged) and updates one group (G completions) at a time;
TRL runs GRPOTrainer with ``per_device_train_batch_size = G``, ``gradient_accumulation_steps =
steps_per_generation = P``: one generation of P·G completions, then P accumulated micro-batches and
one optimizer step — the same work and the same memory shape. Each framework runs in its own
process, so its peak resident memory is measured alone, and the processes alternate A/B/A/B
(``--pairs`` of them) so both see the same machine load; the ratio is of the medians over all
counted rounds. The first step of each process is a warm-up and is not counted. The reward is a coin flip seeded by the
completion text (``coin_reward``) in both frameworks, so every group carries signal: with the real
reward a fresh model scores mostly 0, dgrpo then skips the update of flat groups, and the
comparison would flatter it. Prints a JSON line with seconds per round,
tokens generated, and dgrpo's phase profile; ``--out`` also writes it to a file.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def coin_reward(text: str) -> float:
    """0 or 1 from a stable hash of the completion text."""
    import hashlib

    return float(hashlib.sha256(text.encode()).digest()[0] & 1)


def dgrpo_rounds(args) -> dict:
    from dgrpo.config import load_config
    from dgrpo.recipes.horizontal import one_round
    from dgrpo.training.build import build_run

    cfg = load_config(overrides=[
        "swarm.nodes=1", f"swarm.prompts_per_round={args.prompts}", f"swarm.group_size={args.group}",
        f"sampling.max_new_tokens={args.max_new_tokens}", f"threads={args.threads}", "grpo.lr=5e-5",
        f"out_dir={args.tmp}", f"name=dgrpo-{time.time_ns()}", f"rounds={args.steps}"])
    run = build_run(cfg)
    run.task.reward = lambda completion, problem: coin_reward(completion)
    times, profile, tokens = [], [], []
    for r in range(args.steps):
        t0 = time.perf_counter()
        rec = one_round(run, r)
        times.append(time.perf_counter() - t0)
        profile.append({"generate": rec["time/generate"], "reward": rec["time/reward"],
                        "update": rec["time/update"] - rec["time/reward"]})
        tokens.append(rec["swarm/messages"] * rec["train/completion_tokens"])
    return {"seconds": times, "profile": profile, "tokens": tokens}


def trl_rounds(args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from dgrpo.policy.loading import load_policy
    from dgrpo.tasks.arithmetic import ArithmeticTask

    torch.set_num_threads(args.threads)
    task = ArithmeticTask(seed=0)
    model, tokenizer = load_policy()
    problems = list(task.train[: args.prompts])
    # The same prompt text dgrpo feeds: chat template + examples + "<think>" prefill.
    prompts = [tokenizer.apply_chat_template(task.chat(p), add_generation_prompt=True, tokenize=False)
               + task.completion_prefix for p in problems]
    data = Dataset.from_dict({"prompt": prompts * (args.steps + 1)})

    def reward(prompts, completions, **_):
        return [coin_reward(c) for c in completions]

    class Timer(TrainerCallback):
        def __init__(self):
            self.starts, self.seconds = {}, []

        def on_step_begin(self, a, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            self.seconds.append(time.perf_counter() - self.t0)

    n = args.prompts * args.group
    config = GRPOConfig(
        output_dir=str(Path(args.tmp) / f"trl-{time.time_ns()}"), per_device_train_batch_size=args.group,
        num_generations=args.group, max_completion_length=args.max_new_tokens, temperature=1.0, top_k=10,
        beta=0.0, learning_rate=5e-5, loss_type="grpo", scale_rewards="group", num_iterations=1,
        steps_per_generation=args.prompts, gradient_accumulation_steps=args.prompts, max_steps=args.steps, use_cpu=True,
        gradient_checkpointing=False,  # dgrpo does not checkpoint either: compare like with like
        report_to=[], save_strategy="no", logging_steps=1, shuffle_dataset=False, seed=0)
    timer = Timer()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=data,
                          processing_class=tokenizer, callbacks=[timer])
    trainer.train()
    lengths = [h.get("completions/mean_length") for h in trainer.state.log_history if "completions/mean_length" in h]
    return {"seconds": timer.seconds, "tokens": [round(x * n) for x in lengths]}


def _subprocess(args, name: str) -> dict:
    """Run one framework in a fresh process and parse its RESULT line."""
    argv = [sys.executable, __file__, "--only", name, "--prompts", str(args.prompts), "--group", str(args.group),
            "--max-new-tokens", str(args.max_new_tokens), "--steps", str(args.steps), "--threads", str(args.threads),
            "--tmp", args.tmp]
    proc = subprocess.run(argv, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{name} benchmark failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3, help="rounds per framework; the first is warm-up")
    parser.add_argument("--pairs", type=int, default=2, help="dgrpo/TRL process pairs, run alternately")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tmp", default="/tmp/dgrpo-bench")
    parser.add_argument("--out", help="also write the JSON result here")
    parser.add_argument("--only", choices=["dgrpo", "trl"], help=argparse.SUPPRESS)  # internal: one framework
    args = parser.parse_args()
    if args.only:
        result = dgrpo_rounds(args) if args.only == "dgrpo" else trl_rounds(args)
        result["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print("RESULT " + json.dumps(result))
        return
    runs: dict[str, list[dict]] = {"dgrpo": [], "trl": []}
    for _ in range(args.pairs):  # A/B/A/B: both frameworks see the same machine load
        for name in runs:
            runs[name].append(_subprocess(args, name))

    def counted(name: str, key: str) -> list:
        return [x for r in runs[name] for x in r[key][1:]]

    d_s, t_s = statistics.median(counted("dgrpo", "seconds")), statistics.median(counted("trl", "seconds"))
    d_tok = statistics.median(counted("dgrpo", "tokens"))
    t_tok = statistics.median(counted("trl", "tokens")) if counted("trl", "tokens") else None
    d_prof = counted("dgrpo", "profile")
    result = {
        "batch": {"prompts": args.prompts, "group": args.group, "max_new_tokens": args.max_new_tokens, "threads": args.threads},
        "order": [name for _ in range(args.pairs) for name in runs], "statistic": "median over counted rounds",
        "dgrpo_seconds_per_round": d_s, "trl_seconds_per_step": t_s, "ratio_dgrpo_over_trl": d_s / t_s,
        "ratio_per_pair": [statistics.median(a["seconds"][1:]) / statistics.median(b["seconds"][1:])
                           for a, b in zip(runs["dgrpo"], runs["trl"])],
        "dgrpo_tokens_per_round": d_tok, "trl_tokens_per_step": t_tok,
        "dgrpo_seconds_per_1k_tokens": 1000 * d_s / d_tok if d_tok else None,
        "trl_seconds_per_1k_tokens": 1000 * t_s / t_tok if t_tok else None,
        "dgrpo_peak_rss_gb": max(r["peak_rss_gb"] for r in runs["dgrpo"]),
        "trl_peak_rss_gb": max(r["peak_rss_gb"] for r in runs["trl"]),
        "dgrpo_profile": {k: statistics.median(p[k] for p in d_prof) for k in d_prof[0]},
        "shared_machine": True,
        "raw": runs,
    }
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
