"""Config errors of the judge defense's backends: one line naming the field and the fix."""

import pytest

from dgrpo import config_yaml
from dgrpo.config import ConfigError, load_config
from dgrpo.defenses.judge import JudgeDefenseConfig

URL = "base_url: 'http://127.0.0.1:9/v1'"


def judge(fields: str):
    return load_config(overrides=[f"defenses=[{{kind: judge, {fields}}}]"])


@pytest.mark.parametrize("fields, message", [
    ("backend: openai, model: m", "backend=openai needs base_url"),
    ("backend: openai, model: m, base_url: localhost:8000", "needs base_url, the server's root"),
    (f"backend: openai, {URL}", "backend=openai needs model"),
    (f"backend: openai, model: m, {URL}, mode: logits", "mode=logits reads the judge's logits"),
    (f"backend: openai, model: m, {URL}, dtype: bfloat16", "dtype is not used by backend=openai"),
    (f"backend: openai, model: m, {URL}, threshold: 0.4, dtype: bfloat16, path: d", "dtype, path are not used by backend=openai"),
    (f"backend: openai, model: m, {URL}, threshold: 1.0", "threshold: Input should be less than 1"),
    (URL, "base_url is not used by backend=local; remove it or set backend=openai"),
    ("max_concurrency: 4", "max_concurrency is not used by backend=local"),
    ("backend: vllm", "backend: Input should be 'local', 'openai' or 'detector'"),
    (f"backend: openai, model: m, {URL}, max_concurrency: 0", "max_concurrency: Input should be greater than or equal to 1"),
    (f"backend: openai, model: m, {URL}, timeout_s: 0", "timeout_s: Input should be greater than 0"),
    (f"backend: openai, model: m, {URL}, on_error: retry", "on_error: Input should be 'reject' or 'accept'"),
    ("parse: loose", "parse: Input should be 'strict' or 'leading'"),
    ("unparsed: reject", "unparsed: Extra inputs are not permitted"),
    # u37: extra_body is merged over the request: `messages` there asked the judge a fixed question (accepted all)
    (f"backend: openai, model: m, {URL}, extra_body: {{messages: [{{role: user, content: 'Is 2+2=4?'}}]}}",
     "extra_body sets messages, which the judge's request sets itself"),
    (f"backend: openai, model: m, {URL}, threshold: 0.4, extra_body: {{top_logprobs: 1, top_k: 10}}",
     "extra_body sets top_logprobs, which the judge's request sets itself"),
])
def test_bad_judge_config_is_one_clear_line(fields, message):
    with pytest.raises(ConfigError) as err:
        judge(fields)
    lines = str(err.value).splitlines()  # config errors are one line (the CLI prints them so)
    assert len(lines) == 1 and lines[0].startswith("invalid config: defenses.0") and message in lines[0], str(err.value)


@pytest.mark.parametrize("fields", [
    f"backend: openai, model: m, {URL}, granularity: step, prompt: step, threshold: 0.47, max_steps: 8",
    f"backend: openai, model: m, {URL}, temperature: 0.7",
    "mode: logits, threshold: 0.5",
])
def test_a_runs_saved_config_loads_again(tmp_path, fields):
    """A run's config.yaml writes every field, those a backend does not read at their defaults (training/build.py);
    `dgrpo resume` must load it: an unused field at its default is not an error, the same field changed still is."""
    cfg = judge(fields)
    saved = tmp_path / "config.yaml"
    saved.write_text(config_yaml.dump(cfg.model_dump(mode="json")))
    assert "dtype: float32" in saved.read_text() and "path: null" in saved.read_text()
    assert load_config(saved).defenses == cfg.defenses
    with pytest.raises(ConfigError, match="(dtype|max_concurrency) is not used by backend"):
        bad = "dtype: bfloat16" if "openai" in fields else "max_concurrency: 4"
        load_config(saved, [f"defenses=[{{kind: judge, {fields}, {bad}}}]"])


def test_api_key_variable_must_be_set(monkeypatch):
    fields = f"backend: openai, model: m, {URL}, api_key_env: DGRPO_TEST_JUDGE_KEY"
    monkeypatch.delenv("DGRPO_TEST_JUDGE_KEY", raising=False)
    with pytest.raises(ConfigError, match="api_key_env=DGRPO_TEST_JUDGE_KEY is not set in the environment"):
        judge(fields)
    monkeypatch.setenv("DGRPO_TEST_JUDGE_KEY", "sk-test")
    assert judge(fields).defenses[0].api_key_env == "DGRPO_TEST_JUDGE_KEY"


def test_openai_fields_reach_the_client_config():
    d = judge(f"backend: openai, model: m, {URL}, timeout_s: 2.5, max_retries: 1, backoff_s: 0.1, max_concurrency: 3, "
              "max_new_tokens: 1, logit_bias: {7: 100}, parse: leading, extra_body: {top_k: 10}, threshold: 0.3").defenses[0]
    c = d.client_config()
    assert (c.base_url, c.model, c.api_key_env, c.timeout_s, c.max_retries, c.backoff_s, c.max_concurrency,
            c.max_tokens, dict(c.logit_bias), c.parse, dict(c.extra_body), c.threshold) == \
        ("http://127.0.0.1:9/v1", "m", None, 2.5, 1, 0.1, 3, 1, {7: 100.0}, "leading", {"top_k": 10}, 0.3)
    # worst case of one judgment: 2 attempts of 2.5 s and one 0.1 s backoff
    assert c.worst_case_s == pytest.approx(5.1)


def test_defaults_fail_closed():
    cfg = JudgeDefenseConfig()
    assert (cfg.backend, cfg.on_error, cfg.parse, cfg.mode) == ("local", "reject", "strict", "generate")


def test_a_judge_run_resumed_logs_what_a_straight_run_logs(tmp_path, tiny_model_dir):
    """`dgrpo resume` of a run with a judge defense continues it exactly (docs/training.md): the record's cumulative
    defense/judge/* counters go on from the checkpoint's round, not from zero."""
    from dgrpo.cli import main
    from dgrpo.metrics.logger import read_metrics

    args = [f"model.name={tiny_model_dir}", "threads=1", "swarm.nodes=2", "swarm.group_size=4", "swarm.prompts_per_round=2",
            "sampling.max_new_tokens=8", "eval.every=2", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5",
            "task.few_shot=0", "defenses=[{kind: judge, mode: logits, threshold: 0.5}]"]
    assert main(["run", *args, "rounds=3", f"out_dir={tmp_path}", "name=straight"]) == 0
    assert main(["run", *args, "rounds=2", f"out_dir={tmp_path}", "name=part"]) == 0
    assert main(["resume", str(tmp_path / "part"), "rounds=3"]) == 0
    straight, part = ([{k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(tmp_path / n)]
                      for n in ("straight", "part"))
    assert straight[2]["defense/judge/calls"] > straight[1]["defense/judge/calls"] > 0
    judged = [[{k: v for k, v in r.items() if k.startswith("defense/judge/")} for r in recs] for recs in (part, straight)]
    assert judged[0] == judged[1]  # (before: round 2 of the resumed run counted 8 calls, the straight run 16)
    assert part == straight
