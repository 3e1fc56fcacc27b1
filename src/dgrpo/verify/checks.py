"""The framework-neutral verification API: each check takes what any trainer has and returns one
:class:`~dgrpo.types.Verdict` per completion, with its reason.

What a trainer has: prompt ids and completion ids (lists of token ids, eos included when generated),
the agreed sampling parameters (:class:`~dgrpo.policy.sampling.SamplingParams`), the claimed seeds,
and either a model to score with or logits it already computed. Nothing here reads a dgrpo config,
policy or task; :mod:`dgrpo.defenses` and :mod:`dgrpo.integrations.trl` are thin wrappers.

* :func:`topk_verdicts`: every token inside the scorer's top-k (paper §4.1, Table 1);
* :func:`replay_verdicts`: the claimed seed reproduces the completion (§4.1's suggested fix);
* :func:`step_verdicts`: every arithmetic claim of the text is true (:mod:`dgrpo.verify.steps`);
* :func:`judge_verdicts`: an LLM judge says YES (:mod:`dgrpo.verify.judge`, any ``judge_batch``);
* :class:`Verifier`: the checks in order, sharing one forward pass, each seeing only the completions
  no earlier check rejected.

The logit-level checks need float32 logits on both sides (docs/verification.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Protocol, Sequence

from dgrpo.types import ACCEPT, Verdict
from dgrpo.verify.forward import eval_mode
from dgrpo.verify.inputs import malformed, model_vocab, refuse_half, unpad  # noqa: F401 (unpad, refuse_half: re-exported)

if TYPE_CHECKING:
    import torch

    from dgrpo.policy.sampling import SamplingParams

Ids = Sequence[Sequence[int]]


def completion_logits(model, prompt_ids: Ids, completion_ids: Ids, pad_id: int,
                      prompt_mask: Ids | None = None) -> list["torch.Tensor"]:
    """Logits at every completion position, one forward pass per distinct prompt, without grad, in eval mode
    (no dropout, no gradient checkpointing: :mod:`dgrpo.verify.forward`; the model's modes are restored).

    Completions that share a prompt are scored together (the prompt is computed once,
    :func:`dgrpo.policy.scoring.group_logits`). Padding is removed by ``prompt_mask`` (``generate``'s
    ``attention_mask`` for left-padded ``input_ids``), never by token value: a prompt that starts with
    the pad token keeps it.

    Args:
        model: a Hugging Face causal LM with float32 weights.
        prompt_ids: N prompt id lists (may repeat); completion_ids: N completion id lists.
        pad_id: id used to right-pad a group's completions.
        prompt_mask: N masks (1 = a real prompt token, 0 = padding) the shapes of ``prompt_ids``; None:
            every prompt token is real.

    Returns:
        N tensors: the i-th is (len(completion_ids[i]), V) float32, row t the distribution that
        produced completion token t ((0, V) for an empty completion).

    Raises:
        ValueError: the two lists differ in length, or a prompt is empty (or only padding).
        SettingError: the model's weights are bf16 or fp16 (the exact checks need float32).
    """
    import torch

    from dgrpo.policy.scoring import group_logits

    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"completion_logits: {len(prompt_ids)} prompts for {len(completion_ids)} completions")
    refuse_half(next(model.parameters()).dtype, "the scoring model")
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompt_ids):
        if len(completion_ids[i]):
            groups.setdefault(unpad(p, None if prompt_mask is None else prompt_mask[i]), []).append(i)
    out: list = [None] * len(completion_ids)
    with torch.no_grad(), eval_mode(model):  # no dropout, no gradient checkpointing (dgrpo.verify.forward)
        for prompt, rows in groups.items():
            comps = [list(completion_ids[i]) for i in rows]
            logits = group_logits(model, list(prompt), comps, pad_id)  # (G, T, V)
            for g, i in enumerate(rows):
                out[i] = logits[g, : len(comps[g])]
    vocab = next((o.shape[-1] for o in out if o is not None), model.config.get_text_config().vocab_size)
    return [torch.zeros(0, vocab) if o is None else o for o in out]


def _logits_for(model, prompt_ids, completion_ids, logits, pad_id, check: str, prompt_mask=None) -> list:
    if logits is not None:
        if len(logits) != len(completion_ids):
            raise ValueError(f"{check}: {len(logits)} logits for {len(completion_ids)} completions")
        for lg in logits:
            refuse_half(lg.dtype, f"{check}: a logits tensor")
        return list(logits)
    if model is None or prompt_ids is None:
        raise ValueError(f"{check}: pass logits=, or model= and prompt_ids= to compute them")
    return completion_logits(model, prompt_ids, completion_ids, pad_id, prompt_mask)


def topk_verdicts(completion_ids: Ids, *, k: int, eos_id: int, model=None, prompt_ids: Ids | None = None,
                  logits: Sequence["torch.Tensor"] | None = None, atol: float = 1e-3, pad_id: int | None = None,
                  decode: Callable[[list[int]], str] | None = None, name: str = "topk",
                  prompt_mask: Ids | None = None) -> list[Verdict]:
    """Reject a completion when a token lies outside the scorer's top-k at its position (paper §4.1).

    Args:
        completion_ids: N completions (eos included when generated); a token after the first eos is a rejection
            (``continues after eos``: no sampler emits one; before, the tail was accepted unread).
        k: the agreed top-k; eos_id: the tokenizer's eos id.
        model, prompt_ids: to compute the logits (one extra forward pass per distinct prompt), or
        logits: N tensors (T_i ≥ len(completion_ids[i]), V) already computed, float32.
        atol: a token is inside when its logit ≥ k-th logit − atol (float32 batch noise is ~1e-4).
        pad_id: padding of the forward pass (default eos_id).
        prompt_mask: 1 for real prompt tokens, 0 for padding (``generate``'s attention mask); None: all real.
        decode: token ids → text, to quote the offending token in the reason.

    Returns:
        N verdicts; a rejection's ``position`` is the first offending token.
    """
    from dgrpo.verify.topk import first_outside_topk

    rows = _logits_for(model, prompt_ids, completion_ids, logits, eos_id if pad_id is None else pad_id, "topk_verdicts",
                       prompt_mask)
    out = []
    for ids, lg in zip(completion_ids, rows):
        ids = list(ids)
        if not ids:
            out.append(Verdict(False, name, "empty completion (a sampler emits at least one token, eos included)", 0))
            continue
        if eos_id in ids[:-1]:  # a sampler stops at its eos: a tail after it was never sampled (Replay rejects it too)
            t = ids.index(eos_id) + 1
            out.append(Verdict(False, name, f"continues after eos (token at position {t})", t))
            continue
        t = first_outside_topk(lg[None], [ids], eos_id, k, atol)[0]
        if t is None:
            out.append(ACCEPT)
            continue
        token = decode([ids[t]]) if decode else str(ids[t])
        out.append(Verdict(False, name, f"token {token!r} at position {t} outside top-{k}", t))
    return out


def replay_verdicts(completion_ids: Ids, seeds: Sequence[int | None], params: "SamplingParams", *, eos_id: int,
                    model=None, prompt_ids: Ids | None = None, logits: Sequence["torch.Tensor"] | None = None,
                    method: Literal["fast", "regenerate"] = "fast", atol: float = 1e-3, pad_id: int | None = None,
                    name: str = "replay", prompt_mask: Ids | None = None,
                    positions: Sequence[Sequence[int] | None] | None = None) -> list[Verdict]:
    """Accept a completion only when its claimed seed reproduces it under ``params`` (paper §4.1).

    The sampler is :func:`dgrpo.policy.sampling.sample` (seeded Gumbel-max over the top-k), so the
    sender must have sampled with it. ``fast`` re-makes every seeded decision on the logits (given, or
    one forward pass of ``model``); ``regenerate`` samples again with ``model`` and compares exactly.

    Args:
        seeds: N claimed seeds; None (no seed claimed) is a rejection.
        params: the agreed top_k, temperature and max_new_tokens.
        prompt_mask: 1 for real prompt tokens, 0 for padding (``generate``'s attention mask); None: all real.
        positions: ``fast`` only: per completion, the positions to check (a spot check,
            :mod:`dgrpo.verify.spot`) or None for all; None: all positions of every completion.

    Returns:
        N verdicts with the first position where the replay departs.
    """
    from dgrpo.verify.replay import regeneration_mismatches, replay_mismatch

    if len(seeds) != len(completion_ids):
        raise ValueError(f"replay_verdicts: {len(seeds)} seeds for {len(completion_ids)} completions")
    pad = eos_id if pad_id is None else pad_id
    claimed = [i for i, s in enumerate(seeds) if s is not None and len(completion_ids[i])]
    found: dict[int, tuple[int, str] | None] = {}
    if method == "fast":
        sub_logits = None if logits is None else [logits[i] for i in claimed]
        sub_prompts = None if prompt_ids is None else [prompt_ids[i] for i in claimed]
        sub_masks = None if prompt_mask is None else [prompt_mask[i] for i in claimed]
        rows = _logits_for(model, sub_prompts, [completion_ids[i] for i in claimed], sub_logits, pad, "replay_verdicts",
                           sub_masks) if claimed else []
        for i, lg in zip(claimed, rows):
            found[i] = replay_mismatch(lg, list(completion_ids[i]), int(seeds[i]), params, eos_id, atol,
                                       None if positions is None else positions[i])
    elif method == "regenerate":
        if model is None or prompt_ids is None:
            raise ValueError("replay_verdicts: method='regenerate' needs model= and prompt_ids=")
        refuse_half(next(model.parameters()).dtype, "the scoring model")
        with eval_mode(model):
            differ = regeneration_mismatches(model, [list(unpad(prompt_ids[i], None if prompt_mask is None
                                                                else prompt_mask[i])) for i in claimed],
                                             [list(completion_ids[i]) for i in claimed],
                                             [int(seeds[i]) for i in claimed], params, eos_id, pad)
        for i, t in zip(claimed, differ):
            found[i] = None if t is None else (t, f"regeneration differs at position {t}")
    else:
        raise ValueError(f"replay_verdicts: method must be 'fast' or 'regenerate', got {method!r}")
    out = []
    for i, s in enumerate(seeds):
        if s is None:
            out.append(Verdict(False, name, "no sampling seed claimed", 0))
        elif not len(completion_ids[i]):
            out.append(Verdict(False, name, "empty completion", 0))
        else:
            miss = found[i]
            out.append(ACCEPT if miss is None else Verdict(False, name, miss[1], miss[0]))
    return out


def step_verdicts(texts: Sequence[str], checker=None, name: str = "steps") -> list[Verdict]:
    """Reject a completion whose reasoning writes a false arithmetic claim (``2 + 2 = 5``).

    Args:
        texts: N decoded completions.
        checker: a :class:`dgrpo.verify.steps.StepChecker` (default: its default settings).

    Returns:
        N verdicts; a rejection quotes the first false claim, its ``position`` is the claim's character offset.
    """
    from dgrpo.verify.steps import StepChecker

    checker = checker or StepChecker()
    out = []
    for text in texts:
        v = checker(text)
        if v.accepted:
            out.append(ACCEPT)
        else:
            bad = v.false_claims
            out.append(Verdict(False, name, v.reason, bad[0].start if bad else None))
    return out


class BatchJudge(Protocol):
    """What :func:`judge_verdicts` needs of a judge (:class:`dgrpo.verify.judge.OpenAIJudge` has it)."""

    def judge_batch(self, pairs: Sequence[tuple[str, str]]) -> list: ...


def judge_verdicts(judge: BatchJudge, questions: Sequence[str], texts: Sequence[str],
                   on_error: Literal["reject", "accept"] = "reject", name: str = "judge") -> list[Verdict]:
    """Ask an LLM judge whether each completion answers its question honestly (paper §4.2).

    Args:
        judge: anything with ``judge_batch([(question, completion), ...]) -> [Judgment]``.
        on_error: what an unparseable reply or a failed request does.

    Returns:
        N verdicts; a rejection's reason is the judge's (``"judge said 'NO'"``, ``"timeout after …"``).
    """
    if len(questions) != len(texts):
        raise ValueError(f"judge_verdicts: {len(questions)} questions for {len(texts)} completions")
    judgments = judge.judge_batch(list(zip(questions, texts)))
    return [ACCEPT if j.accepted(on_error) else Verdict(False, name, j.reason) for j in judgments]


@dataclass(frozen=True)
class TopK:
    """The top-k check of a :class:`Verifier` (:func:`topk_verdicts`)."""

    k: int
    atol: float = 1e-3
    name: str = "topk"
    needs_logits = True


@dataclass(frozen=True)
class Replay:
    """The replay check of a :class:`Verifier` (:func:`replay_verdicts`); seeds come with the completions."""

    params: "SamplingParams"
    method: Literal["fast", "regenerate"] = "fast"
    atol: float = 1e-3
    name: str = "replay"

    @property
    def needs_logits(self) -> bool:
        return self.method == "fast"


@dataclass(frozen=True)
class Steps:
    """The step checker of a :class:`Verifier` (:func:`step_verdicts`)."""

    checker: object = None
    name: str = "steps"
    needs_logits = False


@dataclass(frozen=True)
class Judge:
    """The judge check of a :class:`Verifier` (:func:`judge_verdicts`); questions come with the completions."""

    judge: BatchJudge
    on_error: Literal["reject", "accept"] = "reject"
    name: str = "judge"
    needs_logits = False


@dataclass
class Verifier:
    """Run checks in order on a batch; a later check sees only what the earlier ones accepted.

    The logit-level checks (top-k, fast replay) share one forward pass of ``model``, run only for the
    completions still accepted when the first of them is reached.

    Args:
        checks: :class:`TopK`, :class:`Replay`, :class:`Steps`, :class:`Judge` instances, in order.
        model: the scoring model (needed by the logit-level checks and regenerate).
        eos_id, pad_id: the tokenizer's ids (pad defaults to eos).
        decode: token ids → text (needed by Steps and Judge when ``texts`` is not given, and for reasons).
    """

    checks: Sequence[object]
    model: object = None
    eos_id: int | None = None
    pad_id: int | None = None
    decode: Callable[[list[int]], str] | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def verify(self, prompt_ids: Ids, completion_ids: Ids, *, seeds: Sequence[int | None] | None = None,
               texts: Sequence[str] | None = None, questions: Sequence[str] | None = None,
               logits: Sequence["torch.Tensor"] | None = None, prompt_mask: Ids | None = None) -> list[Verdict]:
        """One verdict per completion: the first check's rejection, else ACCEPT.

        ``prompt_mask`` (1 = real token, 0 = padding, e.g. ``generate``'s attention mask) removes padding
        from ``prompt_ids``; None: every prompt token is real (padding is never guessed from token values).
        Malformed input is a rejection (defense ``input``, :func:`dgrpo.verify.inputs.malformed`), never a crash: a
        token id outside [0, vocabulary), a seed that is not a 64-bit integer, a seeds or prompt_ids list of
        another length than completion_ids (every completion rejected).

        Raises:
            ValueError: a check lacks what it needs (seeds for Replay, questions for Judge, eos_id, ...).
        """
        import time

        n = len(completion_ids)
        vocab = logits[0].shape[-1] if logits is not None and len(logits) else model_vocab(self.model)
        bad = malformed(prompt_ids, completion_ids, seeds, vocab)  # ids outside the vocabulary, seeds one short, ...
        verdicts: list[Verdict] = [bad.get(i, ACCEPT) for i in range(n)]
        rows = list(logits) if logits is not None else None
        for check in self.checks:
            live = [i for i in range(n) if verdicts[i].accepted]
            if not live:
                break
            start = time.perf_counter()
            if check.needs_logits and rows is None:
                rows = [None] * n
                got = completion_logits(self.model, [prompt_ids[i] for i in live], [completion_ids[i] for i in live],
                                        self._pad(), None if prompt_mask is None else [prompt_mask[i] for i in live]
                                        ) if self.model is not None else None
                if got is None:
                    raise ValueError(f"Verifier: the {check.name} check needs model= or logits=")
                for i, lg in zip(live, got):
                    rows[i] = lg
            out = self._run(check, live, prompt_ids, completion_ids, seeds, texts, questions, rows, prompt_mask)
            for i, v in zip(live, out):
                verdicts[i] = v
            self.seconds[check.name] = self.seconds.get(check.name, 0.0) + time.perf_counter() - start
        return verdicts

    def _pad(self) -> int:
        if self.eos_id is None:
            raise ValueError("Verifier: logit-level checks need eos_id=")
        return self.eos_id if self.pad_id is None else self.pad_id

    def _texts(self, live, completion_ids, texts) -> list[str]:
        if texts is not None:
            return [texts[i] for i in live]
        if self.decode is None:
            raise ValueError("Verifier: pass texts= or decode= for the text checks")
        return [self.decode(list(completion_ids[i])) for i in live]

    def _run(self, check, live, prompt_ids, completion_ids, seeds, texts, questions, rows, prompt_mask) -> list[Verdict]:
        comps = [completion_ids[i] for i in live]
        sub_rows = None if rows is None else [rows[i] for i in live]
        if isinstance(check, TopK):
            return topk_verdicts(comps, k=check.k, eos_id=self.eos_id, logits=sub_rows, atol=check.atol,
                                 decode=self.decode, name=check.name)
        if isinstance(check, Replay):
            if seeds is None:
                raise ValueError("Verifier: the replay check needs seeds= (one claimed seed per completion)")
            return replay_verdicts(comps, [seeds[i] for i in live], check.params, eos_id=self.eos_id,
                                   model=self.model, prompt_ids=[prompt_ids[i] for i in live],
                                   logits=sub_rows if check.method == "fast" else None, method=check.method,
                                   atol=check.atol, pad_id=self._pad(), name=check.name,
                                   prompt_mask=None if prompt_mask is None else [prompt_mask[i] for i in live])
        if isinstance(check, Steps):
            return step_verdicts(self._texts(live, completion_ids, texts), check.checker, check.name)
        if isinstance(check, Judge):
            if questions is None:
                raise ValueError("Verifier: the judge check needs questions=")
            return judge_verdicts(check.judge, [questions[i] for i in live], self._texts(live, completion_ids, texts),
                                  check.on_error, check.name)
        raise ValueError(f"Verifier: unknown check {check!r} (use TopK, Replay, Steps or Judge)")
