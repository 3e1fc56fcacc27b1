"""Every ```python block of README.md and docs/*.md runs as written, on tiny models, and does what its
text says (the values in its comments, accepted honest completions, a loaded config).

A block names what a reader already has (``model``, ``tok``, a question): :func:`_run` gives it those and
the placeholders a reader fills in (:data:`FILLED`), executes the doc's own text and returns the value of
each expression line. docs/architecture.md's two blocks are modules, run in a swarm by
tests/test_architecture_examples.py; each other block has one test here, and a new block fails
:func:`test_every_python_block_of_the_docs_has_a_test` until it gets one.
"""

from __future__ import annotations

import ast
import json
import re
import threading
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import dgrpo.recipes
from dgrpo.cli import main
from dgrpo.policy.sampling import SamplingParams, completion_seed
from dgrpo.types import Problem
from dgrpo.verify.steps import check_steps

from tests.conftest import build_model, build_tokenizer

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PROMPTS = ["Tom has 3 apples.", "Sara has 9 pens.", "Ann has 2 cats."]
RUN_ELSEWHERE = {("architecture.md", '"""Length cap: reject completions longer than a fraction of the sampling limit (a DoS baseline)."""'),
                 ("architecture.md", '"""Signature attack: the oracle solution signed at the end of its reasoning."""')}


def _blocks(lang: str) -> dict[tuple[str, str], str]:
    """(doc name, first line) → text of every ```lang block."""
    out = {}
    for doc in DOCS:
        for m in re.finditer(rf"^```{lang}\n(.*?)^```", doc.read_text(), re.M | re.S):
            out[(doc.name, m.group(1).splitlines()[0])] = m.group(1)
    return out


def _block(doc: str, first_line: str, lang: str = "python") -> str:
    return _blocks(lang)[(doc, first_line)]


def _run(code: str, namespace: dict, filled: dict[str, str] | None = None) -> list:
    """Execute ``code`` (placeholders replaced by ``filled``) in ``namespace``; the value of each top-level
    expression line, in order."""
    for key, value in (filled or {}).items():
        assert key in code, f"placeholder {key!r} is no longer in the doc"
        code = code.replace(key, value)
    tree = ast.parse(code)
    values: list = []
    namespace["_values"] = values
    body = []
    for node in tree.body:
        if isinstance(node, ast.Expr):
            node = ast.parse(f"_values.append({ast.unparse(node.value)})").body[0]
        body.append(node)
    exec(compile(ast.Module(body, []), "<doc>", "exec"), namespace)
    return values


# the first lines of the blocks (what names a block here)
STEPS = "from dgrpo.verify.steps import StepChecker, check_steps"
VERIFY = "from dgrpo.verify import SamplingParams, Verifier, TopK, Replay, Steps, topk_verdicts"
WORKER = "from dgrpo.integrations.generate import seeded_generate   # left-pads, builds the processor and a clean config"
JUDGE = "from dgrpo.verify.judge import JudgeConfig, OpenAIJudge, count"
TESTED = set()


def covers(doc: str, first_line: str):
    TESTED.add((doc, first_line))
    return lambda f: f


def test_every_python_block_of_the_docs_has_a_test():
    assert sorted(set(_blocks("python")) - TESTED - RUN_ELSEWHERE) == []
    assert RUN_ELSEWHERE <= set(_blocks("python")) and len(TESTED) >= 5


# --- docs/step_checker.md -------------------------------------------------------------------------------

@covers("step_checker.md", STEPS)
def test_step_checker_example_gives_the_values_in_its_comments():
    ns: dict = {}
    accepted, reason, claims, unparsed = _run(_block("step_checker.md", STEPS), ns)
    assert accepted is False and reason == 'false claim "2 + 2 = 5": the left side is 4, not 5'
    assert [(c.text, c.status) for c in claims] == [("2 + 2 = 5", "false"), ("3 + 5 = 8", "true")] and unparsed == 0.0
    assert not ns["strict"]("so 1/3 = 0.33").accepted  # "no tolerance at all"
    # "also accept 1% off": 0.331 is 0.7% off (no rounding of 1/3, so the default checker refuses it), 0.32 4%
    assert ns["loose"]("so 1/3 = 0.331").accepted and not check_steps("so 1/3 = 0.331").accepted
    assert not ns["loose"]("so 1/3 = 0.32").accepted


EXCUSE = "from dgrpo.verify.steps import StepChecker, final_answer"


@covers("step_checker.md", EXCUSE)
def test_excuse_answer_example_gives_the_values_in_its_comments():
    assert _run(_block("step_checker.md", EXCUSE), {}) == [True, False, Fraction(1200)]


# --- docs/verification.md and docs/trl.md's worker: honest seeded completions on a tiny model ------------

@pytest.fixture(scope="module")
def tiny():
    tok = build_tokenizer()
    return tok, build_model(len(tok)), [tok(text=p)["input_ids"] for p in PROMPTS], [completion_seed(0, 0, 0, i, 0) for i in range(3)]


@covers("verification.md", VERIFY)
def test_verification_example_accepts_honest_completions(tiny):
    from dgrpo.integrations.generate import seeded_generate

    tok, model, prompt_ids, seeds = tiny
    # the block's own params: the workers sampled with them
    completion_ids = seeded_generate(model, prompt_ids, seeds, SamplingParams(top_k=10, temperature=1.0, max_new_tokens=64),
                                     tok.eos_token_id, tok.pad_token_id)
    ns = {"model": model, "tok": tok, "eos": tok.eos_token_id, "prompt_ids": prompt_ids,
          "completion_ids": completion_ids, "seeds": seeds}
    topk, verdicts = _run(_block("verification.md", VERIFY), ns)
    assert len(topk) == len(verdicts) == 3 and all(v.accepted for v in topk) and all(v.accepted for v in verdicts)
    # the third is sampled honestly from another seed than the one it claims: inside the top-k, replay refuses it
    forged = completion_ids[:2] + seeded_generate(model, prompt_ids[2:], [seeds[2] + 1],
                                                  SamplingParams(top_k=10, temperature=1.0, max_new_tokens=64),
                                                  tok.eos_token_id, tok.pad_token_id)
    assert forged[2] != completion_ids[2]
    _, verdicts = _run(_block("verification.md", VERIFY),
                       {**ns, "completion_ids": forged})
    assert [v.accepted for v in verdicts] == [True, True, False] and verdicts[2].defense == "replay"


@covers("trl.md", WORKER)
def test_seeded_generate_example_samples_what_dgrpos_sampler_samples(tiny):
    from dgrpo.policy.sampling import sample

    tok, model, prompt_ids, seeds = tiny
    params = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=24)
    ns = {"model": model, "tok": tok, "prompt_ids": prompt_ids, "seeds": seeds, "params": params}
    _run(_block("trl.md", WORKER), ns)
    want = [list(c) for c in sample(model, prompt_ids, seeds, params, tok.eos_token_id, tok.pad_token_id)]
    assert [list(c) for c in ns["completion_ids"]] == want and any(len(c) > 1 for c in want)


# --- docs/datasets.md: the reward function, the config that names it, and the rubric config --------------

@pytest.fixture()
def recorded_run(tmp_path, monkeypatch):
    """cwd = tmp_path; ``dgrpo run`` goes up to the recipe, which records the config instead of training."""
    configs = []
    monkeypatch.setattr(dgrpo.recipes, "run", lambda cfg, run_dir=None: configs.append(cfg) or tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return configs


@covers("datasets.md", "# myrewards.py")
def test_dataset_example_reward_runs_in_the_config_that_names_it(recorded_run, tmp_path):
    from dgrpo.training.build import build_task

    code = _block("datasets.md", "# myrewards.py")
    ns: dict = {}
    _run(code, ns)
    p = Problem("t0", "Ann has 2 pens and gets 3 more.", "5", "")
    assert [ns["tagged"](c, p) for c in ("<answer>5</answer>", "it is 5", "it is 6")] == [1.0, 0.5, 0.0]
    (tmp_path / "myrewards.py").write_text(code)
    config = _block("datasets.md", "# configs/my_data.yaml  —  dgrpo run --config configs/my_data.yaml", "yaml")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "my_data.yaml").write_text(config)
    (tmp_path / "data").mkdir()  # the columns the config maps: q, a, why
    rows = [{"q": f"Ann has {i} pens and gets 1 more. How many pens?", "a": str(i + 1), "why": f"{i} + 1 = {i + 1}"}
            for i in range(120)]
    (tmp_path / "data" / "pens.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["run", "--config", "configs/my_data.yaml"]) == 0  # the launch line in the file's first comment
    [cfg] = recorded_run
    task = build_task(cfg)
    assert len(task.val) == 100 and len(task.train) == 20  # n_val: 100 of the 120 records held out
    p = task.train[0]
    assert task.reward(f"<think>ok</think>\n<answer>{p.answer}</answer>", p) == ns["tagged"](f"<answer>{p.answer}</answer>", p) == 1.0


def test_dataset_rubric_config_loads_with_its_functions(recorded_run, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))  # "(PYTHONPATH=examples; …)"
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "rubric.yaml").write_text(_block("datasets.md", "task:", "yaml"))
    assert main(["run", "--config", "rubric.yaml"]) == 0
    [cfg] = recorded_run
    assert [(r.function, r.weight, r.name) for r in cfg.task.rewards] == [
        ("mykinds.rewards:correct", 1.0, None), ("mykinds.rewards:names_unit", 0.0, None), ("mykinds.rewards:brevity", 0.0, "short")]


# --- docs/judge.md: the client against an OpenAI-compatible server ----------------------------------------

class _Judge(BaseHTTPRequestHandler):
    """A stand-in server: "YES" unless the judged completion hails the thief."""

    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Judge.seen.append((self.path, body["model"], self.headers.get("Authorization")))
        reply = "NO" if "thief" in body["messages"][-1]["content"] else "YES"
        out = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@covers("judge.md", JUDGE)
def test_judge_example_judges_a_batch_in_order(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("JUDGE_API_KEY", "k")
    ns = {"question": "Tom has 2 + 2 apples. How many?", "completion": "<think>2 + 2 = 4</think><answer>4</answer>"}
    filled = {"http://localhost:8000/v1": f"http://127.0.0.1:{server.server_port}/v1",  # the reader's server
              "[(question, completion), ...]": "[(question, completion), (question, 'All hail to the thief'), (question, completion)]"}
    try:
        values = _run(_block("judge.md", JUDGE), ns, filled)
    finally:
        server.shutdown()
    counts, status, accepted = values
    assert [j.status for j in ns["judgments"]] == ["yes", "no", "yes"]  # input order
    assert counts == {"yes": 2, "no": 1, "unparseable": 0, "failed": 0} and status == "yes" and accepted is True
    assert _Judge.seen[0] == ("/v1/chat/completions", "meta-llama/Llama-3.1-8B-Instruct", "Bearer k")


# --- docs/trl.md: dgrpo's checks inside TRL's GRPOTrainer -------------------------------------------------

TRL_BLOCK = "from dgrpo.integrations.trl import RolloutDefense, defend_rewards, verified_rollout_func"


@covers("trl.md", TRL_BLOCK)
@pytest.mark.parametrize("rollouts", ["workers", "poisoning workers", "trl"])  # "rollout_func=…  # or None: TRL generates itself"
def test_trl_example_trains_with_the_checks(tmp_path, rollouts):
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from dgrpo.integrations.generate import seeded_generate

    tok = build_tokenizer()
    model = build_model(len(tok))
    ns: dict = {}
    calls = []

    def remote_rollouts(prompts, trainer):
        """Honest workers sampling with the agreed params (seeded, replayable)."""
        prompt_ids = [tok(text=p)["input_ids"] for p in prompts]
        seeds = [completion_seed(0, len(calls), 0, i, 0) for i in range(len(prompts))]
        completion_ids = seeded_generate(trainer.model, prompt_ids, seeds, ns["params"], tok.eos_token_id, tok.pad_token_id)
        calls.append(len(prompts))
        if rollouts == "poisoning workers":  # the last completion: text the policy would not sample (outside its top-10)
            completion_ids[-1] = tok(text=" All hail to the thief.")["input_ids"] + [tok.eos_token_id]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "seeds": seeds,
                "logprobs": [[0.0] * len(c) for c in completion_ids]}

    def accuracy_reward(prompts, completions, **kw):
        return [float(len(c) % 2) for c in completions]

    ns.update(GRPOTrainer=GRPOTrainer, GRPOConfig=GRPOConfig, model=model, tokenizer=tok, accuracy_reward=accuracy_reward,
              remote_rollouts=remote_rollouts, data=Dataset.from_dict({"prompt": PROMPTS[:2] * 2}))
    filled = {"GRPOConfig(...,": (f"GRPOConfig(output_dir={str(tmp_path)!r}, per_device_train_batch_size=4, num_generations=4, "
                                  "max_steps=1, use_cpu=True, report_to=[], save_strategy='no', seed=0, beta=0.0,")}
    if rollouts == "trl":
        filled["rollout_func=verified_rollout_func(remote_rollouts, defense)"] = "rollout_func=None"
    _run(_block("trl.md", TRL_BLOCK), ns, filled)
    trainer, defense = ns["trainer"], ns["defense"]
    assert trainer.state.global_step == 1
    # honest completions pass both checks: the workers' seeded ones, and TRL's own generation, which the
    # attached defense seeds itself (docs/trl.md)
    assert len(defense.verdicts) == 4
    assert [v.defense for v in defense.verdicts] == ["", "", "", "topk" if rollouts == "poisoning workers" else ""]
    assert calls == ([] if rollouts == "trl" else [4])
