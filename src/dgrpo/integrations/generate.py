"""dgrpo's seeded sampler for ``transformers.generate``: completions other nodes can replay.

Hugging Face ``generate`` draws one random stream for a whole batch, so a completion it samples depends
on the batch and no one can replay it (docs/verification.md). :class:`SeededLogitsProcessor` makes
``generate`` take, at every step, the decision :func:`dgrpo.policy.sampling.sample` takes for the same
(prompt, seed): the Gumbel-max choice over the top-k logits with the noise of
:func:`dgrpo.policy.sampling.gumbel_table` (imported, not copied), row t of the completion's own table
at step t. It returns a one-hot score row (0 for the chosen token, −inf elsewhere), so the sampling
warpers ``generate`` applies after it (temperature, top-k, top-p, min-p) and greedy or multinomial
selection all pick that token. The exact replay check (:func:`dgrpo.verify.replay_verdicts`) then
accepts the completion from its seed.

What it needs from ``generate`` (checked where it can be):

* float32 logits of float32 weights (``generate`` hands processors float32 scores; bf16 weights move
  them by up to 1.6, docs/verification.md);
* raw logits: no processor that ``generate`` runs *before* custom ones may change them
  (``repetition_penalty``, ``no_repeat_ngram_size``, ``bad_words_ids``, ``suppress_tokens``,
  ``min_new_tokens``, ``sequence_bias``, …: :func:`dgrpo.verify.generation.generation_problems` names them);
* one row per (prompt, seed), in the batch's row order (``num_return_sequences`` repeats each prompt's
  row in place), no beam search; ``max_new_tokens`` equal to ``params.max_new_tokens`` (a step past it is
  refused; a smaller limit cuts completions before their eos, which replay rejects);
* one processor per ``generate`` call (it counts steps from the call's first input length).

:func:`seeded_generate` does all of this for a list of prompts and returns dgrpo's completion format.
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from dgrpo.policy.sampling import SamplingParams, choose_tokens, gumbel_table


class SeededLogitsProcessor(LogitsProcessor):
    """A ``transformers`` logits processor that samples what :func:`dgrpo.policy.sampling.sample` samples.

    Args:
        seeds: one seed per batch row (after ``num_return_sequences`` expansion), in row order.
        params: the agreed top_k, temperature (0: greedy) and max_new_tokens.

    Call (by ``generate``): ``input_ids`` (B, L0 + t) with the prompt and the t tokens generated so
    far, ``scores`` (B, V) float next-token logits → (B, V) float32: 0 at the chosen token, −inf elsewhere.

    Raises:
        ValueError: the batch has another number of rows than ``seeds``, a step goes past
            ``params.max_new_tokens``, or the processor is reused by a second ``generate`` call.
    """

    def __init__(self, seeds: Sequence[int], params: SamplingParams):
        if not len(seeds):
            raise ValueError("SeededLogitsProcessor: seeds is empty (one seed per batch row)")
        self.seeds, self.params = [int(s) for s in seeds], params
        self._prompt: torch.Tensor | None = None  # (B, L0) the call's first input
        self._noise: torch.Tensor | None = None  # (B, T, k)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = scores.shape[0]
        if rows != len(self.seeds):
            raise ValueError(f"SeededLogitsProcessor: the batch has {rows} rows for {len(self.seeds)} seeds "
                             "(one seed per row; num_return_sequences repeats rows; beam search is not sampling)")
        if self._prompt is None:
            self._prompt = input_ids.clone()
            self._noise = torch.stack([gumbel_table(s, self.params.max_new_tokens, self.params.top_k)
                                       for s in self.seeds]).to(scores.device)
        width = self._prompt.shape[1]
        t = input_ids.shape[1] - width
        if t < 0 or not torch.equal(input_ids[:, :width], self._prompt):
            raise ValueError("SeededLogitsProcessor: reused by a second generate call; make one per call")
        if t >= self.params.max_new_tokens:
            raise ValueError(f"SeededLogitsProcessor: step {t} is past params.max_new_tokens="
                             f"{self.params.max_new_tokens}; generate with max_new_tokens equal to it")
        tokens = choose_tokens(scores.float(), self._noise[:, t], self.params)  # (B,)
        out = torch.full(scores.shape, float("-inf"), dtype=torch.float32, device=scores.device)
        return out.scatter_(1, tokens[:, None], 0.0)


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as ``generate`` takes them: (B, L) ids left-padded with ``pad_id`` and the (B, L) attention mask."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
        mask[row, width - len(p):] = 1
    return ids, mask


@torch.no_grad()
def seeded_generate(model, prompts: Sequence[Sequence[int]], seeds: Sequence[int], params: SamplingParams,
                    eos_id: int, pad_id: int) -> list[list[int]]:
    """``model.generate`` with :class:`SeededLogitsProcessor`: the completions :func:`dgrpo.policy.sampling.sample`
    gives for the same (prompt, seed) pairs, in dgrpo's format.

    The prompts are left-padded into one batch; the generation config has nothing that touches the
    logits before the processor (greedy selection of its one-hot scores, no penalties).

    Args:
        prompts: token ids of each prompt (chat template applied); seeds: one per prompt.
        eos_id: ends a completion (kept as its last token); pad_id: left padding.

    Returns:
        The completion ids of each prompt, cut after the first eos (eos included when generated).

    Raises:
        ValueError: prompts and seeds differ in length, a prompt is empty, or the model is not float32.
    """
    if len(prompts) != len(seeds):
        raise ValueError(f"seeded_generate: {len(prompts)} prompts but {len(seeds)} seeds")
    if not prompts:
        return []
    if any(len(p) == 0 for p in prompts):
        raise ValueError("seeded_generate: empty prompt")
    dtype = next(model.parameters()).dtype
    if dtype != torch.float32:
        raise ValueError(f"seeded_generate: the model is {dtype}; seeded sampling replays only in float32 (model.float())")
    device = next(model.parameters()).device
    ids, mask = left_pad(prompts, pad_id)
    config = GenerationConfig(do_sample=False, max_new_tokens=params.max_new_tokens, eos_token_id=eos_id,
                              pad_token_id=pad_id, temperature=None, top_k=None, top_p=None)
    training = model.training
    model.eval()  # dropout would break replay
    try:
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config,
                             logits_processor=LogitsProcessorList([SeededLogitsProcessor(seeds, params)]))
    finally:
        model.train(training)
    completions = []
    for row in out[:, ids.shape[1]:].tolist():
        completions.append(row[: row.index(eos_id) + 1] if eos_id in row else row)
    return completions
