"""Which device a model runs on (``model.device``), and the float32 settings exact checks need.

``auto`` takes the GPU of this rank when CUDA is available (``cuda:$LOCAL_RANK`` under torchrun,
``cuda:0`` otherwise) and the CPU when it is not; ``cpu``, ``cuda`` and ``cuda:N`` ask for one
explicitly, and an unavailable device is a one-line error, never a silent CPU run.

The top-k and replay defenses re-derive sampling decisions from logits, so on a GPU they need
float32 matmuls that really are float32: TF32 (on by default for cuDNN, and for matmuls under
some settings) rounds inputs to 10 mantissa bits and moves logits by about 1e-3, which is the
size of the replay tolerance (docs/gpu.md).
"""

from __future__ import annotations

import os
import re

import torch

from dgrpo.errors import DeviceError

_SPEC = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


def parse_device(spec: str) -> tuple[str, int | None]:
    """Split ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` into (kind, index).

    Raises:
        DeviceError: anything else (``auto:1``, ``cpu:0``, ``gpu``, ``cuda:-1``).
    """
    m = _SPEC.match(spec.strip()) if isinstance(spec, str) else None
    if m is None or (m.group(2) is not None and m.group(1) != "cuda"):
        raise DeviceError(f"model.device={spec!r}: use auto, cpu, cuda or cuda:N (N a GPU index)")
    return m.group(1), None if m.group(2) is None else int(m.group(2))


def local_rank() -> int | None:
    """``LOCAL_RANK`` of a torchrun worker (None outside torchrun)."""
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value is not None and value.isdigit() else None


def resolve_device(spec: str = "auto", rank: int | None = None) -> torch.device:
    """The torch device for ``spec`` on this process.

    Args:
        spec: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``.
        rank: local rank of this process (default: ``LOCAL_RANK``); ``auto`` and ``cuda`` pick
            GPU ``rank`` so that each torchrun worker on a machine gets its own GPU.

    Raises:
        DeviceError: a CUDA device was asked for and is not there (names the device and the fix).
    """
    kind, index = parse_device(spec)
    if kind == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    if kind == "auto" and not available:
        return torch.device("cpu")
    rank = local_rank() if rank is None else rank
    if index is None:
        index = rank or 0
        if kind == "auto" and index >= count:  # more local ranks than GPUs: share round-robin
            index %= count
    if index >= count:
        raise DeviceError(f"model.device={spec!r} needs GPU {index}, but {count} CUDA device(s) are visible "
                          f"here; use model.device=cpu or auto, or check CUDA_VISIBLE_DEVICES")
    return torch.device("cuda", index)


def exact_float32(device: torch.device) -> None:
    """Turn TF32 off (and ask for full-precision float32 matmuls) where exact checks run.

    A no-op on the CPU, where float32 matmuls are already IEEE float32.
    """
    if device.type != "cuda":
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
