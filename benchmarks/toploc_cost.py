"""Cost of TOPLOC per completion (the ``toploc`` defense): the sender's proof, the receiver's check.

    python benchmarks/toploc_cost.py --threads 1 --out results/attack_matrix_toploc/toploc_cost.json

Samples ``--prompts`` × ``--group`` completions (≤ ``--max-new-tokens`` tokens) of the arithmetic task's
training prompts with SmolLM2-135M-Instruct (or ``--model``), float32, one stream as a swarm node does:

* ``sample``: the plain sampler (:meth:`dgrpo.policy.policy.Policy.generate`), best of ``--repeats``;
* ``sample_proved``: the same with the hidden states recorded and a proof built per completion
  (:meth:`~dgrpo.policy.policy.Policy.generate_proved`); its excess over ``sample`` is the sender's cost;
* ``check``: the receiver's check, one prefill per group of prompt + completions and the proof's
  verification (:meth:`dgrpo.defenses.toploc.TOPLOCDefense.inspect`);
* ``forward``: the scoring forward of the same groups the update pays anyway (``group_logits``), for scale;
* ``forward_and_shared_check``: that forward keeping its hidden states (``group_logits(hidden=…)``) and the proofs
  checked on them, no prefill of its own (shared proofs); ``shared_check_extra`` is its excess over ``forward``.

Then what the honest proofs let through (``--edits``): each completion with one token changed (to the next id,
at 5 positions spread over it) under its own sample's proof (a lazy 2+2=5 edit), with its second half
replaced by another completion's (a splice), and with the proof of another completion of its prompt.

Prints one JSON object (ms per completion, proof size in base64 characters, honest rejections, passes).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from bench_setup import bench_parser


def _best(fn, repeats: int) -> tuple[float, object]:
    out, best = None, float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def _edits(policy, defense, groups) -> dict:
    """Passes per edit kind (module docstring): ``one_token`` by position share, ``splice``, ``other_proof``."""
    from dataclasses import replace

    vocab, eos = policy.model.get_input_embeddings().num_embeddings, policy.tokenizer.eos_token_id
    out: dict = {"one_token": {}, "splice": [0, 0], "other_proof": [0, 0]}
    for g in groups:
        made = []
        for j, r in enumerate(g):
            n = len(r.completion_ids)
            for where in sorted({1, n // 4, n // 2, 3 * n // 4, n - 2}) if n >= 4 else []:
                ids = list(r.completion_ids)
                ids[where] = next(t for t in (ids[where] + 1, ids[where] + 2) if t % vocab != eos) % vocab
                made.append((f"{round(where / (n - 1), 1):.1f}", replace(r, completion_ids=ids)))
            other = g[(j + 1) % len(g)]
            if n >= 4 and len(other.completion_ids) >= n:
                made.append(("splice", replace(r, completion_ids=r.completion_ids[: n // 2] + other.completion_ids[n // 2 : n])))
            made.append(("other_proof", replace(r, proof=other.proof)))
        for (kind, r), v in zip(made, defense.inspect([r for _, r in made])):
            cell = out[kind] if kind in ("splice", "other_proof") else out["one_token"].setdefault(kind, [0, 0])
            cell[0] += v.accepted
            cell[1] += 1
    return out


def main() -> None:
    parser = bench_parser(__doc__, prompts=8, group=8, max_new_tokens=32, threads=1)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--edits", action="store_true", help="also measure what passes under the honest proofs")
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
    from dgrpo.verify.toploc import proof_problem

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

    def shared():  # shared proofs: the update's scoring forward keeps the hidden states, the proofs are checked on them
        bad = 0
        with torch.no_grad():
            for g in groups:
                hidden: list = []
                group_logits(policy.model, g[0].prompt_ids, [r.completion_ids for r in g], policy.tokenizer.pad_token_id,
                             hidden=hidden)
                bad += sum(proof_problem(h, r.proof, defense.prover) is not None for h, r in zip(hidden, g))
        return bad

    t_shared, shared_rejected = _best(shared, args.repeats)
    passes = _edits(policy, defense, groups) if args.edits else None
    n = len(rollouts)
    tokens = sum(len(r.completion_ids) for r in rollouts)
    report = {"model": args.model, "completions": n, "tokens": tokens, "threads": args.threads,
              "ms_per_completion": {"sample": round(t_plain / n * 1e3, 1), "sample_proved": round(t_proved / n * 1e3, 1),
                                    "sender_overhead": round((t_proved - t_plain) / n * 1e3, 1),
                                    "check": round(t_check / n * 1e3, 1), "forward": round(t_forward / n * 1e3, 1),
                                    "forward_and_shared_check": round(t_shared / n * 1e3, 1),
                                    "shared_check_extra": round((t_shared - t_forward) / n * 1e3, 1)},
              "proof_base64_chars_per_completion": round(sum(len(r.proof) for r in rollouts) / n, 1),
              "honest_rejected": sum(not v.accepted for v in verdicts), "honest_rejected_shared": shared_rejected,
              "passed_under_the_sample_proof": passes,
              "command": (f"python benchmarks/toploc_cost.py --model {args.model} --prompts {args.prompts} --group "
                          f"{args.group} --max-new-tokens {args.max_new_tokens} --threads {args.threads} --repeats {args.repeats}"
                          + (" --edits" if args.edits else ""))}
    print(json.dumps(report))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
