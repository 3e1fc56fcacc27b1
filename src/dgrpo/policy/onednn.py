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

**Which kernel the update uses** (``grpo.update_kernel``, :func:`update_kernel`, :func:`kernel_linears`).
The sampler and every forward a defense reads stay on oneDNN whatever the CPU: their 32-row decoding
GEMMs run faster there on both hosts measured (132 against 60 GFLOP/s on the Intel Xeon), and
exact replay compares the verifier's logits with the sampler's. The update alone (the packed groups'
forward and backward, a group's own forward when no defense read it, the shared prefix's run for
them, the reference model's log-probs) takes the kernel that is faster for its 512-row shapes on this
CPU, chosen by a fixed rule, never by a timing taken at start-up (a run's float32 rounding must not
depend on the load when it started): ``auto`` = MKL on ``GenuineIntel`` CPUs, where MKL takes its
AVX-512 path (Intel Xeon @ 2.80 GHz, 2026-12-07: MKL 204-262 GFLOP/s on the update's shapes against
oneDNN's 183-215; ``benchmarks/generation.py``'s update variants ``before`` (MKL) 20.2 s against
``+onednn`` 24.7 s, medians, ``benchmarks/results/anchors_2026-12-07_quiet``), oneDNN elsewhere (AMD
Zen 5: MKL runs its AVX2 path there, oneDNN 2.2x faster; ``+onednn`` 10.2 s against ``before`` 15.3 s).
The vendor is read once, from ``/proc/cpuinfo``.
"""

from __future__ import annotations

import contextlib
import functools
import platform
from pathlib import Path
from typing import Iterator, Literal

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


Kernel = Literal["onednn", "mkl"]
KERNELS = ("auto", "onednn", "mkl")  # the values of grpo.update_kernel


@functools.cache
def cpu_vendor() -> str:
    """This CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, …): the first ``vendor_id`` of
    ``/proc/cpuinfo``, else ``platform.processor()``; "" when neither says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "vendor_id":
                return value.strip()
    except OSError:
        pass
    return platform.processor().strip()


def update_kernel(setting: str, vendor: str | None = None) -> Kernel:
    """The float32 linear kernel of the update for ``grpo.update_kernel = setting`` (module docstring).

    Args:
        setting: ``auto`` (MKL on a ``GenuineIntel`` CPU, oneDNN on any other), ``onednn`` or ``mkl``.
        vendor: the CPU vendor string (None: :func:`cpu_vendor`, this machine's).

    Returns:
        "onednn" or "mkl".

    Raises:
        ValueError: a setting other than the three (one line naming the field and its values).
    """
    if setting not in KERNELS:
        raise ValueError(f"grpo.update_kernel: {setting!r} is not one of auto, onednn, mkl")
    if setting != "auto":
        return setting  # type: ignore[return-value]
    return "mkl" if (cpu_vendor() if vendor is None else vendor) == "GenuineIntel" else "onednn"


@contextlib.contextmanager
def kernel_linears(model: nn.Module, kernel: Kernel) -> Iterator[None]:
    """Every ``nn.Linear`` of ``model`` on ``kernel`` inside the context: ``onednn`` as
    :func:`onednn_linears`; ``mkl``: PyTorch's own float32 linear, also inside an open
    :func:`onednn_linears` (whose routing is lifted for the context and put back after).

    Raises:
        ValueError: another kernel name.
    """
    if kernel == "onednn":
        with onednn_linears(model):
            yield
        return
    if kernel != "mkl":
        raise ValueError(f"kernel_linears: kernel {kernel!r} is not onednn or mkl")
    lifted = [m for m in model.modules() if type(m) is nn.Linear and getattr(m.__dict__.get("forward"), "__func__", None) is _forward]
    for m in lifted:
        del m.forward
    try:
        yield
    finally:
        for m in lifted:
            m.forward = _forward.__get__(m)
