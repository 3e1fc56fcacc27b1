"""``dgrpo resume RUN_DIR [overrides]``: what continuing a run from its last checkpoint takes.

The run's ``config.yaml`` is reloaded (overrides on top, e.g. ``rounds=20`` to extend a finished
run), every hosted node gets its weights, optimizer and RNG states back, and the recipe's loop
continues at the checkpoint's round, appending to ``metrics.jsonl``. Records of rounds at or after
that round (a crash after the checkpoint) are dropped first, since those rounds run again; so are
the final evaluation of a run being extended. Rounds depend only on (seed, round, weights,
optimizer), so a run of 4 rounds and a run of 2 resumed for 2 more log the same metrics (bar
``time/*``). :func:`dgrpo.recipes.resume` puts the two steps below together.

A federated run checkpoints its shared parameters, last aggregate and optimizer states
(``checkpoint/state/``, :func:`dgrpo.recipes.federated.resume`); an ensemble run checkpoints every
group swarm and then its own round (:func:`dgrpo.recipes.ensemble.resume`). A TokenBuncher run
(``dgrpo harden``) has no checkpoint: it resumes phase by phase instead (:mod:`dgrpo.recipes.hardening`).

Distributed: launch it like the run (``torchrun … -m dgrpo resume RUN_DIR``); the ranks check they
resume from the same round. Hivemind: a node joining a homogeneous swarm at round r resumes a copy
of a peer's checkpoint of round r (docs/hivemind.md) and checks only that round.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


from dgrpo import config_yaml
from dgrpo.config import RunConfig, load_config, read_config_file
from dgrpo.errors import CheckpointError, ConfigError, MetricsFileError
from dgrpo.metrics.logger import read_records
from dgrpo.swarm.clockconfig import resolved
from dgrpo.training.run_dir import check_paths, check_unclaimed
from dgrpo.training.run_files import PEERS, ROSTERS, SAMPLES, own_peers_file, record_roster
from dgrpo.training.run_identity import check_place, check_root_state, read_state


def keep_rounds_before(path: Path, next_round: int) -> None:
    """Drop JSON lines whose ``round`` is ≥ ``next_round`` (atomic rewrite)."""
    if not path.exists():
        return
    lines = [line for line, rec in read_records(path, partial_last_ok=True) if rec["round"] < next_round]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(lines))
    os.replace(tmp, path)


def keep_logs_before(run_dir: Path, next_round: int) -> None:
    """Drop the records of rounds ≥ ``next_round`` from every round log of ``run_dir`` (metrics, samples,
    peers, the roster history), as a resume from that round must (else they are logged twice)."""
    for name in ("metrics.jsonl", SAMPLES, PEERS, ROSTERS):
        keep_rounds_before(Path(run_dir) / name, next_round)


def write_config(run_dir: Path, cfg: RunConfig) -> None:
    """Rewrite ``run_dir/config.yaml`` (after overrides changed the run): written beside it under this process's id,
    then swapped in, so ranks sharing the folder never leave it half written."""
    tmp = Path(run_dir) / f".config.yaml.{os.getpid()}"
    tmp.write_text(config_yaml.dump(cfg.model_dump(mode="json")))
    os.replace(tmp, Path(run_dir) / "config.yaml")


def resumable_config(run_dir: Path, overrides: list[str] | None = None) -> RunConfig:
    """The config of the run in ``run_dir`` with ``overrides``, once the folder is known to resume.

    Every check on the folder runs here, before torch is imported or a model is loaded. A check that
    fails on a folder another process holds (its lock, :mod:`dgrpo.training.run_dir`) is reported as
    that: the folder is being written by process N (its files may be mid-save).

    Raises:
        FileNotFoundError: no ``config.yaml``, or (all but a harden run) no checkpoint.
        ConfigError: an invalid config, a distributed run whose config.yaml records no ``swarm.protocol.schedule``
            (:data:`dgrpo.swarm.clockconfig.UNRECORDED`: saved before the clocked default; it resumes with
            ``swarm.protocol.schedule=relative``, then recorded), an override of ``name`` or ``out_dir`` (the
            run's folder), or a folder another process is writing (whichever other check failed).
        MetricsFileError: a damaged ``metrics.jsonl`` / ``samples.jsonl`` line before the last.
        CheckpointError: a checkpoint state edited after its save, of another run, or past ``rounds``; a
            ``name`` or ``out_dir`` edited in config.yaml after the save.
    """
    try:
        return _checked_config(run_dir, overrides)
    except (FileNotFoundError, ConfigError, CheckpointError, MetricsFileError):
        check_unclaimed(run_dir)  # (a live run's half-written files: name the writer instead)
        raise


def _checked_config(run_dir: Path, overrides: list[str] | None) -> RunConfig:
    """:func:`resumable_config`'s checks (the same errors, the lock aside)."""
    if not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{run_dir} holds no run (config.yaml missing)")
    raw = read_config_file(run_dir / "config.yaml")
    if raw.get("hardening") is None:  # (a harden run resumes phase by phase: dgrpo.recipes.hardening)
        # the folder first: a checkpoint that is not there is named before any field of the config
        ckpt = run_dir / "checkpoint"
        if not ckpt.is_dir():
            raise FileNotFoundError(f"{run_dir} holds no checkpoint; set checkpoint_every to save during a run")
        if not any(ckpt.glob("node*/state.json")) and not (ckpt / "state.json").exists() \
                and not any(ckpt.glob(".node*.old*/state.json")) and not any(ckpt.glob("*state*/state.json")):  # (an interrupted swap is recovered on load)
            raise FileNotFoundError(f"{ckpt} holds no saved node (no node*/state.json): the run stopped before its first save")
    cfg = load_config(run_dir / "config.yaml", overrides or [])
    if overrides:  # the run's identity: its folder stays where it is, so its name and out_dir stay too
        saved = load_config(run_dir / "config.yaml", [])
        for key, was, now in (("name", saved.name, cfg.name), ("out_dir", saved.out_dir, cfg.out_dir)):
            if now != was:
                raise ConfigError(f"{key}: a resume cannot change it ({was!r} in {run_dir}/config.yaml, "
                                  f"{now!r} given): the run stays in {run_dir}; drop {key}=... (copy the "
                                  "folder to continue it elsewhere)")
    check_paths(cfg)
    if cfg.hardening is not None:
        return cfg
    cfg = resolved(cfg, run_dir)  # (distributed, no schedule recorded: one line, never a silent change of schedule;
    # a clock field kept, the clock: checked against the checkpoint as build_run runs it, task u31g)
    for log_file in ("metrics.jsonl", SAMPLES, PEERS, ROSTERS):  # damaged logs are refused before any model loads
        if (run_dir / log_file).exists():
            read_records(run_dir / log_file, partial_last_ok=True)
    config = cfg.model_dump(mode="json")  # so are edited, foreign and too-long checkpoints (each state's
    root = run_dir / "checkpoint"  # checksum, run, round and the run files it was saved with)
    rounds = {state: read_state(state, cfg.rounds, config, run_dir)["next_round"]
              for state in [*sorted(root.glob("node*/state.json")), *sorted(root.glob("state/state.json"))]}
    if (root / "state.json").exists():
        check_root_state(root, cfg.rounds, config, run_dir, rounds)
    for state in [*rounds, *[root / "state.json"] * (root / "state.json").exists()]:  # (config.yaml's name, out_dir)
        check_place(state, config, run_dir)
    return cfg


def all_rounds_done(run_dir: Path, cfg: RunConfig) -> bool:
    """Whether the run in ``run_dir`` (checked by :func:`resumable_config`) has nothing left to run:
    every checkpoint state holds round ``cfg.rounds`` and ``metrics.jsonl`` ends with that round's
    final evaluation. A harden run (resumed phase by phase) is never reported done here."""
    root = run_dir / "checkpoint"
    states = [*root.glob("node*/state.json"), *root.glob("state/state.json"), *root.glob("state.json")]
    if cfg.hardening is not None or not states or not (run_dir / "metrics.jsonl").is_file():
        return False
    if any(json.loads(p.read_text()).get("next_round") != cfg.rounds for p in states):
        return False
    records = read_records(run_dir / "metrics.jsonl", partial_last_ok=True)
    return bool(records) and records[-1][1]["round"] == cfg.rounds


def restore(run, rewrite_config: bool) -> None:
    """Load the checkpoint into a built run, drop the logged rounds that run again, agree on the round;
    ``rewrite_config``: every process writes the run's config into its own ``config.yaml`` (each rank keeps one).

    Raises:
        ConfigError: distributed processes resume from different rounds, or a joining node's
            checkpoint does not hold its join round.
    """
    from dgrpo.training.checkpoint import load_checkpoint

    run.start_round = load_checkpoint(run)
    first = run.transport.first_round
    if first and run.start_round != first:
        raise ConfigError(f"the checkpoint in {run.run_dir} holds round {run.start_round}, but node "
                          f"{run.transport.local_nodes[0]} joins at round {first}: start it from a peer's "
                          f"checkpoint of round {first}")
    if run.transport.is_main:
        if run.start_round < run.cfg.rounds:  # those rounds (and an extended run's final evaluation) run again
            keep_logs_before(run.run_dir, run.start_round)  # (else a crash's rounds are logged twice)
            record_roster(run.run_dir, run.start_round)
    if rewrite_config:  # (every rank: each keeps its own config.yaml, no shared file system needed; review r31d F4)
        write_config(run.run_dir, run.cfg)
    own = own_peers_file(run)  # (this process's own record of the rounds that run again: dropped, as the main's)
    if own and run.start_round < run.cfg.rounds:
        keep_rounds_before(run.run_dir / own, run.start_round)
    if first:  # a joiner: the swarm is running; it does not wait at the resume barrier
        return
    # also a barrier: nobody logs before the main process has truncated (distributed: each round signed by its rank
    # and echoed, so a rank that shows one reader another round is named by every rank there: review r31q Q2)
    rounds = run.transport.gather_values("resume", str(run.start_round), timeout_s=run.cfg.swarm.startup_timeout_s)
    if len(set(rounds.values())) > 1:
        raise ConfigError(f"nodes resume from different rounds {rounds}: their checkpoints disagree")
