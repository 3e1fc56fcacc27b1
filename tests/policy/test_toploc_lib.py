"""The toploc library on this torch: its extension rebuilt from the wheel's sources computes what TOPLOC
defines (a hand-worked interpolation mod 65497, Lagrange's coefficients computed in plain Python, the bf16
bits of the top-k committed, its C and Python verifiers agreeing).

(The README's example proofs of toploc 0.1.6 are not reproduced: its ``torch.manual_seed(42)`` activations
differ from torch 2.13's, the published first polynomial evaluated at 2.13's top-4 indices gives other bits.)"""

import base64

import pytest
import torch

from dgrpo.policy.toploc_lib import load_toploc

P = 65497  # TOPLOC's prime modulus (ndd.cpp MOD_N)


@pytest.fixture(scope="module")
def toploc():
    return load_toploc()


def test_interpolation_through_hand_worked_points(toploc):
    # y = x^2 + 1 through (1, 2), (2, 5), (3, 10): coefficients 1, 0, 1 (ascending)
    poly = toploc.ProofPoly.from_points([1, 2, 3], [2, 5, 10])
    assert poly.coeffs == [1, 0, 1] and poly.modulus == P
    assert [poly(x) for x in (1, 2, 3, 4, 300)] == [2, 5, 10, 17, (300 ** 2 + 1) % P]
    # y = 3x + 7 (mod p) through x = 0, 10, 65000: the degree-2 coefficient vanishes, the values wrap mod p
    poly = toploc.ProofPoly.from_points([0, 10, 65000], [7, 37, (3 * 65000 + 7) % P])
    assert poly.coeffs == [7, 3, 0]
    # bytes: modulus then each coefficient, 2 bytes big-endian
    assert poly.to_bytes() == bytes([P >> 8, P & 255, 0, 7, 0, 3, 0, 0])
    assert toploc.ProofPoly.from_base64(poly.to_base64()).coeffs == [7, 3, 0]


def _lagrange_coefficients(xs, ys):
    """Ascending coefficients of the polynomial through (xs, ys) mod P, by Lagrange's formula in plain Python."""
    out = [0] * len(xs)
    for i, (xi, yi) in enumerate(zip(xs, ys)):
        basis, denom = [1], 1  # prod_{j != i} (x - x_j), ascending
        for j, xj in enumerate(xs):
            if j != i:
                basis = [(a - xj * b) % P for a, b in zip([0] + basis, basis + [0])]
                denom = denom * (xi - xj) % P
        scale = yi * pow(denom, P - 2, P) % P
        out = [(o + scale * c) % P for o, c in zip(out, basis)]
    return out


def test_interpolation_agrees_with_lagrange_on_random_points(toploc):
    gen = torch.Generator().manual_seed(3)
    for n in (1, 5, 64):
        xs = torch.randperm(4096, generator=gen)[:n].tolist()
        ys = torch.randint(0, 65536, (n,), generator=gen).tolist()
        poly = toploc.ProofPoly.from_points(xs, ys)
        assert poly.modulus == P  # the x are below 4096: injective mod P
        assert poly.coeffs == _lagrange_coefficients(xs, [y % P for y in ys])


def _horner(coeffs, x):
    out = 0
    for c in reversed(coeffs):
        out = (out * x + c) % P
    return out


def test_a_proof_commits_to_the_bf16_bits_of_the_top_k_and_verifies_its_own_values(toploc):
    gen = torch.Generator().manual_seed(0)
    rows = list(torch.randn(40, 64, generator=gen).to(torch.bfloat16))  # 40 decode steps of hidden size 64
    proofs = toploc.build_proofs(rows, decode_batching_size=32, topk=16, skip_prefill=True)
    assert len(proofs) == 2  # steps 0..31 and 32..39
    for proof, chunk in zip(proofs, (torch.stack(rows[:32]).view(-1), torch.stack(rows[32:]).view(-1))):
        top = chunk.float().abs().topk(16).indices
        bits = chunk[top].view(torch.int16).int() & 0xFFFF  # the committed bf16 bit patterns
        # the polynomial evaluated (in plain Python) at each top-k index mod its modulus gives the bits mod p
        assert [_horner(proof.coeffs, int(i) % proof.modulus) for i in top] == [int(b) % P for b in bits]
        assert len(base64.b64decode(proof.to_base64())) == 2 + 2 * 16
    # the C verifier (a tensor) and the Python one (a list) agree; the values themselves match exactly
    c_side = toploc.verify_proofs(torch.stack(rows), proofs, 32, 16, skip_prefill=True)
    py_side = toploc.verify_proofs(rows, proofs, 32, 16, skip_prefill=True)
    assert [(r.exp_mismatches, r.mant_err_mean, r.mant_err_median) for r in c_side] == [(0, 0, 0)] * 2
    assert [(r.exp_mismatches, r.mant_err_mean, r.mant_err_median) for r in py_side] == [(0, 0, 0)] * 2
    # other activations: the exponents and mantissas the proof gives at their top-k are mostly wrong
    other = torch.randn(40, 64, generator=gen).to(torch.bfloat16)
    bad = toploc.verify_proofs(other, proofs, 32, 16, skip_prefill=True)
    assert all(r.exp_mismatches > 8 for r in bad)


def test_the_torch_port_of_the_verifier_returns_what_the_library_returns(toploc):
    """dgrpo.verify.toploc.chunk_errors (no thread per call) against toploc.verify_proofs on a tensor, on
    matching, noisy and unrelated activations, 70 steps (chunks of 32, 32, 6)."""
    from dgrpo.verify.toploc import chunk_errors

    gen = torch.Generator().manual_seed(1)
    rows = torch.randn(70, 64, generator=gen).to(torch.bfloat16)
    proofs = toploc.build_proofs(list(rows), decode_batching_size=32, topk=48, skip_prefill=True)
    for other in (rows, (rows.float() * 1.01).to(torch.bfloat16), torch.randn(70, 64, generator=gen).to(torch.bfloat16)):
        lib = toploc.verify_proofs(other, proofs, 32, 48, skip_prefill=True)
        flat = [x for r in lib for x in (r.exp_mismatches, r.mant_err_mean, r.mant_err_median)]
        assert [x for r in chunk_errors(other, proofs, 32, 48) for x in r] == pytest.approx(flat)
    assert chunk_errors(rows, proofs, 32, 48) == [(0, 0.0, 0.0)] * 3
