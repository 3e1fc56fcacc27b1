"""How :meth:`dgrpo.integrations.trl.RolloutDefense.attach` hooks into a TRL ``GRPOTrainer`` (docs/trl.md).

* :func:`trainer_problems`: the trainer settings that make the logit-level checks reject honest work
  (``bf16``, ``top_k=0``, ``repetition_penalty``, vLLM generation under Replay or in half precision,
  dropout in TRL's own train-mode generation, a temperature or length the workers did not sample with,
  ...), one line each, read as ``generate`` resolves them (:func:`effective_generation`: ``GRPOConfig``,
  its ``generation_kwargs``, the model's generation config, transformers' defaults);
* :func:`cut_after_stop`, :func:`fill_empty`: a ``rollout_func`` result made safe for TRL (no tokens
  after the first eos, no empty completion);
* :func:`hook_generation`: the checks run right where completions enter the trainer (``_generate``), for
  TRL's own generation and ``rollout_func`` alike, so that with ``action="drop"`` a rejected completion's
  tokens leave the loss, its normaliser and the KL term (TRL's ``env_mask``: the completion mask is 0 on
  every token of it);
* :func:`seeded_generation`: TRL's own ``generate`` samples with dgrpo's seeded sampler
  (:class:`~dgrpo.integrations.generate.SeededLogitsProcessor`), so Replay can check it.

The hooks wrap two methods of the trainer instance that TRL 1.16 keeps private (``_generate`` and
``_generate_single_turn``); :func:`hook_generation` refuses a trainer whose ``_generate`` returns
another layout.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from dgrpo.errors import SettingError
from dgrpo.verify.checks import Replay, TopK
from dgrpo.verify.forward import active_dropout
from dgrpo.verify.generation import generation_problems

if TYPE_CHECKING:
    from dgrpo.integrations.trl import RolloutDefense

FIELD = "dgrpo_rejection"


def trainer_model(trainer) -> Any:
    """The policy object the trainer updates (unwrapped from its accelerator)."""
    return trainer.accelerator.unwrap_model(trainer.model)


def trainer_problems(trainer, checks, eos_id: int | None) -> list[str]:
    """What in ``trainer.args`` (``GRPOConfig``) and the trainer's generation makes ``checks`` reject honest work.

    Returns:
        One line per problem, each naming the setting (``GRPOConfig.top_k=0 ...``) and the fix.
    """
    args = trainer.args
    topks = [c for c in checks if isinstance(c, TopK)]
    replays = [c for c in checks if isinstance(c, Replay)]
    if not topks and not replays:
        return []
    out = []
    for flag in ("bf16", "fp16"):
        if getattr(args, flag, False):
            default = " (TRL's default when bf16 is unset)" if flag == "bf16" else ""
            out.append(f"GRPOConfig.{flag}=True{default}: the top-k and replay checks are exact only in float32 (in "
                       f"{flag} honest tokens fall outside the top-k and replay rejects honest completions); set "
                       f"{flag}=False")
    for replay in replays:  # the workers (or TRL's seeded generate) sample at params.temperature, greedy at 0
        p = replay.params
        if args.temperature != p.temperature:
            out.append(f"GRPOConfig.temperature={args.temperature} but Replay's params.temperature={p.temperature} (the "
                       "workers' sampling): the loss would score another distribution than the one sampled; make them equal")
    own = trainer.rollout_func is None
    dropout = active_dropout(trainer_model(trainer)) if own and not args.use_vllm else []
    if dropout:  # TRL's generate runs in train mode; the checks score in eval mode
        modules = any(d.startswith("Dropout(") for d in dropout)  # what disable_dropout zeroes
        rates = [d.split("=")[0] for d in dropout if not d.startswith("Dropout(")]  # rates held by the modules
        fix = " and ".join([*(["set disable_dropout=True"] if modules else []),
                            *([f"load the model with {', '.join(rates)} 0 in its config"] if rates else [])])
        out.append(f"GRPOConfig.disable_dropout={getattr(args, 'disable_dropout', False)}: the model has dropout "
                   f"({', '.join(dropout)}) and TRL's own generate samples in train mode with it, so the checks (which "
                   f"score without dropout) reject honest completions; {fix}")
    sampled = (args.generation_kwargs or {}).get("temperature", args.temperature)
    if own and not replays and sampled != args.temperature:
        out.append(f"GRPOConfig.generation_kwargs: temperature={sampled} but GRPOConfig.temperature={args.temperature}: "
                   "TRL samples at one and its loss scores at the other; set only GRPOConfig.temperature")
    if own and args.use_vllm:
        if replays:
            out.append("GRPOConfig.use_vllm=True: vLLM's sampler cannot be replayed (dgrpo's seeded sampler runs in "
                       "transformers' generate; docs/trl.md); generate without vLLM or through rollout_func workers")
        dtype = vllm_dtype(trainer)
        if dtype is None:
            out.append("GRPOConfig.use_vllm=True: the vLLM side's dtype cannot be read (TRL's colocated vLLM and `trl "
                       "vllm-serve` default to dtype 'auto', which runs float32 checkpoints in half precision) and the "
                       "top-k and replay checks need float32; serve with --dtype float32 or set use_vllm=False")
        elif str(dtype).removeprefix("torch.") not in ("float32", "float"):
            out.append(f"GRPOConfig.use_vllm=True: vLLM generates in {str(dtype).removeprefix('torch.')}, and the top-k and "
                       "replay checks are exact only in float32 (honest tokens fall outside the top-k); serve with "
                       "--dtype float32 or set use_vllm=False")
        settings = {"do_sample": True, "top_k": args.top_k, "repetition_penalty": args.repetition_penalty,
                    **(args.generation_kwargs or {})}
        out += generation_problems(settings, topks, model=trainer_model(trainer), where="GRPOConfig")
    elif own and args.use_transformers_continuous_batching and replays:
        out.append("GRPOConfig.use_transformers_continuous_batching=True takes no logits processor, so Replay cannot "
                   "check its completions; set it to False")
    elif own:
        settings = effective_generation(trainer)
        out += [_name_trl_field(p, args.generation_kwargs) for p in generation_problems(
            settings, checks, seeded=bool(replays), model=trainer_model(trainer), eos_id=eos_id, where="GRPOConfig")]
    else:
        out += generation_problems(None, checks, model=trainer_model(trainer))
        stops = list(getattr(trainer, "eos_token_ids", None) or [])
        if replays and eos_id is not None and set(stops) - {eos_id}:
            out.append(f"model.generation_config.eos_token_id: TRL ends completions at {stops} (GRPOTrainer.eos_token_ids) "
                       f"and a rollout is cut at each, but Replay's seeded sampler stops at eos_id={eos_id} only, so "
                       f"honest completions are rejected; set model.generation_config.eos_token_id={eos_id}")
    return out


def vllm_dtype(trainer) -> str | None:
    """The dtype TRL's vLLM generates in, as vLLM resolved it (None when it cannot be read).

    Server mode: ``model_config.dtype`` of the server's ``/server_info`` (what ``trl vllm-serve --dtype`` set);
    colocate mode: the engine's ``model_config.dtype``. TRL starts the colocated engine with vLLM's default
    dtype ``auto`` (half precision for a float32 checkpoint, vLLM's engine arguments). Read from the objects
    TRL 1.16 builds; not tested against a running vLLM (none is installed here).
    """
    gen = getattr(trainer, "vllm_generation", None)
    try:
        if getattr(trainer.args, "vllm_mode", "colocate") == "server":
            return gen.vllm_client.get_server_info()["model_config"]["dtype"]
        return gen.llm.llm_engine.model_config.dtype
    except Exception:  # no engine or server to ask, an older server, a network error: unknown
        return None


def effective_generation(trainer):
    """The ``GenerationConfig`` TRL's own ``generate`` samples with, as ``generate`` resolves it.

    TRL builds it from ``GRPOConfig`` (``top_k``, ``temperature``, ``repetition_penalty``, ...) overridden
    by ``GRPOConfig.generation_kwargs``; ``generate`` then fills every field left None from the model's
    ``generation_config`` and from transformers' defaults (``top_k=50``, ...). So
    ``generation_kwargs={"top_k": 50}`` samples with top-50 whatever ``GRPOConfig.top_k`` says, and
    ``{"top_k": None}`` with the checkpoint's top_k or 50.
    """
    import copy

    config = copy.deepcopy(trainer.generation_config)
    model_config = getattr(trainer_model(trainer), "generation_config", None)
    if model_config is not None:
        config.update(**model_config.to_dict(), defaults_only=True, allow_custom_entries=True)
    config.update(**config._get_default_generation_params(), defaults_only=True)
    return config


def _name_trl_field(problem: str, generation_kwargs: dict | None) -> str:
    """Name the field where the user set it: ``generation_kwargs`` overrides ``GRPOConfig``'s own field, and
    GRPOConfig calls generate's max_new_tokens ``max_completion_length``."""
    for key in generation_kwargs or {}:
        if problem.startswith(f"GRPOConfig: {key}="):
            return problem.replace("GRPOConfig: ", "GRPOConfig.generation_kwargs: ", 1)
    return problem.replace("GRPOConfig: max_new_tokens=", "GRPOConfig: max_completion_length=")


def cut_after_stop(out: dict, stop_ids) -> None:
    """Cut every completion of a ``rollout_func`` result after its first stop token (eos kept), in place.

    TRL trains on every token a ``rollout_func`` returns and decodes them all for the reward functions,
    while the checks read a completion up to its first eos: a tail after the eos would be rewarded and
    trained unchecked. ``logprobs`` and ``env_mask`` (per-token lists) are cut alike.

    Args:
        out: the rollout dict (``completion_ids``; optional ``logprobs``, ``env_mask``), modified in place.
        stop_ids: the token ids that end a completion (the verifier's eos and TRL's ``eos_token_ids``).
    """
    stops = set(stop_ids)
    for i, ids in enumerate(out["completion_ids"]):
        ids = list(ids)
        end = next((t + 1 for t, tok in enumerate(ids) if tok in stops), len(ids))
        if end == len(ids):
            continue
        out["completion_ids"][i] = ids[:end]
        for key in ("logprobs", "env_mask"):
            if out.get(key) is not None and out[key][i] is not None:
                out[key][i] = list(out[key][i])[:end]


def fill_empty(out: dict, rows: list[int], filler: int) -> None:
    """Give each empty completion in ``rows`` one ``filler`` token that no loss term sees (``env_mask`` 0).

    TRL indexes every completion's last token, so an empty one raises IndexError mid-step; the filler
    keeps the batch's shape while the completion is rejected and masked out of the loss.
    """
    if not rows:
        return
    ids = out["completion_ids"]
    mask = out.get("env_mask")
    out["env_mask"] = mask = [list(m) for m in mask] if mask is not None else [[1] * len(c) for c in ids]
    for i in rows:
        ids[i], mask[i] = [filler], [0]
        if out.get("logprobs") is not None:
            out["logprobs"][i] = [0.0]


def drop_mask(tool_mask, completion_ids, reasons) -> list[list[int]]:
    """TRL's per-token ``tool_mask`` (1 = a model token in the loss) with every token of a rejected completion at 0."""
    base = tool_mask if tool_mask is not None else [[1] * len(ids) for ids in completion_ids]
    return [[0] * len(m) if reason else list(m) for m, reason in zip(base, reasons)]


def refuse_raw_rollout(defense: "RolloutDefense", trainer) -> None:
    """Raise :class:`SettingError` when ``trainer.rollout_func`` is set and not wrapped by ``defense``'s
    :func:`~dgrpo.integrations.trl.verified_rollout_func` (a raw one's completions would reach TRL uncut: a tail
    after the eos, an empty completion, another prompt's answer, a forged ``dgrpo_rejection`` field)."""
    rollout = getattr(trainer, "rollout_func", None)
    if rollout is not None and getattr(rollout, "_dgrpo_defense", None) is not defense:
        raise SettingError("RolloutDefense: GRPOTrainer's rollout_func is not wrapped; pass rollout_func="
                           "verified_rollout_func(your_rollout_func, defense) (a raw one's completions reach TRL "
                           "unchecked: tails after eos, empty or other prompts' completions, forged verdicts)")


def hook_generation(defense: "RolloutDefense", trainer) -> None:
    """Check every batch where it enters ``trainer`` (``_generate``) and, with ``drop``, mask its rejected completions.

    The rejection strings reach the reward functions as the extra field ``dgrpo_rejection``; a batch a
    :func:`~dgrpo.integrations.trl.verified_rollout_func` already checked is not checked again.
    """
    original = trainer._generate

    @functools.wraps(original)
    def checked(prompts):
        refuse_raw_rollout(defense, trainer)  # rollout_func replaced after attach
        out = original(prompts)
        if not isinstance(out, tuple) or len(out) != 8:
            raise SettingError("dgrpo.integrations.trl: this TRL's GRPOTrainer._generate returns another layout than "
                               'TRL 1.16\'s; install "trl>=1.16,<2"')
        prompt_ids, completion_ids, tool_mask, completions, _, extra = out[:6]
        trusted, defense.checked = defense.checked, None
        if trusted is None or extra.get(FIELD) is not trusted:  # only verified_rollout_func's own list is trusted
            seeds = extra.get("seeds", defense.own_seeds)
            reasons = defense.check_batch(prompts, prompt_ids, completion_ids, completions, seeds)
            extra[FIELD] = reasons
            if defense.action == "drop":
                out = (*out[:2], drop_mask(tool_mask, completion_ids, reasons), *out[3:])
        return out

    trainer._generate = checked


@contextmanager
def _with_processor(model, processor):
    """``model.generate`` takes ``processor`` as its logits processor for the duration (instance attribute)."""
    from transformers import LogitsProcessorList

    model.generate = functools.partial(type(model).generate, model, logits_processor=LogitsProcessorList([processor]))
    try:
        yield
    finally:
        del model.generate


def seeded_generation(defense: "RolloutDefense", trainer, params) -> None:
    """Make TRL's own (non-vLLM) ``generate`` sample with dgrpo's seeded sampler under ``params``.

    Completion i of the b-th generated batch gets seed
    ``completion_seed(defense.seed, b, process_index, "trl", i)``; the seeds are kept in
    ``defense.own_seeds`` for the replay check.
    """
    from dgrpo.integrations.generate import SeededLogitsProcessor
    from dgrpo.policy.sampling import completion_seed

    original = trainer._generate_single_turn
    rank = trainer.accelerator.process_index

    @functools.wraps(original)
    def seeded(prompt_ids, *args, **kwargs):
        batch = defense.batches
        defense.batches += 1
        defense.own_seeds = [completion_seed(defense.seed, batch, rank, "trl", i) for i in range(len(prompt_ids))]
        with _with_processor(trainer_model(trainer), SeededLogitsProcessor(defense.own_seeds, params)):
            return original(prompt_ids, *args, **kwargs)

    trainer._generate_single_turn = seeded
