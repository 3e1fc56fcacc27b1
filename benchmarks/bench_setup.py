"""Set-up shared by the SmolLM2 benchmarks on the arithmetic task (defense_cost, exactness, generation,
shared_prefix_exactness): the embedded model behind a :class:`~dgrpo.policy.policy.Policy`, and a round's request
list (each prompt ``group`` times, with the seeds node 0 draws in round 0).

dgrpo is imported on first call, so a benchmark sets its torch threads before anything loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from dgrpo.policy.policy import Policy
    from dgrpo.policy.sampling import SamplingParams
    from dgrpo.tasks.arithmetic import ArithmeticTask


class Bench(NamedTuple):
    """What the benchmarks measure on: the model and tokenizer (``load_policy()``: embedded SmolLM2-135M-Instruct,
    float32), the policy sampling with ``params``, and the arithmetic task of seed 0."""

    model: object
    tokenizer: object
    policy: Policy
    task: ArithmeticTask
    params: SamplingParams


def arithmetic_bench(max_new_tokens: int, top_k: int = 10, temperature: float = 1.0) -> Bench:
    """Load the embedded model and the arithmetic task; sampling top-``top_k`` at ``temperature`` for at most
    ``max_new_tokens`` tokens (the defaults are the run's)."""
    from dgrpo.policy.loading import load_policy
    from dgrpo.policy.policy import Policy
    from dgrpo.policy.sampling import SamplingParams
    from dgrpo.tasks.arithmetic import ArithmeticTask

    model, tokenizer = load_policy()
    params = SamplingParams(top_k, temperature, max_new_tokens)
    return Bench(model, tokenizer, Policy("smollm2", model, tokenizer, params), ArithmeticTask(seed=0), params)


def group_requests(problems: list, group: int) -> tuple[list, list[int]]:
    """Each of ``problems`` ``group`` times in a row, and the seed of each request
    (``completion_seed(0, 0, 0, prompt_id, i)``: seed 0, round 0, node 0, the request's index ``i``)."""
    from dgrpo.policy.sampling import completion_seed

    reqs = [p for p in problems for _ in range(group)]
    return reqs, [completion_seed(0, 0, 0, p.prompt_id, i) for i, p in enumerate(reqs)]


def bench_parser(doc: str | None, prompts: int, group: int, max_new_tokens: int, threads: int):
    """An argument parser with the options every round-shaped benchmark takes: ``--prompts``, ``--group``
    (completions per prompt), ``--max-new-tokens`` and ``--threads`` (torch threads), at these defaults."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=prompts)
    parser.add_argument("--group", type=int, default=group)
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    parser.add_argument("--threads", type=int, default=threads)
    return parser
