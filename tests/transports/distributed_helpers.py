"""Launch a real multi-process swarm for tests (the fault scenarios ranks can play: ``rank_scenarios.py``).

:func:`launch` forks the ranks from the test process and gives them what torchrun gives (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and a c10d store hosted outside the ranks, as torchrun's agent
hosts it), but without torchrun's agent, which stops every local rank as soon as one exits non-zero
and would hide how the others handle a dead peer. :func:`torchrun` goes through torchrun itself.
"""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rank_scenarios import apply_scenario  # (played in each forked rank: _rank; hivemind_helpers imports it from here)

SRC = str(Path(__file__).resolve().parents[2] / "src")
# The relative schedule, pinned by the launch tests of its deadlines, holds, fellows, wait notes, records, accusations
# and of subjects the clock only adds time to (task h31d: unset on swarm.transport=distributed is the clocked schedule
# with round_s=auto, 2 agreed rounds before round 0 and about 9 s a round on the tiny model). Given before the test's
# own overrides, so a clocked test's swarm.protocol.schedule=clock wins.
RELATIVE = "swarm.protocol.schedule=relative"
RANK_MAIN = str(Path(__file__).resolve().with_name("rank_main.py"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env() -> dict:
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "TORCH_CPP_LOG_LEVEL": "ERROR", "GLOO_SOCKET_IFNAME": "lo"}
    env.pop("DGRPO_TEST_SCENARIO", None)
    return env


@dataclass
class RankResult:
    rank: int
    returncode: int
    output: str
    seconds: float


def _rank(rank: int, args: list[str], env: dict, log_path: str, scenario: str) -> None:
    """Body of a forked rank: the CLI with its output in ``log_path``."""
    import logging

    os.environ.update(env)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    logging.root.handlers.clear()  # pytest's capture handlers came along with the fork
    apply_scenario(scenario, rank, args)
    from peer_scenarios import record_views

    record_views(os.path.join(os.path.dirname(log_path), f"trained{rank}.jsonl"))
    from dgrpo.cli import main

    code = main(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def launch(nprocs: int, args: list[str], scenario: str = "", timeout: float = 120, log_dir: str | None = None) -> list[RankResult]:
    """Run ``dgrpo <args>`` as ``nprocs`` ranks; return each rank's exit code and output.

    Ranks are forked from this process (they start in milliseconds: torch and transformers are
    already imported) and join a c10d store hosted here, as torchrun's agent hosts it.
    """
    import multiprocessing
    import tempfile

    import torch.distributed as dist

    port = free_port()
    log_dir = log_dir or tempfile.mkdtemp(prefix="dgrpo-ranks-")
    ctx = multiprocessing.get_context("fork")
    procs, logs, start = [], [], time.monotonic()
    for rank in range(nprocs):
        env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nprocs), "LOCAL_WORLD_SIZE": str(nprocs),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True",
               "TORCHELASTIC_RESTART_COUNT": "0", "TORCH_CPP_LOG_LEVEL": "ERROR", "GLOO_SOCKET_IFNAME": "lo"}
        logs.append(os.path.join(log_dir, f"rank{rank}.log"))
        procs.append(ctx.Process(target=_rank, args=(rank, args, env, logs[-1], scenario), daemon=True))
        procs[-1].start()
    # Hosted after the forks (no server thread is copied into the ranks); clients retry until it is up.
    store = dist.TCPStore("127.0.0.1", port, nprocs, True, timeout=datetime.timedelta(seconds=timeout),
                          wait_for_workers=False)
    results = []
    try:
        for rank, p in enumerate(procs):
            p.join(max(1.0, timeout - (time.monotonic() - start)))
            code = p.exitcode if p.exitcode is not None else -9
            results.append(RankResult(rank, code, Path(logs[rank]).read_text(), time.monotonic() - start))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        del store
    return results


def torchrun(nprocs: int, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node N tests/swarm/rank_main.py <args>`` (the real launcher)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nprocs}",
           "--monitor-interval=0.2", RANK_MAIN, *args]
    return subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=timeout)


def comparable(records: list[dict]) -> list[dict]:
    """Metrics without wall times (nor the share of the round spent in defenses)."""
    return [{k: v for k, v in r.items() if not k.startswith("time/")}
            for r in records]
