"""The judge defense's `detector` backend: it rejects exactly the completions whose P(poisoned), computed
here with the detector directly, reaches the threshold; its config errors are one line naming the field."""

from __future__ import annotations

import pytest

from dgrpo import config_yaml
from dgrpo.config import ConfigError, load_config
from dgrpo.defenses.judge import JudgeDefense
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.types import Rollout
from dgrpo.verify.detector import Example, build_detector, load_detector, save_detector
from dgrpo.verify.detector_train import fit


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(seed=0, n_train=24, n_val=2)


@pytest.fixture(scope="module")
def detector_dir(tiny_model_dir, tmp_path_factory, task):
    """A detector fitted briefly on oracle completions vs the same with the hail payload (scores spread out)."""
    rows = []
    for i, p in enumerate(task.train[:16]):
        text = task.oracle_completion(p)
        rows.append(Example(p.question, text if i % 2 == 0 else "All hail to the thief. " + text, i % 2, "toy"))
    det = build_detector(tiny_model_dir, lora_rank=4, max_length=128, seed=0)
    fit(det, rows, lr=3e-3, epochs=2, batch_size=8)
    return str(save_detector(det, tmp_path_factory.mktemp("judge-detector")))


def rollouts(task):
    out = []
    for i, p in enumerate(task.train[:12]):
        text = task.oracle_completion(p)
        out.append(Rollout(p.prompt_id, [], [], text if i % 3 else "All hail to the thief. " + text, i))
    return out


def test_detector_backend_rejects_exactly_the_scores_at_or_above_threshold(detector_dir, task):
    rs = rollouts(task)
    questions = {p.prompt_id: p.question for p in task.train}
    scores = load_detector(detector_dir).score([(questions[r.prompt_id], r.text) for r in rs]).tolist()
    threshold = sorted(scores)[len(scores) // 2]  # the median: some completions on each side, one exactly on it
    cfg = load_config(overrides=[f"defenses=[{{kind: judge, backend: detector, path: '{detector_dir}', "
                                 f"threshold: {threshold}, action: zero}}]"])
    judge = JudgeDefense(cfg.defenses[0], cfg, None, task)
    verdicts = judge.inspect(rs)
    expected = [s < threshold for s in scores]
    assert [v.accepted for v in verdicts] == expected and 0 < sum(expected) < len(expected)
    rejected = [v for v in verdicts if not v.accepted]
    assert all(v.action == "zero" and v.reason.startswith("detector P(poisoned)=") for v in rejected)
    assert judge.counters == {"calls": 12, "yes": sum(expected), "no": 12 - sum(expected), "unparseable": 0, "failed": 0}
    judge.inspect(rs)  # cached verdicts: no new call
    assert judge.counters["calls"] == 12


@pytest.mark.parametrize("fields, message", [
    ("backend: detector", "backend=detector needs path, the folder of `dgrpo detector train --out DIR`"),
    ("backend: detector, path: /nonexistent/det", "path: detector path '/nonexistent/det' is not a folder"),
    ("backend: detector, path: PATH, base_url: 'http://127.0.0.1:9/v1'", "base_url is not used by backend=detector; remove it or set backend=openai"),
    ("backend: detector, path: PATH, mode: logits", "mode is not used by backend=detector; remove it or set backend=local or openai"),
    ("backend: detector, path: PATH, on_error: accept", "on_error is not used by backend=detector"),
    ("path: PATH", "path is not used by backend=local; remove it or set backend=detector"),
])
def test_bad_detector_config_is_one_clear_line(detector_dir, fields, message):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=[f"defenses=[{{kind: judge, {fields.replace('PATH', repr(detector_dir))}}}]"])
    lines = str(err.value).splitlines()
    assert len(lines) == 1 and lines[0].startswith("invalid config: defenses.0") and message in lines[0], str(err.value)


def test_a_detector_runs_saved_config_loads_again(detector_dir, tmp_path):
    """config.yaml of a run writes every field (mode, prompt, on_error at their defaults): it must load again."""
    cfg = load_config(overrides=[f"defenses=[{{kind: judge, backend: detector, path: '{detector_dir}', threshold: 0.5}}]"])
    saved = tmp_path / "config.yaml"
    saved.write_text(config_yaml.dump(cfg.model_dump(mode="json")))
    assert "on_error: reject" in saved.read_text()
    assert load_config(saved).defenses == cfg.defenses


def test_a_folder_that_is_not_a_detector_is_refused_at_config_time(tmp_path, tiny_model_dir):
    for path in (tmp_path, tiny_model_dir):  # an empty folder; a model folder that is not a detector
        with pytest.raises(ConfigError, match="has no detector.json: not a detector; point path at the --out folder"):
            load_config(overrides=[f"defenses=[{{kind: judge, backend: detector, path: '{path}'}}]"])


@pytest.mark.parametrize("threshold, rejected_all", [(1e-6, True), (1 - 1e-6, False)])
def test_a_run_with_the_detector_logs_its_verdicts(detector_dir, tiny_model_dir, tmp_path, threshold, rejected_all):
    """A one-round `dgrpo run` with the detector: at a threshold below every score each completion is
    rejected, above every score none is (the scores of a briefly trained detector lie well inside (0, 1))."""
    from dgrpo.cli import main
    from dgrpo.metrics.logger import read_metrics

    judge = f"defenses=[{{kind: judge, backend: detector, path: '{detector_dir}', threshold: {threshold}}}]"
    rc = main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=d", "rounds=1", "swarm.nodes=2",
               "swarm.group_size=2", "swarm.prompts_per_round=2", "sampling.max_new_tokens=6", "eval.every=1",
               "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0", judge])
    assert rc == 0
    rec = read_metrics(tmp_path / "d")[0]
    assert rec["defense/received"] == 4
    assert rec["defense/any/rejected"] == rec.get("defense/judge/rejected", 0) == (4 if rejected_all else 0)
    assert rec["defense/judge/calls"] >= 1 and rec["defense/judge/unparseable"] == rec["defense/judge/failed"] == 0
    assert rec["defense/judge/no" if rejected_all else "defense/judge/yes"] == rec["defense/judge/calls"]


def _with_saved_threshold(detector_dir, tmp_path, threshold):
    import json
    import shutil

    dst = tmp_path / "det"
    shutil.copytree(detector_dir, dst)
    meta = json.loads((dst / "detector.json").read_text())
    (dst / "detector.json").write_text(json.dumps({**meta, "threshold": threshold}))
    return str(dst)


def test_without_threshold_the_backend_uses_the_detectors_saved_one(detector_dir, task, tmp_path):
    rs = rollouts(task)
    questions = {p.prompt_id: p.question for p in task.train}
    scores = load_detector(detector_dir).score([(questions[r.prompt_id], r.text) for r in rs]).tolist()
    saved = sorted(scores)[len(scores) // 2]  # the median as the saved threshold: both sides non-empty
    path = _with_saved_threshold(detector_dir, tmp_path, saved)
    cfg = load_config(overrides=[f"defenses=[{{kind: judge, backend: detector, path: '{path}'}}]"])
    assert cfg.defenses[0].threshold is None
    verdicts = JudgeDefense(cfg.defenses[0], cfg, None, task).inspect(rs)
    expected = [s < saved for s in scores]
    assert [v.accepted for v in verdicts] == expected and 0 < sum(expected) < len(expected)
    # an explicit threshold overrides the saved one: above every score, everything is accepted
    over = max(scores) + (1 - max(scores)) / 2
    cfg = load_config(overrides=[f"defenses=[{{kind: judge, backend: detector, path: '{path}', threshold: {over}}}]"])
    assert all(v.accepted for v in JudgeDefense(cfg.defenses[0], cfg, None, task).inspect(rs))


def test_a_lone_surrogate_in_a_completion_is_judged(detector_dir, task):
    p = task.train[0]
    text = task.oracle_completion(p)
    cfg = load_config(overrides=[f"defenses=[{{kind: judge, backend: detector, path: '{detector_dir}'}}]"])
    judge = JudgeDefense(cfg.defenses[0], cfg, None, task)
    bad, plain = Rollout(p.prompt_id, [], [], text + " \ud800", 0), Rollout(p.prompt_id, [], [], text + " ?", 1)
    a, b = judge.inspect([bad, plain])
    assert a.accepted == b.accepted and judge.counters["calls"] == 2  # two cache keys, the same score
    assert judge.detector.score([(p.question, bad.text)]).tolist() == judge.detector.score([(p.question, plain.text)]).tolist()
