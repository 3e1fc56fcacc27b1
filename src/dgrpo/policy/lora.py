"""LoRA adapters on a policy, in place (peft's ``inject_adapter_in_model``).

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", eq. 3) replaces a
linear layer's W x by W x + (α / r) · B A x with A (r, d_in) random and B (d_out, r) zero, so the
adapted model starts equal to the base model; only A and B train. The model object stays the
same (no ``PeftModel`` wrapper), so the sampler, the scoring pass and checkpoints see one module
tree whose state dict holds the base weights and the adapters.
"""

from __future__ import annotations

from typing import Sequence

from torch import nn


def add_lora(model: nn.Module, rank: int, alpha: float, targets: Sequence[str]) -> nn.Module:
    """Inject rank-``rank`` LoRA adapters into the ``targets`` linears of ``model`` and freeze the rest.

    Args:
        model: a transformers causal LM (changed in place and returned).
        rank: r ≥ 1.
        alpha: α, the adapters' update is scaled by α / r.
        targets: module names (peft ``target_modules``), e.g. ``["q_proj", "v_proj"]``.

    Returns:
        ``model``, whose only parameters with ``requires_grad`` are the adapters' A and B.

    Raises:
        ValueError: no module of ``model`` matches ``targets`` (peft's message, naming them).
    """
    from peft import LoraConfig, inject_adapter_in_model

    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0, bias="none")
    inject_adapter_in_model(config, model)
    for name, param in model.named_parameters():
        param.requires_grad_("lora_" in name)
    return model


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters an optimizer updates: every one with ``requires_grad`` (all, without LoRA)."""
    return [p for p in model.parameters() if p.requires_grad]
