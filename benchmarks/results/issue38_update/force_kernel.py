"""pytest plugin (-p force_kernel): force grpo.update_kernel to $FORCE_UPDATE_KERNEL for every Learner."""
import os

import pytest


@pytest.fixture(autouse=True)
def _force_update_kernel(monkeypatch):
    from dgrpo.grpo import learner
    from dgrpo.policy import onednn

    forced = os.environ["FORCE_UPDATE_KERNEL"]
    seen = []
    monkeypatch.setattr(learner, "update_kernel", lambda setting, vendor=None: seen.append(setting) or onednn.update_kernel(forced))
    yield
    print(f"[update_kernel forced {forced}: {len(seen)} learners]")
