"""A prompt prefix several groups share, run once: its keys and values, and one backward through it.

The prompts of an update share most of their tokens (the arithmetic task's system prompt and
worked examples: 196 of ~228). :func:`dgrpo.policy.scoring.group_logits` already runs each group's
prompt once for its G completions; with a :class:`SharedPrefix` the prefix common to all the
groups runs once per update instead of once per group, forward and backward:

* the forward over the prefix keeps its graph; each group's forward reads *leaf* copies of the
  prefix's keys and values (``kv``), so a group's backward stops there and adds ∂loss/∂(keys,
  values) to the leaves' ``.grad``;
* :meth:`SharedPrefix.backward` then back-propagates the summed gradient through the prefix's
  forward once.

The gradient is the same sum as G groups each back-propagating through their own copy of the
prefix, added in another order: equal up to float32 rounding (tests/grpo/test_shared_prefix.py).
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel

from dgrpo.policy.kv_cache import plain_layers
from dgrpo.policy.onednn import Kernel, kernel_linears
from dgrpo.policy.sampling import _shared_prefix


def common_prefix(prompts: Sequence[Sequence[int]], minimum: int = 16) -> int:
    """Length of the prefix all distinct ``prompts`` share, each keeping at least one token after it.

    Returns 0 for fewer than two distinct prompts or a prefix shorter than ``minimum`` tokens (not
    worth a forward of its own).
    """
    return _shared_prefix(list(dict.fromkeys(tuple(p) for p in prompts)), minimum)


class SharedPrefix:
    """The keys and values of ``ids`` under ``model``, computed once, for several groups to attend to.

    Args:
        model: a causal LM whose layers keep plain KV caches (:func:`dgrpo.policy.kv_cache.plain_layers`).
        ids: the prefix token ids (length S ≥ 1).
        grad: keep the forward's graph so the groups' gradients can flow back into the weights
            (:meth:`backward`); False for scoring without grad (a reference model, a defense).
        kernel: the float32 linear kernel of the forward (and so of its backward):
            :func:`dgrpo.policy.onednn.kernel_linears`; oneDNN, the sampler's, unless only the update reads it.

    Attributes:
        ids: the prefix.
        grad: whether the groups' gradients are collected (``grad`` and a parameter requires grad).
        kv: per layer, (keys, values) of shape (1, kv_heads, S, head_dim): leaves that collect
            the groups' gradients when ``grad``.

    Raises:
        ValueError: an empty prefix, or a model whose layers are not plain attention.
    """

    def __init__(self, model: PreTrainedModel, ids: Sequence[int], grad: bool, kernel: Kernel = "onednn"):
        if not ids:
            raise ValueError("SharedPrefix needs a non-empty prefix")
        if not plain_layers(model.config):
            raise ValueError("SharedPrefix needs a model whose layers all keep plain KV caches (no sliding window)")
        self.ids = list(ids)
        device = next(model.parameters()).device
        cache = DynamicCache(config=model.config)
        with torch.set_grad_enabled(grad), kernel_linears(model, kernel):
            model(input_ids=torch.tensor([self.ids], device=device), cache=cache, use_cache=True, logits_to_keep=1)
        outputs = [(layer.keys, layer.values) for layer in cache.layers]
        self.grad = grad and any(t.requires_grad for pair in outputs for t in pair)
        self._outputs = outputs if self.grad else None
        self.kv = [(k.detach().requires_grad_(self.grad), v.detach().requires_grad_(self.grad)) for k, v in outputs]

    def cache(self, model: PreTrainedModel) -> DynamicCache:
        """A new cache (batch 1) holding the prefix; forwards append to it without touching ``kv``."""
        cache = DynamicCache(config=model.config)
        for layer, (k, v) in enumerate(self.kv):
            cache.update(k, v, layer)
        return cache

    def matches(self, prompt: Sequence[int]) -> bool:
        """Whether ``prompt`` starts with the prefix and has at least one token after it."""
        return len(prompt) > len(self.ids) and list(prompt[: len(self.ids)]) == self.ids

    def backward(self) -> None:
        """Back-propagate the gradient the groups left on ``kv`` through the prefix's forward, once.

        Adds to the parameters' ``.grad``; frees the graph. Does nothing without grad or when no
        group back-propagated into the prefix.
        """
        if self._outputs is None:
            return
        pairs = [(out, leaf.grad) for outs, leaves in zip(self._outputs, self.kv)
                 for out, leaf in zip(outs, leaves) if leaf.grad is not None]
        self._outputs = None
        if pairs:
            torch.autograd.backward([out for out, _ in pairs], [g for _, g in pairs])
