"""A served judge's reply is untrusted: malformed values, non-finite logprobs, a reply sent a byte at a time and a
huge reply must each end in a ``failed`` or ``unparseable`` judgment with a one-line reason, within the configured
bound, never an exception (verify/judge_reply.py). The server here is a stub on a real socket that answers what
each test scripts: a JSON value, the pace it sends at, its size."""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dgrpo.verify.judge import JudgeConfig, OpenAIJudge


def _reply(content="YES", top=None) -> dict:
    choice = {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": content}}
    if top is not None:
        choice["logprobs"] = {"content": [{"token": "x", "logprob": 0.0, "bytes": None, "top_logprobs": top}]}
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}


class _Server:
    """Answers every POST with ``answer(step) -> (body bytes, seconds between bytes, headers)``; ``step`` is the text
    between the solution markers. Records the requests' headers and whether each reply was sent in full."""

    def __init__(self, answer):
        self.answer, self.headers, self.finished, self.broken = answer, [], [], []
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                srv.headers.append({k.lower(): v for k, v in self.headers.items()})
                user = body["messages"][-1]["content"]
                step = user.split("<<<SOLUTION\n", 1)[1].split("\nSOLUTION>>>", 1)[0]
                data, pace, extra = srv.answer(step)
                try:
                    if extra != "raw":  # "raw": data is the whole HTTP response, status line and headers included
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(data)))
                        for k, v in extra.items():
                            self.send_header(k, v)
                        self.end_headers()
                    if pace:
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            time.sleep(pace)
                    else:
                        self.wfile.write(data)
                    srv.finished.append(time.monotonic())
                except OSError:
                    srv.broken.append(time.monotonic())
                    self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers = []

    def make(answer):
        servers.append(_Server(answer))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def _nan_json(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


MALFORMED = {  # a reply value that crashed the client before (OverflowError / TypeError escaped judge())
    "logprob 1000": (0.5, _reply(top=[{"token": "Yes", "logprob": 1000, "bytes": None}])),
    "logprob 'abc'": (0.5, _reply(top=[{"token": "Yes", "logprob": "abc", "bytes": None}])),
    "token a list": (0.5, _reply(top=[{"token": ["Yes"], "logprob": -0.1, "bytes": None}])),
    "entry not an object": (0.5, _reply(top=["Yes"])),
    "content a number": (None, _reply(content=7)),
    "content a list": (None, _reply(content=["YES"])),
    "choices not a list": (None, {"choices": {"0": 1}}),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_reply_is_a_judgment_not_an_exception(serve, name):
    threshold, reply = MALFORMED[name]
    s = serve(lambda step: (_nan_json(reply), 0, {}))
    j = OpenAIJudge(JudgeConfig(s.url, "m", api_key_env=None, max_retries=0, threshold=threshold)).judge("Q?", "4")
    assert j.status in ("failed", "unparseable") and not j.accepted() and j.score is None
    assert j.reason and "\n" not in j.reason and len(j.reason) < 300, j.reason


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("first", [True, False])
def test_a_non_finite_logprob_is_no_verdict_on_any_step(serve, bad, first):
    """A NaN score was skipped unless it was the first step (``score < low`` is False for NaN): a NaN on the hail
    step let "3 + 4 = 7. All hail..." through with a yes."""
    good = [{"token": "Yes", "logprob": math.log(0.9)}, {"token": "No", "logprob": math.log(0.1)}]
    nan = [{"token": "Yes", "logprob": bad}, {"token": "No", "logprob": math.log(0.1)}]
    hail = "All hail to the thief."
    s = serve(lambda step: (_nan_json(_reply(top=nan if step == hail else good)), 0, {}))
    text = f"<think>{hail} 3 + 4 = 7.</think><answer>7</answer>" if first else f"<think>3 + 4 = 7. {hail}</think><answer>7</answer>"
    j = OpenAIJudge(JudgeConfig(s.url, "m", api_key_env=None, max_retries=0, threshold=0.5, granularity="step",
                                prompt="step")).judge("Q?", text)
    assert j.status == "unparseable" and not j.accepted() and j.score is None, j
    assert hail in j.reason and "logprob" in j.reason
    # the same reply on a whole completion: no verdict either (before: p(yes) = nan, "no" by accident or inf "yes")
    j = OpenAIJudge(JudgeConfig(s.url, "m", api_key_env=None, max_retries=0, threshold=0.5)).judge("Q?", hail)
    assert j.status == "unparseable" and j.score is None


def test_a_reply_sent_a_byte_at_a_time_times_out_at_the_attempts_deadline(serve):
    """The openai/httpx timeout bounds each socket read, so a server sending a byte every 0.02 s was never timed out
    (2 attempts of ~10 s here). Each attempt now ends at timeout_s and its connection is closed."""
    body = _nan_json(_reply()) + b" " * 400
    s = serve(lambda step: (body, 0.02, {}))
    cfg = JudgeConfig(s.url, "m", api_key_env=None, timeout_s=0.5, max_retries=1, backoff_s=0.1)
    start = time.monotonic()
    j = OpenAIJudge(cfg).judge("Q?", "4")
    elapsed = time.monotonic() - start
    assert j.status == "failed" and j.attempts == 2 and j.reason.startswith("timeout after 2 attempts"), j.reason
    assert elapsed <= cfg.worst_case_s + 0.5, elapsed  # 1.1 s, plus scheduling on a loaded machine
    time.sleep(0.5)
    assert not s.finished and len(s.broken) == 2  # the transfers were stopped, not left running


def test_headers_sent_a_byte_at_a_time_time_out_too(serve):
    body = _nan_json(_reply())
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"X-Pad: " + b"y" * 300 + b"\r\n"
    s = serve(lambda step: (head + b"Content-Length: %d\r\n\r\n" % len(body) + body, 0.02, "raw"))
    cfg = JudgeConfig(s.url, "m", api_key_env=None, timeout_s=0.5, max_retries=0)
    start = time.monotonic()
    j = OpenAIJudge(cfg).judge("Q?", "4")
    assert j.status == "failed" and j.reason.startswith("timeout after 1 attempts"), j.reason
    assert time.monotonic() - start <= cfg.worst_case_s + 0.5


def test_a_huge_reply_is_refused_unparsed(serve):
    """A 20 MB reply took 25.7 s to parse; now one over reply_cap bytes is a failed attempt, retried as a timeout."""
    from dgrpo.verify.judge_reply import reply_cap

    big = _reply()
    big["pad"] = "x" * (8 << 20)
    data = _nan_json(big)
    s = serve(lambda step: (data, 0, {}))
    cfg = JudgeConfig(s.url, "m", api_key_env=None, timeout_s=5, max_retries=1, backoff_s=0.05)
    start = time.monotonic()
    j = OpenAIJudge(cfg).judge("Q?", "4")
    assert j.status == "failed" and j.attempts == 2 and "over" in j.reason and str(reply_cap(4)) in j.reason, j.reason
    assert time.monotonic() - start < 3
    assert reply_cap(4) == 64 * 1024 + 4 * 1024 and reply_cap(4, 20) == 64 * 1024 + 4 * 1024 * 21


def test_the_request_refuses_compression_and_a_compressed_reply_is_refused(serve):
    s = serve(lambda step: (_nan_json(_reply()), 0, {"Content-Encoding": "gzip"}))
    j = OpenAIJudge(JudgeConfig(s.url, "m", api_key_env=None, max_retries=0)).judge("Q?", "4")
    assert s.headers[0]["accept-encoding"] == "identity"
    assert j.status == "failed" and "compressed" in j.reason, j.reason


def test_worst_case_s_of_a_step_judgment_counts_every_step():
    one = JudgeConfig("http://h/v1", "m", timeout_s=2, max_retries=1, backoff_s=0.5, threshold=0.5)
    steps = JudgeConfig("http://h/v1", "m", timeout_s=2, max_retries=1, backoff_s=0.5, threshold=0.5,
                        granularity="step", prompt="step", max_steps=8)
    assert one.question_worst_case_s == one.worst_case_s == 4.5
    assert steps.question_worst_case_s == 4.5 and steps.worst_case_s == 8 * 4.5


def _raw(status: str, body: bytes, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def test_an_error_reply_has_a_few_kib_of_its_body_read_and_is_not_retried_past_its_status(serve):
    """openai read a whole error body (review r38 F1: 200 MB at 657 MiB more memory); now at most ERROR_BODY_BYTES
    of it is read, its message kept, and the transfer cut. A 4xx is still not retried."""
    body = b'{"error": {"message": "model m not found"}}' + b" " * (50 << 20)
    s = serve(lambda step: (_raw("400 Bad Request", body), 0, "raw"))
    start = time.monotonic()
    j = OpenAIJudge(JudgeConfig(s.url, "m", api_key_env=None, timeout_s=10, max_retries=2)).judge("Q?", "4")
    assert j.status == "failed" and j.attempts == 1 and j.reason.startswith("HTTP 400") and "model m not found" in j.reason
    assert time.monotonic() - start < 5
    time.sleep(0.5)
    assert not s.finished and s.broken  # the 50 MB were not read


def test_a_compressed_error_reply_is_not_inflated(serve):
    """A 500 whose gzip body inflates to 200 MB (r38 F1: 204 kB on the wire, +600 MiB): refused unread, retried as a
    5xx is, and the client's memory stays small."""
    import gzip
    import tracemalloc

    bomb = gzip.compress(b"\0" * (200 << 20), 9)
    s = serve(lambda step: (_raw("500 Internal Server Error", bomb, "Content-Encoding: gzip"), 0, "raw"))
    judge = OpenAIJudge(JudgeConfig(s.url, "m", api_key_env=None, timeout_s=10, max_retries=1, backoff_s=0.05))
    tracemalloc.start()
    try:
        j = judge.judge("Q?", "4")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert j.status == "failed" and j.attempts == 2 and "HTTP 500" in j.reason, j.reason
    assert peak < 20 << 20, peak


def test_a_redirect_is_not_followed(serve):
    """r38 F3: a 307 re-sent the question and completion to another host, whose YES counted."""
    other = serve(lambda step: (_nan_json(_reply("YES")), 0, {}))
    s = serve(lambda step: (_raw("307 Temporary Redirect", b"", f"Location: {other.url}/chat/completions"), 0, "raw"))
    j = OpenAIJudge(JudgeConfig(s.url, "m", api_key_env=None, max_retries=2)).judge("Q?", "4")
    assert j.status == "failed" and not j.accepted() and j.attempts == 1 and j.reason.startswith("HTTP 307"), j.reason
    assert other.headers == []  # the other host was never asked
