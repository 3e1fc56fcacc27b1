"""How the logit-level checks run the scoring model: without dropout and without gradient checkpointing.

The checks recompute sampling decisions that were made in eval mode (``generate``, dgrpo's sampler and
:func:`dgrpo.integrations.generate.seeded_generate` all sample without dropout). A trainer's model is in
train mode, where

* dropout moves the logits (0.08–0.13 on the tiny GPT-2 and OPT test models with their default dropout),
  so honest tokens leave the top-k and seeded decisions differ;
* gradient checkpointing turns the KV cache off (transformers drops ``use_cache`` under it), and the
  checks score a group's completions against the prompt's cache: GPT-2 raised a shape error, OPT gave
  logits off by 0.06, silently.

:func:`eval_mode` runs the scoring forward in eval mode and puts every module back as it was;
:func:`active_dropout` names the dropout a train-mode forward would apply (for the trainer checks that
refuse a generator sampling in train mode with it); :func:`half_precision_problem` names a bf16/fp16
dtype the exact checks refuse (the one line that both the checks and the generator settings check raise).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def eval_mode(model) -> Iterator[object]:
    """``model`` in eval mode for the duration; each module's own ``training`` flag is restored after."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, mode in modes:
            module.training = mode


def active_dropout(model) -> list[str]:
    """The dropout a train-mode forward of ``model`` applies, one entry per kind (empty: none).

    Returns:
        ``"Dropout(p=0.1)"`` for ``torch.nn.Dropout`` modules with p > 0 (what TRL's ``disable_dropout``
        zeroes) and ``"attention_dropout=0.1"`` (``dropout=``, ``layerdrop=``, ...) for modules that hold a
        float rate of their own and call functional dropout with it (Llama's and OPT's attention, OPT's
        layers), which ``disable_dropout`` leaves alone.
    """
    import torch

    found: dict[str, None] = {}
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout) and module.p > 0:
            found[f"Dropout(p={module.p:g})"] = None
        for name, rate in vars(module).items():
            if isinstance(rate, float) and rate > 0 and ("dropout" in name or name.endswith("drop")):
                found[f"{name}={rate:g}"] = None
    return list(found)


def half_precision_problem(dtype: Any, where: str) -> str | None:
    """The one-line refusal of a bf16 or fp16 ``dtype`` (``where`` names what has it), None for float32/64."""
    name = str(dtype).removeprefix("torch.")
    if name in ("bfloat16", "float16"):
        return (f"{where} is {name}: the top-k and replay checks are exact only in float32 (in bf16 honest "
                "tokens fall outside the top-k and replay rejects most honest completions); use float32 weights")
    return None
