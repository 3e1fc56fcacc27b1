"""dgrpo's checks inside TRL's ``GRPOTrainer`` (docs/trl.md): reject untrusted completions before
they reach the update.

Two pieces, used together when completions come from workers the trainer does not control
(remote vLLM servers, volunteer machines) through TRL's ``rollout_func``:

* :func:`verified_rollout_func` wraps a ``rollout_func``: it runs a :class:`~dgrpo.verify.Verifier`
  on the rollout's ``prompt_ids`` / ``completion_ids`` (and ``seeds`` when the workers return them,
  for exact replay) right where they enter the trainer, and adds the verdicts as an extra field,
  ``dgrpo_rejection`` (one string per completion: empty when accepted, else ``"<check>: <reason>"``).
  The top-k and replay checks cost one extra forward pass without grad per distinct prompt (TRL keeps
  per-token log-probabilities, not the logits those checks need).
* :func:`defend_rewards` wraps TRL reward functions (``f(prompts, completions, completion_ids, **kw)``):
  a rejected completion gets reward 0 from every wrapped function (``action="zero"``, the paper's
  r = r_verifiable × r_verifier) or None from every one (``action="drop"``: TRL then excludes it from
  its group's mean and std and gives it advantage 0). Without the rollout wrapper (TRL's own
  generation) the reward wrapper runs the verifier itself, tokenizing the prompts as TRL does.

Rejections are logged through TRL's ``log_metric`` as ``dgrpo/rejected`` (fraction of the batch) and
``dgrpo/<check>/rejected``; :attr:`RolloutDefense.verdicts` keeps the last batch's verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from dgrpo.types import Verdict
from dgrpo.verify.checks import Verifier

FIELD = "dgrpo_rejection"


def _require_trl() -> None:
    try:
        import trl  # noqa: F401
    except ImportError as e:
        raise ImportError('dgrpo.integrations.trl needs TRL: pip install "dgrpo[trl]"') from e


def _text(completion) -> str:
    """A TRL completion as text: a string, or conversational ``[{"role": "assistant", "content": ...}]``."""
    if isinstance(completion, str):
        return completion
    return "".join(m["content"] if isinstance(m["content"], str) else "" for m in completion)


def _question(prompt) -> str:
    """The last user turn of a TRL prompt (the prompt itself when it is a string)."""
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if m.get("role") == "user" and isinstance(m.get("content"), str)]
    return users[-1] if users else ""


def _reason(v: Verdict) -> str:
    return "" if v.accepted else f"{v.defense}: {v.reason}"


@dataclass
class RolloutDefense:
    """The verifier shared by the rollout wrapper and the reward wrappers, and what it decided.

    Attributes:
        verifier: the checks to run (:class:`dgrpo.verify.Verifier`); its ``model`` must be the
            trainer's policy object itself, so the checks score with the weights being trained.
        tokenizer: the trainer's processing class (prompt tokenization when TRL generates itself, texts).
        action: ``zero`` (reward 0) or ``drop`` (reward None: out of the group statistics, advantage 0).
        verdicts: the last batch's verdicts; rejected: how many completions were rejected so far; seen: checked so far.
    """

    verifier: Verifier
    tokenizer: Any = None
    action: Literal["zero", "drop"] = "zero"
    verdicts: list[Verdict] = field(default_factory=list)
    rejected: int = 0
    seen: int = 0
    _cache: tuple | None = None

    def __post_init__(self):
        if self.action not in ("zero", "drop"):
            raise ValueError(f"RolloutDefense: action must be 'zero' or 'drop', got {self.action!r}")

    def check(self, prompt_ids, completion_ids, *, seeds=None, texts=None, questions=None) -> list[str]:
        """Run the verifier on one batch; returns the ``dgrpo_rejection`` strings (empty = accepted)."""
        verdicts = self.verifier.verify(prompt_ids, completion_ids, seeds=seeds, texts=texts, questions=questions)
        self.verdicts = verdicts
        self.seen += len(verdicts)
        self.rejected += sum(not v.accepted for v in verdicts)
        return [_reason(v) for v in verdicts]

    def _prompt_ids(self, prompts) -> list[list[int]]:
        """Tokenize prompts as GRPOTrainer does (text: the tokenizer's defaults; chat: the chat template)."""
        if self.tokenizer is None:
            raise ValueError("RolloutDefense: pass tokenizer= to check completions TRL generated itself")
        if isinstance(prompts[0], str):
            return self.tokenizer(text=list(prompts))["input_ids"]
        return [self.tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
                for p in prompts]

    def rejections(self, prompts, completions, completion_ids, kwargs: dict) -> list[str]:
        """The batch's rejection strings: from the rollout wrapper's field, else computed once per batch."""
        if FIELD in kwargs:
            return list(kwargs[FIELD])
        key = (tuple(map(tuple, completion_ids)), tuple(map(repr, prompts)))
        if self._cache is None or self._cache[0] != key:
            texts = [_text(c) for c in completions]
            self._cache = (key, self.check(self._prompt_ids(prompts), completion_ids, texts=texts,
                                           questions=[_question(p) for p in prompts]))
        return self._cache[1]

    def log(self, reasons: Sequence[str], kwargs: dict) -> None:
        log_metric = kwargs.get("log_metric")
        if log_metric is None or not reasons:
            return
        log_metric("dgrpo/rejected", sum(bool(r) for r in reasons) / len(reasons))
        for name in dict.fromkeys(c.name for c in self.verifier.checks):
            log_metric(f"dgrpo/{name}/rejected", sum(r.startswith(f"{name}: ") for r in reasons) / len(reasons))


def verified_rollout_func(rollout_func: Callable, defense: RolloutDefense) -> Callable:
    """Wrap a TRL ``rollout_func(prompts, trainer) -> dict`` so its completions are checked on arrival.

    The wrapped function returns the same dict plus ``dgrpo_rejection`` (one string per completion).
    An optional ``seeds`` field (one claimed seed per completion) feeds the replay check; the
    ``seeds`` and verdict fields reach reward functions as keyword arguments, like any extra field.

    Raises:
        ValueError: the rollout's ``prompt_ids`` and ``completion_ids`` differ in length.
    """
    _require_trl()

    def verified(prompts, trainer) -> dict:
        out = rollout_func(prompts, trainer)
        prompt_ids, completion_ids = out["prompt_ids"], out["completion_ids"]
        if len(prompt_ids) != len(completion_ids):
            raise ValueError(f"rollout_func returned {len(prompt_ids)} prompt_ids for {len(completion_ids)} completion_ids")
        per = len(completion_ids) // max(len(prompts), 1)  # completions per prompt, in prompt order
        questions = [_question(prompts[min(i // max(per, 1), len(prompts) - 1)]) for i in range(len(completion_ids))]
        tok = defense.tokenizer
        texts = tok.batch_decode(completion_ids, skip_special_tokens=True) if tok is not None else None
        out[FIELD] = defense.check(prompt_ids, completion_ids, seeds=out.get("seeds"), texts=texts, questions=questions)
        return out

    verified.__name__ = getattr(rollout_func, "__name__", "rollout_func")
    return verified


def defend_rewards(reward_funcs: Callable | Sequence[Callable], defense: RolloutDefense) -> list[Callable]:
    """Wrap TRL reward functions so a completion the defense rejected gets 0 (or None with ``drop``) from each.

    Wrap every reward function of the trainer: with ``drop``, TRL leaves a completion out of the
    group statistics only when *every* reward function returns None for it. Names are kept (TRL logs
    ``rewards/<name>/mean``).

    Returns:
        The wrapped functions, in order (pass them as ``GRPOTrainer(reward_funcs=...)``).
    """
    _require_trl()
    funcs = [reward_funcs] if callable(reward_funcs) else list(reward_funcs)
    wrapped = []
    for i, func in enumerate(funcs):
        def defended(prompts, completions, completion_ids, _func=func, _first=i == 0, **kwargs):
            reasons = defense.rejections(prompts, completions, completion_ids, kwargs)
            if _first:
                defense.log(reasons, kwargs)
            kwargs.pop(FIELD, None)
            rewards = _func(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
            cut = 0.0 if defense.action == "zero" else None
            return [cut if reason else r for r, reason in zip(rewards, reasons)]

        defended.__name__ = getattr(func, "__name__", f"reward_{i}")
        wrapped.append(defended)
    return wrapped
