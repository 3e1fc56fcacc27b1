"""``dgrpo resume RUN_DIR [overrides]``: continue a run from its last checkpoint.

The run's ``config.yaml`` is reloaded (overrides on top, e.g. ``rounds=20`` to extend a finished
run), every hosted node gets its weights, optimizer and RNG states back, and the loop continues at
the checkpoint's round, appending to ``metrics.jsonl``. Records of rounds at or after that round (a
crash after the checkpoint) are dropped first, since those rounds run again; so are the final
evaluation of a run being extended. Rounds depend only on (seed, round, weights, optimizer), so a
run of 4 rounds and a run of 2 resumed for 2 more log the same metrics (bar ``time/*``).

A TokenBuncher run (``dgrpo harden``) has no checkpoint: it resumes phase by phase instead
(dgrpo.experiments.harden).

Distributed: launch it like the run (``torchrun … -m dgrpo resume RUN_DIR``); the ranks check they
resume from the same round.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from dgrpo.config import ConfigError, load_config
from dgrpo.metrics.logger import read_records


def _keep_rounds_before(path: Path, next_round: int) -> None:
    """Drop JSON lines whose ``round`` is ≥ ``next_round`` (atomic rewrite)."""
    if not path.exists():
        return
    lines = [line for line, rec in read_records(path, partial_last_ok=True) if rec["round"] < next_round]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(lines))
    os.replace(tmp, path)


def resume(run_dir: str | Path, overrides: list[str] | None = None) -> Path:
    """Continue the run in ``run_dir``; returns the run directory.

    Raises:
        FileNotFoundError: no ``config.yaml`` or no checkpoint in ``run_dir``.
        ConfigError: a federated or ensemble run (they keep no checkpoint), or distributed ranks
            resume from different rounds.
        MetricsFileError: a damaged ``metrics.jsonl`` / ``samples.jsonl`` line before the last.

    Every check on the folder runs before torch is imported or a model is loaded.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{run_dir} holds no run (config.yaml missing)")
    cfg = load_config(run_dir / "config.yaml", overrides or [])
    if cfg.federated is not None or cfg.ensemble is not None:
        kind = "federated" if cfg.federated is not None else "ensemble"
        raise ConfigError(f"{run_dir} is a {kind} run; these keep no checkpoint and cannot be resumed (run it again)")
    if cfg.hardening is not None:
        from dgrpo.experiments.harden import check_resume, run as run_hardening

        check_resume(cfg, run_dir)
        if overrides:
            (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
        return run_hardening(cfg, run_dir, resume=True)
    if not (run_dir / "checkpoint").is_dir():
        raise FileNotFoundError(f"{run_dir} holds no checkpoint; set checkpoint_every to save during a run")
    ckpt = run_dir / "checkpoint"
    if not any(ckpt.glob("node*/state.json")) and not (ckpt / "state.json").exists():  # before loading any model
        raise FileNotFoundError(f"{ckpt} holds no saved node (no node*/state.json): the run stopped before its first save")
    for log_file in ("metrics.jsonl", "samples.jsonl"):  # damaged logs are refused before any model loads
        if (run_dir / log_file).exists():
            read_records(run_dir / log_file, partial_last_ok=True)
    from dgrpo.experiments.checkpoint import load_checkpoint
    from dgrpo.experiments.loop import loop
    from dgrpo.experiments.setup import build_run

    run = build_run(cfg, run_dir)
    run.start_round = load_checkpoint(run)
    transport = run.transport
    if getattr(transport, "is_main", True):
        if run.start_round < cfg.rounds:  # those rounds (and an extended run's final evaluation) run again
            _keep_rounds_before(run_dir / "metrics.jsonl", run.start_round)
            _keep_rounds_before(run_dir / "samples.jsonl", run.start_round)
        if overrides:
            (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    if hasattr(transport, "gather_values"):  # also a barrier: nobody logs before the main rank has truncated
        rounds = transport.gather_values("resume", str(run.start_round), timeout_s=cfg.swarm.startup_timeout_s)
        if len(set(rounds.values())) > 1:
            raise ConfigError(f"nodes resume from different rounds {rounds}: their checkpoints disagree")
    if cfg.swarm.mode == "horizontal":
        from dgrpo.experiments.alg1_horizontal import write_round
    else:
        from dgrpo.experiments.alg2_vertical import write_round
    return loop(cfg, write_round, run_dir, run)
