"""A start-up stop leaves no run folder this process made holding nothing but its config (review r31n G5, left open
by task h31r; training/run_dir.py ``drop_unused``): a rank that met node 0's refusal of its proposed run name agreed
on node 1's name and made that folder before every rank stopped in round 0's relays, and the folder stayed behind.
Never a folder that holds anything else (a resumed run's checkpoints) or that this process did not make."""

from types import SimpleNamespace

import pytest

from dgrpo.config import load_config
from dgrpo.errors import PeerFailure, StartupStop
from dgrpo.training.build import build_run_dir
from dgrpo.training.loop import train
from dgrpo.training.run_dir import drop_unused


def _cfg(tmp_path):
    return load_config(overrides=[f"out_dir={tmp_path}", "rounds=2", "eval.first=false"])


def test_a_folder_this_process_made_holding_its_config_alone_is_removed(tmp_path):
    run_dir = build_run_dir(_cfg(tmp_path), "d", owner=False)
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml"]
    assert drop_unused(run_dir) and not run_dir.exists() and tmp_path.exists()


def test_the_main_s_own_lock_file_goes_with_it(tmp_path):
    run_dir = build_run_dir(_cfg(tmp_path), "d", owner=True)  # (claimed: its .lock)
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock", "config.yaml"]
    assert drop_unused(run_dir) and not run_dir.exists()


def test_a_folder_holding_anything_else_is_kept_whole(tmp_path):
    run_dir = build_run_dir(_cfg(tmp_path), "d", owner=False)
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "round_2.pt").write_bytes(b"weights")
    assert not drop_unused(run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "config.yaml"]
    assert (run_dir / "checkpoints" / "round_2.pt").read_bytes() == b"weights"


def test_a_folder_this_process_did_not_make_is_kept(tmp_path):
    (tmp_path / "d").mkdir()  # (another process's, or a resumed run's: it was there first)
    run_dir = build_run_dir(_cfg(tmp_path), "d", owner=False)
    assert not drop_unused(run_dir) and sorted(p.name for p in run_dir.iterdir()) == ["config.yaml"]


def test_a_file_in_the_way_of_the_run_folder_is_still_one_line(tmp_path):
    from dgrpo.errors import ConfigError

    (tmp_path / "d").write_text("not a folder")
    with pytest.raises(ConfigError, match="cannot create the run folder"):
        build_run_dir(_cfg(tmp_path), "d", owner=False)


@pytest.mark.parametrize("error, gone", [(StartupStop, True), (PeerFailure, False)])
def test_a_stop_in_the_first_round_s_relays_removes_the_folder_only_for_a_start_up_stop(tmp_path, error, gone):
    """The training loop: a :class:`StartupStop` (every rank stopped in round 0's relays, ``startstops.decide``)
    removes the folder; any other peer failure keeps it (its peers may go on in it)."""
    cfg = _cfg(tmp_path)
    run_dir = build_run_dir(cfg, "d", owner=False)
    run = SimpleNamespace(cfg=cfg, start_round=0, run_dir=run_dir,
                          transport=SimpleNamespace(is_main=False, local_nodes=[1], starts_at=lambda first: None))

    def one_round(run, r):
        raise error("node 1 stopped at start-up (...); node 2 stops too in exchange 'eq0', its first round's relays")

    with pytest.raises(error):
        train(run, one_round)
    assert run_dir.exists() is not gone
