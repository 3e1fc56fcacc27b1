"""dgrpo's checks inside TRL's ``GRPOTrainer`` (docs/trl.md): reject untrusted completions before
they reach the update.

* :class:`RolloutDefense` holds the checks (a :class:`~dgrpo.verify.Verifier`) and what they decided;
  :meth:`RolloutDefense.attach` binds it to the trainer: the checks score with the trainer's own model
  (no second copy), the trainer's settings are checked first (``bf16``, ``top_k``,
  ``repetition_penalty``, temperature, length, vLLM: one line naming the setting when one makes the
  checks reject honest work), and every batch is checked where it enters the trainer, for TRL's own
  generation (sampling with dgrpo's seeded sampler when a Replay check needs it) and ``rollout_func``
  alike.
* :func:`defend_rewards` wraps TRL reward functions (``f(prompts, completions, completion_ids, **kw)``):
  a rejected completion gets reward 0 from every wrapped function (``action="zero"``, the paper's
  r = r_verifiable × r_verifier) or None from every one (``action="drop"``: TRL excludes it from its
  group's mean and std, gives it advantage 0, and the completion mask leaves its tokens out of the loss,
  the loss normaliser and the KL term). The reasons go to TRL's completions table (column
  ``dgrpo_rejection``).
* :func:`verified_rollout_func` wraps a ``rollout_func``: the same checks on the workers' ``prompt_ids`` /
  ``completion_ids`` (and ``seeds``, for exact replay) as they arrive; it attaches the defense on its
  first call.

Rejections are logged through TRL's ``log_metric`` as ``dgrpo/rejected`` (fraction of the batch) and
``dgrpo/<check>/rejected``; :attr:`RolloutDefense.verdicts` keeps the last batch's verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from dgrpo.errors import SettingError
from dgrpo.integrations.trl_trainer import (FIELD, cut_after_stop, drop_mask, fill_empty, refuse_raw_rollout,
                                            trainer_model)
from dgrpo.types import Verdict
from dgrpo.verify.checks import Replay, Verifier
from dgrpo.verify.inputs import malformed, model_vocab


MULTI_TURN = ("{what}: multi-turn rollouts are not supported, as dgrpo's checks score every completion token as "
              "sampled by the model and reject honest completions with spliced-in feedback; use single-turn rollouts")


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
    """The checks shared by the trainer hooks and the reward wrappers, and what they decided.

    Attributes:
        verifier: the checks to run (:class:`dgrpo.verify.Verifier`); leave its ``model`` None:
            :meth:`attach` sets the trainer's own policy object (a second copy would stop matching the
            trained weights after the first step, and is refused). Its ``eos_id``, ``pad_id`` and
            ``decode`` default to the trainer's tokenizer's.
        tokenizer: the tokenizer that decodes completions for the text checks (default: the trainer's).
        action: ``zero`` (reward 0) or ``drop`` (reward None and no token in the loss).
        seed: the run seed of TRL's own seeded generation (when a Replay check needs it).
        verdicts: the last batch's verdicts; rejected: how many completions were rejected so far; seen: checked so far.
    """

    verifier: Verifier
    tokenizer: Any = None
    action: Literal["zero", "drop"] = "zero"
    seed: int = 0
    verdicts: list[Verdict] = field(default_factory=list)
    rejected: int = 0
    seen: int = 0
    trainer: Any = None
    own_seeds: list[int] | None = None
    batches: int = 0
    checked: Any = None  # the dgrpo_rejection list verified_rollout_func wrote for the batch in flight

    def __post_init__(self):
        if self.action not in ("zero", "drop"):
            raise ValueError(f"RolloutDefense: action must be 'zero' or 'drop', got {self.action!r}")

    def attach(self, trainer):
        """Bind the checks to ``trainer`` (a TRL ``GRPOTrainer``); call it before ``trainer.train()``.

        Returns:
            ``trainer``.

        Raises:
            SettingError: the verifier holds another model than the trainer's, a reward function is not
                wrapped with :func:`defend_rewards`, or a trainer setting makes the checks reject honest
                completions (:func:`dgrpo.integrations.trl_trainer.trainer_problems`); one line naming it.
        """
        from dgrpo.integrations.trl_trainer import hook_generation, seeded_generation, trainer_model, trainer_problems

        if self.trainer is trainer:
            return trainer
        model, v = trainer_model(trainer), self.verifier
        if v.model is not None and v.model is not model and v.model is not trainer.model:
            raise SettingError("RolloutDefense: the verifier scores with another model object than the trainer's (a "
                               "second copy stops matching the trained weights after the first step); leave "
                               "Verifier(model=None) and attach(trainer) uses the trainer's")
        tok = self.tokenizer if self.tokenizer is not None else trainer.processing_class
        tok = getattr(tok, "tokenizer", tok)  # a multimodal processor holds its tokenizer
        eos = tok.eos_token_id if v.eos_id is None else v.eos_id
        for func, name in zip(trainer.reward_funcs, trainer.reward_func_names):
            refusal = reward_model_refusal(func, name)
            if refusal:
                raise SettingError(refusal)
            if getattr(func, "_dgrpo_defense", None) is not self:
                raise SettingError(f"RolloutDefense: reward function {name!r} is not wrapped; pass reward_funcs="
                                   "defend_rewards([...], defense) so that rejected completions lose their reward")
        refuse_raw_rollout(self, trainer)
        if getattr(trainer, "tools", None) or getattr(trainer, "environment_factories", None):
            raise SettingError(MULTI_TURN.format(what="GRPOTrainer tools / environment_factory (tool output tokens)"))
        problems = trainer_problems(trainer, v.checks, eos)
        if problems:
            raise SettingError(problems[0])
        self.tokenizer, v.model, v.eos_id, v.decode = tok, model, eos, v.decode or tok.decode
        v.pad_id = (tok.pad_token_id if tok.pad_token_id is not None else eos) if v.pad_id is None else v.pad_id
        hook_generation(self, trainer)
        replays = [c for c in v.checks if isinstance(c, Replay)]
        if trainer.rollout_func is None and replays:
            seeded_generation(self, trainer, replays[0].params)
        self.trainer = trainer
        return trainer

    def check(self, prompt_ids, completion_ids, *, seeds=None, texts=None, questions=None,
              given: dict[int, Verdict] | None = None) -> list[str]:
        """Run the verifier on one batch; returns the ``dgrpo_rejection`` strings (empty = accepted).

        ``given`` holds verdicts already decided (completion index → verdict); the verifier runs on the rest.
        """
        given = given or {}
        rest = [i for i in range(len(completion_ids)) if i not in given]
        pick = (lambda xs: None if xs is None else [xs[i] for i in rest])  # noqa: E731
        found = self.verifier.verify(pick(prompt_ids), pick(completion_ids), seeds=pick(seeds), texts=pick(texts),
                                     questions=pick(questions)) if rest else []
        verdicts = [given.get(i) for i in range(len(completion_ids))]
        for i, v in zip(rest, found):
            verdicts[i] = v
        self.verdicts = verdicts
        self.seen += len(verdicts)
        self.rejected += sum(not v.accepted for v in verdicts)
        return [_reason(v) for v in verdicts]

    def check_batch(self, prompts, prompt_ids, completion_ids, completions, seeds=None) -> list[str]:
        """:meth:`check` of a batch as ``GRPOTrainer._generate`` has it (one prompt per completion)."""
        return self.check(prompt_ids, completion_ids, seeds=seeds, texts=[_text(c) for c in completions],
                          questions=[_question(p) for p in prompts])

    def rejections(self, kwargs: dict) -> list[str]:
        """The batch's rejection strings, as the trainer hook (or rollout wrapper) left them in the batch.

        Raises:
            SettingError: the defense was never attached to the trainer (the first batch refuses).
        """
        if FIELD not in kwargs:
            raise SettingError("RolloutDefense: not attached to the trainer; call defense.attach(trainer) before "
                               "trainer.train() (the checks need the trainer's model and settings)")
        return list(kwargs[FIELD])

    def log(self, reasons: Sequence[str], kwargs: dict) -> None:
        """The batch's rejection rates to TRL's metrics, its reasons to TRL's completions table."""
        log_extra = kwargs.get("log_extra")
        if log_extra is not None and reasons:
            log_extra(FIELD, list(reasons))
        log_metric = kwargs.get("log_metric")
        if log_metric is None or not reasons:
            return
        log_metric("dgrpo/rejected", sum(bool(r) for r in reasons) / len(reasons))
        names = [*(c.name for c in self.verifier.checks), *(r.split(": ")[0] for r in reasons if r)]
        for name in dict.fromkeys(names):
            log_metric(f"dgrpo/{name}/rejected", sum(r.startswith(f"{name}: ") for r in reasons) / len(reasons))


def verified_rollout_func(rollout_func: Callable, defense: RolloutDefense) -> Callable:
    """Wrap a TRL ``rollout_func(prompts, trainer) -> dict`` so its completions are checked on arrival.

    The wrapped function attaches ``defense`` to the trainer on its first call and returns the same dict
    plus ``dgrpo_rejection`` (one string per completion) and, with ``action="drop"``, an ``env_mask`` that
    is 0 on every token of a rejected completion (TRL then leaves those tokens out of the loss). An
    optional ``seeds`` field (one claimed seed per completion) feeds the replay check.

    Each rollout's ``prompt_ids`` must be the trainer's own tokenization of the prompt it was sent (TRL's
    ``_tokenize_prompts``: the chat template with the generation prompt, or the tokenizer on a string
    prompt): a completion whose ``prompt_ids`` differ answers another prompt and is rejected
    (``prompt: ...``), and the trainer's ``prompt_ids`` replace the worker's in what TRL trains on.

    Before the checks, every completion is cut after its first eos (the verifier's or one of TRL's
    ``eos_token_ids``): TRL would train on and reward a tail the checks never read. An empty completion
    is rejected (``rollout: empty completion``) and handed to TRL as one eos token with ``env_mask`` 0
    (TRL raises IndexError on an empty one); so is a completion with a token id outside [0, the model's
    vocabulary) (``rollout: token id 999999 at position 0 out of range ...``). A ``seeds`` list of another
    length rejects every completion (``rollout: 7 seeds for 8 completions``), a seed that is not a 64-bit
    integer its own; a completion longer than ``GRPOConfig.max_completion_length`` is rejected
    (``rollout: 14 tokens exceed ...``). A worker's own ``dgrpo_rejection`` field is discarded.

    Raises:
        ValueError: the rollout's ``prompt_ids`` and ``completion_ids`` differ in length.
        SettingError: from :meth:`RolloutDefense.attach`, on the first call.
    """
    _require_trl()

    def verified(prompts, trainer) -> dict:
        defense.attach(trainer)
        out = rollout_func(prompts, trainer)
        out.pop(FIELD, None)  # a worker's own verdicts are never trusted
        if any(m is not None and 0 in list(m) for m in out.get("env_mask") or []):
            raise SettingError(MULTI_TURN.format(what="rollout_func: env_mask has 0s (environment or tool tokens)"))
        out["completion_ids"] = completion_ids = [list(c) for c in out["completion_ids"]]
        prompt_ids = out["prompt_ids"]
        if len(prompt_ids) != len(completion_ids):
            raise ValueError(f"rollout_func returned {len(prompt_ids)} prompt_ids for {len(completion_ids)} completion_ids")
        eos = defense.verifier.eos_id
        cut_after_stop(out, {eos, *getattr(trainer, "eos_token_ids", [])})
        per = max(len(completion_ids) // max(len(prompts), 1), 1)  # completions per prompt, in prompt order
        source = [min(i // per, len(prompts) - 1) for i in range(len(completion_ids))]  # completion → its prompt
        questions = [_question(prompts[j]) for j in source]
        given, unusable = unfit_rollouts(out, trainer)
        fill_empty(out, unusable, eos)  # TRL decodes and indexes every completion: no empty one, no id past the vocabulary
        texts = defense.tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        own = trainer._tokenize_prompts(list(prompts))[0]  # TRL's own tokenization (chat template, generation prompt)
        given.update(other_prompts(own, prompt_ids, source, given))
        out["prompt_ids"] = prompt_ids = [list(own[j]) for j in source]
        out[FIELD] = defense.checked = defense.check(prompt_ids, completion_ids, seeds=out.get("seeds"), texts=texts,
                                                     questions=questions, given=given)
        if defense.action == "drop":
            out["env_mask"] = drop_mask(out.get("env_mask"), completion_ids, out[FIELD])
        return out

    verified.__name__ = getattr(rollout_func, "__name__", "rollout_func")
    verified._dgrpo_defense = defense
    return verified


def unfit_rollouts(out: dict, trainer) -> tuple[dict[int, Verdict], list[int]]:
    """The completions of a rollout that cannot be checked or trained as they are, each with its rejection.

    Returns:
        (completion index → a ``rollout`` rejection, the indices whose ids TRL cannot take: empty, or a token id
        outside [0, the model's vocabulary)). A seed that is not a 64-bit integer or a ``seeds`` list of another
        length (:func:`dgrpo.verify.inputs.malformed`), and a completion longer than
        ``GRPOConfig.max_completion_length`` (TRL's own generation stops there) are rejected too.
    """
    ids = out["completion_ids"]
    given = malformed(None, ids, out.get("seeds"), model_vocab(trainer_model(trainer)), "rollout")
    unusable = [i for i, v in given.items() if v.reason.startswith("token id")]
    if out.get("seeds") is not None and len(out["seeds"]) != len(ids):  # every completion rejected; TRL hands an
        out["seeds"] = [None] * len(ids)  # extra field out per completion and raised KeyError on a short one
    for i, c in enumerate(ids):
        if not c and i not in given:
            given[i] = Verdict(False, "rollout", "empty completion (a sampler emits at least one token, eos included)", 0)
            unusable.append(i)
    limit = getattr(trainer.args, "max_completion_length", None)
    for i, c in enumerate(ids):
        if limit is not None and len(c) > limit and i not in given:
            given[i] = Verdict(False, "rollout", f"{len(c)} tokens exceed GRPOConfig.max_completion_length={limit}",
                               limit)
    return given, sorted(unusable)


def other_prompts(own, prompt_ids, source: list[int], skip=()) -> dict[int, Verdict]:
    """The completions whose ``prompt_ids`` are not the trainer's tokenization of the prompt they were sent.

    Args:
        own: the trainer's token ids of each prompt it handed to ``rollout_func``; prompt_ids: the rollout's,
            one per completion; source: the index in ``own`` of each completion's prompt; skip: indices left out.

    Returns:
        completion index → a ``prompt`` rejection naming the first differing position.
    """
    out = {}
    for i, (ids, j) in enumerate(zip(prompt_ids, source)):
        ids, want = list(ids), [int(t) for t in own[j]]
        if i in skip or ids == want:
            continue
        t = next((k for k, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
        out[i] = Verdict(False, "prompt", f"prompt_ids differ from the trainer's prompt {j} at position {t} (the "
                         "completion answers another prompt)", None)
    return out


def reward_model_refusal(func, name: str) -> str | None:
    """The one-line refusal of a reward model (a ``torch.nn.Module`` or a model path) among the reward functions."""
    import torch

    if not isinstance(func, (str, torch.nn.Module)):
        return None
    return (f"RolloutDefense: reward function {name!r} is a reward model, whose score TRL computes itself where dgrpo "
            "cannot cut it; call the model inside a function, def rm_reward(prompts, completions, **kw): return "
            "[score of each prompt + completion], and pass reward_funcs=defend_rewards([rm_reward, ...], defense)")


def defend_rewards(reward_funcs: Callable | Sequence[Callable], defense: RolloutDefense) -> list[Callable]:
    """Wrap TRL reward functions so a completion the defense rejected gets 0 (or None with ``drop``) from each.

    Wrap every reward function of the trainer (:meth:`RolloutDefense.attach` refuses one left
    unwrapped): with ``drop``, TRL leaves a completion out of the group statistics only when *every*
    reward function returns None for it. Names are kept (TRL logs ``rewards/<name>/mean``). An async
    reward function is wrapped by an async one (TRL awaits it on its event loop).

    Returns:
        The wrapped functions, in order (pass them as ``GRPOTrainer(reward_funcs=...)``).

    Raises:
        SettingError: a reward model (``torch.nn.Module`` or a model path) among them (:func:`reward_model_refusal`).
    """
    _require_trl()
    from trl.trainer.utils import is_async_callable

    funcs = [reward_funcs] if callable(reward_funcs) or isinstance(reward_funcs, str) else list(reward_funcs)
    wrapped = []
    for i, func in enumerate(funcs):
        refusal = reward_model_refusal(func, func if isinstance(func, str) else type(func).__name__)
        if refusal:
            raise SettingError(refusal)

        def before(kwargs, first):
            reasons = defense.rejections(kwargs)
            if first:
                defense.log(reasons, kwargs)
            kwargs.pop(FIELD, None)
            return reasons

        def after(rewards, reasons):
            cut = 0.0 if defense.action == "zero" else None
            return [cut if reason else r for r, reason in zip(rewards, reasons)]

        if is_async_callable(func):
            async def defended(prompts, completions, completion_ids, _func=func, _first=i == 0, **kwargs):
                reasons = before(kwargs, _first)
                return after(await _func(prompts=prompts, completions=completions, completion_ids=completion_ids,
                                         **kwargs), reasons)
        else:
            def defended(prompts, completions, completion_ids, _func=func, _first=i == 0, **kwargs):
                reasons = before(kwargs, _first)
                return after(_func(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs),
                             reasons)

        defended.__name__ = getattr(func, "__name__", f"reward_{i}")
        defended._dgrpo_defense = defense
        wrapped.append(defended)
    return wrapped
