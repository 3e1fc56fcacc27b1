from pathlib import Path

import pytest
import torch
from torch import nn

from dgrpo.policy import onednn
from dgrpo.policy.onednn import linear, onednn_linears

pytestmark = pytest.mark.skipif(not onednn.available(), reason="this PyTorch has no oneDNN")


@pytest.mark.parametrize("bias", [True, False])
def test_linear_and_its_gradients_match_float64(bias):
    torch.manual_seed(0)
    x = torch.randn(3, 17, 96, requires_grad=True)
    w = torch.randn(40, 96, requires_grad=True)
    b = torch.randn(40, requires_grad=True) if bias else None
    g = torch.randn(3, 17, 40)
    y = linear(x, w, b)
    (y * g).sum().backward()
    xd, wd, gd = x.double().detach(), w.double().detach(), g.double()
    yd = xd @ wd.T + (b.double().detach() if bias else 0)
    assert y.shape == (3, 17, 40) and y.dtype == torch.float32
    assert torch.allclose(y.double(), yd, atol=1e-4)
    assert torch.allclose(x.grad.double(), gd @ wd, atol=1e-4)  # ∂x = ∂y W
    assert torch.allclose(w.grad.double(), gd.reshape(-1, 40).T @ xd.reshape(-1, 96), atol=1e-4)  # ∂W = ∂yᵀ x
    if bias:
        assert torch.allclose(b.grad.double(), gd.sum((0, 1)), atol=1e-4)


def test_other_dtypes_fall_back_to_torch():
    x, w = torch.randn(4, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64)
    assert torch.equal(linear(x, w), nn.functional.linear(x, w))


def test_context_routes_model_linears_and_restores_them(model):
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    model.zero_grad()
    model(input_ids=ids).logits.square().mean().backward()
    ref_logits = model(input_ids=ids).logits.detach()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    calls = []
    real = onednn._gemm
    onednn._gemm = lambda *a: calls.append(1) or real(*a)
    try:
        with onednn_linears(model), onednn_linears(model):  # nesting is harmless
            out = model(input_ids=ids).logits
        out.square().mean().backward()  # backward after the context closed still uses the saved graph
    finally:
        onednn._gemm = real
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    assert len(calls) >= 3 * len(linears)  # forward + both backward GEMMs of every linear
    assert all("forward" not in m.__dict__ for m in linears)
    assert torch.allclose(out.detach(), ref_logits, atol=1e-5)
    for name, p in model.named_parameters():
        assert torch.allclose(p.grad, ref_grads[name], atol=1e-5, rtol=1e-4), name


# grpo.update_kernel: a fixed rule on the CPU vendor string (no timing), and its one-line errors


@pytest.mark.parametrize("setting,vendor,kernel", [
    ("auto", "GenuineIntel", "mkl"), ("auto", "AuthenticAMD", "onednn"), ("auto", "", "onednn"),
    ("auto", "HygonGenuine", "onednn"), ("onednn", "GenuineIntel", "onednn"), ("mkl", "AuthenticAMD", "mkl")])
def test_update_kernel_rule(setting, vendor, kernel):
    assert onednn.update_kernel(setting, vendor) == kernel


def test_update_kernel_reads_this_cpus_vendor():
    vendor = onednn.cpu_vendor()
    assert onednn.update_kernel("auto") == onednn.update_kernel("auto", vendor)
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if "vendor_id" in info:
        assert f"vendor_id\t: {vendor}\n" in info


def test_bad_update_kernel_is_one_line():
    from dgrpo.config import load_config
    from dgrpo.errors import ConfigError

    with pytest.raises(ValueError, match=r"^grpo.update_kernel: 'fast' is not one of auto, onednn, mkl$"):
        onednn.update_kernel("fast")
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["grpo.update_kernel=fast"])
    assert "grpo.update_kernel" in str(err.value) and "\n" not in str(err.value)
    assert load_config(overrides=["grpo.update_kernel=mkl"]).grpo.update_kernel == "mkl"
    with pytest.raises(ValueError, match="kernel 'blas' is not onednn or mkl"):
        with onednn.kernel_linears(nn.Linear(2, 2), "blas"):
            pass


def test_mkl_lifts_an_open_onednn_routing_and_puts_it_back(model):
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    calls = []
    real = onednn._gemm
    onednn._gemm = lambda *a: calls.append(1) or real(*a)
    try:
        with onednn_linears(model):
            with onednn.kernel_linears(model, "mkl"):
                model(input_ids=ids)
            assert not calls  # PyTorch's own linear inside
            model(input_ids=ids)
            assert calls  # oneDNN again after
        with onednn.kernel_linears(model, "onednn"):
            n = len(calls)
            model(input_ids=ids)
            assert len(calls) > n
    finally:
        onednn._gemm = real
    assert all("forward" not in m.__dict__ for m in model.modules() if type(m) is nn.Linear)
