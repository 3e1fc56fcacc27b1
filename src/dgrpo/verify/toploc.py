"""The receiver's check of a TOPLOC proof (Ong et al. 2025, arXiv 2501.16007; the ``toploc`` library).

The sender's proof (:mod:`dgrpo.policy.proofs`) commits, per chunk of 32 decoding steps, to the top-128
bf16 values of its last-layer hidden states. The receiver re-computes the same hidden states with one
scoring forward of its group (``group_logits(hidden=…)``: the ``toploc`` defense's own, or the update's
with ``shared_forward``; :func:`dgrpo.policy.proofs.prefill_hidden` is the same per row), takes its own top-k
positions, evaluates the sender's polynomial there and compares exponent and mantissa bits
(``toploc.verify_proofs``). A chunk passes under the thresholds of the library's own validator
(``vllm_validate_poly.py`` of PrimeIntellect-ai/toploc: at least 90 of 128 exponents equal, mantissa
difference mean ≤ 10 and median ≤ 8, in bf16 mantissa units), the exponent share scaled when ``topk`` < 128.

What a valid proof shows: some holder of these weights ran a forward pass over this prompt and these
tokens. Not how the tokens were chosen (an adaptive sender prefills what it wants to send), and not
every token: values far from an edited token stay in the top-k, so the thresholds that absorb hardware
noise can absorb a one-token edit under the sample's own proof (measured in docs/verification.md).

:func:`chunk_errors` is the library's C verifier (``verify_proofs`` on a tensor, ``poly.cpp``) in torch:
the same top-k, the polynomial evaluated by the library (``evaluate_polynomials``), the same exponent
and mantissa fields and statistics (the median as the upper middle value, as the C code takes it). The
library's own call spawns one thread per core per call and runs ``get_fp_parts`` under OpenMP with every
core: 100 ms a completion on the shared 2-core machine, against 2 ms for its prefill
(``tests/policy/test_toploc_lib.py`` checks the two agree).
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
    if not proof.isascii():  # a lone surrogate (JSON's "\udcff") made the library's binding raise TypeError
        return 0, "TOPLOC proof is not base64 proofs (a character outside ASCII)"
    n, want = len(hidden), math.ceil(len(hidden) / params.chunk)
    parts = proof.split(SEP)
    if len(parts) != want:
        return 0, f"TOPLOC proof has {len(parts)} chunks, the completion needs {want} (one per {params.chunk} tokens)"
    toploc, k = load_toploc(), params.k(hidden.shape[1])
    try:
        polys = [toploc.ProofPoly.from_base64(p) for p in parts]
    except (ValueError, RuntimeError, TypeError) as err:
        return 0, f"TOPLOC proof is not base64 proofs ({err})"
    if any(len(p) != k or not 0 < p.modulus <= 65497 for p in polys):
        return 0, f"TOPLOC proof chunks are not {k}-point polynomials"
    results = chunk_errors(hidden, polys, params.chunk, k)
    allowed = k - math.ceil(params.exp_match * k)
    for c, (exp_mismatches, mant_mean, mant_median) in enumerate(results):
        if exp_mismatches > allowed or mant_mean > params.mant_mean or mant_median > params.mant_median:
            t = c * params.chunk
            return t, (f"TOPLOC proof does not match the hidden states of tokens {t}..{min(t + params.chunk, n) - 1} "
                       f"(exponent mismatches {exp_mismatches}/{k}, allowed {allowed}; mantissa error mean "
                       f"{mant_mean:.3g} (≤ {params.mant_mean:g}), median {mant_median:.3g} "
                       f"(≤ {params.mant_median:g}))")
    return None


def _fields(bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 bit patterns (int64) → (exponent, mantissa) fields, as ``utils.cpp`` extracts them."""
    return (bits & 0x7F80) >> 7, bits & 0x7F


def chunk_errors(hidden: torch.Tensor, polys: list, chunk: int, k: int) -> list[tuple[int, float, float]]:
    """Per proof, (exponent mismatches, mantissa error mean, median) of ``hidden`` against it: what
    ``toploc.verify_proofs(hidden, polys, chunk, k)`` returns (module docstring).

    Args:
        hidden: (n, H) hidden states of the decoding steps (cast to bf16); proof c covers rows
            ``c·chunk … (c+1)·chunk − 1``.
        polys: ``toploc.ProofPoly`` per chunk.

    Returns:
        One (int, float, float) per proof; 2**64 for both statistics when no exponent agrees.
    """
    toploc = load_toploc()
    flat = hidden.to(torch.bfloat16).cpu()
    out = []
    for c, poly in enumerate(polys):
        values = flat[c * chunk : (c + 1) * chunk].reshape(-1)
        idx = values.abs().topk(k).indices  # (k,)
        claimed = torch.tensor(toploc.poly.evaluate_polynomials(poly.coeffs, [i % poly.modulus for i in idx.tolist()]))
        own = values[idx].view(torch.int16).long() & 0xFFFF
        (e1, m1), (e2, m2) = _fields(claimed), _fields(own)
        same = e1 == e2
        errs = (m1 - m2)[same].abs().sort().values.double()
        if len(errs):
            out.append((int((~same).sum()), float(errs.mean()), float(errs[len(errs) // 2])))
        else:
            out.append((int((~same).sum()), 2.0 ** 64, 2.0 ** 64))
    return out
