"""LLM-as-a-judge for heterogeneous swarms (paper §4.2, Table 1), served in-process or over the OpenAI API.

A judge model reads each incoming completion with its question and answers whether the solution
is correct and free of malicious or irrelevant content. The verdict is binary (paper Appendix D.3:
a ranking would still prefer poisoned completions over early gibberish), and the reward becomes
r = r_verifiable × r_judge (§4.2, with ``action: zero``). Verdicts are cached by a hash of
(question, completion).

Three backends (``backend``):

- ``local``: the judge's weights in this process (default: the policy's base model), greedy
  ``generate`` or the ``logits`` reduction p(yes) / (p(yes) + p(no));
- ``openai``: any OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp, ``transformers serve``,
  a hosted model) through :class:`dgrpo.verify.judge.OpenAIJudge`: base URL, model name, API key
  from a named environment variable, timeout, retries with backoff, bounded concurrency;
- ``detector``: a LoRA classifier trained on the project's own attacks and honest samples
  (:mod:`dgrpo.verify.detector`, docs/detector.md); a completion is rejected (``no``) when
  P(poisoned) ≥ ``threshold`` (default: the detector's saved one). It reads the completion after the task's prefill, as it was trained.

Every judgment is ``yes``, ``no``, ``unparseable`` (an answer that is not a verdict under ``parse``)
or ``failed`` (no answer). The last two are never silent: they follow ``on_error`` (reject by
default), are counted in :attr:`JudgeDefense.counters` (logged each round as
``defense/judge/<status>``), logged, and a rejection's reason says which it was. The prompt is
:func:`dgrpo.verify.judge.build_messages` for both backends (docs/judge.md: the paper's D.3 prompt
is not in the text the project has).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any, Literal, Sequence

from pydantic import Field, model_validator

from dgrpo.defenses.base import Defense, DefenseConfig
from dgrpo.registry import register
from dgrpo.types import ACCEPT, Verdict

log = logging.getLogger(__name__)

Status = Literal["yes", "no", "unparseable", "failed"]
STATUSES = ("yes", "no", "unparseable", "failed")


def completion_key(question: str, completion: str) -> str:
    """Cache key of a verdict: sha256 of question and completion."""
    return hashlib.sha256(f"{question}\0{completion}".encode("utf-8", "surrogatepass")).hexdigest()  # lone surrogates too


_JUDGES: dict[tuple[str, str, str], tuple] = {}  # (model, dtype, device) → (model, tokenizer): shared by policies
_DETECTORS: dict[tuple[str, str, str], object] = {}  # (path, dtype, device) → verify.detector.Detector
_OPENAI_ONLY = ("base_url", "api_key_env", "timeout_s", "max_retries", "backoff_s", "backoff_max_s",
                "max_concurrency", "temperature", "logit_bias", "extra_body", "granularity", "max_steps")
_NOT_USED = {  # fields each backend does not read: setting one away from its default is an error
    "local": _OPENAI_ONLY + ("path",),
    "openai": ("dtype", "path"),
    "detector": _OPENAI_ONLY + ("model", "mode", "parse", "max_new_tokens", "on_error", "prompt"),
}


class JudgeDefenseConfig(DefenseConfig):
    """``kind: judge``: heterogeneous LLM-as-a-judge (paper §4.2), ``local`` or served (``openai``).

    Fields of another backend set away from their defaults are errors (``base_url`` with ``backend: local``,
    ``dtype: bfloat16`` with ``backend: openai``, ``mode: logits`` with ``backend: detector``), so a config never
    carries a setting that does nothing; at its default such a field is what the backend does anyway, and is let
    through (a run's ``config.yaml`` writes every field and must load again).
    """

    kind: Literal["judge"] = "judge"
    backend: Literal["local", "openai", "detector"] = Field("local", description="local: the judge's weights in this process; openai: an OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp, transformers serve, hosted; docs/judge.md); detector: a trained LoRA classifier (dgrpo detector train, docs/detector.md).")
    model: str | None = Field(None, description="local: any Hugging Face instruct model or folder (None = the policy's base model); openai: the model name the server expects (required).")
    mode: Literal["generate", "logits"] = Field("generate", description="generate: the judge's answer parsed as YES/NO; logits (local only): compare p('YES') and p('NO') as the first answer token.")
    max_new_tokens: int = Field(4, ge=1, description="Length of a generated verdict, tokens (one word is enough).")
    parse: Literal["strict", "leading"] = Field("strict", description="strict: the whole reply must be YES or NO (case, markdown, final punctuation aside); leading: the first word decides unless the other word follows (dgrpo.verify.judge.parse_verdict).")
    prompt: Literal["plain", "fewshot", "relevant", "step", "step-kind"] = Field("plain", description="local, openai: the judge prompt (dgrpo.verify.judge_prompts: plain = the rule alone; fewshot = the rule and four worked examples as earlier turns; relevant = is every part about solving the problem, every calculation right; docs/judge.md). With granularity: step a step prompt (dgrpo.verify.judge_steps): step = is this step part of solving the problem, any calculation right; step-kind = 'is this calculation correct?' for a step with an = between digits, else 'is this sentence part of solving the problem?'.")
    granularity: Literal["completion", "step"] = Field("completion", description="openai: completion = one question about the whole completion; step = one question per step (think-block sentences, the answer unless a bare number), the completion's score is the lowest step score, accepted when ≥ threshold (required), prompt step or step-kind (docs/judge.md).")
    max_steps: int = Field(8, ge=1, le=64, description="openai, granularity: step: the most steps a completion may have; one with more is rejected without a question (a poison past a cap would otherwise go unjudged).")
    on_error: Literal["reject", "accept"] = Field("reject", description="Verdict of an unparseable or failed judgment (counted as defense/judge/unparseable, /failed). Fails closed by default.")
    # local
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="local, detector: judge weights dtype.")
    threshold: float | None = Field(None, gt=0, lt=1, description="local, logits mode: accept when p(yes) / (p(yes) + p(no)) ≥ threshold (None = 0.5: the likelier word wins); openai: the same share from the reply's first-token top_logprobs (None: the reply's text decides; docs/judge.md); detector: reject when P(poisoned) ≥ threshold (None = the detector's saved threshold, detector.json, the one `dgrpo detector eval` measures).")
    # detector
    path: str | None = Field(None, description="detector: the folder written by `dgrpo detector train --out DIR` (required).")
    # openai
    base_url: str | None = Field(None, description="openai: the server's OpenAI-compatible root, e.g. http://localhost:8000/v1 (required).")
    api_key_env: str | None = Field(None, description="openai: environment variable holding the API key (None: the server needs none, e.g. a local one).")
    timeout_s: float = Field(30.0, gt=0, description="openai: each attempt's deadline (connect, request, the whole reply), seconds (docs/judge.md).")
    max_retries: int = Field(2, ge=0, le=10, description="openai: extra attempts after a timeout, a connection error, HTTP 408/409/429 or 5xx.")
    backoff_s: float = Field(0.5, ge=0, description="openai: sleep min(backoff_max_s, backoff_s × 2^k) before retry k + 1.")
    backoff_max_s: float = Field(8.0, ge=0, description="openai: the longest backoff sleep, seconds.")
    max_concurrency: int = Field(8, ge=1, le=256, description="openai: requests in flight at most.")
    temperature: float = Field(0.0, ge=0, description="openai: 0 = greedy; the paper samples with top-k 10 (pass it in extra_body, in the server's spelling).")
    logit_bias: dict[int, float] | None = Field(None, description="openai: token id → bias (+100 on the judge's Yes and No tokens with max_new_tokens: 1 forces a binary reply, docs/judge.md).")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="openai: sampling settings in the server's spelling, only top_k, top_p, min_p, or transformers serve's generation_config JSON string of do_sample, temperature and those (vLLM {top_k: 10}; anything else is refused, docs/judge.md).")

    @model_validator(mode="after")
    def _backend_fields(self) -> "JudgeDefenseConfig":
        wrong = [f for f in _NOT_USED[self.backend] if self._changed(f)]
        if wrong:
            users = sorted({b for b in _NOT_USED if b != self.backend and not set(wrong) & set(_NOT_USED[b])})
            raise ValueError(f"judge: {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} not used by backend="
                             f"{self.backend}; remove {'it' if len(wrong) == 1 else 'them'}"
                             + (f" or set backend={' or '.join(users)}" if users else ""))
        if self.backend == "local" and self.model:  # (a bad folder is named before the policy loads)
            from dgrpo.policy.folders import check_model_folder

            try:
                check_model_folder(self.model)
            except ValueError as err:
                raise ValueError(f"judge: model: {err}") from None
        if self.backend == "local" and self.prompt in ("step", "step-kind"):
            raise ValueError(f"judge: prompt={self.prompt} asks about one step at a time (granularity: step), which only "
                             f"backend=openai has; set backend: openai or a completion prompt (plain, fewshot, relevant)")
        if self.backend == "detector":
            if not self.path:
                raise ValueError("judge: backend=detector needs path, the folder of `dgrpo detector train --out DIR`")
            from dgrpo.errors import PolicyLoadError
            from dgrpo.verify.detector import read_meta  # light: json only

            try:
                read_meta(self.path)
            except PolicyLoadError as err:  # not a folder / not a detector
                raise ValueError(f"judge: path: {err}") from None
        if self.backend == "openai":
            if not self.base_url or "://" not in self.base_url:
                raise ValueError(f"judge: backend=openai needs base_url, the server's root such as "
                                 f"http://localhost:8000/v1 (got {self.base_url!r})")
            if not self.model:
                raise ValueError("judge: backend=openai needs model, the name the server serves (GET /v1/models)")
            from dgrpo.verify.judge_steps import STEP_PROMPTS

            if (self.granularity == "step") != (self.prompt in STEP_PROMPTS):
                raise ValueError(f"judge: prompt={self.prompt} does not go with granularity={self.granularity}; "
                                 + ("set prompt: step or step-kind" if self.granularity == "step" else
                                    "set granularity: step (or a completion prompt: plain, fewshot, relevant)"))
            if self.granularity == "step" and self.threshold is None:
                raise ValueError("judge: granularity=step needs threshold (a completion's score is its lowest step "
                                 "score; accept when >= threshold)")
            from dgrpo.verify.judge_request import extra_body_conflict

            if conflict := extra_body_conflict(self.extra_body):
                raise ValueError(f"judge: {conflict}")
            if self._changed("max_steps") and self.granularity != "step":
                raise ValueError("judge: max_steps is used only with granularity=step; remove it or set granularity: step")
            if self.mode == "logits":
                raise ValueError("judge: mode=logits reads the judge's logits, which only backend=local has; for a "
                                 "served judge set threshold (the reply's top_logprobs decide), or logit_bias on its Yes and No tokens (docs/judge.md)")
        return self

    def _changed(self, name: str) -> bool:
        """Whether field ``name`` was set to a value other than its default: a run's saved config.yaml writes
        every field, the unused ones at their defaults, and must load again (``dgrpo resume``)."""
        return name in self.model_fields_set and getattr(self, name) != type(self).model_fields[name].get_default(
            call_default_factory=True)

    def check(self, run) -> None:
        if self.backend == "openai" and self.api_key_env is not None:
            import os

            if not os.environ.get(self.api_key_env):
                raise ValueError(f"judge: api_key_env={self.api_key_env} is not set in the environment; export it "
                                 f"with the server's API key, or set api_key_env: null for a server that needs none")

    def client_config(self):
        """The :class:`dgrpo.verify.judge.JudgeConfig` of backend ``openai``."""
        from dgrpo.verify.judge import JudgeConfig

        return JudgeConfig(self.base_url, self.model, api_key_env=self.api_key_env, timeout_s=self.timeout_s,
                           max_retries=self.max_retries, backoff_s=self.backoff_s, backoff_max_s=self.backoff_max_s,
                           max_concurrency=self.max_concurrency, max_tokens=self.max_new_tokens,
                           temperature=self.temperature, logit_bias=self.logit_bias, extra_body=dict(self.extra_body),
                           parse=self.parse, threshold=self.threshold, prompt=self.prompt,
                           granularity=self.granularity, max_steps=self.max_steps)


@register("defense", "judge", config=JudgeDefenseConfig)
class JudgeDefense(Defense):
    """Binary LLM judge over incoming completions (torch, the model or the client load when it is built).

    Args:
        cfg: :class:`JudgeDefenseConfig`.
        run_cfg: the run config (its model is the default local judge: the policy's *base* weights).
        policy: the receiving policy (unused; the judge has its own frozen weights).
        task: the task (questions and the completion prefix).
        judge: local backend: a ``(model, tokenizer)`` pair to use instead of loading ``cfg.model``.

    Attributes:
        counters: cumulative judgments by status (``yes``, ``no``, ``unparseable``, ``failed``) and
            ``calls`` (judgments made; cached ones are not counted again). Shared, with the cache, by the
            judges of the process's other honest nodes (:func:`dgrpo.defenses.base.share_verdicts`).
    """

    name = "judge"
    stage = "rollouts"

    def __init__(self, cfg, run_cfg, policy, task, judge=None):
        self.cfg, self.task, self.action = cfg, task, cfg.action
        self.model = self.tokenizer = self.client = None
        self.detector = None
        frozen = None  # what gives two judges of this config equal verdicts: the server, or the weights they load
        if cfg.backend == "openai":
            from dgrpo.verify.judge import OpenAIJudge

            self.client = OpenAIJudge(cfg.client_config())
            if cfg.temperature == 0 and not cfg.extra_body:  # greedy, and no server-side sampling field
                frozen = "server"
        elif cfg.backend == "detector":
            key = (cfg.path, cfg.dtype, str(run_cfg.model.device))
            if key not in _DETECTORS:
                from dgrpo.verify.detector import load_detector

                _DETECTORS[key] = load_detector(cfg.path, run_cfg.model.device, cfg.dtype)
            self.detector, frozen = _DETECTORS[key], key
        else:
            if judge is None:
                key = (cfg.model or run_cfg.model.name, cfg.dtype, str(run_cfg.model.device))
                if key not in _JUDGES:
                    from dgrpo.policy.loading import load_policy

                    _JUDGES[key] = load_policy(key[0], cfg.dtype, trainable=False, device=run_cfg.model.device)
                judge, frozen = _JUDGES[key], key
            self.model, self.tokenizer = judge
        self._store_key = (None if frozen is None else  # (verdict_store_key; None: sampled, or a judge passed in)
                           json.dumps([cfg.model_dump(mode="json", exclude={"action"}), frozen], sort_keys=True))
        self.problems = {p.prompt_id: p for p in (*task.train, *task.val)}
        self.cache: dict[str, tuple[bool, str]] = {}
        self.seconds = 0.0
        self.counters = {"calls": 0, **{s: 0 for s in STATUSES}}

    def verdict_store_key(self) -> str | None:
        """Shared by the in-process honest nodes' judges of one config (``action`` aside) on the same frozen
        weights or server (:func:`dgrpo.defenses.base.share_verdicts`): local (greedy or logits) and detector
        judges always, served ones when ``temperature`` is 0 and ``extra_body`` is empty (a sampled verdict is
        each node's own draw). A judge passed in as ``judge=`` shares nothing."""
        return self._store_key

    def _pair(self, rollout) -> tuple[str, str]:
        """(question, completion text with the task's prefill) the judge reads; the detector reads the
        completion after the prefill, as it was trained (verify/detector.py)."""
        question = self.problems[rollout.prompt_id].question
        if self.detector is not None:
            return question, rollout.text
        return question, (self.task.completion_prefix + rollout.text).strip()

    def judge_pairs(self, pairs: list[tuple[str, str]]) -> list[tuple[Status, str]]:
        """(status, reason) of each (question, completion) pair, in order, uncached."""
        if self.client is not None:
            return [(j.status, j.reason) for j in self.client.judge_batch(pairs)]
        if self.detector is not None:
            thr = self.detector.meta["threshold"] if self.cfg.threshold is None else self.cfg.threshold
            return [("no", f"detector P(poisoned)={p:.3f} ≥ {thr}") if p >= thr else
                    ("yes", f"detector P(poisoned)={p:.3f} < {thr}") for p in self.detector.score(pairs).tolist()]
        from dgrpo.policy.chat import encode_prompt
        from dgrpo.verify.judge import build_messages

        prompts = [encode_prompt(self.tokenizer, build_messages(q, c, self.cfg.prompt)) for q, c in pairs]
        return self._generated(prompts) if self.cfg.mode == "generate" else self._compared(prompts)

    def _generated(self, prompts: list[list[int]]) -> list[tuple[Status, str]]:
        from dgrpo.policy.sampling import SamplingParams, sample
        from dgrpo.verify.judge import parse_verdict

        params = SamplingParams(top_k=1, temperature=0.0, max_new_tokens=self.cfg.max_new_tokens)
        outs = sample(self.model, prompts, [0] * len(prompts), params, self.tokenizer.eos_token_id,
                      self.tokenizer.pad_token_id)
        replies = []
        for o in outs:
            text = self.tokenizer.decode(o, skip_special_tokens=True)
            verdict = parse_verdict(text, self.cfg.parse)
            replies.append((verdict, f"judge said {text.strip()[:40]!r}") if verdict else
                           ("unparseable", f"reply is not a {self.cfg.parse} YES/NO: {text.strip()[:60]!r}"))
        return replies

    def _compared(self, prompts: list[list[int]]) -> list[tuple[Status, str]]:
        yes = self._first_ids(["YES", "Yes", "yes", " YES", " Yes", " yes"])
        no = self._first_ids(["NO", "No", "no", " NO", " No", " no"])
        replies = []
        for probs in self._next_token_probs(prompts):  # (V,) per prompt
            py, pn = float(probs[yes].sum()), float(probs[no].sum())
            share = py / (py + pn) if py + pn > 0 else 0.0
            replies.append(("yes" if share >= (0.5 if self.cfg.threshold is None else self.cfg.threshold) else "no",
                            f"judge p(yes)={py:.3f} p(no)={pn:.3f} share={share:.3f}"))
        return replies

    def _next_token_probs(self, prompts: list[list[int]], batch: int = 8) -> list:
        """Next-token distribution (a (V,) tensor) after each prompt (left-padded batches)."""
        import torch

        out = []
        pad = self.tokenizer.pad_token_id
        device = next(self.model.parameters()).device
        for i in range(0, len(prompts), batch):
            chunk = prompts[i : i + batch]
            width = max(map(len, chunk))
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk], device=device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk], device=device)
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            with torch.no_grad():
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1].float()
            out += list(torch.softmax(logits, -1).cpu())
        return out

    def _first_ids(self, words: list[str]) -> list[int]:
        return sorted({self.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in words})

    def inspect(self, rollouts: Sequence, logits=None) -> list[Verdict]:
        """Judge every rollout (cached; a failed call is asked again next time, and an unparseable reply too
        unless the judge is frozen and greedy (:meth:`verdict_store_key`), which would give it again)."""
        start = time.perf_counter()
        keys, todo = [], {}
        for r in rollouts:
            pair = self._pair(r)
            key = completion_key(*pair)
            keys.append(key)
            if key not in self.cache and key not in todo:
                todo[key] = pair
        fresh: dict[str, tuple[bool, str]] = {}
        if todo:
            for key, (status, reason) in zip(todo, self.judge_pairs(list(todo.values()))):
                self.counters["calls"] += 1
                self.counters[status] += 1
                if status in ("yes", "no"):
                    self.cache[key] = fresh[key] = (status == "yes", reason)
                    continue
                log.warning("judge %s (%s as configured by on_error): %s", status, self.cfg.on_error, reason)
                fresh[key] = (self.cfg.on_error == "accept", f"judge {status} ({self.cfg.on_error}ed by on_error): {reason}")
                if status == "unparseable" and self._store_key is not None:  # a frozen greedy judge says it again:
                    self.cache[key] = fresh[key]  # kept, so no other node (nor a re-sent copy) pays for the call
        self.seconds += time.perf_counter() - start
        out = []
        for k in keys:
            ok, reason = self.cache.get(k) or fresh[k]
            out.append(ACCEPT if ok else Verdict(False, self.name, reason, None, self.action))
        return out

    def close(self) -> None:
        """Close the served judge's HTTP client (nothing to do for a local judge)."""
        if self.client is not None:
            self.client.close()
