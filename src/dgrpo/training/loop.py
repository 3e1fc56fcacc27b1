"""The loop over rounds a swarm recipe runs: evaluate every k rounds, one round, log, checkpoint.

The round itself is the recipe's (:func:`dgrpo.recipes.horizontal.one_round`,
:func:`dgrpo.recipes.vertical.one_round`); this loop is what every round shares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tqdm import tqdm

from dgrpo.metrics.plots import plot_run
from dgrpo.training.build import Run
from dgrpo.training.checkpoint import save_checkpoint
from dgrpo.training.evaluate import evaluate
from dgrpo.training.main_dir import main_dir
from dgrpo.training.records import evaluates, flush_held, share_record
from dgrpo.errors import StartupStop
from dgrpo.training.run_dir import drop_unused, release

OneRound = Callable[[Run, int], dict]  # (run, round) → the round's record ({} without an honest view)


def evaluation_round(cfg, r: int) -> bool:
    """Whether round ``r`` (before its update) is evaluated: every ``eval.every`` rounds, round 0 only
    with ``eval.first`` (the last evaluation, after the last round, always runs)."""
    return r % cfg.eval.every == 0 and (r > 0 or cfg.eval.first)


def _log(run: Run, bar, records: list[dict]) -> None:
    """Log ``records`` (round order) and show the last round's reward and accuracy on ``bar``."""
    if records:
        main_dir(run)  # (a node that became the main without the run folder's lock logs in a folder of its own)
    for rec in records:
        run.logger.log(rec)
        if bar is not None:
            bar.set_postfix(reward=f"{rec.get('train/reward_honest') or 0:.2f}",
                            acc=f"{rec['eval/accuracy']:.2f}" if "eval/accuracy" in rec else "-")


def train(run: Run, one_round: OneRound) -> Path:
    """Run rounds ``run.start_round .. rounds-1``; evaluate every ``eval.every`` rounds and at the end.

    Evaluation results are logged with the round they precede (round r = weights before round r's
    update; a last record at round ``rounds`` holds the final evaluation).

    Returns:
        The run directory.
    """
    cfg = run.cfg
    bar = tqdm(range(run.start_round, cfg.rounds), desc="rounds", unit="round", initial=run.start_round,
               total=cfg.rounds, disable=not run.transport.is_main)  # a resumed run counts on: 3/4, 4/4
    run.transport.starts_at(run.start_round)  # (clocked rounds: a node late in its first round serves its skip notice)
    try:
        for r in bar:
            rec = evaluate(run, r, run.run_dir / "samples.jsonl") if evaluation_round(cfg, r) and evaluates(run) else {}
            rec.update(one_round(run, r))
            _log(run, bar, share_record(run, rec))  # distributed: merged on the main process (a round whose records
            if cfg.checkpoint_every and (r + 1) % cfg.checkpoint_every == 0 and r + 1 < cfg.rounds:  # are not all
                _log(run, bar, flush_held(run))  # in: held; a checkpoint holds the log of every round before it)
                save_checkpoint(run, r + 1)
    except StartupStop:  # (every rank stopped in its first round's relays, nothing trained: review r31n G5)
        drop_unused(run.run_dir)  # (a folder this process made holding its config alone; anything else is kept)
        raise
    if run.start_round < cfg.rounds or not (run.run_dir / "metrics.jsonl").exists():
        final = {"round": cfg.rounds, **(evaluate(run, cfg.rounds, run.run_dir / "samples.jsonl") if evaluates(run) else {})}
        _log(run, None, share_record(run, final))
    save_checkpoint(run, cfg.rounds)
    _log(run, None, flush_held(run, final=True))  # (after the save: distributed, the main's done is posted before the
    # last records are read, until they come or their sender's done is served: transports/recordreads.py)
    run.logger.close()
    main = main_dir(run) is not None  # (the main process may have changed after a peer failure)
    # distributed: wait until every live peer is done. Its peers wait for this node's `done` timeout_s at most, so
    # the plots (seconds of matplotlib on a loaded machine) come after it: before, CI's peers named the main failed.
    run.transport.close()
    if main:
        plot_run(run.run_dir)
    release(run.run_dir)
    return run.run_dir
