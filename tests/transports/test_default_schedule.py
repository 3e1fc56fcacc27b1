"""The default schedule (issue 31, task h31d): ``swarm.protocol.schedule`` unset on ``swarm.transport=distributed`` is
``clock`` with ``round_s: auto`` (:mod:`dgrpo.swarm.clockconfig`); unset elsewhere it is nothing, as before; an explicit
``relative`` keeps today's schedule. A launch on the default: ``test_distributed.py``'s torchrun test (default set)."""

import pytest

from dgrpo import config_yaml
from dgrpo.config import RunConfig, load_config
from dgrpo.errors import ConfigError
from dgrpo.swarm.clockconfig import UNRECORDED, resolved
from dgrpo.training.run_identity import identity

DIST = ["swarm.transport=distributed"]


def _protocol(cfg: RunConfig) -> dict:
    return cfg.model_dump(mode="json")["swarm"]["protocol"]


def _read_back(cfg: RunConfig) -> RunConfig:
    """``cfg`` as a run's config.yaml holds it, read again."""
    return RunConfig.model_validate(config_yaml.load(config_yaml.dump(cfg.model_dump(mode="json"))))


def test_unset_on_distributed_runs_and_records_the_clock_with_auto():
    cfg = load_config(None, DIST)
    assert cfg.swarm.protocol.schedule is None and "schedule" not in _protocol(cfg)  # (read: dumps as before)
    run = resolved(cfg)  # (what build_run runs and writes into a new run's config.yaml)
    assert (run.swarm.protocol.schedule, run.swarm.protocol.round_s) == ("clock", "auto")
    assert {k: _protocol(run)[k] for k in ("schedule", "round_s")} == {"schedule": "clock", "round_s": "auto"}
    assert "direct_s" not in _protocol(run) and "relay_s" not in _protocol(run)  # (auto's 4 s each, unset)
    again = _read_back(run)
    assert again == run and resolved(again) is again  # (a resume reads the clock back: nothing to resolve)
    hand = resolved(load_config(None, [*DIST, "swarm.protocol.round_s=30"]))  # (a clock field alone: the clock's)
    assert (hand.swarm.protocol.schedule, hand.swarm.protocol.round_s) == ("clock", 30)
    written = load_config(None, [*DIST, "swarm.protocol.schedule=clock"])  # (the default written out by hand: before,
    assert written == run and _read_back(written) == run  # refused for want of round_s; now the same run as the default)
    with pytest.raises(ConfigError, match="round_s=auto does not time the judge defense"):  # (auto's refusals hold)
        load_config(None, [*DIST, "swarm.protocol.schedule=clock", "defenses=[{kind: judge}]"])


@pytest.mark.parametrize("transport", [["swarm.transport=inprocess"], ["swarm.transport=hivemind",
                                                                        "swarm.hivemind.node=0"]])
def test_unset_elsewhere_is_valid_and_unchanged_and_relative_there_dumps_as_unset(transport):
    cfg = load_config(None, transport)
    assert cfg.swarm.protocol.schedule is None and resolved(cfg) is cfg and "schedule" not in _protocol(cfg)
    relative = load_config(None, [*transport, "swarm.protocol.schedule=relative"])
    assert relative == cfg and _protocol(relative) == _protocol(cfg)  # (the field was left out when relative)
    with pytest.raises(ConfigError, match="swarm.protocol.schedule=clock is built for swarm.transport=distributed"):
        load_config(None, [*transport, "swarm.protocol.schedule=clock", "swarm.protocol.round_s=30"])
    for extra in ([], ["swarm.protocol.schedule=relative"]):  # (a clock field there: leave it out; clock is no fix,
        with pytest.raises(ConfigError) as err:                # it is refused in turn, task u31g)
            load_config(None, [*transport, *extra, "swarm.protocol.round_s=auto"])
        assert "round_s is used only with swarm.protocol.schedule=clock; leave it out" in str(err.value)
        assert "set swarm.protocol.schedule=clock" not in str(err.value)


def test_explicit_relative_on_distributed_is_kept_written_and_its_checkpoint_hash_is_the_unset_ones():
    cfg = load_config(None, [*DIST, "swarm.protocol.schedule=relative"])
    assert resolved(cfg) is cfg and _protocol(cfg)["schedule"] == "relative"
    assert _read_back(cfg).swarm.protocol.schedule == "relative"  # (written: unset would read back as the clock)
    unset = load_config(None, DIST).model_dump(mode="json")  # (a run saved before the default: relative, unwritten)
    assert identity(cfg.model_dump(mode="json"), 3)["config_sha256"] == identity(unset, 3)["config_sha256"]
    clock = resolved(load_config(None, DIST)).model_dump(mode="json")
    assert identity(clock, 3)["config_sha256"] != identity(unset, 3)["config_sha256"]  # (the clock: another run)


@pytest.mark.parametrize("defense", ["judge", "toploc"])
def test_a_defense_auto_does_not_time_is_refused_on_the_default_naming_the_schedule_and_both_fixes(defense):
    with pytest.raises(ConfigError) as err:
        load_config(None, [*DIST, f"defenses=[{{kind: {defense}}}]"])
    line = str(err.value)
    assert "\n" not in line and f"does not time the {defense} defense" in line, line
    assert "swarm.protocol.schedule is unset" in line and "swarm.protocol.schedule=relative" in line, line
    assert "set swarm.protocol.round_s to seconds" in line, line
    for fix in ("swarm.protocol.schedule=relative", "swarm.protocol.round_s=60"):  # (either fix loads)
        assert load_config(None, [*DIST, f"defenses=[{{kind: {defense}}}]", fix]).defenses[0].kind == defense
    assert load_config(None, [f"defenses=[{{kind: {defense}}}]"]).swarm.protocol.schedule is None  # (in-process)


def test_a_timeout_the_default_windows_do_not_fit_is_refused_naming_the_schedule():
    with pytest.raises(ConfigError) as err:
        load_config(None, [*DIST, "swarm.timeout_s=5"])
    line = str(err.value)
    assert "\n" not in line and "swarm.protocol.schedule is unset" in line and "(4 + 4s)" in line, line
    assert "raise swarm.timeout_s" in line and "swarm.protocol.schedule=relative" in line, line
    assert load_config(None, [*DIST, "swarm.timeout_s=5", "swarm.protocol.schedule=relative"]).swarm.timeout_s == 5


def test_a_resume_of_a_distributed_config_recording_no_schedule_is_one_line():
    cfg = load_config(None, DIST)
    with pytest.raises(ConfigError) as err:
        resolved(cfg, "runs/old")
    assert str(err.value) == UNRECORDED.format(run_dir="runs/old") and "\n" not in str(err.value)
    assert "runs/old/config.yaml records none" in str(err.value)
    assert "resume with swarm.protocol.schedule=relative" in str(err.value)
    relative = load_config(None, [*DIST, "swarm.protocol.schedule=relative"])
    assert resolved(relative, "runs/old") is relative  # (given: resumed as it is)
    clock = resolved(cfg)
    assert resolved(_read_back(clock), "runs/new") == clock  # (a run since the default records its schedule)


HIVEMIND = ["swarm.transport=hivemind", "swarm.hivemind.node=0"]


@pytest.mark.parametrize("transport", ["distributed", "hivemind"])
@pytest.mark.parametrize("kind", [["federated={}", "swarm.mode=vertical"], ["hardening={}"], ["ensemble={groups: 2}"]])
def test_a_run_that_builds_no_swarm_transport_refuses_distributed_in_one_line(kind, transport):
    """Review r31d F1: federated and hardening runs never build a transport and an ensemble's groups cannot share one
    torchrun world, so ``swarm.transport=distributed`` there ran every rank's whole run alone, off the clock the docs
    promise (and a federated resume met the clock's UNRECORDED line): refused when the config is read."""
    assert load_config(None, kind).swarm.transport == "inprocess"  # (the run as it is meant)
    with pytest.raises(ConfigError) as err:  # (hivemind: federated and hardening build no transport either, and an
        load_config(None, [*kind, *(DIST if transport == "distributed" else HIVEMIND)])  # ensemble's groups one node id)
    line = str(err.value)
    assert "\n" not in line and f"drop swarm.transport={transport}" in line and "set swarm.transport=inprocess" in line, line
    assert kind[0].split("=")[0] in line, line


@pytest.mark.parametrize("given", ["swarm.protocol.round_s=5", "swarm.protocol.relay_s=1"])
def test_the_default_s_relative_fix_names_the_clock_fields_to_leave_out(given):
    """Review r31d F2: a clock field given with the schedule unset and refused; the line's relative fix alone is
    refused again (``round_s is used only with schedule=clock``), so it names the field to leave out, and that loads."""
    with pytest.raises(ConfigError) as err:
        load_config(None, [*DIST, given])
    line = str(err.value)
    field = given.split("=")[0]
    assert "\n" not in line and f"set swarm.protocol.schedule=relative and leave out {field}" in line, line
    assert load_config(None, [*DIST, "swarm.protocol.schedule=relative"]).swarm.protocol.schedule == "relative"
    with pytest.raises(ConfigError, match=f"{field} is used only with swarm.protocol.schedule=clock"):
        load_config(None, [*DIST, given, "swarm.protocol.schedule=relative"])  # (why the fix must say so)


def test_the_start_up_fingerprint_is_of_the_schedule_a_rank_runs():
    """Review r31d: ranks agree on the config :func:`resolved` made (build_run resolves before the transport joins):
    the default and its explicit spelling agree; an explicit ``relative`` or another ``round_s`` does not (named at
    start-up: ``test_default_schedule_launch.py``)."""
    from dgrpo.transports.fingerprint import config_fingerprint

    unset = config_fingerprint(resolved(load_config(None, DIST)))
    spelled = load_config(None, [*DIST, "swarm.protocol.schedule=clock", "swarm.protocol.round_s=auto"])
    assert config_fingerprint(resolved(spelled)) == unset
    for other in ("swarm.protocol.schedule=relative", "swarm.protocol.round_s=30"):
        assert config_fingerprint(resolved(load_config(None, [*DIST, other]))) != unset, other


def test_a_resume_whose_config_lost_only_the_schedule_line_resumes_on_the_clock_it_recorded():
    """Review r31d F3: a clocked run's config.yaml with ``schedule`` dropped (``swarm.protocol.schedule=null``, an
    edit) keeps ``round_s: auto``, which no config before the default could hold without ``schedule: clock``. Before,
    UNRECORDED told it to resume as relative (then refused by the checkpoint hash); now it resolves to the clock, whose
    hash is the saved run's, and a config with no clock field is still UNRECORDED."""
    saved = resolved(load_config(None, DIST))
    lost = load_config(None, [*DIST, "swarm.protocol.schedule=clock", "swarm.protocol.round_s=auto",
                              "swarm.protocol.schedule=null"])
    assert lost.swarm.protocol.schedule is None and lost.swarm.protocol.round_s == "auto"
    again = resolved(lost, "runs/old")
    assert again == saved
    assert identity(again.model_dump(mode="json"), 3)["config_sha256"] == \
        identity(saved.model_dump(mode="json"), 3)["config_sha256"]
    with pytest.raises(ConfigError, match="records none"):
        resolved(load_config(None, DIST), "runs/old")


def test_a_resume_given_the_schedule_records_it_in_every_rank_s_own_config(tmp_path, monkeypatch):
    """Review r31d F4: each rank keeps its own config.yaml (docs/distributed.md, Files: no shared file system), but
    ``restore`` rewrote it on the main rank alone, so after ``swarm.protocol.schedule=relative`` a non-main rank's
    folder still recorded none and its next plain resume met UNRECORDED (and a ``rounds=`` override left its rounds
    stale). Now every rank writes its own, swapped in whole."""
    from types import SimpleNamespace

    from dgrpo.training import checkpoint
    from dgrpo.training.resume import restore

    cfg = load_config(None, [*DIST, "swarm.protocol.schedule=relative", "rounds=4"])
    (tmp_path / "config.yaml").write_text(config_yaml.dump(load_config(None, DIST).model_dump(mode="json")))
    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda run: 2)
    transport = SimpleNamespace(first_round=0, is_main=False, local_nodes=[1],
                                gather_values=lambda tag, value, timeout_s: {0: value, 1: value})
    restore(SimpleNamespace(run_dir=tmp_path, cfg=cfg, transport=transport), rewrite_config=True)
    again = load_config(tmp_path / "config.yaml", [])
    assert (again.swarm.protocol.schedule, again.rounds) == ("relative", 4)
    assert resolved(again, tmp_path) is again  # (its next resume: no UNRECORDED)
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]  # (nothing left beside it)


SLOW_REWARD = '''
def judged(completion, problem):
    """Stands for a reward whose cost grows with the completion (a model judge, a test run)."""
    return float(problem.answer in completion)
'''


@pytest.mark.parametrize("auto", [[], ["swarm.protocol.round_s=auto"]])
def test_a_reward_function_of_the_user_s_is_refused_on_auto_like_an_untimed_defense(tmp_path, monkeypatch, auto):
    """Review r31d F6: ``round_s: auto`` times the built-in rewards (the sandbox's programs; the rest inside SAFETY)
    but not a dataset task's ``reward: module:function`` (nor a rubric), which runs on every received completion, the
    attacker's at the length cap: the defenses' allow-list failed closed, the reward's failed open. Now one line
    naming it and both fixes (each loads); the built-in math reward of the same dataset still runs on auto."""
    import json
    import sys

    (tmp_path / "slowrewards.py").write_text(SLOW_REWARD)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("slowrewards", None)
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"question": f"{i} + 2?", "answer": str(i + 2)}) + "\n"
                                              for i in range(8)))
    task = ["task.kind=dataset", f"task.path={tmp_path / 'd.jsonl'}", "task.n_val=2"]
    assert load_config(None, [*DIST, *task, *auto]).task.reward is None  # (the math reward: timed)
    with pytest.raises(ConfigError) as err:
        load_config(None, [*DIST, *task, *auto, "task.reward=slowrewards:judged"])
    line = str(err.value)
    assert "\n" not in line and "does not time task.reward" in line, line
    assert "set swarm.protocol.round_s to seconds" in line, line
    if not auto:
        assert "swarm.protocol.schedule is unset" in line and "swarm.protocol.schedule=relative" in line, line
    for fix in ("swarm.protocol.round_s=60", *(() if auto else ("swarm.protocol.schedule=relative",))):
        assert load_config(None, [*DIST, *task, "task.reward=slowrewards:judged", fix]).task.reward


def test_a_resume_whose_config_lost_only_the_schedule_line_is_checked_against_its_checkpoint_on_the_clock(
        tmp_path, monkeypatch):
    """Task u31g: the rule above held in ``resolved`` but ``dgrpo resume`` checked the checkpoints against the config
    as read (its result dropped), so a clocked run's config.yaml without its ``schedule`` line was refused as "saved by
    another run (swarm.protocol.schedule: 'clock' at the save, '(unset)' now)" on 4 ranks (docs/distributed.md says it
    resumes on the clock). The checkpoint states must be checked against the config build_run runs: the clock's."""
    from dgrpo.training import resume

    saved = resolved(load_config(None, DIST))  # (what a new clocked run wrote and sealed into its checkpoints)
    dumped = saved.model_dump(mode="json")
    del dumped["swarm"]["protocol"]["schedule"]  # (the edit: round_s: auto kept)
    (tmp_path / "config.yaml").write_text(config_yaml.dump(dumped))
    (tmp_path / "checkpoint" / "node0").mkdir(parents=True)
    (tmp_path / "checkpoint" / "node0" / "state.json").write_text("{}")
    seen = []
    monkeypatch.setattr(resume, "read_state", lambda path, rounds, config, run_dir: seen.append(config) or
                        {"next_round": 1})
    monkeypatch.setattr(resume, "check_place", lambda *a: None)
    cfg = resume._checked_config(tmp_path, None)
    assert (cfg.swarm.protocol.schedule, cfg.swarm.protocol.round_s) == ("clock", "auto")
    assert [identity(c, 1)["config_sha256"] for c in seen] == [identity(dumped | {"swarm": saved.model_dump(
        mode="json")["swarm"]}, 1)["config_sha256"]]
    del dumped["swarm"]["protocol"]["round_s"]  # (no clock field left: a run from before the default, one line)
    (tmp_path / "config.yaml").write_text(config_yaml.dump(dumped))
    with pytest.raises(ConfigError, match="records none"):
        resume._checked_config(tmp_path, None)
