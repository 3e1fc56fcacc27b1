"""The run name every node takes (the lowest live node's, ``agree("name")``) passes the checks of a locally given
``name=`` (review r31f H8: node 0 proposed an absolute path and every rank wrote its run folder, config and
checkpoints there, outside ``out_dir``)."""

import os
from types import SimpleNamespace

import pytest
from distributed_helpers import RELATIVE, launch

from dgrpo.config import load_config
from dgrpo.errors import ConfigError
from dgrpo.swarm.identity import write_keys
from dgrpo.training.build import agreed_name


def _launch_args(model_dir, keys, tmp_path, startup_timeout_s: int) -> list[str]:
    """A 4-rank distributed run with a roster file (as a deployment has) and no name= (as the README's commands)."""
    return ["run", RELATIVE, f"model.name={model_dir}", "swarm.nodes=4", "rounds=1", "threads=1", "swarm.group_size=4",
            "sampling.max_new_tokens=24", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0",
            "swarm.prompts_per_round=2", "swarm.timeout_s=20", f"swarm.startup_timeout_s={startup_timeout_s}",
            f"swarm.protocol.roster={keys / 'roster.json'}", f"swarm.protocol.key_dir={keys}",
            f"out_dir={tmp_path / 'out'}", "swarm.transport=distributed"]


@pytest.mark.parametrize("name, why", [
    ("/tmp/elsewhere", "name must be one folder name inside out_dir (no '/', '\\', '.' or '..'), got '/tmp/elsewhere'"),
    ("..", "name must be one folder name inside out_dir"),
    ("a/../../b", "name must be one folder name inside out_dir"),
    ("x" * 201, "Value should have at most 200 items after validation, not 201"),
])
def test_a_proposed_name_a_local_name_could_not_be_is_refused_naming_its_proposer(name, why):
    said = []
    cfg = load_config(None, [])
    transport = SimpleNamespace(alive={0, 1, 2, 3}, first_round=0, announce_stop=said.append)
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"name={name}"])
    assert why in str(err.value)  # the same check as a local name=
    with pytest.raises(ConfigError) as err:
        agreed_name(cfg, transport, name)
    assert str(err.value).startswith(f"the run name {name[:120]!r} proposed by node 0, the lowest live node")
    assert why in str(err.value) and "\n" not in str(err.value)
    assert said == [str(err.value)]  # the peers are told the same line (distributed: signed)
    assert agreed_name(cfg, transport, "arith__none__nodefense__seed0__20261205-170000") == \
        "arith__none__nodefense__seed0__20261205-170000"


@pytest.mark.slow
def test_four_ranks_refuse_an_absolute_run_name_from_node_0_at_start_up(tmp_path, tiny_model_dir):
    """Node 0 proposes an absolute path (``name`` unset, as in the README's commands; a roster file, as a deployment
    has): every rank stops at start-up in one line naming node 0 as its proposer (a rank still reading a peer that
    stopped first quotes that peer's signed reason, never "sent nothing"), and nothing is left there nor under
    out_dir. A rank that met node 0's stop notice during the name exchange holds it to round 0's relays (review r31n
    G5: a notice shown to some nodes must not stop them alone), so it agrees on node 1's name and makes that folder
    before every rank stops; that stop (``StartupStop``) removes the folder it made, holding its config.yaml alone
    (before, it stayed behind: 3 of 3 runs, 2026-12-06; training/run_dir.py ``drop_unused``)."""
    escaped, keys = tmp_path / "ESCAPED", tmp_path / "keys"
    write_keys(keys, 4)
    args = _launch_args(tiny_model_dir, keys, tmp_path, startup_timeout_s=30)
    results = launch(4, args, scenario=f"propose:0:{escaped}", timeout=120, log_dir=str(tmp_path))
    assert all(r.returncode in (2, 3) for r in results), [r.returncode for r in results]
    refusal = (f"the run name {str(escaped)!r} proposed by node 0, the lowest live node, whose value every node takes, "
               f"is refused: name must be one folder name inside out_dir (no '/', '\\', '.' or '..'), got {str(escaped)!r}")
    for r in results:
        lines = [line for line in r.output.splitlines() if line.startswith("dgrpo: error:")]
        assert len(lines) == 1 and refusal in lines[0] and "sent nothing" not in lines[0], r.output[-2000:]
    assert sum(r.returncode == 2 for r in results) >= 1  # (at least one refused it itself: the others may quote it)
    assert not escaped.exists()
    made = [p for p in (tmp_path / "out").glob("*")] if (tmp_path / "out").exists() else []
    assert made == [], [(p, sorted(os.listdir(p))) for p in made]


@pytest.mark.slow
def test_ranks_that_met_node_0_s_refusal_in_the_name_exchange_leave_no_run_folder(tmp_path, tiny_model_dir):
    """Review r31n G5's leftover, made certain: node 0 proposes an absolute path and its server serves its name to
    nobody for 4 s, so it refuses its own proposal and stops before any peer read it; nodes 1-3 meet its signed stop
    notice in the name exchange, hold it (a notice shown to some nodes must not stop them alone), agree on node 1's
    name and make that run folder (a config.yaml alone), then stop at start-up quoting node 0's reason. Before, that
    folder stayed behind; now the start-up stop removes it (training/run_dir.py ``drop_unused``)."""
    escaped, keys = tmp_path / "ESCAPED", tmp_path / "keys"
    write_keys(keys, 4)
    args = _launch_args(tiny_model_dir, keys, tmp_path, startup_timeout_s=30)
    hide = ",".join(f"delay:0:{k}:^name/data/0:4" for k in (1, 2, 3))
    results = launch(4, args, scenario=f"propose:0:{escaped},{hide}", timeout=120, log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [2, 3, 3, 3], [r.output[-2000:] for r in results]
    refusal = (f"the run name {str(escaped)!r} proposed by node 0, the lowest live node, whose value every node takes, "
               f"is refused: name must be one folder name inside out_dir")
    for r in results:
        lines = [line for line in r.output.splitlines() if line.startswith("dgrpo: error:")]
        assert len(lines) == 1 and refusal in lines[0] and "sent nothing" not in lines[0], r.output[-2000:]
        assert r.rank == 0 or "node 0 stopped at start-up" in lines[0], lines[0]
    assert not escaped.exists()
    made = [p for p in (tmp_path / "out").glob("*")] if (tmp_path / "out").exists() else []
    assert made == [], [(p, sorted(os.listdir(p))) for p in made]


@pytest.mark.slow
def test_a_proposed_name_that_holds_a_run_on_one_machine_stops_every_rank_at_once_naming_the_proposer(
        tmp_path, tiny_model_dir):
    """Review r31g J4: node 0 proposes a valid name (``prev_run``) that already holds a run (metrics.jsonl) only in
    node 1's out_dir (machines with different disks). Node 1 raised FileExistsError before any stop notice and the
    others stopped after startup_timeout_s calling it silent, with no line naming node 0. Now node 1 stops with its
    signed notice naming node 0 as the proposer, and every other rank quotes it, well before the start-up limit."""
    keys, disk1 = tmp_path / "keys", tmp_path / "node1_disk"
    write_keys(keys, 4)
    (disk1 / "prev_run").mkdir(parents=True)
    (disk1 / "prev_run" / "metrics.jsonl").write_text('{"round": 0}\n')
    args = _launch_args(tiny_model_dir, keys, tmp_path, startup_timeout_s=40)
    results = launch(4, args, scenario=f"propose:0:prev_run,outdir:1:{disk1}", timeout=150, log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [3, 2, 3, 3], [r.returncode for r in results]
    why = (f"{disk1 / 'prev_run'} already holds a run; pick another name or use `dgrpo resume` (on this machine; the "
           "run name 'prev_run' was proposed by node 0, the lowest live node, whose value every node takes")
    for r in results:
        lines = [line for line in r.output.splitlines() if line.startswith("dgrpo: error:")]
        assert len(lines) == 1 and why in lines[0] and "sent nothing" not in lines[0], r.output[-2000:]
        assert r.rank == 1 or "node 1 stopped at start-up" in lines[0], lines[0]
        assert r.seconds < 40, r.seconds  # (before: all stopped after startup_timeout_s)
    assert (disk1 / "prev_run" / "metrics.jsonl").read_text() == '{"round": 0}\n'
