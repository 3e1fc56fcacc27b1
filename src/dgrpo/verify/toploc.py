"""The receiver's check of a TOPLOC proof (Ong et al. 2025, arXiv 2501.16007; the ``toploc`` library).

The sender's proof (:mod:`dgrpo.policy.proofs`) commits, per chunk of 32 decoding steps, to the top-128
bf16 values of its last-layer hidden states. The receiver re-computes the same hidden states with one
prefill of prompt + completion (:func:`dgrpo.policy.proofs.prefill_hidden`), takes its own top-k
positions, evaluates the sender's polynomial there and compares exponent and mantissa bits
(``toploc.verify_proofs``). A chunk passes under the thresholds of the library's own validator
(``vllm_validate_poly.py`` of PrimeIntellect-ai/toploc: at least 90 of 128 exponents equal, mantissa
difference mean ≤ 10 and median ≤ 8, in bf16 mantissa units), the exponent share scaled when ``topk`` < 128.

What a valid proof shows: some holder of these weights ran a forward pass over this prompt and these
tokens. Not how the tokens were chosen (an adaptive sender prefills what it wants to send), and not
every token: values far from an edited token stay in the top-k, so the thresholds that absorb hardware
noise can absorb a one-token edit under the sample's own proof (measured in docs/verification.md).
"""

from __future__ import annotations

import math

import torch

from dgrpo.policy.proofs import SEP, ProofParams
from dgrpo.policy.toploc_lib import load_toploc


def proof_problem(hidden: torch.Tensor, proof: str, params: ProofParams = ProofParams()) -> tuple[int, str] | None:
    """None when ``proof`` commits to (a bf16 rounding of) ``hidden``, else (first token position of the
    first failing chunk, reason).

    Args:
        hidden: (n, H) the receiver's own hidden states of the completion's decoding steps.
        proof: the sender's proof (:func:`build_proof`).
    """
    if not proof:
        return 0, "no TOPLOC proof"
    n, want = len(hidden), math.ceil(len(hidden) / params.chunk)
    parts = proof.split(SEP)
    if len(parts) != want:
        return 0, f"TOPLOC proof has {len(parts)} chunks, the completion needs {want} (one per {params.chunk} tokens)"
    toploc, k = load_toploc(), params.k(hidden.shape[1])
    try:
        polys = [toploc.ProofPoly.from_base64(p) for p in parts]
    except (ValueError, RuntimeError) as err:
        return 0, f"TOPLOC proof is not base64 proofs ({err})"
    if any(len(p) != k or not 0 < p.modulus <= 65497 for p in polys):
        return 0, f"TOPLOC proof chunks are not {k}-point polynomials"
    results = toploc.verify_proofs(hidden.to(torch.bfloat16).cpu().contiguous(), polys, params.chunk, k,
                                   skip_prefill=True)
    allowed = k - math.ceil(params.exp_match * k)
    for c, r in enumerate(results):
        if (r.exp_mismatches > allowed or r.mant_err_mean > params.mant_mean
                or r.mant_err_median > params.mant_median):
            t = c * params.chunk
            return t, (f"TOPLOC proof does not match the hidden states of tokens {t}..{min(t + params.chunk, n) - 1} "
                       f"(exponent mismatches {r.exp_mismatches}/{k}, allowed {allowed}; mantissa error mean "
                       f"{r.mant_err_mean:.3g} (≤ {params.mant_mean:g}), median {r.mant_err_median:.3g} "
                       f"(≤ {params.mant_median:g}))")
    return None
