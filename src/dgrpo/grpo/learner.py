"""One GRPO update of a policy from a batch of rollouts (paper §1.1, Algorithms 1-2 ``update``).

The batch is processed one group at a time (a group shares its prompt, see
:func:`dgrpo.policy.scoring.group_logits`): forward with grad → logit-stage defenses on the same
logits → advantages over the accepted completions of the group → backward of the loss numerator.
Gradients are divided by the accumulated loss denominator at the end, so the result equals the
full-batch loss of :func:`dgrpo.grpo.loss.aggregate_loss`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal, Sequence

import torch
from transformers import PreTrainedModel

from dgrpo.defenses.base import Defense
from dgrpo.grpo.advantages import ScaleRewards, group_advantages
from dgrpo.grpo.loss import LossType, loss_terms, per_token_loss
from dgrpo.policy.scoring import completion_mask, group_logits, pad_right, token_logprobs
from dgrpo.swarm.rollout import Rollout


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
    max_len: int = 64  # dr_grpo's constant normaliser (max new tokens)
    reject_mode: Literal["drop", "zero"] = "drop"


@dataclass
class UpdateStats:
    """What one update did: loss, gradient norm (before clipping), rollouts used, seconds."""

    loss: float = 0.0
    grad_norm: float = 0.0
    used: int = 0
    skipped_groups: int = 0
    defense_seconds: float = 0.0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def groups_of(rollouts: Sequence[Rollout]) -> "OrderedDict[str, list[Rollout]]":
    """Rollouts grouped by prompt id, in first-seen order."""
    groups: OrderedDict[str, list[Rollout]] = OrderedDict()
    for r in rollouts:
        groups.setdefault(r.prompt_id, []).append(r)
    return groups


class Learner:
    """Owns a policy's optimizer (AdamW) and its frozen reference model.

    Args:
        model: the policy π_θ (trained in place).
        params: update hyper-parameters.
        eos_id / pad_id: tokenizer ids used to pad and mask completions.
        ref_model: frozen π_ref; required (and only loaded) when ``params.beta > 0``.

    Raises:
        ValueError: beta > 0 without a reference model.
    """

    def __init__(self, model: PreTrainedModel, params: GRPOParams, eos_id: int, pad_id: int,
                 ref_model: PreTrainedModel | None = None):
        if params.beta > 0 and ref_model is None:
            raise ValueError("beta > 0 needs a reference model")
        self.model, self.params, self.eos_id, self.pad_id, self.ref_model = model, params, eos_id, pad_id, ref_model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=params.lr, weight_decay=params.weight_decay)

    def _reject(self, rollouts: list[Rollout], logits: torch.Tensor, defenses: Sequence[Defense], times: dict) -> None:
        for defense in defenses:
            t0 = time.perf_counter()
            live = [i for i, r in enumerate(rollouts) if r.accepted]
            if live:
                verdicts = defense.inspect([rollouts[i] for i in live], logits[live])
                for i, v in zip(live, verdicts):
                    if not v.accepted:
                        rollouts[i].verdicts.append(v)
            times[defense.name] = times.get(defense.name, 0.0) + time.perf_counter() - t0

    def _used(self, group: list[Rollout]) -> tuple[list[int], torch.Tensor]:
        """Indices that enter the loss and their rewards.

        A rejection drops the completion from its group or keeps it with reward 0, as its
        verdict's ``action`` (default: ``reject_mode``) says.
        """
        def dropped(r: Rollout) -> bool:
            return any((v.action or self.params.reject_mode) == "drop" for v in r.verdicts)

        idx = [i for i, r in enumerate(group) if not dropped(group[i])]
        return idx, torch.tensor([0.0 if group[i].verdicts else group[i].reward for i in idx])

    @staticmethod
    def _no_signal(rewards: torch.Tensor) -> bool:
        return len(rewards) < 2 or bool(rewards.min() == rewards.max())

    def step(self, rollouts: Sequence[Rollout], logit_defenses: Sequence[Defense] = ()) -> UpdateStats:
        """Run ``num_iterations`` optimizer steps on one generation of rollouts.

        Rollouts already rejected (``verdicts`` non-empty) are dropped or zeroed; logit-stage
        defenses add their verdicts during the first iteration, from the same forward pass.

        Returns:
            Statistics of the last iteration (loss, pre-clip grad norm, rollouts used) and the
            seconds spent in each logit-stage defense (``extra["defense_seconds"]``).
        """
        start = time.perf_counter()
        p = self.params
        groups = list(groups_of(rollouts).values())
        stats = UpdateStats()
        defense_times: dict[str, float] = {}
        batch_std = None
        if p.scale_rewards == "batch":  # std over rollouts entering the update (before logit checks)
            live = torch.tensor([r.reward for r in rollouts if r.accepted] or [0.0]).double()
            batch_std = float(live.std(correction=0))
        zeroing = p.reject_mode == "zero" or any(getattr(d, "action", None) == "zero" for d in logit_defenses)
        old_logps: dict[int, torch.Tensor] = {}
        ref_logps: dict[int, torch.Tensor] = {}
        skipped_den: dict[int, float] = {}  # groups with no gradient, and their loss denominator
        self.model.train()
        for iteration in range(p.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            num_total, den_total, used = 0.0, 0.0, 0
            for gi, group in enumerate(groups):
                if gi in skipped_den:
                    den_total += skipped_den[gi]
                    continue
                if iteration > 0 and gi not in old_logps:
                    continue
                prompt = group[0].prompt_ids
                completions = [r.completion_ids for r in group]
                ids = pad_right(completions, self.pad_id)
                if iteration == 0:
                    idx, rewards = self._used(group)
                    # Equal rewards mean zero advantage: without a KL term the gradient is exactly 0.
                    # Logit-stage defenses may still need the logits (no grad needed for those).
                    flat = p.beta == 0 and self._no_signal(rewards) and not zeroing
                    if flat and not logit_defenses:
                        skipped_den[gi] = self._denominator(group, idx)
                        den_total += skipped_den[gi]
                        continue
                    with torch.set_grad_enabled(not flat):
                        logits = group_logits(self.model, prompt, completions, self.pad_id)  # (G, T, V)
                    if logit_defenses:
                        self._reject(group, logits.detach(), logit_defenses, defense_times)
                    idx, rewards = self._used(group)
                    if flat or (p.beta == 0 and self._no_signal(rewards)):
                        skipped_den[gi] = self._denominator(group, idx)
                        den_total += skipped_den[gi]
                        continue
                else:
                    idx, rewards = self._used(group)
                    logits = group_logits(self.model, prompt, completions, self.pad_id)
                ids = ids.to(logits.device)
                logp = token_logprobs(logits, ids)[idx]  # (n, T)
                del logits
                mask = completion_mask(ids[idx], self.eos_id, [len(group[i].completion_ids) for i in idx])
                if iteration == 0:
                    old_logps[gi] = logp.detach()
                adv = group_advantages(rewards, [0] * len(idx), "none" if p.scale_rewards == "batch" else p.scale_rewards)
                if batch_std is not None:
                    adv = adv / batch_std if batch_std > 0 else torch.zeros_like(adv)
                ref = None
                if p.beta > 0:
                    if gi not in ref_logps:
                        with torch.no_grad():
                            ref_logps[gi] = token_logprobs(
                                group_logits(self.ref_model, prompt, completions, self.pad_id), ids)[idx]
                    ref = ref_logps[gi]
                loss_tok = per_token_loss(logp, old_logps[gi], adv.to(logp.device), p.epsilon, ref, p.beta)
                num, den = loss_terms(loss_tok, mask, p.loss_type, p.max_len)
                num.backward()
                num_total += float(num.detach())
                den_total += den
                used += len(idx)
            stats.skipped_groups = len(skipped_den)
            if used == 0:
                break
            for param in self.model.parameters():
                if param.grad is not None:
                    param.grad.div_(den_total)
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), p.max_grad_norm)
            self.optimizer.step()
            stats.loss, stats.grad_norm, stats.used = num_total / den_total, float(norm), used
        self.optimizer.zero_grad(set_to_none=True)
        stats.defense_seconds = sum(defense_times.values())
        stats.extra["defense_seconds"] = defense_times
        stats.seconds = time.perf_counter() - start
        return stats

    def _denominator(self, group: list[Rollout], idx: list[int]) -> float:
        """Loss denominator contributed by a skipped group (its numerator is 0)."""
        if self.params.loss_type == "grpo":
            return float(len(idx))
        if self.params.loss_type == "dr_grpo":
            return float(len(idx) * self.params.max_len)
        if not idx:
            return 0.0
        completions = [group[i].completion_ids for i in idx]
        return float(completion_mask(pad_right(completions, self.pad_id), self.eos_id, [len(c) for c in completions]).sum())
