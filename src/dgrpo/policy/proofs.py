"""TOPLOC proofs a sender builds (Ong et al. 2025, arXiv 2501.16007), through the ``toploc`` library
(:mod:`dgrpo.policy.toploc_lib`); the receiver's check is :mod:`dgrpo.verify.toploc`.

The sender commits to its own last-layer hidden states while it samples: for every chunk of
``chunk`` (32) decoding steps, the ``topk`` (128) largest-magnitude values of the chunk's bf16 hidden
states, their positions interpolated by a polynomial mod 65497 (``toploc.build_proofs``, 2 + 2·topk bytes
per chunk). The hidden state of decoding step t is the input of the output embedding (``lm_head``) that
produced the logits token t was sampled from: the last prompt position for t = 0, the position of token
t−1 after (:func:`dgrpo.policy.stream.decode` records them). A completion of n tokens has n of them,
(n, H); the last token's own hidden state is never computed by the sampler and is not committed to.

Whoever holds the weights proves any token sequence by prefilling it (:func:`prove_by_prefill`): a
proof shows which weights ran on which prompt and tokens, not how the tokens were chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from dgrpo.policy.toploc_lib import load_toploc

CHUNK, TOPK = 32, 128  # the library's and the paper's decode_batching_size and top-k
EXP_MATCH, MANT_MEAN, MANT_MEDIAN = 90 / 128, 10.0, 8.0  # vllm_validate_poly.py: TEXP=90 of 128, TMEAN, TMEDIAN
SEP = ","  # between the base64 proofs of a message's chunks


@dataclass(frozen=True)
class ProofParams:
    """How proofs are built and judged (every node of a swarm uses the same).

    Attributes:
        chunk: decoding steps per proof (the library's ``decode_batching_size``).
        topk: values committed per chunk; capped at the hidden size (every chunk holds ≥ 1 step).
        exp_match: least share of the top-k whose bf16 exponents must be equal.
        mant_mean / mant_median: most mean / median mantissa difference of those (bf16 units, 0..127).
    """

    chunk: int = CHUNK
    topk: int = TOPK
    exp_match: float = EXP_MATCH
    mant_mean: float = MANT_MEAN
    mant_median: float = MANT_MEDIAN

    def k(self, hidden_size: int) -> int:
        return min(self.topk, hidden_size)


def build_proof(hidden: torch.Tensor, params: ProofParams = ProofParams()) -> str:
    """The proof of one completion's decoding steps.

    Args:
        hidden: (n, H) hidden states, one row per decoding step (cast to bf16 as the library commits).

    Returns:
        ``ceil(n / chunk)`` base64 proofs joined by ``,`` ("" for n = 0).

    Raises:
        ValueError: ``hidden`` is not 2-D, or the library returned its null proof (it logs the cause).
    """
    if hidden.dim() != 2:
        raise ValueError(f"build_proof: hidden must be (n, H), got shape {tuple(hidden.shape)}")
    if len(hidden) == 0:
        return ""
    toploc = load_toploc()
    rows = list(hidden.to(torch.bfloat16).cpu())
    proofs = toploc.build_proofs(rows, decode_batching_size=params.chunk, topk=params.k(hidden.shape[1]),
                                 skip_prefill=True)
    if any(p.modulus == 0 for p in proofs):  # build_proofs returns null proofs instead of raising
        raise ValueError("build_proof: toploc could not build a proof of these hidden states")
    return SEP.join(p.to_base64() for p in proofs)


@torch.no_grad()
def prefill_hidden(model, prompt_ids: Sequence[int], completions: Sequence[Sequence[int]], pad_id: int) -> list[torch.Tensor]:
    """The hidden states of every decoding step of each completion, from one prefill of the group.

    Args:
        prompt_ids: the prompt (p tokens) all ``completions`` answer.
        completions: token id lists (n_i ≥ 0 tokens each).
        pad_id: right padding (masked; causal attention keeps it out of every real position).

    Returns:
        Per completion, (n_i, H) bf16 on CPU: positions p−1 … p+n_i−2 of prompt + completion.
    """
    p = len(prompt_ids)
    rows = [list(prompt_ids) + list(c[:-1]) for c in completions]
    width = max(map(len, rows))
    device = next(model.parameters()).device
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    seen: list[torch.Tensor] = []

    def hook(_module, args):  # the output embedding's input is all a proof needs: stop before its logits
        seen.append(args[0].detach().to(torch.bfloat16).cpu())  # (G, width, H)
        raise _HiddenReady

    handle = model.get_output_embeddings().register_forward_pre_hook(hook)
    training = model.training  # sampled without dropout: recomputed without it (as sample() does)
    model.eval()
    try:
        model(input_ids=ids.to(device), attention_mask=mask.to(device))
    except _HiddenReady:
        pass
    finally:
        handle.remove()
        model.train(training)
    if not seen:
        raise RuntimeError("prefill_hidden: the model's forward never called its output embedding")
    return [seen[-1][i, p - 1 : p - 1 + len(c)] for i, c in enumerate(completions)]


class _HiddenReady(Exception):
    """Raised by :func:`prefill_hidden`'s hook once it holds the hidden states: the (G, width, V) float32
    logits (1.6 GB for 56 rows of 150 tokens of SmolLM2's vocabulary, a fifth of its FLOPs) are never computed."""


def prove_by_prefill(model, prompt_ids: Sequence[int], completions: Sequence[Sequence[int]], pad_id: int,
                     params: ProofParams = ProofParams()) -> list[str]:
    """Proofs of any token sequences from one prefill: what a sender holding the weights sends for a
    completion it did not sample (an attacker's poison), and what makes TOPLOC blind to how tokens were chosen.

    Returns:
        One proof per completion; "" for one holding ids outside the model's embeddings (no forward runs it).
    """
    vocab = model.get_input_embeddings().num_embeddings
    runnable = [i for i, c in enumerate(completions) if all(0 <= t < vocab for t in c)]
    out = [""] * len(completions)
    if runnable:
        hidden = prefill_hidden(model, prompt_ids, [completions[i] for i in runnable], pad_id)
        for i, h in zip(runnable, hidden):
            out[i] = build_proof(h, params)
    return out
