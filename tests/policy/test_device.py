import pytest
import torch

from dgrpo.errors import DeviceError
from dgrpo.policy.device import exact_float32, parse_device, resolve_device


def test_auto_picks_the_cpu_without_cuda():
    assert not torch.cuda.is_available()  # this machine (and CI) has no GPU
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("auto", rank=3) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:3"])
def test_an_unavailable_gpu_is_a_one_line_error(spec):
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


def test_exact_float32_is_a_noop_on_cpu():
    before = torch.get_float32_matmul_precision()
    exact_float32(torch.device("cpu"))
    assert torch.get_float32_matmul_precision() == before
