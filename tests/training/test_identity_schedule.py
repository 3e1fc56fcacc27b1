"""A resume refused for another schedule names both schedules as the user writes them (relative is left out
of the run's hash, so the refusal said "'(unset)' now" for a relative resume of a clocked run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dgrpo.config import load_config
from dgrpo.errors import CheckpointError
from dgrpo.training.run_identity import check_identity, identity


def resolved(*overrides: str) -> dict:
    return load_config(None, ["swarm.transport=distributed", "swarm.nodes=2", *overrides]).model_dump(mode="json")


@pytest.mark.parametrize(("saved", "now", "said"), [
    (["swarm.protocol.schedule=clock", "swarm.protocol.round_s=30"],
     ["swarm.protocol.schedule=relative"], "'clock' at the save, 'relative' now"),
    (["swarm.protocol.schedule=relative"],
     ["swarm.protocol.schedule=clock", "swarm.protocol.round_s=30"], "'relative' at the save, 'clock' now"),
])
def test_the_refusal_names_relative_by_its_name(saved, now, said):
    with pytest.raises(CheckpointError) as err:
        check_identity(Path("node0/state.json"), identity(resolved(*saved), 3), resolved(*now), 3)
    assert f"swarm.protocol.schedule: {said}" in str(err.value)


def test_the_same_relative_run_resumes():
    cfg = resolved("swarm.protocol.schedule=relative")
    check_identity(Path("node0/state.json"), identity(cfg, 2), resolved("swarm.protocol.schedule=relative"), 2)
