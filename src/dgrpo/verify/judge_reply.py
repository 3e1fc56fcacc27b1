"""One request of the served judge (:class:`dgrpo.verify.judge.OpenAIJudge`), bounded in time and size, and what
its reply says (:func:`parse_verdict`, :func:`verdict_probabilities`, re-exported by :mod:`dgrpo.verify.judge`).

The openai/httpx ``timeout`` bounds each socket operation, not a request: a server that sent its reply a byte at a
time was never timed out (``timeout_s=1, max_retries=1``: 12.1 s for a bound of 2.1 s), and a 20 MB reply took 25.7 s
to parse. Here:

- **Deadline**: each attempt ends ``timeout_s`` after it starts. The client's network backend gives every connect,
  write and read of the attempt only the time left (``min(timeout_s, left)``), and one that starts with none left
  fails as a timeout; httpcore then closes the connection, so the transfer stops (no watchdog thread, nothing left
  running). Not covered: the name lookup of the server's host (the system resolver has its own timeout).
- **Size**: the body is read chunk by chunk and the attempt fails as soon as it passes :func:`reply_cap` bytes (or a
  ``Content-Length`` says it would); the request asks for ``Accept-Encoding: identity`` and a compressed reply is
  refused (a small gzip body can inflate to anything).
- **Values**: the reply is read as plain JSON and every value used is checked (:func:`first_token_alternatives`,
  :func:`reply_text`): a token that is not text, a logprob that is not a finite number ≤ 0, a content that is not
  text are "no verdict" with a one-line reason, never an exception.

Past the deadline or the cap, an attempt fails and is retried as a timeout is (``ReplyRefused``).
"""

from __future__ import annotations

import importlib
import json
import math
import re
import threading
import time
import unicodedata
from contextlib import contextmanager
from typing import Any, Iterator, Literal, Sequence

REPLY_BASE_BYTES = 64 * 1024  # headers the server adds, usage, timings, ids
TOKEN_BYTES = 1024  # one token's entry (text, or text, logprob and bytes), JSON-escaped, generously
LOGPROB_SLACK = 1e-3  # a logprob above this is no probability (exp > 1.001); rounding may leave 0 a hair above
_local = threading.local()
_EDGE = " \t\r\n*_`'\".!:;"  # markdown emphasis, quotes and final punctuation around a one-word reply
_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_LABEL = re.compile(r"^(?:final\s+answer|answer|verdict|decision)\s*[:\-]\s*", re.IGNORECASE)
_WORD = re.compile(r"[a-z]+")


ERROR_BODY_BYTES = 4096  # what is read of a reply that is not a plain 2xx (an HTTP error's message), at most


class ReplyRefused(Exception):
    """A reply over the size cap, compressed, or not a 2xx (``status``: its HTTP status; a redirect is not
    followed): the attempt failed (retried as a timeout is, or by its status)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def _refuse_unread(response) -> None:
    """httpx response hook, run before any of the body is read: a compressed reply is refused unread, a reply that
    is not a 2xx (an error, a redirect) has at most :data:`ERROR_BODY_BYTES` of its body read, for its message
    (review r38 F1: openai read and inflated a whole error body, 200 kB of gzip became 600 MiB; F3: a redirect
    re-sent the question to another host and that host's YES counted)."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if response.status_code < 300 and encoding in ("", "identity"):
        return
    text = b""
    if encoding in ("", "identity"):
        for chunk in response.iter_raw():
            text += chunk
            if len(text) >= ERROR_BODY_BYTES:
                break
    response.close()
    if response.status_code >= 300:
        raise ReplyRefused(f"HTTP {response.status_code}: {show(text[:ERROR_BODY_BYTES].decode('utf-8', 'replace'), 200)}",
                           response.status_code)
    raise ReplyRefused(f"the reply is compressed (Content-Encoding: {encoding[:20]}), which the request refused")


def reply_cap(max_tokens: int, top_logprobs: int | None = None) -> int:
    """Most body bytes one reply may have: 64 KiB plus 1 KiB per reply token, times ``1 + top_logprobs`` when the
    request asks for logprobs (each token then carries its alternatives): ``max_tokens=4`` → 68 KiB,
    ``max_tokens=4, top_logprobs=20`` → 148 KiB. A judge's reply is a few KiB."""
    return REPLY_BASE_BYTES + max_tokens * TOKEN_BYTES * (1 + (top_logprobs or 0))


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every socket operation of this thread inside the block ends by ``seconds`` from now."""
    _local.end = time.monotonic() + seconds
    try:
        yield
    finally:
        _local.end = None


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout`` cut to the time left before this thread's deadline; ``error`` when none is left."""
    end = getattr(_local, "end", None)
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise error("the attempt's deadline (timeout_s) passed")
    return left if timeout is None else min(timeout, left)


class _Stream:
    """An httpcore network stream whose every operation ends by the thread's deadline (``hc``: the httpcore module)."""

    def __init__(self, inner, hc):
        self._inner, self._hc = inner, hc

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, self._hc.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, self._hc.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout, self._hc.ConnectTimeout)),
                       self._hc)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend:
    """An httpcore network backend whose connections are :class:`_Stream` s."""

    def __init__(self, inner, hc):
        self._inner, self._hc = inner, hc

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        stream = self._inner.connect_tcp(host, port, _left(timeout, self._hc.ConnectTimeout), local_address, socket_options)
        return _Stream(stream, self._hc)

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _Stream(self._inner.connect_unix_socket(path, _left(timeout, self._hc.ConnectTimeout), socket_options),
                       self._hc)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def http_client(openai_module) -> tuple[Any, tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """(the openai client's HTTP client with its network backend bounded by :func:`deadline`, the HTTP library's
    timeout errors, its other transport errors). The library is the one the installed openai uses (httpx, or httpx2
    for openai 3.x) and its httpcore. It connects directly (a transport of our own: proxy variables are not used),
    follows no redirect, and reads no more than :data:`ERROR_BODY_BYTES` of a reply that is not a 2xx and nothing of
    a compressed one (:func:`_refuse_unread`).

    Raises:
        RuntimeError: the HTTP library has no network backend where this expects it (one line).
    """
    client_cls = next(c for c in openai_module.DefaultHttpxClient.__mro__ if c.__name__ == "Client")
    hx = importlib.import_module(client_cls.__module__.split(".")[0])
    transport = hx.HTTPTransport(limits=hx.Limits(max_connections=1000, max_keepalive_connections=100))
    pool = getattr(transport, "_pool", None)
    if not hasattr(pool, "_network_backend"):
        raise RuntimeError(f"judge: {hx.__name__} {getattr(hx, '__version__', '?')} has no network backend to bound; "
                           "the judge's per-attempt deadline needs httpx 0.2x / httpx2 with httpcore's ConnectionPool")
    pool._network_backend = _Backend(pool._network_backend, importlib.import_module(type(pool).__module__.split(".")[0]))
    client = openai_module.DefaultHttpxClient(transport=transport, follow_redirects=False,
                                              event_hooks={"request": [], "response": [_refuse_unread]})
    return client, (hx.TimeoutException,), (hx.TransportError,)


def request_choice(client, kwargs: dict[str, Any], cap: int) -> dict[str, Any]:
    """The first choice (plain JSON) of one chat completion request, its body read up to ``cap`` bytes.

    Raises:
        ReplyRefused: the body is over ``cap`` bytes, compressed, or not a 2xx (:func:`_refuse_unread`).
        ValueError: the body is not JSON or has no choice with a message.
        openai / httpx errors: as the client raises them (timeouts, connection errors, HTTP status).
    """
    with client.chat.completions.with_streaming_response.create(**kwargs) as response:
        raw = response.http_response  # (a compressed or non-2xx reply was refused unread: _refuse_unread)
        declared = raw.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise ReplyRefused(f"the reply is over {cap} bytes (Content-Length {declared})")
        body = bytearray()
        for chunk in raw.iter_raw():
            body += chunk
            if len(body) > cap:
                raise ReplyRefused(f"the reply is over {cap} bytes")
    data = json.loads(bytes(body))
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) \
            or not isinstance(choices[0].get("message"), dict):
        raise ValueError("the response has no choice with a message")
    return choices[0]


def show(value: Any, n: int = 60) -> str:
    """``value`` as one short line."""
    return " ".join(repr(value).split())[:n]


def reply_text(choice: dict[str, Any]) -> str | None:
    """The choice's ``message.content`` when it is text (None when it is absent or not text)."""
    content = choice["message"].get("content")
    return content if isinstance(content, str) else None


def first_token_alternatives(choice: dict[str, Any]) -> list[tuple[str, float]] | str:
    """(token, logprob) of the choice's first reply token's ``top_logprobs``, or why there are none to use: none
    returned, or an entry whose token is not text or whose logprob is not a finite number ≤ 0 (NaN, inf, 1000,
    ``"abc"``: a NaN score would pass every ``<`` comparison, 1000 overflows exp)."""
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    top = content[0].get("top_logprobs") if isinstance(content, list) and content and isinstance(content[0], dict) else None
    if not top:
        return "the server returned no top_logprobs (threshold needs a server that does)"
    if not isinstance(top, list):
        return f"malformed top_logprobs {show(top)} (not a list)"
    out = []
    for entry in top:
        token, logprob = (entry.get("token"), entry.get("logprob")) if isinstance(entry, dict) else (None, None)
        if not isinstance(token, str) or isinstance(logprob, bool) or not isinstance(logprob, (int, float)) \
                or not math.isfinite(logprob) or logprob > LOGPROB_SLACK:
            return f"malformed top_logprobs entry {show(entry)} (a token must be text, a logprob a finite number <= 0)"
        out.append((token, float(logprob)))
    return out


def _clean(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    return "".join(c for c in text if unicodedata.category(c) not in ("Cf", "Mn", "Me")).casefold()


def parse_verdict(text: str | None, mode: Literal["strict", "leading"] = "strict") -> Literal["yes", "no"] | None:
    """The verdict in a judge's reply, or None when there is none.

    ``strict`` (default): after Unicode NFKC folding, removal of invisible characters and
    case-folding, the whole reply with surrounding spaces, markdown emphasis, quotes and final
    punctuation stripped must be exactly ``yes`` or ``no``: ``"YES"``, ``"no."``, ``"**Yes**"`` parse;
    ``"Yes, it is correct"``, ``"YESYES"``, ``"Yesterday"``, ``"Maybe"``, ``""`` do not.

    ``leading``: a leading ``<think>...</think>`` block and an ``Answer:`` / ``Verdict:`` label are
    dropped; the first word must be ``yes`` or ``no`` and the other word must not appear as a word
    anywhere after it: ``"Yes, the steps are right"`` is yes, ``"No. Yes."`` and ``"Yes or no"`` are None.
    """
    if not text:
        return None
    t = _clean(text)
    if mode == "strict":
        t = t.strip(_EDGE)
        return t if t in ("yes", "no") else None
    if mode != "leading":
        raise ValueError(f"parse_verdict: mode must be 'strict' or 'leading', got {mode!r}")
    t = _LABEL.sub("", _THINK.sub("", t).lstrip(_EDGE)).lstrip(_EDGE)
    words = _WORD.findall(t)
    if not words or words[0] not in ("yes", "no") or not t.startswith(words[0]):
        return None
    other = "no" if words[0] == "yes" else "yes"
    return None if other in words[1:] else words[0]


def verdict_probabilities(top: Sequence[tuple[str, float]]) -> dict[str, float]:
    """p(yes) and p(no) from a first token's (token text, log-probability) alternatives: the sums of
    exp(logprob) over the tokens that read ``yes`` / ``no`` after :func:`parse_verdict`'s folding (case,
    surrounding spaces and punctuation). ``[("Yes", log 0.6), (" yes", log 0.1), ("No", log 0.2)]`` →
    ``{"yes": 0.7, "no": 0.2}``."""
    out = {"yes": 0.0, "no": 0.0}
    for token, logprob in top:
        word = parse_verdict(token, "strict")
        if word is not None:
            out[word] += math.exp(logprob)
    return out
