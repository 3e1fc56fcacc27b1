"""What the resume tests of tests/training share: the tiny runs' settings, their metrics without times, and
the check that ``dgrpo resume`` refuses a run in one line."""

from __future__ import annotations

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics

# 2 nodes (node 1 injecting), 4 completions of 2 prompts a round, evaluated every 2 rounds on 2 prompts
COMMON = ["threads=1", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=24",
          "eval.every=2", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01",
          "swarm.malicious=[1]", "attack.kind=injection", "attack.poisoned_per_group=1"]


def metrics(run_dir):
    """Every record of ``run_dir``'s metrics.jsonl without its ``time/*`` keys."""
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(run_dir)]


def refused(run_dir, capsys, *needles, overrides=("rounds=4",)) -> str:
    """``dgrpo resume run_dir *overrides`` exits 2 with one ``dgrpo: error:`` line (no traceback) holding every
    one of ``needles``; returns that line."""
    capsys.readouterr()
    rc = main(["resume", str(run_dir), *overrides])
    err = capsys.readouterr().err
    last = err.rstrip("\n").rsplit("\n", 1)[-1]
    assert rc == 2 and last.startswith("dgrpo: error: ") and err.count("dgrpo: error") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in last, last
    return last
