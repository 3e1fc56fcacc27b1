"""SIGKILL at random points of a 4-round tiny run, then ``dgrpo resume`` (issue 18): the resumed run
logs the same metrics as a straight run, every time.

Each trial forks this process (torch is already imported: a trial costs the run, not an interpreter
start) and kills the child with SIGKILL, either after a random delay or at a random one of the
file-system steps of the run's checkpoint writes (each fsync and rename): the second kind lands
inside a checkpoint write by construction. A kill before the first checkpoint leaves nothing to
resume; ``dgrpo resume`` then says so in one line, and the trial is counted apart.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics

COMMON = ["threads=1", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=24",
          "eval.every=2", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01",
          "swarm.malicious=[1]", "attack.kind=injection", "attack.poisoned_per_group=1", "rounds=4", "checkpoint_every=1"]
RESUMED, MAX_TRIALS = 20, 40  # trials until 20 were killed and resumed; alternately by delay and at a random step


def metrics(run_dir):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(run_dir)]


class StepCounter:
    """Counts the run's fsyncs and renames; SIGKILLs its own process at step ``kill_at``."""

    def __init__(self, kill_at: int | None = None):
        self.steps, self.kill_at = 0, kill_at
        self.real = {name: getattr(os, name) for name in ("fsync", "rename", "replace")}
        for name, fn in self.real.items():
            setattr(os, name, self._wrap(fn))

    def _wrap(self, fn):
        def step(*args):
            self.steps += 1
            if self.steps == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*args)
        return step

    def restore(self):
        for name, fn in self.real.items():
            setattr(os, name, fn)


def _child(argv, kill_at):
    """In the forked child: run and leave without any of the parent's clean-up."""
    code = 1
    try:
        StepCounter(kill_at)
        code = main(argv)
    finally:
        os._exit(code)


def _wait(pid, deadline_s):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"trial process {pid} still running after {deadline_s} s")


@pytest.mark.slow
def test_resume_after_sigkill_at_random_points_matches_a_straight_run(tmp_path, tiny_model_dir, capsys):
    args = [f"model.name={tiny_model_dir}", *COMMON, f"out_dir={tmp_path}"]
    counter = StepCounter()
    start = time.monotonic()
    try:
        assert main(["run", *args, "name=straight"]) == 0
    finally:
        counter.restore()
    seconds, steps = time.monotonic() - start, counter.steps
    want = metrics(tmp_path / "straight")
    assert [r["round"] for r in want] == [0, 1, 2, 3, 4] and steps > 20

    rng = random.Random(18)
    outcomes = {"resumed": 0, "before_first_save": 0, "finished_before_kill": 0}
    killed_in_checkpoint = 0
    trial = -1
    while outcomes["resumed"] < RESUMED and trial + 1 < MAX_TRIALS:
        trial += 1
        name = f"t{trial}"
        by_step = trial % 2 == 1
        kill_at = rng.randint(1, steps) if by_step else None
        capsys.readouterr()
        pid = os.fork()
        if pid == 0:
            _child(["run", *args, f"name={name}"], kill_at)
        if not by_step:
            time.sleep(rng.uniform(0, 0.9 * seconds))
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        status = _wait(pid, 120 + 10 * seconds)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        killed_in_checkpoint += by_step and killed
        assert killed or os.waitstatus_to_exitcode(status) == 0, f"trial {trial}: exit status {status}"
        capsys.readouterr()
        rc = main(["resume", str(tmp_path / name)])
        err = capsys.readouterr().err
        if rc == 2 and ("holds no saved node" in err or "holds no checkpoint" in err or "holds no run" in err):
            outcomes["before_first_save"] += 1  # killed before the first checkpoint was renamed in
            assert err.count("dgrpo: error") == 1 and "Traceback" not in err
            continue
        assert rc == 0, f"trial {trial} (kill {'at step ' + str(kill_at) if by_step else 'by time'}): {err[-500:]}"
        assert metrics(tmp_path / name) == want, f"trial {trial}: kill at step {kill_at}"
        outcomes["resumed" if killed else "finished_before_kill"] += 1
    print(outcomes, "killed inside checkpoint writes:", killed_in_checkpoint, f"straight run {seconds:.1f} s, {steps} steps")
    assert outcomes["resumed"] >= RESUMED and killed_in_checkpoint >= 8, outcomes
