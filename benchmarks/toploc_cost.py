"""Cost of TOPLOC per completion (the ``toploc`` defense): the sender's proof, the receiver's check.

    python benchmarks/toploc_cost.py --threads 1 --out results/attack_matrix_toploc/toploc_cost.json

Samples ``--prompts`` × ``--group`` completions (≤ ``--max-new-tokens`` tokens) of the arithmetic task's
training prompts with SmolLM2-135M-Instruct (or ``--model``), float32, one stream as a swarm node does:

* ``sample``: the plain sampler (:meth:`dgrpo.policy.policy.Policy.generate`), best of ``--repeats``;
* ``sample_proved``: the same with the hidden states recorded and a proof built per completion
  (:meth:`~dgrpo.policy.policy.Policy.generate_proved`); its excess over ``sample`` is the sender's cost;
* ``check``: the receiver's check, one prefill per group of prompt + completions and the proof's
  verification (:meth:`dgrpo.defenses.toploc.TOPLOCDefense.inspect`);
* ``forward``: the scoring forward of the same groups the update pays anyway (``group_logits``), for scale.

Prints one JSON object (ms per completion, proof size in base64 characters, honest rejections).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def _best(fn, repeats: int) -> tuple[float, object]:
    out, best = None, float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from dgrpo.config import load_config
    from dgrpo.defenses import build_defense
    from dgrpo.policy.scoring import group_logits
    from dgrpo.policy.sampling import completion_seed
    from dgrpo.training.build import build_policy, build_task
    from dgrpo.types import Rollout
    from dgrpo.policy.toploc_lib import load_toploc

    load_toploc()  # (a first call may compile the extension: not timed)
    cfg = load_config(None, [f"model.name={args.model}", "model.device=cpu", f"sampling.max_new_tokens={args.max_new_tokens}",
                             "defenses=[{kind: toploc}]"])
    task = build_task(cfg)
    policy, _ = build_policy(cfg.model, cfg, trainable=False)
    defense = build_defense(cfg.defenses[0], cfg, policy, task)
    problems = [p for p in task.train[: args.prompts] for _ in range(args.group)]
    seeds = [completion_seed(0, 1, 0, p.prompt_id, i) for i, p in enumerate(problems)]
    policy.generate(task, problems[:2], seeds[:2])  # warm-up
    t_plain, plain = _best(lambda: policy.generate(task, problems, seeds), args.repeats)
    t_proved, proved = _best(lambda: policy.generate_proved(task, problems, seeds, defense.prover), args.repeats)
    assert [ids for ids, _ in plain] == [ids for ids, _, _ in proved]  # recording changes no token
    rollouts = [Rollout(p.prompt_id, policy.prompt_ids(task, p), ids, text, 0, proof=proof)
                for p, (ids, text, proof) in zip(problems, proved)]
    groups = [rollouts[i:i + args.group] for i in range(0, len(rollouts), args.group)]
    t_check, verdicts = _best(lambda: [v for g in groups for v in defense.inspect(g)], args.repeats)

    def forward():
        with torch.no_grad():
            return [group_logits(policy.model, g[0].prompt_ids, [r.completion_ids for r in g], policy.tokenizer.pad_token_id)
                    for g in groups]

    t_forward, _ = _best(forward, args.repeats)
    n = len(rollouts)
    tokens = sum(len(r.completion_ids) for r in rollouts)
    report = {"model": args.model, "completions": n, "tokens": tokens, "threads": args.threads,
              "ms_per_completion": {"sample": round(t_plain / n * 1e3, 1), "sample_proved": round(t_proved / n * 1e3, 1),
                                    "sender_overhead": round((t_proved - t_plain) / n * 1e3, 1),
                                    "check": round(t_check / n * 1e3, 1), "forward": round(t_forward / n * 1e3, 1)},
              "proof_base64_chars_per_completion": round(sum(len(r.proof) for r in rollouts) / n, 1),
              "honest_rejected": sum(not v.accepted for v in verdicts),
              "command": (f"python benchmarks/toploc_cost.py --model {args.model} --prompts {args.prompts} --group "
                          f"{args.group} --max-new-tokens {args.max_new_tokens} --threads {args.threads} --repeats {args.repeats}")}
    print(json.dumps(report))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
