"""Per-token log-probabilities of given completion ids, one forward pass per group.

All completions of a group share their prompt, so the prompt is run once and its KV cache is
repeated for the G completions: the forward (and backward) cost of the prompt is paid once per
group instead of G times. The logits this returns also serve the defenses that inspect them
(top-k support, replay), so checking costs no extra forward pass.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel


def pad_right(completions: list[list[int]], pad_id: int) -> torch.Tensor:
    """Right-pad completions to a (G, T) long tensor, T = the longest completion."""
    width = max(len(c) for c in completions)
    out = torch.full((len(completions), width), pad_id, dtype=torch.long)
    for row, ids in enumerate(completions):
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


def completion_mask(ids: torch.Tensor, eos_id: int, lengths: list[int] | None = None) -> torch.Tensor:
    """Mask of real completion tokens: everything up to and including the first eos.

    Works when pad == eos: ``x y <eos> <pad> <pad>`` → ``[1, 1, 1, 0, 0]``. A completion cut at
    the length limit has no eos, so when it is padded with eos only ``lengths`` can tell the first
    pad from a real eos: pass them whenever they are known.

    Args:
        ids: (G, T) completion ids.
        lengths: real length of each completion (None: infer from the first eos only).

    Returns:
        (G, T) float mask.
    """
    is_eos = (ids == eos_id).long()
    eos_before = is_eos.cumsum(dim=1) - is_eos  # number of eos strictly before t
    mask = eos_before == 0
    if lengths is not None:
        positions = torch.arange(ids.shape[1], device=ids.device)[None, :]
        mask &= positions < torch.tensor(lengths, device=ids.device)[:, None]
    return mask.float()


def group_logits(model: PreTrainedModel, prompt: list[int], completions: list[list[int]], pad_id: int) -> torch.Tensor:
    """Next-token logits at every completion position of a group.

    ``logits[g, t]`` is the distribution that produced ``completions[g][t]``: for t = 0 it comes
    from the last prompt position (prompt ``A B C``, completion ``D E F`` → D is scored by the
    logits at C), for t > 0 from completion position t − 1.

    Args:
        prompt: the prompt ids shared by the group (length L ≥ 1).
        completions: G completion id lists (each length ≥ 1).

    Returns:
        (G, T, V) float32 logits, T = longest completion; rows past a completion's end are padding.
        Differentiable when grad is enabled.

    Raises:
        ValueError: empty prompt or empty completion.
    """
    if not prompt or not completions or any(len(c) == 0 for c in completions):
        raise ValueError("group_logits needs a non-empty prompt and non-empty completions")
    device = next(model.parameters()).device
    g = len(completions)
    cache = DynamicCache()
    prompt_ids = torch.tensor([prompt], dtype=torch.long, device=device)  # (1, L)
    first = model(input_ids=prompt_ids, cache=cache, use_cache=True).logits[:, -1:, :]  # (1, 1, V)
    cache.batch_repeat_interleave(g)  # (1, …) → (G, …): the prompt is computed once
    comp = pad_right(completions, pad_id).to(device)  # (G, T)
    # Right padding needs no attention mask: causal attention never lets a real token see it.
    rest = model(input_ids=comp[:, :-1], cache=cache, use_cache=True).logits if comp.shape[1] > 1 else None
    first = first.expand(g, 1, first.shape[-1])
    logits = first if rest is None else torch.cat([first, rest], dim=1)  # (G, T, V)
    return logits.float()


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log π(ids[g, t] | prefix) from logits.

    Args:
        logits: (G, T, V); ids: (G, T).

    Returns:
        (G, T) log-probabilities (natural log).
    """
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[..., None]).squeeze(-1)


def score(model: PreTrainedModel, prompt: list[int], completions: list[list[int]], pad_id: int) -> torch.Tensor:
    """Per-token log-probs of given completion ids under ``model`` (no grad).

    Returns:
        (G, T) log-probs; positions past each completion's end hold log-probs of padding.
    """
    with torch.no_grad():
        logits = group_logits(model, prompt, completions, pad_id)
        return token_logprobs(logits, pad_right(completions, pad_id).to(logits.device))
