"""The round loop shared by Algorithms 1 and 2: write → all-gather → update → metrics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from dgrpo.config import RunConfig
from dgrpo.experiments.checkpoint import save_checkpoint
from dgrpo.experiments.records import evaluates, share_record
from dgrpo.experiments.rounds import evaluate, round_record
from dgrpo.experiments.setup import Run, build_run
from dgrpo.metrics.plots import plot_run
from dgrpo.swarm.messages import Message

WriteRound = Callable[[Run, int], dict[int, list[Message]]]


def loop(cfg: RunConfig, write_round: WriteRound, run_dir: Path | None = None, run: Run | None = None) -> Path:
    """Run rounds ``start_round .. cfg.rounds-1``; evaluate every ``eval.every`` rounds and at the end.

    Evaluation results are logged with the round they precede (round r = weights before round r's
    update; a last record at round ``cfg.rounds`` holds the final evaluation).

    Returns:
        The run directory.
    """
    run = run or build_run(cfg, run_dir)
    swarm, is_main = run.swarm, getattr(run.transport, "is_main", True)
    bar = tqdm(range(run.start_round, cfg.rounds), desc="rounds", unit="round", disable=not is_main)
    last = {}
    for r in bar:
        rec = evaluate(run, r, run.run_dir / "samples.jsonl") if r % cfg.eval.every == 0 and evaluates(run) else {}
        t0 = time.perf_counter()
        local = write_round(run, r)                                 # Alg.1 L3-5 / Alg.2 L3-5
        t1 = time.perf_counter()
        messages = run.transport.all_gather(local)                  # Alg.1 L6, L8 / Alg.2 L7
        t2 = time.perf_counter()
        reports = swarm.update(messages, r)                         # Alg.1 L9 / Alg.2 L8
        t3 = time.perf_counter()
        times = {"generate": t1 - t0, "exchange": t2 - t1, "update": t3 - t2, "round": t3 - t0}
        if reports:  # a process hosting only an attacker has no honest view of the round
            rec.update(round_record(run, r, messages, reports, times))
        rec = share_record(run, rec)  # distributed: merged on the main rank, None elsewhere
        if rec is not None:
            run.logger.log(rec)
            last = rec
            bar.set_postfix(reward=f"{rec.get('train/reward_honest') or 0:.2f}",
                            acc=f"{last.get('eval/accuracy', float('nan')):.2f}" if "eval/accuracy" in rec else "-")
        if cfg.checkpoint_every and (r + 1) % cfg.checkpoint_every == 0 and r + 1 < cfg.rounds:
            save_checkpoint(run, r + 1)
    if run.start_round < cfg.rounds or not (run.run_dir / "metrics.jsonl").exists():
        final = {"round": cfg.rounds, **(evaluate(run, cfg.rounds, run.run_dir / "samples.jsonl") if evaluates(run) else {})}
        final = share_record(run, final)
        if final is not None:
            run.logger.log(final)
    save_checkpoint(run, cfg.rounds)
    run.logger.close()
    if getattr(run.transport, "is_main", True):  # the main rank may have changed after a peer failure
        plot_run(run.run_dir)
    if hasattr(run.transport, "close"):
        run.transport.close()  # distributed: wait until every live peer is done
    return run.run_dir
