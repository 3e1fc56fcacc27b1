"""The judge client against a real ``transformers serve`` process running a tiny random model.

The fixture saves a randomly initialised 2-layer Llama (as in tests/conftest.py) with the tests'
tokenizer plus ``YES`` and ``NO`` as single tokens to a temp folder, starts ``transformers serve`` on that
folder (offline: HF_HUB_OFFLINE=1) on a free port, waits for ``/health`` and stops it afterwards.

A random model has no opinion, so to test "a yes answer accepts, a no answer rejects" the request
forces the reply through the OpenAI API's own ``logit_bias`` field (+100 on the YES or NO token,
greedy decoding, one token), which the server applies in its generate call. Everything else is the
real path: HTTP, the server's chat template, generation, decoding, JSON, the client's parse. The
unforced reply is checked against the same model's greedy generation run here.

Timeouts, a server that is down and the concurrency bound are measured at a counting reverse
proxy written below (a real HTTP server in front of the real one), not by mocking the client.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dgrpo.verify.judge import JudgeConfig, OpenAIJudge, build_messages, count, parse_verdict

STARTUP_S = 240  # a loaded 2-core machine; the server is usually up in 10-20 s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def judge_model(tmp_path_factory, tokenizer):
    """(folder, tokenizer) of a tiny random chat model whose vocabulary has YES and NO as tokens."""
    path = tmp_path_factory.mktemp("tiny_judge")
    tok = copy.deepcopy(tokenizer)  # the shared tokenizer of tests/conftest.py, plus two tokens
    tok.add_tokens(["YES", "NO"])
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                                         tie_word_embeddings=True)).float()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path, tok


@pytest.fixture(scope="module")
def server(judge_model):
    """Base URL of a ``transformers serve`` process pinned to the tiny model; stopped after the module."""
    path, _ = judge_model
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    log = open(path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "transformers.cli.transformers", "serve", str(path),
                             "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + STARTUP_S
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"transformers serve exited ({proc.returncode}): {(path / 'serve.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not answer in {STARTUP_S} s")
            time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/v1", str(path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class CountingProxy:
    """Reverse proxy in front of ``upstream``: holds each request ``delay`` seconds, records the most in flight."""

    def __init__(self, upstream: str, delay: float = 0.0):
        host, port = upstream.split("//")[1].split("/")[0].split(":")
        self.upstream, self.delay = (host, int(port)), delay
        self.lock, self.in_flight, self.max_in_flight, self.requests = threading.Lock(), 0, 0, 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                proxy.forward(self)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def forward(self, h: BaseHTTPRequestHandler) -> None:
        # in flight = from the request's arrival until its answer is ready to send: the counter drops
        # before the answer is written, so a client's next request cannot overlap its previous one here
        with self.lock:
            self.in_flight += 1
            self.requests += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            body = h.rfile.read(int(h.headers.get("Content-Length", 0)))
            time.sleep(self.delay)
            conn = http.client.HTTPConnection(*self.upstream, timeout=120)
            conn.request("POST", h.path, body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            status, ctype, data = resp.status, resp.getheader("Content-Type", "application/json"), resp.read()
        except OSError as e:  # the upstream failed: say so, as a gateway would
            status, ctype, data = 502, "text/plain", str(e).encode()
        finally:
            with self.lock:
                self.in_flight -= 1
        try:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout test)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def forced(tok, word: str) -> dict:
    """Config fields that make any model answer ``word``: +100 on its token, greedy, one token."""
    return {"logit_bias": {tok.convert_tokens_to_ids(word): 100.0}, "max_tokens": 1, "temperature": 0.0}


@pytest.mark.slow
def test_yes_accepts_and_no_rejects(server, judge_model):
    url, model = server
    _, tok = judge_model
    pair = ("Tom has 3 apples and buys 4. How many?", "<think>3 + 4 = 7</think><answer>7</answer>")
    for word, status, accepted in (("YES", "yes", True), ("NO", "no", False)):
        judge = OpenAIJudge(JudgeConfig(url, model, api_key_env=None, timeout_s=60, **forced(tok, word)))
        j = judge.judge(*pair)
        judge.close()
        assert (j.status, j.reply, j.attempts) == (status, word, 1), j
        assert j.accepted("reject") is accepted and j.accepted("accept") is accepted
        print(f"forced {word}: {j.seconds * 1000:.0f} ms")


def test_unforced_reply_is_the_models_greedy_output(server, judge_model):
    url, model = server
    path, tok = judge_model
    judge = OpenAIJudge(JudgeConfig(url, model, api_key_env=None, timeout_s=60, max_tokens=6))
    q, c = "What is 2 + 2?", "2 + 2 = 4"
    j = judge.judge(q, c)
    judge.close()
    # the same model, here, greedily: the server must have returned exactly this text
    from transformers import AutoModelForCausalLM

    local = AutoModelForCausalLM.from_pretrained(path).eval()
    ids = tok.apply_chat_template(build_messages(q, c), add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True)
    with torch.no_grad():
        out = local.generate(**ids, do_sample=False, max_new_tokens=6)
    expected = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert j.reply == expected
    assert j.status == (parse_verdict(expected) or "unparseable")
    # a random model does not say YES or NO: the client counts that, it does not guess
    assert j.status == "unparseable" and not j.accepted("reject") and j.accepted("accept")


def test_a_repeated_token_is_not_a_verdict(server, judge_model):
    url, model = server
    _, tok = judge_model
    judge = OpenAIJudge(JudgeConfig(url, model, api_key_env=None, timeout_s=60, **{**forced(tok, "YES"), "max_tokens": 3}))
    j = judge.judge("q", "c")
    judge.close()
    assert (j.status, j.reply) == ("unparseable", "YESYESYES")


def test_a_threshold_needs_top_logprobs_which_transformers_serve_does_not_return(server, judge_model):
    url, model = server
    _, tok = judge_model
    # transformers serve ignores `logprobs` (docs/judge.md): a threshold judge must say so, never guess from the text
    judge = OpenAIJudge(JudgeConfig(url, model, api_key_env=None, timeout_s=60, threshold=0.5, **forced(tok, "YES")))
    j = judge.judge("q", "c")
    judge.close()
    assert (j.status, j.reply, j.score) == ("unparseable", "YES", None)
    assert j.reason == "the server returned no top_logprobs (threshold needs a server that does)"


def test_http_error_is_failed_without_retries(server):
    url, _ = server
    judge = OpenAIJudge(JudgeConfig(url, "some-other-model", api_key_env=None, timeout_s=60, max_retries=3))
    j = judge.judge("q", "c")
    judge.close()
    assert j.status == "failed" and j.attempts == 1 and j.reason.startswith("HTTP 400"), j


def test_server_down_fails_within_the_bound():
    cfg = JudgeConfig(f"http://127.0.0.1:{free_port()}/v1", "m", api_key_env=None, timeout_s=1.0, max_retries=2,
                      backoff_s=0.2)
    judge = OpenAIJudge(cfg)
    start = time.perf_counter()
    j = judge.judge("q", "c")
    elapsed = time.perf_counter() - start
    judge.close()
    assert j.status == "failed" and j.attempts == 3 and "connection error" in j.reason, j
    assert 0.2 + 0.4 <= elapsed <= cfg.worst_case_s + 1.0  # both backoffs were slept; refused at once
    print(f"server down: failed after {j.attempts} attempts in {elapsed:.2f} s (bound {cfg.worst_case_s:.1f} s)")


def test_slow_server_times_out_within_the_bound(server):
    url, model = server
    proxy = CountingProxy(url, delay=5.0)
    cfg = JudgeConfig(proxy.url, model, api_key_env=None, timeout_s=0.5, max_retries=1, backoff_s=0.1)
    judge = OpenAIJudge(cfg)
    start = time.perf_counter()
    j = judge.judge("q", "c")
    elapsed = time.perf_counter() - start
    judge.close()
    proxy.close()
    assert j.status == "failed" and j.attempts == 2 and j.reason.startswith("timeout"), j
    assert proxy.requests == 2
    assert 2 * 0.5 + 0.1 <= elapsed <= cfg.worst_case_s + 1.0
    print(f"slow server (5 s): timeout after {j.attempts} attempts in {elapsed:.2f} s (bound {cfg.worst_case_s:.1f} s)")


@pytest.mark.parametrize("limit", [1, 3])
def test_concurrency_is_bounded(server, judge_model, limit):
    url, model = server
    _, tok = judge_model
    proxy = CountingProxy(url, delay=0.4)
    judge = OpenAIJudge(JudgeConfig(proxy.url, model, api_key_env=None, timeout_s=60, max_concurrency=limit,
                                    **forced(tok, "YES")))
    pairs = [(f"question {i}", f"completion {i}") for i in range(9)] + [("question 0", "completion 0")]
    start = time.perf_counter()
    js = judge.judge_batch(pairs)
    elapsed = time.perf_counter() - start
    judge.close()
    proxy.close()
    assert count(js) == {"yes": 10, "no": 0, "unparseable": 0, "failed": 0}, [j for j in js if j.status != "yes"]
    assert proxy.requests == 9  # the repeated pair was sent once
    assert proxy.max_in_flight == limit, proxy.max_in_flight
    assert elapsed >= (9 / limit) * 0.4 * 0.9  # the proxy's hold, serialised into ceil(9 / limit) waves
    print(f"max_concurrency={limit}: {proxy.requests} requests, at most {proxy.max_in_flight} in flight, "
          f"{elapsed:.2f} s")


# ----- the judge *defense* with backend openai, against the same server -----

def served_defense(url, model, tmp_path=None, **fields):
    """A JudgeDefense of backend openai built from a run config, as `dgrpo run` builds it."""
    from dgrpo.config import load_config
    from dgrpo.defenses import build_defense
    from dgrpo.tasks.arithmetic import ArithmeticTask

    body = ", ".join(f"{k}: {v}" for k, v in {"backend": "openai", "base_url": f"'{url}'", "model": f"'{model}'",
                                              **fields}.items())
    cfg = load_config(overrides=[f"defenses=[{{kind: judge, {body}}}]"])
    task = ArithmeticTask(seed=0, n_train=12, n_val=2)
    return build_defense(cfg.defenses[0], cfg, None, task), task


def rollouts_of(task, n):
    from dgrpo.types import Rollout

    return [Rollout(p.prompt_id, [], [], task.oracle_completion(p), 0) for p in task.train[:n]]


def test_defense_yes_accepts_no_rejects_and_counts(server, judge_model):
    url, model = server
    _, tok = judge_model
    for word, accepted in (("YES", True), ("NO", False)):
        d, task = served_defense(url, model, max_new_tokens=1, logit_bias=f"{{{tok.convert_tokens_to_ids(word)}: 100}}",
                                 timeout_s=60)
        verdicts = d.inspect(rollouts_of(task, 3))
        d.inspect(rollouts_of(task, 3))  # cached: no new request
        d.close()
        assert [v.accepted for v in verdicts] == [accepted] * 3
        assert d.counters == {"calls": 3, "yes": 3 * accepted, "no": 3 * (not accepted), "unparseable": 0, "failed": 0}
        if not accepted:
            assert verdicts[0].defense == "judge" and verdicts[0].reason == "judge said 'NO'"


def test_defense_unparseable_reply_follows_on_error(server):
    url, model = server
    for on_error in ("reject", "accept"):
        d, task = served_defense(url, model, max_new_tokens=4, timeout_s=60, on_error=on_error)
        [v] = d.inspect(rollouts_of(task, 1))
        d.close()
        # a random model says no YES/NO: counted unparseable, decided by on_error, said in the reason
        assert d.counters["unparseable"] == 1 and v.accepted is (on_error == "accept")
        if not v.accepted:
            assert v.reason.startswith("judge unparseable (rejected by on_error): reply is not a strict YES/NO")


@pytest.mark.parametrize("on_error", ["reject", "accept"])
def test_defense_server_down_gives_the_configured_outcome_in_time(on_error):
    d, task = served_defense(f"http://127.0.0.1:{free_port()}/v1", "m", timeout_s=1, max_retries=1, backoff_s=0.1,
                             on_error=on_error)
    start = time.perf_counter()
    verdicts = d.inspect(rollouts_of(task, 2))
    elapsed = time.perf_counter() - start
    d.inspect(rollouts_of(task, 2))  # a failure is not cached: asked again
    d.close()
    assert [v.accepted for v in verdicts] == [on_error == "accept"] * 2
    assert d.counters == {"calls": 4, "yes": 0, "no": 0, "unparseable": 0, "failed": 4}
    assert elapsed <= d.client.config.worst_case_s + 1.0
    if on_error == "reject":
        assert "judge failed (rejected by on_error): connection error after 2 attempts" in verdicts[0].reason


def test_defense_slow_server_times_out_and_concurrency_is_bounded(server, judge_model):
    url, model = server
    _, tok = judge_model
    slow = CountingProxy(url, delay=5.0)
    d, task = served_defense(slow.url, model, timeout_s=0.5, max_retries=0, max_concurrency=2)
    start = time.perf_counter()
    verdicts = d.inspect(rollouts_of(task, 2))
    elapsed = time.perf_counter() - start
    d.close()
    slow.close()
    assert not any(v.accepted for v in verdicts) and d.counters["failed"] == 2 and "timeout" in verdicts[0].reason
    assert elapsed < 5.0  # the two requests ran side by side and each gave up at 0.5 s
    held = CountingProxy(url, delay=0.3)
    d, task = served_defense(held.url, model, timeout_s=60, max_concurrency=2, max_new_tokens=1,
                             logit_bias=f"{{{tok.convert_tokens_to_ids('YES')}: 100}}")
    verdicts = d.inspect(rollouts_of(task, 6))
    d.close()
    held.close()
    assert all(v.accepted for v in verdicts) and held.requests == 6 and held.max_in_flight == 2


def test_a_run_with_a_served_judge_logs_its_counts(server, judge_model, tiny_model_dir, tmp_path):
    from dgrpo.cli import main
    from dgrpo.metrics.logger import read_metrics

    url, model = server
    _, tok = judge_model
    judge = (f"defenses=[{{kind: judge, backend: openai, base_url: '{url}', model: '{model}', max_new_tokens: 1, "
             f"timeout_s: 60, logit_bias: {{{tok.convert_tokens_to_ids('NO')}: 100}}}}]")
    rc = main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=j", "rounds=1", "swarm.nodes=2",
               "swarm.group_size=2", "swarm.prompts_per_round=2", "sampling.max_new_tokens=6", "eval.every=1",
               "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0", judge])
    assert rc == 0
    rec = read_metrics(tmp_path / "j")[0]
    assert rec["defense/received"] == 4 and rec["defense/judge/rejected"] == 4
    assert rec["defense/judge/no"] == rec["defense/judge/calls"] >= 1  # distinct completions, each judged once
    assert rec["defense/judge/failed"] == rec["defense/judge/unparseable"] == 0
