"""float32 linear layers on oneDNN instead of MKL, for the sampler and the scoring pass.

On this project's CPU (AMD Zen 5, 2 cores) PyTorch's default float32 GEMM (MKL) reaches about
220 GFLOP/s, half of what oneDNN (``torch.ops.mkldnn._linear_pointwise``, shipped with every
x86 PyTorch build) reaches on the same shapes: 330-520 GFLOP/s for the decoding shapes (32 rows)
and the update's shapes (512 rows), forward and backward (``benchmarks/generation.py`` measures
both). The results are float32 with float32 accumulation (no reduced-precision mode): they differ
from MKL's only by summation order, about 1e-6 relative, the same size as the noise between two
batch sizes in MKL.

:func:`onednn_linears` routes every ``nn.Linear`` of a model through oneDNN while the context is
open; gradients flow through :class:`_OneDNNLinear` (backward GEMMs on oneDNN too), so a graph
built inside the context back-propagates correctly after it closes. Tensors that are not float32
on CPU, or a PyTorch without oneDNN, fall back to ``torch.nn.functional.linear``.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn


def available() -> bool:
    """True when this PyTorch has oneDNN's float32 linear op."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        torch.ops.mkldnn._linear_pointwise  # noqa: B018  (resolving the op is the check)
    except (AttributeError, RuntimeError):
        return False
    return True


def _gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T (+ bias) on oneDNN; x: (M, K), weight: (N, K) → (M, N)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    """y = x Wᵀ + b with all three GEMMs (forward, ∂x = ∂y W, ∂W = ∂yᵀ x) on oneDNN."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(x2, weight)
        ctx.has_bias, ctx.shape = bias is not None, x.shape
        return _gemm(x2, weight, bias).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x2, weight = ctx.saved_tensors
        g2 = grad.reshape(-1, grad.shape[-1])
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = _gemm(g2, weight.t()).view(ctx.shape)
        if ctx.needs_input_grad[1]:
            gw = _gemm(g2.t(), x2.t())
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g2.sum(0)
        return gx, gw, gb


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.nn.functional.linear`` on oneDNN for float32 CPU tensors (same shapes, same math).

    Args:
        x: (..., K); weight: (N, K); bias: (N,) or None.

    Returns:
        (..., N).
    """
    if not (x.dtype == weight.dtype == torch.float32 and x.device.type == weight.device.type == "cpu"
            and x.shape[-1] > 0 and x.numel() > 0):
        return nn.functional.linear(x, weight, bias)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)):
        return _OneDNNLinear.apply(x, weight, bias)
    x2 = x.reshape(-1, x.shape[-1])
    return _gemm(x2, weight, bias).view(*x.shape[:-1], weight.shape[0])


def _forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return linear(x, self.weight, self.bias)


@contextlib.contextmanager
def onednn_linears(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """Route every ``nn.Linear`` of ``model`` through :func:`linear` inside the context.

    Nested use is safe (the outer context restores the modules). Does nothing when ``enabled`` is
    False or oneDNN is not available.
    """
    if not enabled or not available():
        yield
        return
    patched = [m for m in model.modules() if type(m) is nn.Linear and "forward" not in m.__dict__]
    for m in patched:
        m.forward = _forward.__get__(m)
    try:
        yield
    finally:
        for m in patched:
            del m.forward
