import pytest
import torch

from dgrpo.errors import DeviceError
from dgrpo.policy.device import exact_float32, parse_device, resolve_device


def _no_cuda(monkeypatch):
    # torch.cuda's answers on a machine with no GPU (CI, the dev box); on a GPU machine too, so these
    # tests hold wherever they run (they asserted no CUDA and failed on a GPU box).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_auto_picks_the_cpu_without_cuda(monkeypatch):
    _no_cuda(monkeypatch)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("auto", rank=3) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:3"])
def test_an_unavailable_gpu_is_a_one_line_error(spec, monkeypatch):
    _no_cuda(monkeypatch)
    with pytest.raises(DeviceError) as err:
        resolve_device(spec)
    msg = str(err.value)
    assert "\n" not in msg and spec in msg and "0 CUDA device(s)" in msg and "model.device=cpu" in msg


@pytest.mark.parametrize("spec", ["gpu", "cpu:0", "auto:1", "cuda:-1", "cuda:x", "", "CUDA"])
def test_malformed_specs_are_refused(spec):
    with pytest.raises(DeviceError, match="use auto, cpu, cuda or cuda:N"):
        parse_device(spec)


def test_ranks_get_their_own_gpu(monkeypatch):
    # The index arithmetic with 2 visible GPUs (torch.cuda's answers replaced: there is no GPU here).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto", rank=1) == torch.device("cuda", 1)
    assert resolve_device("cuda", rank=0) == torch.device("cuda", 0)
    assert resolve_device("auto", rank=3) == torch.device("cuda", 1)  # 4 ranks on 2 GPUs: round-robin
    assert resolve_device("cuda:1", rank=0) == torch.device("cuda", 1)  # explicit index wins
    with pytest.raises(DeviceError, match="needs GPU 2"):
        resolve_device("cuda", rank=2)  # an explicit cuda never shares silently
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_device("auto") == torch.device("cuda", 1)


def test_a_gpu_past_the_visible_count_is_refused(monkeypatch):
    # One visible GPU (what torch reports on a one-GPU machine): cuda:0 is it, cuda:1 is a one-line error.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert resolve_device("auto") == torch.device("cuda", 0)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    with pytest.raises(DeviceError) as err:
        resolve_device("cuda:1")
    assert "\n" not in str(err.value) and "1 CUDA device(s)" in str(err.value)


def test_exact_float32_is_a_noop_on_cpu():
    before = torch.get_float32_matmul_precision()
    exact_float32(torch.device("cpu"))
    assert torch.get_float32_matmul_precision() == before
