"""One GRPO update of a policy from a batch of rollouts (paper §1.1, Algorithms 1-2 ``update``).

An update is three calls, which the recipes make in this order::

    batch = learner.score(rollouts)          # groups by prompt; each group's logits come from one
                                             # forward pass with grad, run when first read
    batch = defend(defenses, batch, times)   # dgrpo.defenses: verdicts on the rollouts, then on each
                                             # group's logits (the update's own forward pass)
    stats = learner.step(batch)              # advantages over each group's accepted completions,
                                             # the loss numerator's backward, one AdamW step

A group a logit-stage defense reads is scored, checked and learnt from before the next one is
scored, so only one such group's graph is alive at a time. Groups no defense read are packed
together, up to :attr:`Learner.pack_rows` rows, into one forward and one backward
(:mod:`dgrpo.policy.packing`: more rows per GEMM, attention still per group). Gradients are divided
by the summed loss denominator at the end, so the result equals the full-batch loss of
:func:`dgrpo.grpo.loss.aggregate_loss`.

Each group's prompt runs once for its G completions (:func:`dgrpo.policy.scoring.group_logits`), and
the prefix all the batch's prompts share (a system prompt, worked examples) runs once per optimizer
step, forward and backward (:class:`dgrpo.policy.prefix.SharedPrefix`; the reference model's once
per update): the same loss and gradients up to float32 rounding. The update's own forwards and
backwards run on ``grpo.update_kernel``'s float32 linear kernel (:func:`dgrpo.policy.onednn.update_kernel`:
MKL on Intel CPUs, oneDNN elsewhere); a forward a defense reads stays on oneDNN, the sampler's.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

import torch
from transformers import PreTrainedModel

from dgrpo.grpo.advantages import ScaleRewards, group_advantages, reward_std
from dgrpo.grpo.loss import LossType, loss_denominator, loss_terms, per_token_loss
from dgrpo.policy.kv_cache import plain_layers
from dgrpo.policy.onednn import update_kernel
from dgrpo.policy.packing import groups_token_logprobs, packed_rows
from dgrpo.policy.prefix import SharedPrefix, common_prefix
from dgrpo.policy import scoring
from dgrpo.policy.scoring import completion_mask, group_logits, group_token_logprobs, pad_right, token_logprobs
from dgrpo.types import Rollout


@dataclass(frozen=True)
class GRPOParams:
    """Hyper-parameters of the update (documented in :class:`dgrpo.config.GRPOConfig`)."""

    loss_type: LossType = "grpo"
    scale_rewards: ScaleRewards = "group"
    beta: float = 0.0
    lr: float = 5e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    num_iterations: int = 1
    epsilon: float = 0.2
    warmup_rounds: int = 0
    max_len: int = 64  # dr_grpo's constant normaliser (max new tokens)
    reject_mode: Literal["drop", "zero"] = "drop"
    update_kernel: Literal["auto", "onednn", "mkl"] = "auto"


@dataclass
class UpdateStats:
    """What one update did: loss, gradient norm (before clipping), rollouts used, seconds."""

    loss: float = 0.0
    grad_norm: float = 0.0
    used: int = 0
    skipped_groups: int = 0
    seconds: float = 0.0


def groups_of(rollouts: Sequence[Rollout]) -> "OrderedDict[str, list[Rollout]]":
    """Rollouts grouped by prompt id, in first-seen order."""
    groups: OrderedDict[str, list[Rollout]] = OrderedDict()
    for r in rollouts:
        groups.setdefault(r.prompt_id, []).append(r)
    return groups


def kept(group: Sequence[Rollout], reject_mode: str) -> tuple[list[int], torch.Tensor]:
    """Indices of a group's completions that enter the loss, and their rewards (n,).

    A rejection drops the completion from its group or keeps it with reward 0, as its verdict's
    ``action`` (default: ``reject_mode``) says.
    """
    idx = [i for i, r in enumerate(group) if not any((v.action or reject_mode) == "drop" for v in r.verdicts)]
    return idx, torch.tensor([0.0 if group[i].verdicts else group[i].reward for i in idx])


def has_signal(rewards: torch.Tensor) -> bool:
    """Whether rewards differ: equal rewards give zero advantage, hence (β = 0) a zero gradient."""
    return len(rewards) >= 2 and bool(rewards.min() != rewards.max())


class Prefix:
    """The prompt prefix the groups of one batch share, and its runs: the policy's (rebuilt after
    each optimizer step, with grad when a group learns; one per float32 linear kernel asked for, the
    oneDNN one for a defense's read, the update's for the update) and the reference model's (no grad).

    Attributes:
        ids: the shared prefix (empty: nothing shared, each group runs its whole prompt).
    """

    def __init__(self, ids: list[int]):
        self.ids, self._runs, self._ref = ids, {}, None  # _runs: kernel → (the policy's run, with grad)

    def policy(self, model, grad: bool, kernel: str = "onednn") -> SharedPrefix | None:
        """The prefix run by the policy on ``kernel``, with grad if ``grad`` (run now unless already run so)."""
        if not self.ids:
            return None
        run = self._runs.get(kernel)
        if run is None or (grad and not run[1]):
            self._runs[kernel] = run = (SharedPrefix(model, self.ids, grad, kernel), grad)
        return run[0]

    def reference(self, model, kernel: str = "onednn") -> SharedPrefix | None:
        """The prefix run by the reference model (no grad)."""
        if self.ids and self._ref is None:
            self._ref = SharedPrefix(model, self.ids, grad=False, kernel=kernel)
        return self._ref

    def backward(self) -> None:
        """Back-propagate the groups' gradients through the policy's prefix runs, once each, then drop them
        (the weights are about to change)."""
        for run, _ in self._runs.values():
            run.backward()
        self._runs = {}


class Group:
    """The completions of one prompt in an update, and the logits of the update's forward pass.

    Attributes:
        rollouts: the group's rollouts (their verdicts grow as defenses judge them).
        old_logp / ref_logp: (n, T) log-probs under π_old and π_ref, kept across iterations.
        prefix: the prompt prefix the batch's groups share.
    """

    def __init__(self, rollouts: list[Rollout], learner: "Learner", prefix: Prefix | None = None):
        self.rollouts, self.learner, self.prefix = rollouts, learner, prefix or Prefix([])
        self._logits: torch.Tensor | None = None
        self.keep_hidden = False  # set by defend when a defense reads the forward's hidden states (TOPLOC)
        self.hidden: list[torch.Tensor] | None = None  # per rollout (len, H) bf16, from the forward that made the logits
        self.old_logp: torch.Tensor | None = None
        self.ref_logp: torch.Tensor | None = None

    @property
    def logits(self) -> torch.Tensor:
        """(G, T, V) float32 logits, T = the longest completion; the forward pass runs when first read,
        with grad when the group can still move the weights (else a defense alone reads them)."""
        if self._logits is None:
            self.hidden = [] if self.keep_hidden else None
            keep = {"hidden": self.hidden} if self.keep_hidden else {}
            self._logits = self.learner.forward(self.rollouts, grad=self.learner.may_learn(self.rollouts),
                                                prefix=self.prefix, **keep)
        return self._logits

    def logits_for_loss(self, reuse_only: bool = False) -> torch.Tensor | None:
        """The logits with their graph (a new forward pass unless the first one had grad; with
        ``reuse_only``, None instead of a new pass); the group lets go of them."""
        logits = self._logits if self._logits is not None and self._logits.requires_grad else \
            None if reuse_only else self.learner.forward(self.rollouts, grad=True, prefix=self.prefix)
        self._logits = None
        return logits

    def release(self) -> None:
        self._logits = None


@dataclass
class Batch:
    """The rollouts of one update and their groups (an iterable the update reads once, in order)."""

    rollouts: list[Rollout]
    groups: Iterable[Group]
    prefix: Prefix | None = None


PACKED_ROWS = 2048  # rows of one packed update forward (a README round: 4 groups, ~1,360 rows)


class Learner:
    """Owns a policy's optimizer (AdamW) and its frozen reference model.

    Args:
        model: the policy π_θ (trained in place).
        params: update hyper-parameters.
        eos_id / pad_id: tokenizer ids used to pad and mask completions.
        ref_model: frozen π_ref; required (and only loaded) when ``params.beta > 0``.

    Attributes:
        pack_rows: groups whose logits no defense kept are packed into one forward and one backward
            (:mod:`dgrpo.policy.packing`) until they hold this many rows (default :data:`PACKED_ROWS`); 0: one
            forward per group. On by default since it measured faster on a quiet machine: a README round's update
            10.5 s against 11.5 s (medians of 6 interleaved repeats, faster in 6 of 6; BENCHMARKS.md, "The update
            packs its groups").
        kernel: the float32 linear kernel of the update's own forwards and backwards, ``params.update_kernel``
            resolved (:func:`dgrpo.policy.onednn.update_kernel`); a defense's read stays on oneDNN.

    Raises:
        ValueError: beta > 0 without a reference model; an unknown ``params.update_kernel``.
    """

    pack_rows = PACKED_ROWS

    def __init__(self, model: PreTrainedModel, params: GRPOParams, eos_id: int, pad_id: int,
                 ref_model: PreTrainedModel | None = None):
        if params.beta > 0 and ref_model is None:
            raise ValueError("beta > 0 needs a reference model")
        self.model, self.params, self.eos_id, self.pad_id, self.ref_model = model, params, eos_id, pad_id, ref_model
        self.kernel = update_kernel(params.update_kernel)
        self.parameters = [p for p in model.parameters() if p.requires_grad]  # all, or LoRA's adapters
        self.optimizer = torch.optim.AdamW(self.parameters, lr=params.lr, weight_decay=params.weight_decay)

    def learning_rate(self, round_idx: int | None) -> float:
        """The learning rate of round ``round_idx``: lr · min(1, (r + 1) / warmup_rounds) (linear
        warm-up, as TRL's ``warmup_steps`` with one optimizer step per round); lr without warm-up or
        without a round."""
        w = self.params.warmup_rounds
        if not w or round_idx is None:
            return self.params.lr
        return self.params.lr * min(1.0, (round_idx + 1) / w)

    def score(self, rollouts: Sequence[Rollout]) -> Batch:
        """The batch of an update: one :class:`Group` per prompt id, logits run on demand; the prefix
        the groups' prompts share (≥ 16 tokens, at least two prompts, a plain-attention model) runs once."""
        groups = groups_of(rollouts)
        shared = common_prefix([g[0].prompt_ids for g in groups.values()]) if plain_layers(self.model.config) else 0
        prefix = Prefix(list(next(iter(groups.values()))[0].prompt_ids[:shared]) if shared else [])
        return Batch(list(rollouts), [Group(g, self, prefix) for g in groups.values()], prefix)

    def forward(self, group: Sequence[Rollout], grad: bool, prefix: Prefix | None = None,
                hidden: list | None = None) -> torch.Tensor:
        """(G, T, V) logits of a group's completions under π_θ (:func:`dgrpo.policy.scoring.group_logits`),
        behind the batch's shared ``prefix`` when given; ``hidden`` (an empty list) receives each
        completion's last-layer hidden states from the same forward."""
        with torch.set_grad_enabled(grad):
            shared = prefix.policy(self.model, grad) if prefix is not None else None
            return group_logits(self.model, group[0].prompt_ids, [r.completion_ids for r in group], self.pad_id,
                                shared, hidden=hidden)

    def may_learn(self, group: Sequence[Rollout]) -> bool:
        """Whether the group, as its verdicts stand, gives a gradient: β > 0 or its rewards differ."""
        return self.params.beta > 0 or has_signal(kept(group, self.params.reject_mode)[1])

    def step(self, batch: Batch | Sequence[Rollout], round_idx: int | None = None) -> UpdateStats:
        """Run ``num_iterations`` optimizer steps on one generation of rollouts (a batch, or the
        rollouts themselves).

        Rejected rollouts (``verdicts`` non-empty) are dropped or zeroed. The batch reward std
        (``scale_rewards="batch"``) is taken over the rollouts accepted when the step starts, before
        the logit-stage defenses judge the groups.

        ``round_idx`` sets the learning rate of the warm-up (:meth:`learning_rate`).

        Returns:
            Statistics of the last iteration: loss, pre-clip grad norm, rollouts used.
        """
        batch = batch if isinstance(batch, Batch) else self.score(batch)
        if round_idx is not None:
            for param_group in self.optimizer.param_groups:
                param_group["lr"] = self.learning_rate(round_idx)
        start, p = time.perf_counter(), self.params
        std = reward_std([r.reward for r in batch.rollouts if r.accepted]) if p.scale_rewards == "batch" else None
        stats, learning, flat_den = UpdateStats(), [], 0.0
        self.model.train()
        for iteration in range(p.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            num, den, used = 0.0, flat_den, 0
            pending: list[tuple[Group, list[int], torch.Tensor]] = []  # groups for one packed forward
            for group in (batch.groups if iteration == 0 else learning):
                idx, rewards = kept(group.rollouts, p.reject_mode)
                if iteration == 0 and p.beta == 0 and not has_signal(rewards):  # zero advantage: no gradient
                    group_den = self._denominator(group, idx)
                    flat_den, den, stats.skipped_groups = flat_den + group_den, den + group_den, stats.skipped_groups + 1
                    group.release()
                    continue
                if iteration == 0:
                    learning.append(group)
                adv = group_advantages(rewards, [0] * len(idx), p.scale_rewards, std)  # (n,)
                used += len(idx)
                logits = group.logits_for_loss(reuse_only=True)  # (G, T, V) when a defense's read kept them with grad
                if logits is None and self._packs(group, pending):
                    pending.append((group, idx, adv))
                    if sum(self._rows(g) for g, _, _ in pending) < self.pack_rows:
                        continue
                    group_num, group_den = self._backward_packed(pending)
                    pending = []
                else:
                    group_num, group_den = self._backward(group, idx, adv, logits)
                num, den = num + group_num, den + group_den
            if pending:
                group_num, group_den = self._backward_packed(pending)
                num, den = num + group_num, den + group_den
            if batch.prefix is not None:
                batch.prefix.backward()  # the shared prompt prefix: once, with every group's gradient
            if used == 0:
                break
            stats.loss, stats.grad_norm, stats.used = num / den, self._apply(den), used
        self.optimizer.zero_grad(set_to_none=True)
        stats.seconds = time.perf_counter() - start
        return stats

    def _backward(self, group: Group, idx: list[int], adv: torch.Tensor,
                  logits: torch.Tensor | None = None) -> tuple[float, float]:
        """Backward of one group's loss numerator over its kept completions ``idx``; (numerator, denominator).
        ``logits``: the group's (G, T, V) logits with their graph, when a defense's read kept them."""
        completions = [r.completion_ids for r in group.rollouts]
        if logits is not None:
            logp = token_logprobs(logits, pad_right(completions, self.pad_id).to(logits.device))  # (G, T)
            del logits
        else:  # the log-probs alone: no (G, T, V) logits (equal bit for bit, scoring.group_token_logprobs)
            with torch.set_grad_enabled(True):
                shared = group.prefix.policy(self.model, True, self.kernel)
                logp = group_token_logprobs(self.model, group.rollouts[0].prompt_ids, completions, self.pad_id, shared,
                                            self.kernel)
        if self.params.beta > 0 and group.ref_logp is None:
            with torch.no_grad():
                group.ref_logp = group_token_logprobs(self.ref_model, group.rollouts[0].prompt_ids, completions,
                                                      self.pad_id, group.prefix.reference(self.ref_model, self.kernel),
                                                      self.kernel)[idx]
        num, den = self._loss(group, idx, adv, logp[idx])
        num.backward()
        return float(num.detach()), den

    def _packs(self, group: Group, pending: list) -> bool:
        """Whether ``group`` joins the packed forward of ``pending`` (:mod:`dgrpo.policy.packing`): packing on,
        plain-attention layers, the group packable (:func:`dgrpo.policy.scoring._packable`: else it is padded),
        and the same shared prefix as the groups already pending."""
        if self.pack_rows <= 0 or not plain_layers(self.model.config):
            return False
        if pending and pending[0][0].prefix is not group.prefix:
            return False
        lengths = [len(r.completion_ids) for r in group.rollouts]
        return scoring._packable(self.model, len(group.rollouts[0].prompt_ids), lengths)

    @staticmethod
    def _rows(group: Group) -> int:
        """The rows ``group`` adds to a packed forward."""
        return packed_rows([len(r.completion_ids) for r in group.rollouts], len(group.rollouts[0].prompt_ids),
                           len(group.prefix.ids))

    def _backward_packed(self, items: list[tuple[Group, list[int], torch.Tensor]]) -> tuple[float, float]:
        """One forward over several groups packed together and one backward of their summed loss
        numerators (:func:`dgrpo.policy.packing.groups_token_logprobs`); (numerator, denominator)."""
        groups = [g for g, _, _ in items]
        inputs = [(g.rollouts[0].prompt_ids, [r.completion_ids for r in g.rollouts]) for g in groups]
        with torch.set_grad_enabled(True):
            logps = groups_token_logprobs(self.model, inputs, groups[0].prefix.policy(self.model, True, self.kernel),
                                          self.kernel)
        missing = [i for i, g in enumerate(groups) if self.params.beta > 0 and g.ref_logp is None]
        if missing:
            with torch.no_grad():
                refs = groups_token_logprobs(self.ref_model, [inputs[i] for i in missing],
                                             groups[0].prefix.reference(self.ref_model, self.kernel), self.kernel)
            for i, ref in zip(missing, refs):
                groups[i].ref_logp = ref[items[i][1]]
        total, den = None, 0.0
        for (group, idx, adv), logp in zip(items, logps):
            num, group_den = self._loss(group, idx, adv, logp[idx])
            total, den = num if total is None else total + num, den + group_den
        total.backward()
        return float(total.detach()), den

    def _loss(self, group: Group, idx: list[int], adv: torch.Tensor, logp: torch.Tensor) -> tuple[torch.Tensor, float]:
        """A group's loss numerator (with grad) and denominator from the (n, T) log-probs of its kept
        completions ``idx``; sets π_old's log-probs in the first iteration."""
        p = self.params
        completions = [group.rollouts[i].completion_ids for i in idx]
        ids = pad_right([r.completion_ids for r in group.rollouts], self.pad_id)[idx].to(logp.device)
        mask = completion_mask(ids, self.eos_id, [len(c) for c in completions])
        if group.old_logp is None:  # π_old: the weights that generated (ratio 1 in the first iteration)
            group.old_logp = logp.detach()
        loss_tok = per_token_loss(logp, group.old_logp, adv.to(logp.device), p.epsilon, group.ref_logp, p.beta)
        return loss_terms(loss_tok, mask, p.loss_type, p.max_len)

    def _denominator(self, group: Group, idx: list[int]) -> float:
        """Loss denominator of a group left out of the gradient (its numerator is 0)."""
        if not idx:
            return 0.0
        completions = [group.rollouts[i].completion_ids for i in idx]
        mask = completion_mask(pad_right(completions, self.pad_id), self.eos_id, [len(c) for c in completions])
        return loss_denominator(mask, self.params.loss_type, self.params.max_len)

    def _apply(self, den: float) -> float:
        """Gradient ÷ loss denominator, clipping, one optimizer step; returns the pre-clip norm."""
        for param in self.parameters:
            if param.grad is not None:
                param.grad.div_(den)
        norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.params.max_grad_norm)
        self.optimizer.step()
        return float(norm)
