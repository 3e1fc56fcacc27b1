"""LLM-as-a-judge client for any OpenAI-compatible chat endpoint (paper §4.2, Appendix D.3).

For each incoming completion a judge model is asked whether the solution is correct and free of
malicious data (paper §4.2); its decision is binary, not a ranking, because early in training most
completions are gibberish and a ranking would still prefer the poisoned ones (Appendix D.3). The
caller multiplies the verifiable reward by it: r = r_verifiable × r_judge (§4.2).

People serve judges as services (vLLM, SGLang, llama.cpp, ``transformers serve``, hosted APIs), all
behind the OpenAI chat API, so this client speaks only that API through the ``openai`` package:
base URL, model name, an API key read from a named environment variable, a deadline and a size cap
per attempt (:mod:`dgrpo.verify.judge_reply`), retries with exponential backoff, and at most ``max_concurrency`` requests in flight (a thread
pool). See docs/judge.md for each server.

Every judgment ends in exactly one of four statuses, never a silent yes or no:

- ``yes`` / ``no``: the reply parsed (see :func:`parse_verdict`);
- ``unparseable``: the server answered, but not with a verdict;
- ``failed``: no answer (connection refused, timeout after the retries, HTTP error, empty choice).

:meth:`Judgment.accepted` turns a judgment into accept/reject with the caller's rule for the last
two. Worst-case wall time of one question: ``(max_retries + 1) × timeout_s`` plus the backoffs; of one judgment,
that times ``max_steps`` with ``granularity="step"`` (:attr:`JudgeConfig.worst_case_s`).
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

from dgrpo.verify.judge_prompts import PLAIN_SYSTEM, PROMPTS, USER, prompt_messages
from dgrpo.verify.judge_reply import (ReplyRefused, deadline, first_token_alternatives, http_client,  # noqa: F401
                                      parse_verdict, reply_cap, reply_text, request_choice, verdict_probabilities)
from dgrpo.verify.judge_request import extra_body_conflict
from dgrpo.verify.judge_steps import DEFAULT_MAX_STEPS, STEP_PROMPTS, split_steps, step_messages
from dgrpo.verify.markers import strip_marker_variants

# The paper's appendix D.3 describes the judge but the prompt itself is not in the paper's text
# as the project has it (docs/judge.md): this prompt follows §4.2's wording ("asking it if the
# solution is correct and without malicious data") and D.3's binary decision. The completion is
# untrusted: it sits between markers that are removed from its text, and the judge is told that
# nothing inside is addressed to it (THREATS.md: "instructions addressed to the judge").
JUDGE_SYSTEM, JUDGE_USER = PLAIN_SYSTEM, USER  # the ``plain`` prompt (verify/judge_prompts.py has every prompt)
# paper Appendix D.3: the judge samples with top-k, k = 10 ("greedy decoding performed very poorly")
PAPER_TOP_K = 10

Status = Literal["yes", "no", "unparseable", "failed"]
RETRY_STATUS = {408, 409, 429}  # and every 5xx


def build_messages(question: str, completion: str, prompt: str = "plain") -> list[dict[str, str]]:
    """The judge's chat messages for one (question, completion) pair under ``prompt`` (``plain``, ``fewshot``:
    :mod:`dgrpo.verify.judge_prompts`).

    The completion is folded and every marker variant is removed from it to a fixed point
    (:func:`dgrpo.verify.markers.strip_marker_variants`: any case, spaced, fullwidth, zero-width
    split), so the user message holds exactly one ``<<<SOLUTION`` and one ``SOLUTION>>>`` and nothing a
    reader would take for one (the question is the task's own text, not the sender's). Lone surrogates
    (which no tokenizer or JSON body encodes as UTF-8) become ``?``.
    """
    completion = strip_marker_variants(completion.encode("utf-8", "replace").decode("utf-8"))
    return prompt_messages(prompt, question, completion)


def build_step_messages(question: str, step: str, prompt: str = "step") -> list[dict[str, str]]:
    """The judge's chat messages for one step of a completion under step prompt ``prompt``
    (:mod:`dgrpo.verify.judge_steps`); the step is cleaned of marker variants as :func:`build_messages` cleans a
    completion."""
    step = strip_marker_variants(step.encode("utf-8", "replace").decode("utf-8"))
    return step_messages(prompt, question, step)


@dataclass(frozen=True)
class Judgment:
    """One judgment.

    Attributes:
        status: ``yes``, ``no``, ``unparseable`` or ``failed``.
        reason: why (``"judge said 'YES'"``, ``"timeout after 2 attempts of 0.5 s"``).
        reply: the judge's raw reply text (None when it failed).
        attempts: HTTP requests made (1 + retries used).
        seconds: wall time of this judgment, retries and backoff included.
        score: with a ``threshold`` (:class:`JudgeConfig`), p(yes) / (p(yes) + p(no)) of the reply's first
            token (``granularity="step"``: the lowest step score); None otherwise.
        steps: ``granularity="step"``: (step text, its score or None) of every step asked, in text order.
    """

    status: Status
    reason: str
    reply: str | None = None
    attempts: int = 0
    seconds: float = 0.0
    score: float | None = None
    steps: tuple[tuple[str, float | None], ...] = ()

    def accepted(self, on_error: Literal["reject", "accept"] = "reject") -> bool:
        """yes → True, no → False; ``unparseable`` and ``failed`` follow ``on_error``."""
        if on_error not in ("reject", "accept"):
            raise ValueError(f"Judgment.accepted: on_error must be 'reject' or 'accept', got {on_error!r}")
        if self.status in ("yes", "no"):
            return self.status == "yes"
        return on_error == "accept"


@dataclass(frozen=True)
class JudgeConfig:
    """Where the judge is served and how to call it.

    Args:
        base_url: the server's OpenAI-compatible root, e.g. ``http://localhost:8000/v1``.
        model: the model name the server expects (vLLM: ``--served-model-name``; ``transformers serve``:
            the model id or folder it was started with).
        api_key_env: environment variable holding the API key; None for servers that need none.
        timeout_s: each attempt's deadline (connect, request, whole reply), seconds (:mod:`~dgrpo.verify.judge_reply`).
        max_retries: extra attempts after a timeout, a connection error, HTTP 408/409/429 or 5xx.
        backoff_s, backoff_max_s: sleep ``min(backoff_max_s, backoff_s × 2^k)`` before retry k + 1.
        max_concurrency: requests in flight at most.
        max_tokens: reply length; a verdict is one word.
        temperature: 0 is greedy (reproducible); the paper samples with top-k 10 (``PAPER_TOP_K``, pass
            it through ``extra_body`` in the server's own spelling, see docs/judge.md).
        seed: the OpenAI ``seed`` field (servers that honour it sample reproducibly).
        logit_bias: token id → bias, the OpenAI ``logit_bias`` field (sent as floats).
        extra_body: extra request fields a server understands (vLLM ``{"top_k": 10}``,
            ``transformers serve`` ``{"generation_config": "{...}"}``).
        parse: ``strict`` or ``leading`` (:func:`parse_verdict`).
        threshold: None (default): the reply's text decides. A number in (0, 1): the first reply token's
            log-probabilities decide (the request asks for ``logprobs`` with ``top_logprobs``): p(yes) and
            p(no) sum the probabilities of the listed tokens that read ``yes`` / ``no`` after
            :func:`parse_verdict`'s folding (``Yes``, `` YES``, ``yes``...), and the verdict is yes when
            p(yes) / (p(yes) + p(no)) ≥ threshold; neither word among them is ``unparseable``. The served
            counterpart of the local judge's ``logits`` mode: one request gives a score, so a threshold
            can be chosen on a development split without asking the judge again.
        top_logprobs: how many first-token alternatives to ask for with a threshold (OpenAI allows 0-20).
        prompt: the judge prompt's name (:data:`dgrpo.verify.judge_prompts.PROMPTS`; with ``granularity="step"``
            a step prompt, :data:`dgrpo.verify.judge_steps.STEP_PROMPTS`).
        granularity: ``completion`` (default): one question about the whole completion. ``step``: one question
            per step (:func:`dgrpo.verify.judge_steps.split_steps`), the completion's score is the lowest step
            score, accepted when it is ≥ ``threshold`` (required); a step with no verdict makes the completion
            ``unparseable``, a failed step ``failed``.
        max_steps: ``granularity="step"``: the most steps a completion may have; one with more is rejected
            without a question (:mod:`dgrpo.verify.judge_steps`: a poison past a cap would go unjudged).

    Raises:
        ValueError: a bad field, named in one line.
    """

    base_url: str
    model: str
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout_s: float = 30.0
    max_retries: int = 2
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    max_concurrency: int = 8
    max_tokens: int = 4
    temperature: float = 0.0
    seed: int | None = None
    logit_bias: Mapping[int, float] | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    parse: Literal["strict", "leading"] = "strict"
    threshold: float | None = None
    top_logprobs: int = 20
    prompt: str = "plain"
    granularity: Literal["completion", "step"] = "completion"
    max_steps: int = DEFAULT_MAX_STEPS

    def __post_init__(self):
        checks = {"base_url": bool(self.base_url) and "://" in self.base_url, "model": bool(self.model),
                  "timeout_s": self.timeout_s > 0, "max_retries": self.max_retries >= 0,
                  "backoff_s": self.backoff_s >= 0, "backoff_max_s": self.backoff_max_s >= 0,
                  "max_concurrency": self.max_concurrency >= 1, "max_tokens": self.max_tokens >= 1,
                  "temperature": self.temperature >= 0, "parse": self.parse in ("strict", "leading"),
                  "threshold": self.threshold is None or 0 < self.threshold < 1,
                  "top_logprobs": 1 <= self.top_logprobs <= 20, "granularity": self.granularity in ("completion", "step"),
                  "prompt": self.prompt in (STEP_PROMPTS if self.granularity == "step" else PROMPTS),
                  "max_steps": isinstance(self.max_steps, int) and self.max_steps >= 1}
        for name, ok in checks.items():
            if not ok:
                fix = ("a URL such as http://localhost:8000/v1" if name == "base_url" else
                       f"granularity={self.granularity} takes {', '.join(STEP_PROMPTS if self.granularity == 'step' else PROMPTS)}"
                       if name == "prompt" else "see the field doc")
                raise ValueError(f"JudgeConfig: bad {name}={getattr(self, name)!r} ({fix})")
        if self.granularity == "step" and self.threshold is None:
            raise ValueError("JudgeConfig: granularity=step needs threshold (a completion's score is its lowest step "
                             "score, accepted when >= threshold)")
        if conflict := extra_body_conflict(self.extra_body):
            raise ValueError(f"JudgeConfig: {conflict}")

    def backoff(self, k: int) -> float:
        """Seconds to sleep before retry ``k + 1`` (k = 0 for the first retry)."""
        return min(self.backoff_max_s, self.backoff_s * 2**k)

    @property
    def question_worst_case_s(self) -> float:
        """Longest one question can take: every attempt times out, with every backoff slept."""
        return (self.max_retries + 1) * self.timeout_s + sum(self.backoff(k) for k in range(self.max_retries))

    @property
    def worst_case_s(self) -> float:
        """Longest one judgment can take: one question, or ``max_steps`` asked in turn with ``granularity="step"``."""
        return (self.max_steps if self.granularity == "step" else 1) * self.question_worst_case_s


class OpenAIJudge:
    """Binary judge over an OpenAI-compatible chat endpoint.

    Args:
        config: :class:`JudgeConfig`.

    Raises:
        ValueError: ``config.api_key_env`` names a variable that is not set.
    """

    def __init__(self, config: JudgeConfig):
        import openai  # a dependency of dgrpo; imported here so the step checker never needs it

        self.config, self._openai = config, openai
        key = "not-needed"
        if config.api_key_env is not None:
            key = os.environ.get(config.api_key_env, "")
            if not key:
                raise ValueError(f"OpenAIJudge: environment variable {config.api_key_env} is not set (set it to the "
                                 f"server's API key; a local server accepts any value, or use api_key_env=None)")
        # retries are ours (counted, with our backoff), so the client's own are off; no compressed replies (a gzip
        # bomb would pass the size cap); the HTTP client bounds each attempt (verify/judge_reply.py)
        http, timeouts, transport_errors = http_client(openai)
        self.client = openai.OpenAI(base_url=config.base_url, api_key=key, timeout=config.timeout_s, max_retries=0,
                                    http_client=http, default_headers={"Accept-Encoding": "identity"})
        self._timeouts = (openai.APITimeoutError, *timeouts)
        self._retryable = (*self._timeouts, openai.APIConnectionError, *transport_errors, ReplyRefused)  # + RETRY_STATUS
        self._cap = reply_cap(config.max_tokens, config.top_logprobs if config.threshold is not None else None)

    def _request(self, messages: list[dict]) -> dict[str, Any]:
        """The first choice of the server's reply, plain JSON (its ``message``, and ``logprobs`` when asked)."""
        c = self.config
        kwargs: dict[str, Any] = {"model": c.model, "messages": messages, "max_tokens": c.max_tokens,
                                  "temperature": c.temperature}
        if c.seed is not None:
            kwargs["seed"] = c.seed
        if c.logit_bias:
            kwargs["logit_bias"] = {str(int(k)): float(v) for k, v in c.logit_bias.items()}
        if c.extra_body:
            kwargs["extra_body"] = dict(c.extra_body)
        if c.threshold is not None:
            kwargs.update(logprobs=True, top_logprobs=c.top_logprobs)
        return request_choice(self.client, kwargs, self._cap)

    def _decide(self, choice: dict[str, Any]) -> tuple[Literal["yes", "no"] | None, str, float | None]:
        """(verdict or None, reason, score) of one reply choice; a malformed value is no verdict, never an error."""
        c, reply = self.config, reply_text(choice)
        if reply is None and choice["message"].get("content") is not None:
            return None, f"the reply's content is not text: {_short(choice['message']['content'])[:80]}", None
        if c.threshold is None:
            verdict = parse_verdict(reply, c.parse)
            reason = (f"judge said {(reply or '').strip()[:40]!r}" if verdict else
                      f"reply is not a {c.parse} YES/NO: {(reply or '')[:80]!r}")
            return verdict, reason, None
        top = first_token_alternatives(choice)
        if isinstance(top, str):  # none returned, or malformed (a NaN score would pass every comparison)
            return None, top, None
        p = verdict_probabilities(top)
        if p["yes"] + p["no"] == 0:
            return None, f"neither yes nor no among the first token's top {len(top)}", None
        score = p["yes"] / (p["yes"] + p["no"])
        verdict = "yes" if score >= c.threshold else "no"
        return verdict, f"judge p(yes)={p['yes']:.3f} p(no)={p['no']:.3f} share={score:.3f} (threshold {c.threshold:g})", score

    def judge(self, question: str, completion: str) -> Judgment:
        """Judge one completion; never raises for server trouble (it is a ``failed`` judgment)."""
        c, start = self.config, time.perf_counter()
        if c.granularity == "step":
            return self._judge_steps(question, completion, start)
        status, reason, reply, attempts, score = self._ask(build_messages(question, completion, c.prompt))
        return Judgment(status, reason, reply, attempts, time.perf_counter() - start, score)

    def _judge_steps(self, question: str, completion: str, start: float) -> Judgment:
        """``granularity="step"``: every step asked in turn (the problem first, the step last, so a server's prefix
        cache serves the rest); the lowest score decides. Stops at the first step with no verdict."""
        c, asked, attempts = self.config, [], 0
        low: tuple[float, str] | None = None
        steps = split_steps(completion)
        if len(steps) > c.max_steps:  # fail-closed: a poison past the cap would go unjudged
            return Judgment("no", f"{len(steps)} steps, over max_steps={c.max_steps}: rejected unasked (a step past "
                                  "the cap would go unjudged)", None, 0, time.perf_counter() - start, 0.0, ())
        for k, step in enumerate(steps):
            status, reason, reply, n, score = self._ask(build_step_messages(question, step, c.prompt))
            attempts += n
            asked.append((step, score))
            if score is None or not math.isfinite(score):  # failed or unparseable: the completion has no score
                return Judgment(status, f"step {k + 1} of {len(steps)} {step[:60]!r}: {reason}", reply, attempts,
                                time.perf_counter() - start, None, tuple(asked))
            if low is None or score < low[0]:
                low = (score, step)
        assert low is not None  # split_steps never returns no step
        verdict = "yes" if low[0] >= c.threshold else "no"
        return Judgment(verdict, f"lowest of {len(steps)} step scores {low[0]:.3f} (threshold {c.threshold:g}) on "
                                 f"{low[1][:60]!r}", None, attempts, time.perf_counter() - start, low[0], tuple(asked))

    def _ask(self, messages: list[dict]) -> tuple[Status, str, str | None, int, float | None]:
        """(status, reason, reply, attempts, score) of one question, retried as configured."""
        c = self.config
        for attempt in range(c.max_retries + 1):
            start = time.monotonic()
            try:
                with deadline(c.timeout_s):  # every socket operation of the attempt ends by then
                    choice = self._request(messages)
                verdict, reason, score = self._decide(choice)
            except (*self._retryable, self._openai.APIStatusError) as e:
                cause = e if isinstance(e, ReplyRefused) else e.__cause__  # (openai wraps a hook's refusal)
                refused = cause if isinstance(cause, ReplyRefused) else None
                status = (refused.status if refused else None) or getattr(e, "status_code", None)
                why = refused or e  # (a refusal's own line names its status)
                if status is not None and status not in RETRY_STATUS and status < 500:  # retrying will not help
                    return "failed", _short(why) if refused else f"HTTP {status}: {_short(e)}", None, attempt + 1, None
                if attempt < c.max_retries:
                    time.sleep(c.backoff(attempt))
                    continue
                kind = ("timeout" if isinstance(e, self._timeouts) or time.monotonic() - start >= c.timeout_s else
                        f"HTTP {status}" if status is not None else "refused reply" if refused else "connection error")
                return ("failed", f"{kind} after {attempt + 1} attempts of at most {c.timeout_s:g} s: {_short(why)}",
                        None, attempt + 1, None)
            except Exception as e:  # a malformed response: never a verdict
                return "failed", f"{type(e).__name__}: {_short(e)}", None, attempt + 1, None
            return verdict or "unparseable", reason, reply_text(choice), attempt + 1, score
        raise AssertionError("unreachable")

    def judge_batch(self, pairs: Sequence[tuple[str, str]]) -> list[Judgment]:
        """Judge (question, completion) pairs, at most ``max_concurrency`` at a time, in input order.

        Identical pairs are sent once.
        """
        unique = list(dict.fromkeys(pairs))
        if not unique:
            return []
        with ThreadPoolExecutor(max_workers=min(self.config.max_concurrency, len(unique))) as pool:
            done = dict(zip(unique, pool.map(lambda p: self.judge(*p), unique)))
        return [done[p] for p in pairs]

    def close(self) -> None:
        self.client.close()


def count(judgments: Sequence[Judgment]) -> dict[str, int]:
    """How many judgments have each status (all four keys present)."""
    out = {"yes": 0, "no": 0, "unparseable": 0, "failed": 0}
    for j in judgments:
        out[j.status] += 1
    return out


def _short(e: Exception) -> str:
    return " ".join(str(e).split())[:160]
