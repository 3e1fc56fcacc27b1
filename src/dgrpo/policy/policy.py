"""A policy as a swarm node holds it: weights, tokenizer and sampling strategy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from dgrpo.policy.chat import decode_completion, encode_prompt
from dgrpo.policy.sampling import SamplingParams, sample

if TYPE_CHECKING:
    from dgrpo.tasks.base import Task
    from dgrpo.types import Problem


@dataclass(eq=False)  # compared (and hashed) by identity: nodes sharing weights share one Policy
class Policy:
    """Weights plus everything needed to prompt and sample them (the learner that trains them is
    :class:`dgrpo.grpo.learner.Learner`).

    Attributes:
        name: model name (hub id, path or ``smollm2-135m-instruct``); nodes with the same name and
            tokenizer exchange token ids directly.
    """

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    sampling: SamplingParams
    _prompt_cache: dict = field(default_factory=dict, repr=False)

    @property
    def tokenizer_id(self) -> str:
        """Identifies the vocabulary: messages carry it so receivers know whether ids are theirs."""
        return f"{type(self.tokenizer).__name__}:{self.tokenizer.name_or_path.rsplit('/', 1)[-1]}:{len(self.tokenizer)}"

    def prompt_ids(self, task: Task, problem: Problem) -> list[int]:
        """Chat-templated prompt ids of a problem, with the task's prefill appended (cached)."""
        key = (task.name, problem.prompt_id)
        if key not in self._prompt_cache:
            ids = encode_prompt(self.tokenizer, task.chat(problem))
            if task.completion_prefix:
                ids += self.tokenizer(task.completion_prefix, add_special_tokens=False)["input_ids"]
            self._prompt_cache[key] = ids
        return self._prompt_cache[key]

    def generate(self, task: Task, problems: list[Problem], seeds: list[int], *, temperatures: list[float] | None = None,
                 max_rows: int | None = None, scores: list[list | None] | None = None,
                 rescore=None) -> list[tuple[list[int], str]]:
        """Sample one completion per (problem, seed) as one stream (:func:`~dgrpo.policy.sampling.sample`).

        Args:
            temperatures: one per request (0 = greedy; None: the policy's sampling temperature).
            max_rows: decode at most this many at once, the others refilling finished rows (None: all).
            scores: per request None, or an empty list that receives each token's (log-probability,
                entropy) under these weights as it is sampled.
            rescore: given completions of these prompts to score too, behind the same prefill
                (:class:`dgrpo.policy.rescore.Rescore`).

        Returns:
            (token ids, text) per request, in order.
        """
        prompts = [self.prompt_ids(task, p) for p in problems]
        outs = sample(self.model, prompts, seeds, self.sampling, self.tokenizer.eos_token_id, self.tokenizer.pad_token_id,
                      temperatures=temperatures, max_rows=max_rows, scores=scores,
                      rescore=rescore)
        return [(ids, decode_completion(self.tokenizer, ids)) for ids in outs]

    def generate_proved(self, task: Task, problems: list[Problem], seeds: list[int], params) -> list[tuple[list[int], str, str]]:
        """As :meth:`generate`, each completion with the TOPLOC proof of the hidden states its sampling
        computed (``params``: :class:`dgrpo.policy.proofs.ProofParams`; :func:`dgrpo.policy.proofs.build_proof`).

        Returns:
            (token ids, text, proof) per request, in order.
        """
        import torch

        from dgrpo.policy.proofs import build_proof

        prompts = [self.prompt_ids(task, p) for p in problems]
        hidden: list[list] = [[] for _ in prompts]
        outs = sample(self.model, prompts, seeds, self.sampling, self.tokenizer.eos_token_id, self.tokenizer.pad_token_id,
                      hidden=hidden)
        return [(ids, decode_completion(self.tokenizer, ids), build_proof(torch.stack(h), params))
                for ids, h in zip(outs, hidden)]
