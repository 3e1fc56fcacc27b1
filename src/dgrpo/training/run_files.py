"""The files of a run folder a checkpoint is bound to beside its own: what a resume reads back.

A checkpoint of round r records (in its sealed state, :mod:`dgrpo.training.run_identity`):

* ``metrics.jsonl``: the SHA-256 of its records of rounds before r (the rounds a resume keeps; later
  ones, from a crash after the save, are dropped and run again);
* ``samples.jsonl`` (the evaluations' completions) and ``peers.jsonl`` (the per-sender record of
  every round): the same, a missing file counting as one without records (so deleting a file that
  held records before r, or truncating or editing one, is refused; rounds at or after r are dropped
  at the resume and run again, :func:`dgrpo.training.resume.restore`);
* ``rosters.jsonl``, the roster history: one record per start, ``{"round": r, "roster": …}``, the
  round the start ran from and what it wrote to ``roster.json`` (keys, fingerprint, signing
  context), bound like ``peers.jsonl``. ``roster.json`` itself is not bound: every start writes it
  again when it builds the swarm (from a deployment roster, ``swarm.protocol.roster``, the same
  bytes; from keys the process makes, new keys), so it is the record of the latest start, and a start
  that crashed before its first save would otherwise make every later resume fail. A resume from
  round r keeps the records of starts before r (checked) and drops the later ones (starts whose
  rounds run again), then adds its own (:func:`record_roster`).
* ``bans.json``: the bans as they were (the file itself, :class:`dgrpo.swarm.protocol.BanList`);
* ``eval_reference/``: the SHA-256 of every drift reference that existed (the first evaluation's
  completions, ``dgrpo.training.evaluate``);
* the base model: the SHA-256 over the files of every local model folder the config names (the
  default and packaged models' cached copies, a path); a hub id is not hashed (its cache is the hub's).

The metrics and the bans are recorded by the process that writes them (the main one). At a resume
(:func:`check_run_files`) each must be as recorded, or the resume is refused in one line naming the
file; the exception is a ``bans.json`` written at round r or later (a crash after the save), which
is put back as it was at the save, since those rounds run again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from dgrpo.errors import CheckpointError
from dgrpo.training.durable import sha256

METRICS, BANS, REFERENCE = "metrics.jsonl", "bans.json", "eval_reference"
SAMPLES, PEERS, ROSTERS = "samples.jsonl", "peers.jsonl", "rosters.jsonl"
LOGS = (SAMPLES, PEERS, ROSTERS)  # round logs bound like the metrics, a missing file read as one without records
_model_cache: dict[tuple, str] = {}


def _metrics_digest(path: Path, next_round: int, missing_is_empty: bool = False) -> str | None:
    """SHA-256 of the records of rounds before ``next_round`` in a log of round records; without the
    file None, or (``missing_is_empty``) the digest of no records."""
    from dgrpo.metrics.logger import read_records

    if not path.is_file():
        return hashlib.sha256(b"").hexdigest() if missing_is_empty else None
    return hashlib.sha256("".join(line for line, rec in read_records(path, partial_last_ok=True)
                                  if rec["round"] < next_round).encode()).hexdigest()


def _model_folders(config: dict) -> list[Path]:
    """The local folders of the models the config names (no hub id: nothing to resolve there)."""
    from dgrpo.policy.loading import DEFAULT_MODEL, PACKAGED, resolve_model_path

    names = [m.get("name") for m in [config.get("model")] + list((config.get("swarm") or {}).get("models") or [])
             if isinstance(m, dict)]
    out = []
    for name in dict.fromkeys(n for n in names if isinstance(n, str)):
        local = name in (DEFAULT_MODEL, *PACKAGED) or Path(name).expanduser().is_dir()
        if local:
            folder = Path(resolve_model_path(name)).expanduser()
            if folder.is_dir():
                out.append(folder)
    return out


def model_digest(config: dict) -> str | None:
    """SHA-256 over the names and contents of every file of the config's local model folders (cached
    per process by file size and modification time), or None when it names none."""
    folders = _model_folders(config)
    if not folders:
        return None
    files = [p for f in folders for p in sorted(f.rglob("*")) if p.is_file() and not p.name.startswith(".")]
    key = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if key not in _model_cache:
        h = hashlib.sha256()
        for p in files:
            h.update(f"{p.name}\0{sha256(p)}\n".encode())
        _model_cache[key] = h.hexdigest()
    return _model_cache[key]


def record_roster(run_dir: Path, start: int) -> None:
    """Append ``{"round": start, "roster": …}`` (what this start wrote to ``roster.json``) to
    ``rosters.jsonl``; nothing when the folder holds no ``roster.json`` (a run without a swarm protocol)."""
    from dgrpo.swarm.identity import ROSTER_FILE

    roster = Path(run_dir) / ROSTER_FILE
    if roster.is_file():
        with open(Path(run_dir) / ROSTERS, "a", encoding="utf-8") as f:
            f.write(json.dumps({"round": start, "roster": json.loads(roster.read_text())}, sort_keys=True) + "\n")


def run_files(run_dir: Path, next_round: int, config: dict, main: bool) -> dict:
    """What a checkpoint of round ``next_round`` records of ``run_dir`` (module docstring); the metrics
    and bans only when ``main`` (the process that writes them)."""
    run_dir = Path(run_dir)
    out: dict = {"model": model_digest(config),
                 REFERENCE: {p.name: sha256(p) for p in sorted((run_dir / REFERENCE).glob("*.json"))}}
    if main:
        out[METRICS] = _metrics_digest(run_dir / METRICS, next_round)
        for log in LOGS:
            out[log] = _metrics_digest(run_dir / log, next_round, missing_is_empty=True)
        bans = run_dir / BANS
        out[BANS] = json.loads(bans.read_text()) if bans.is_file() else None
    return out


def check_run_files(path: Path, saved, run_dir: Path, next_round: int, config: dict) -> None:
    """Refuse a resume whose run folder is not what the checkpoint ``path`` recorded (``saved``, from
    :func:`run_files`); put back a ``bans.json`` written after the save. A state without the record
    (saved by an older dgrpo) is not checked.

    Raises:
        CheckpointError: one line naming the file that changed and what to do.
    """
    if not isinstance(saved, dict):
        return
    run_dir = Path(run_dir)
    fix = f"restore it as it was at the save of round {next_round}, or start a new run"
    if METRICS in saved and _metrics_digest(run_dir / METRICS, next_round) != saved[METRICS]:
        raise CheckpointError(f"{run_dir / METRICS}: its records of rounds 0..{next_round - 1} differ from those "
                              f"the checkpoint {path} was saved with (edited or replaced); {fix}")
    for log in LOGS:
        if log in saved and _metrics_digest(run_dir / log, next_round, missing_is_empty=True) != saved[log]:
            kept = f"records of rounds 0..{next_round - 1}"
            raise CheckpointError(f"{run_dir / log}: " + (f"missing, but the checkpoint {path} was saved with its {kept} "
                                  "(deleted)" if not (run_dir / log).is_file() else f"its {kept} differ from those the "
                                  f"checkpoint {path} was saved with (truncated or edited)") + f"; {fix}")
    if BANS in saved:
        _check_bans(path, saved[BANS], run_dir / BANS, next_round, fix)
    for name, digest in (saved.get(REFERENCE) or {}).items():
        ref = run_dir / REFERENCE / name
        if not ref.is_file() or sha256(ref) != digest:
            raise CheckpointError(f"{ref}: {'missing' if not ref.is_file() else 'changed'} since the checkpoint {path} "
                                  f"was saved (the drift reference of the first evaluation); {fix}")
    if "model" in saved and saved["model"] is not None and model_digest(config) != saved["model"]:
        folders = ", ".join(str(f) for f in _model_folders(config)) or "(none found)"
        raise CheckpointError(f"the model files ({folders}) differ from those the checkpoint {path} was saved with "
                              "(changed, or another model under the same name): resume with the run's own model files, "
                              "or start a new run")


def _check_bans(path: Path, saved, bans: Path, next_round: int, fix: str) -> None:
    try:
        now = json.loads(bans.read_text()) if bans.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        now = "unreadable"
    if now == saved:
        return
    written = now.get("round") if isinstance(now, dict) else None
    if type(written) is int and written >= next_round:  # rounds after the save, which run again
        if saved is None:
            bans.unlink()
        else:
            tmp = bans.with_name(f".{bans.name}.{os.getpid()}")
            tmp.write_text(json.dumps(saved, indent=1))
            os.replace(tmp, bans)
        return
    raise CheckpointError(f"{bans}: {'missing' if now is None else 'changed'} since the checkpoint {path} was saved "
                          f"(the bans of rounds before {next_round}); {fix}")


def own_peers_file(run) -> str | None:
    """This process's own per-sender record, ``peers.node{k}.jsonl`` (k: its lowest hosted node), in a swarm of
    several processes (distributed, hivemind); None in one process (``peers.jsonl`` is then the whole record).
    Written by every process that reports an honest node, whoever is the main rank, so a malicious lowest rank
    that declares itself honest (the main, which alone writes ``peers.jsonl``) cannot keep itself out of every
    honest operator's files (review r31j F5)."""
    nodes = run.transport.local_nodes
    return f"peers.node{min(nodes)}.jsonl" if nodes and len(nodes) < run.cfg.swarm.nodes else None
