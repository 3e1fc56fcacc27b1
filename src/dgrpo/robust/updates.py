"""What travels in a swarm that exchanges policy updates: flat parameter vectors.

The federated recipe (:mod:`dgrpo.recipes.federated`) keeps one copy of the trainable parameters,
reads each honest node's update as a flat vector θ_k − θ_t (or its gradient) and writes the
aggregate back.
"""

from __future__ import annotations

import torch


class GradientCapture:
    """Stands in for a node's optimizer when updates are gradients: ``step`` records the
    (already clipped) gradient of the trainable parameters instead of moving them."""

    def __init__(self, params: list[torch.Tensor]):
        self.params = params
        self.vector: torch.Tensor | None = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        self.vector = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
                                 for p in self.params])


@torch.no_grad()
def load_vector(vec: torch.Tensor, params: list[torch.Tensor]) -> None:
    """Copy a flat vector into the parameters, in place.

    (``torch.nn.utils.vector_to_parameters`` rebinds ``param.data`` to views of ``vec``, so a later
    in-place optimizer step would write into ``vec`` itself — here θ_t, which must stay intact.)

    Raises:
        ValueError: the vector's length is not the parameters' total size.
    """
    offset = 0
    for p in params:
        p.copy_(vec[offset: offset + p.numel()].view_as(p))
        offset += p.numel()
    if offset != vec.numel():
        raise ValueError(f"vector has {vec.numel()} entries, parameters {offset}")


def set_gradient(vec: torch.Tensor, params: list[torch.Tensor]) -> None:
    """Set each parameter's ``.grad`` to its slice of the flat vector ``vec``."""
    offset = 0
    for p in params:
        p.grad = vec[offset: offset + p.numel()].view_as(p).clone()
        offset += p.numel()


def add_lora(model, rank: int, alpha: float, targets: list[str]):
    """Wrap ``model`` with peft LoRA adapters on ``targets``; only adapter weights stay trainable."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets),
                                            lora_dropout=0.0, bias="none"))


def stack_in_node_order(honest: torch.Tensor, poisoned: torch.Tensor, honest_ids: list[int], malicious_ids: list[int]) -> torch.Tensor:
    """(n, d): row i is node i's update (honest rows from ``honest``, malicious from ``poisoned``)."""
    rows = {k: honest[i] for i, k in enumerate(honest_ids)}
    rows.update({k: poisoned[i] for i, k in enumerate(malicious_ids)})
    return torch.stack([rows[k] for k in sorted(rows)])
