"""Ranks on different schedules (review r31d): the start-up config agreement compares the config each rank runs,
after :func:`dgrpo.swarm.clockconfig.resolved`, so a rank whose config says ``schedule: relative`` (or another
``round_s``) beside ranks on the default (unset: ``clock`` with ``round_s: auto``) is named before round 0 (at the
check-in, :mod:`dgrpo.transports.checkin_claims`) and no rank trains. The same configs' fingerprints, without a
launch: ``test_default_schedule.py``."""

import pytest
from distributed_helpers import launch
from test_distributed import B2, COMMON
from test_store_attacks import one_error_line


@pytest.mark.slow
@pytest.mark.parametrize("override", ["swarm.protocol.schedule=relative", "swarm.protocol.round_s=30"])
def test_a_schedule_override_only_one_rank_got_stops_both_ranks_naming_it(tmp_path, tiny_model_dir, override):
    results = launch(2, ["run", f"model.name={tiny_model_dir}", *COMMON, B2, "rounds=1", f"out_dir={tmp_path}",
                         "name=d", "swarm.nodes=2", "swarm.transport=distributed", "swarm.startup_timeout_s=60"],
                     scenario=f"arg:1:{override}", timeout=120, log_dir=str(tmp_path))
    assert all(r.returncode not in (0, -9) for r in results), [(r.returncode, r.output[-1500:]) for r in results]
    lines = [one_error_line(r.output) for r in results]
    for k, line in enumerate(lines):  # (two ranks: each names the other, with both fingerprints, at the check-in)
        assert f"node {1 - k} runs another config than node {k}" in line, lines
    metrics = tmp_path / "d" / "metrics.jsonl"
    assert not metrics.exists() or '"train/' not in metrics.read_text()
