"""The folder a process writes the main's files in: only the process that holds the run folder's lock writes there.

The main (the lowest live honest node) writes ``metrics.jsonl``, ``peers.jsonl``, ``bans.json``, the plots and the
checkpoint's ``state.json``. The main can change mid-run (a peer failure). In a swarm of 3 or more the main before
it was expelled by a majority and exits, and its lock goes with it (the kernel drops a ``flock`` at exit): the new
main takes the run folder and goes on in it. In a swarm of 2 that splits (issue 31, review r31s: one node stalled
and came back, each takes the other for the failed peer, docs/distributed.md) both nodes are the main and both go
on; on one machine the second one used to write the first one's ``metrics.jsonl`` beside it (two trainings' rounds
in one log, its report mixed and ``dgrpo resume`` refused). Now a node that becomes the main while another process
holds the run folder writes its own rounds in a folder of its own next to it, ``{run folder}.node{k}`` (k: its
lowest hosted node; ``-2``, ``-3``, … when that name already holds a run or is locked), created and locked like a
run folder, with the run's ``config.yaml`` and drift references copied in, and says so in one line.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from dgrpo.errors import ConfigError
from dgrpo.metrics.logger import MetricsLogger, read_metrics
from dgrpo.training.evaluate import REFERENCE_DIR
from dgrpo.training.run_dir import claim, holder, made, release, take

log = logging.getLogger(__name__)
MAX_TRIES = 100  # folder names tried for a node's own folder ({run}.node{k}, {run}.node{k}-2, ...)


def main_dir(run) -> Path | None:
    """The folder this process writes the main's files in: ``run.run_dir`` once this process holds its lock, None
    when it is not the main. A process that became the main without holding it first takes the lock (the main
    before it exited) or else moves ``run.run_dir`` and ``run.logger`` to a folder of its own (:func:`own_folder`).

    Args:
        run: a :class:`~dgrpo.training.build.Run` (its ``transport``, ``run_dir``, ``cfg``, ``logger`` and
            ``owns_dir``: whether this process holds ``run_dir``'s lock as the main's writer).

    Raises:
        ConfigError: no folder of its own could be made next to the run folder (names it and what to free).
    """
    if not run.transport.is_main:
        return None
    if not run.owns_dir:
        node = min(run.transport.local_nodes)
        took = take(run.run_dir)
        if took and not _finished(run):  # (the main before it exited, expelled: the folder is this process's now)
            log.warning("node %d is now the main and writes the run folder %s", node, run.run_dir)
        else:
            old, pid = run.run_dir, holder(run.run_dir)
            if took:  # (the main before it ran the whole run and exited: a split swarm of 2 whose half ended first)
                release(old)
            run.run_dir = own_folder(old, node)
            run.logger.close()
            run.logger = MetricsLogger.for_run(run.run_dir, run.cfg, True)
            log.warning("node %d is now the main, but %s the run folder %s (its main, which took node %d for the "
                        "failed peer: a split swarm of 2); node %d writes its own rounds in %s", node,
                        "its main finished the run in" if took else f"process {pid} still writes", old, node, node,
                        run.run_dir)
        run.owns_dir = True
    return run.run_dir


def _finished(run) -> bool:
    """Whether ``run.run_dir``'s ``metrics.jsonl`` already ends with the run's last record (round ``cfg.rounds``): the
    main before this one ran the whole run and exited, as the other half of a split swarm of 2 does when it is the
    faster (a loaded slow set saw node 1 take node 0's finished folder and append its rounds 0-2 there); an expelled
    main exits mid-run. An unreadable or missing file is not finished (the folder is taken as before)."""
    try:
        records = read_metrics(run.run_dir)
    except (OSError, ValueError):  # (MetricsFileError is a ValueError)
        return False
    return bool(records) and records[-1].get("round") == run.cfg.rounds


def own_folder(run_dir: Path, node: int) -> Path:
    """Make and lock ``{run_dir}.node{node}`` (or ``-2``, ``-3``, …: the first that holds no run and no other
    process holds) next to ``run_dir``, and copy ``run_dir``'s ``config.yaml`` and drift references into it.

    Returns:
        the folder.

    Raises:
        ConfigError: it cannot be created (out_dir not writable, full) or every name tried is taken.
    """
    run_dir = Path(run_dir)
    for i in range(1, MAX_TRIES + 1):
        own = run_dir.parent / f"{run_dir.name}.node{node}{'' if i == 1 else f'-{i}'}"
        try:
            own.mkdir(exist_ok=True)
        except OSError as err:
            raise ConfigError(f"node {node} became the main while another process writes {run_dir}, and cannot "
                              f"create its own folder {own} ({err.strerror}); free out_dir={run_dir.parent}") from None
        if (own / "metrics.jsonl").exists():
            continue
        try:
            claim(own)
        except ConfigError:
            continue
        made.add(own.resolve())
        for name in ("config.yaml", REFERENCE_DIR):
            src = run_dir / name
            if src.is_dir():
                shutil.copytree(src, own / name, dirs_exist_ok=True)
            elif src.is_file():
                shutil.copy2(src, own / name)
        return own
    raise ConfigError(f"node {node} became the main while another process writes {run_dir}, and the {MAX_TRIES} "
                      f"names {run_dir.name}.node{node}[-i] next to it are taken; remove them or choose another out_dir")
