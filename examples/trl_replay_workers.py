"""TRL's GRPOTrainer on rollouts from workers that sample with ``transformers.generate`` and dgrpo's seeded
logits processor; one worker tampers, and exact replay rejects exactly its rollouts (docs/trl.md).

    python examples/trl_replay_workers.py                         # SmolLM2-135M-Instruct, 2 steps
    python examples/trl_replay_workers.py --tamper token          # swap one token for another top-k one
    python examples/trl_replay_workers.py --model path/to/model --steps 4 --max-new-tokens 48

Each of ``--group`` workers writes one completion of every prompt, with its own ``generate`` call (its own
batch) and the seed the trainer assigned it for that (step, prompt, worker). Worker ``--bad`` tampers:

* ``seed``: samples from another seed and claims the assigned one (best-of-N, seed grinding: every token
  is inside the top-k, so only replay can see it);
* ``token``: samples honestly, then swaps one token for another token of the top-k (a minimal edit);
* ``text``: answers with a fixed sentence, "All hail to the thief." (a payload).

The trainer checks every rollout with ``Replay`` alone, ``action="drop"``: a rejected rollout gets no reward
and none of its tokens enters the loss. Each step prints which rollouts were tampered and which rejected.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from dgrpo.integrations.generate import seeded_generate  # noqa: E402
from dgrpo.integrations.trl import RolloutDefense, defend_rewards, verified_rollout_func  # noqa: E402
from dgrpo.policy.loading import load_policy  # noqa: E402
from dgrpo.policy.sampling import SamplingParams, completion_seed  # noqa: E402
from dgrpo.rewards.math import shaped_math_reward  # noqa: E402
from dgrpo.tasks.arithmetic import ArithmeticTask  # noqa: E402
from dgrpo.verify import Replay, Verifier, completion_logits  # noqa: E402

PAYLOAD = "All hail to the thief."


class Worker:
    """One generation worker: ``generate`` + dgrpo's seeded processor on the prompts it is sent."""

    def __init__(self, tokenizer, params: SamplingParams, tamper: str | None = None):
        self.tok, self.params, self.tamper = tokenizer, params, tamper

    def __call__(self, model, prompt_ids: list[list[int]], seeds: list[int]) -> list[list[int]]:
        eos, pad = self.tok.eos_token_id, self.tok.pad_token_id or self.tok.eos_token_id
        sampled = [s + 1 for s in seeds] if self.tamper == "seed" else seeds
        out = seeded_generate(model, prompt_ids, sampled, self.params, eos, pad)
        if self.tamper == "text":
            return [self.tok(text=PAYLOAD, add_special_tokens=False)["input_ids"] + [eos] for _ in out]
        if self.tamper == "token":
            for ids, logits in zip(out, completion_logits(model, prompt_ids, out, pad)):
                t = len(ids) // 2
                top = logits[t].topk(self.params.top_k).indices.tolist()
                ids[t] = next(i for i in top if i != ids[t])  # another token of the top-k: top-k support passes
        return out


class Rollouts:
    """The trainer side of ``rollout_func``: assigns each (step, prompt, worker) its seed, collects the
    workers' completions, and returns the assigned seeds (never a worker's claim) for replay."""

    def __init__(self, tokenizer, workers: list[Worker], bad: int):
        self.tok, self.workers, self.bad, self.step, self.tampered = tokenizer, workers, bad, 0, []

    def __call__(self, prompts: list[str], trainer) -> dict:
        group = len(self.workers)
        prompt_ids = self.tok(text=list(prompts))["input_ids"]  # as GRPOTrainer tokenizes them (checked by the defense)
        seeds = [completion_seed(0, self.step, i % group, i // group, 0) for i in range(len(prompts))]
        completion_ids: list = [None] * len(prompts)
        for w, worker in enumerate(self.workers):  # GRPOTrainer repeats each prompt `group` times in a row
            rows = [i for i in range(len(prompts)) if i % group == w]
            for i, ids in zip(rows, worker(trainer.model, [prompt_ids[i] for i in rows], [seeds[i] for i in rows])):
                completion_ids[i] = ids
        logprobs = [lg.log_softmax(-1).gather(-1, torch.tensor(c)[:, None]).squeeze(-1).tolist() for lg, c in
                    zip(completion_logits(trainer.model, prompt_ids, completion_ids, self.tok.eos_token_id), completion_ids)]
        self.tampered.append([i for i in range(len(prompts)) if i % group == self.bad])
        self.step += 1
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs, "seeds": seeds}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="dgrpo model name, local folder or hub id")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step")
    ap.add_argument("--group", type=int, default=4, help="workers = completions per prompt (num_generations)")
    ap.add_argument("--bad", type=int, default=3, help="the tampering worker")
    ap.add_argument("--tamper", choices=["seed", "token", "text"], default="seed")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(args.model)  # float32: replay is exact only in float32
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=args.max_new_tokens)
    task = ArithmeticTask(seed=0)
    problems = list(task.train[: args.prompts * args.steps])
    prompts = [tokenizer.apply_chat_template(task.chat(p), add_generation_prompt=True, tokenize=False)
               + task.completion_prefix for p in problems]
    answers = dict(zip(prompts, (p.answer for p in problems)))

    def math_reward(prompts, completions, **kw):
        return [shaped_math_reward(task.completion_prefix + c, answers[p], 0.0) for p, c in zip(prompts, completions)]

    workers = [Worker(tokenizer, params, args.tamper if w == args.bad else None) for w in range(args.group)]
    rollouts = Rollouts(tokenizer, workers, args.bad)
    defense = RolloutDefense(Verifier([Replay(params)]), action="drop")
    rejected: list[list[int]] = []

    def record(defended):
        def recorded(prompts, completions, completion_ids, **kw):
            rejected.append([i for i, v in enumerate(defense.verdicts) if not v.accepted])
            return defended(prompts=prompts, completions=completions, completion_ids=completion_ids, **kw)

        recorded.__name__, recorded._dgrpo_defense = defended.__name__, defense
        return recorded

    config = GRPOConfig(output_dir=tempfile.mkdtemp(prefix="trl-replay-"), per_device_train_batch_size=args.prompts * args.group,
                        num_generations=args.group, max_completion_length=params.max_new_tokens, temperature=params.temperature,
                        top_k=params.top_k, beta=0.0, learning_rate=1e-5, max_steps=args.steps, use_cpu=not torch.cuda.is_available(),
                        report_to=[], save_strategy="no", logging_steps=1, shuffle_dataset=False, seed=0, bf16=False)
    trainer = GRPOTrainer(model=model, reward_funcs=[record(f) for f in defend_rewards(math_reward, defense)], args=config,
                          train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer,
                          rollout_func=verified_rollout_func(rollouts, defense))
    trainer.train()
    for step, (bad, out) in enumerate(zip(rollouts.tampered, rejected)):
        print(f"step {step}: tampered {bad}, rejected {out}")
    print(f"rejected {defense.rejected} of {defense.seen} rollouts; last reasons:")
    for v in {v.reason: v for v in defense.verdicts if not v.accepted}.values():
        print(f"  {v.defense}: {v.reason}")
    return {"tampered": rollouts.tampered, "rejected": rejected, "seen": defense.seen, "steps": trainer.state.global_step}


if __name__ == "__main__":
    main()
