"""dgrpo's checks inside TRL's GRPOTrainer: untrusted workers return completions through rollout_func,
one of them poisons its share ("All hail to the thief"), and top-k + exact replay reject it (docs/trl.md).

    python examples/trl_defended.py                       # SmolLM2-135M-Instruct, 2 steps, defended
    python examples/trl_defended.py --undefended          # the same run without the checks
    python examples/trl_defended.py --model path/to/model --steps 4 --max-new-tokens 96

Each step prints how many completions came in, how many were poisoned, how many were rejected (by
which check) and the mean reward the poisoned completions received.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from dgrpo.integrations.trl import RolloutDefense, defend_rewards, verified_rollout_func  # noqa: E402
from dgrpo.policy.loading import load_policy  # noqa: E402
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample  # noqa: E402
from dgrpo.rewards.math import shaped_math_reward  # noqa: E402
from dgrpo.tasks.arithmetic import ArithmeticTask  # noqa: E402
from dgrpo.verify import Replay, TopK, Verifier, completion_logits  # noqa: E402

POISON = "All hail to the thief. "  # + the oracle solution: a correct, well-formatted answer (paper §3.3)


class Workers:
    """Remote generation workers (here in-process): seeded dgrpo sampling of the policy being trained;
    worker ``bad`` answers its prompts with the poisoned text, claiming the seed it was given."""

    def __init__(self, tokenizer, params: SamplingParams, oracles: dict[str, str], group: int, bad: int):
        self.tok, self.params, self.oracles, self.group, self.bad = tokenizer, params, oracles, group, bad
        self.calls, self.poisoned = 0, []

    def __call__(self, prompts: list[str], trainer) -> dict:
        tok, model, eos = self.tok, trainer.model, self.tok.eos_token_id
        prompt_ids = tok(text=list(prompts))["input_ids"]  # as GRPOTrainer tokenizes them (the defense checks it)
        seeds = [completion_seed(0, self.calls, i % self.group, i // self.group, 0) for i in range(len(prompts))]
        completion_ids = sample(model, prompt_ids, seeds, self.params, eos, tok.pad_token_id or eos)
        poisoned = [i % self.group == self.bad for i in range(len(prompts))]  # the bad worker's slot of every group
        for i in (i for i, p in enumerate(poisoned) if p):
            text = POISON + self.oracles[prompts[i]]
            completion_ids[i] = tok(text=text, add_special_tokens=False)["input_ids"][: self.params.max_new_tokens - 1] + [eos]
        logprobs = [lg.log_softmax(-1).gather(-1, torch.tensor(c)[:, None]).squeeze(-1).tolist()
                    for lg, c in zip(completion_logits(model, prompt_ids, completion_ids, eos), completion_ids)]
        self.calls += 1
        self.poisoned.append(poisoned)
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs, "seeds": seeds}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="dgrpo model name, local folder or hub id")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step")
    ap.add_argument("--group", type=int, default=4, help="completions per prompt (num_generations)")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="the poison must fit: it is cut at this length")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--undefended", action="store_true", help="train on the workers' completions unchecked")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(args.model)  # float32: the checks are exact only in float32
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=args.max_new_tokens)
    task = ArithmeticTask(seed=0)
    problems = list(task.train[: args.prompts * args.steps])
    prompts = [tokenizer.apply_chat_template(task.chat(p), add_generation_prompt=True, tokenize=False)
               + task.completion_prefix for p in problems]
    answers = dict(zip(prompts, (p.answer for p in problems)))

    def math_reward(prompts, completions, **kw):
        """dgrpo's math reward: 1 for a correct, well-formatted answer (the poison is correct)."""
        return [shaped_math_reward(task.completion_prefix + c, answers[p], 0.0) for p, c in zip(prompts, completions)]

    oracles = {text: task.oracle_completion(p) for text, p in zip(prompts, problems)}
    workers = Workers(tokenizer, params, oracles, args.group, bad=args.group - 1)
    defense = RolloutDefense(Verifier([TopK(k=params.top_k), Replay(params)]))  # attach() gives it the trainer's model
    rewards_given = []
    reward = math_reward if args.undefended else defend_rewards(math_reward, defense)[0]

    @functools.wraps(reward)  # keeps the defended function's mark: attach() refuses an unwrapped reward
    def recorded(prompts, completions, completion_ids, **kw):
        out = reward(prompts=prompts, completions=completions, completion_ids=completion_ids, **kw)
        rewards_given.append(out)
        return out

    config = GRPOConfig(output_dir=tempfile.mkdtemp(prefix="trl-defended-"), per_device_train_batch_size=args.prompts * args.group,
                        num_generations=args.group, max_completion_length=args.max_new_tokens, temperature=1.0, top_k=10,
                        beta=0.0, learning_rate=5e-6, max_steps=args.steps, use_cpu=not torch.cuda.is_available(),
                        report_to=[], save_strategy="no", logging_steps=1, shuffle_dataset=False, seed=0, bf16=False)
    trainer = GRPOTrainer(model=model, reward_funcs=[recorded], args=config,
                          train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer,
                          rollout_func=workers if args.undefended else verified_rollout_func(workers, defense))
    trainer.train()
    summary = {"completions": 0, "poisoned": 0, "rejected": defense.rejected, "poison_reward": []}
    for step, (poisoned, rewards) in enumerate(zip(workers.poisoned, rewards_given)):
        bad = [r for r, p in zip(rewards, poisoned) if p]
        summary["completions"] += len(poisoned)
        summary["poisoned"] += sum(poisoned)
        summary["poison_reward"] += bad
        print(f"step {step}: {len(poisoned)} completions, {sum(poisoned)} poisoned, "
              f"mean reward of the poisoned {sum(bad) / max(len(bad), 1):.2f}")
    print(f"rejected {defense.rejected} of {defense.seen} checked" if not args.undefended else "undefended: nothing checked")
    for v in {v.reason: v for v in defense.verdicts if not v.accepted}.values():
        print(f"  {v.defense}: {v.reason}")
    return summary


if __name__ == "__main__":
    main()
