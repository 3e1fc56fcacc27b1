"""Fixtures of tests/verify: one trained toy detector for every detector test module (trained once)."""

from __future__ import annotations

import pytest

from detector_toy import accuracy, toy
from dgrpo.verify.detector import build_detector, save_detector
from dgrpo.verify.detector_train import fit


@pytest.fixture(scope="session")
def trained(tiny_model_dir, tmp_path_factory):
    """(detector fitted on 64 toy rows, its saved folder, held-out rows, held-out accuracy before training)."""
    held_out = toy(40, seed=1)
    det = build_detector(tiny_model_dir, lora_rank=4, lora_alpha=8, max_length=96, seed=0)
    before = accuracy(det, held_out)
    metrics = fit(det, toy(64, seed=0), lr=3e-3, epochs=5, batch_size=8, seed=0)
    out = save_detector(det, tmp_path_factory.mktemp("detector"))
    return det, out, held_out, before, metrics

