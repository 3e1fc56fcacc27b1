"""Exact seeded replay for homogeneous swarms (the paper's suggested fix, §4.1): a thin wrapper that
plugs :mod:`dgrpo.verify.replay` into the swarm.

``fast`` checks every seeded sampling decision on the update's own logits (no extra forward pass);
``regenerate`` samples the completion again from its seed.
"""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from dgrpo.defenses.base import ExactDefenseConfig
from dgrpo.registry import register
from dgrpo.types import ACCEPT, Verdict


class ReplayDefenseConfig(ExactDefenseConfig):
    """``kind: replay``: exact seeded replay (the paper's suggested fix, §4.1)."""

    kind: Literal["replay"] = "replay"
    method: Literal["fast", "regenerate"] = Field("fast", description="fast: check every seeded sampling decision against the update's own logits (no extra forward); regenerate: resample the completion token by token from its seed and compare.")
    atol: float = Field(1e-3, ge=0, description="fast method: the claimed token's perturbed score may trail the best by at most atol (float32 noise).")


@register("defense", "replay", config=ReplayDefenseConfig)
class ReplayDefense:
    """Accept a completion only when its claimed seed reproduces it.

    Args:
        cfg: :class:`ReplayDefenseConfig`.
        run_cfg: for the agreed sampling strategy.
        policy: the receiver's policy (weights for ``regenerate``, tokenizer ids).
    """

    name = "replay"

    def __init__(self, cfg, run_cfg, policy, task):
        from dgrpo.policy.sampling import SamplingParams  # (torch: loaded on first use)

        s = run_cfg.sampling
        self.params = SamplingParams(s.top_k, s.temperature, s.max_new_tokens)
        self.method, self.atol, self.action = cfg.method, cfg.atol, cfg.action
        self.policy, self.task = policy, task
        self.stage = "logits" if cfg.method == "fast" else "rollouts"

    def _unclaimed(self) -> Verdict:
        return Verdict(False, self.name, "no sampling seed claimed", 0, self.action)

    def inspect(self, rollouts: Sequence, logits=None) -> list[Verdict]:
        from dgrpo.verify.replay import regeneration_mismatches, replay_mismatch

        eos = self.policy.tokenizer.eos_token_id
        if self.method == "fast":
            if logits is None:
                raise ValueError("fast replay needs the group's logits")
            out = []
            for g, r in enumerate(rollouts):
                if r.seed is None:
                    out.append(self._unclaimed())
                    continue
                miss = replay_mismatch(logits[g], r.completion_ids, r.seed, self.params, eos, self.atol)
                out.append(ACCEPT if miss is None else Verdict(False, self.name, miss[1], miss[0], self.action))
            return out
        claimed = [r for r in rollouts if r.seed is not None]
        differ = iter(regeneration_mismatches(self.policy.model, [r.prompt_ids for r in claimed],
                                              [r.completion_ids for r in claimed], [r.seed for r in claimed],
                                              self.params, eos, self.policy.tokenizer.pad_token_id))
        out = []
        for r in rollouts:
            if r.seed is None:
                out.append(self._unclaimed())
                continue
            t = next(differ)
            out.append(ACCEPT if t is None else Verdict(False, self.name, f"regeneration differs at position {t}", t, self.action))
        return out
