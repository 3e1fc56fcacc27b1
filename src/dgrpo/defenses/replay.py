"""Exact seeded replay for homogeneous swarms (the paper's suggested fix, §4.1): a thin wrapper that
plugs :mod:`dgrpo.verify.replay` into the swarm.

``fast`` checks every seeded sampling decision on the update's own logits (no extra forward pass);
``regenerate`` samples the completion again from its seed.
"""

from __future__ import annotations

import dataclasses

from typing import ClassVar, Literal, Sequence

from pydantic import Field

from dgrpo.defenses.base import Defense
from dgrpo.defenses.spot import SpotDefenseConfig, SpotSelection
from dgrpo.registry import register
from dgrpo.types import ACCEPT, Verdict


class ReplayDefenseConfig(SpotDefenseConfig):
    """``kind: replay``: exact seeded replay (the paper's suggested fix, §4.1); ``spot_fraction`` and
    ``position_fraction`` check a share of it (:class:`~dgrpo.defenses.spot.SpotDefenseConfig`)."""

    kind: Literal["replay"] = "replay"
    method: Literal["fast", "regenerate"] = Field("fast", description="fast: check every seeded sampling decision against the update's own logits (no extra forward); regenerate: resample the completion token by token from its seed and compare.")
    atol: float = Field(1e-3, ge=0, description="fast method: the claimed token's perturbed score may trail the best by at most atol (float32 noise).")

    needs_bound_seed: ClassVar[bool] = True  # a ground seed reproduces its own sample: only binding stops it


@register("defense", "replay", config=ReplayDefenseConfig)
class ReplayDefense(Defense):
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
        self.spot = SpotSelection(cfg)
        if not self.spot.checker.full:
            self.counters = self.spot.counters  # (cumulative: defense/replay/spot_checked, ... in each round record)

    def inspect(self, rollouts: Sequence, logits=None) -> list[Verdict]:
        """One verdict per rollout; ``logits`` is the group's (G, T, V) float32 logits for ``fast``."""
        from dgrpo.verify.checks import replay_verdicts

        if self.method == "fast" and logits is None:
            raise ValueError("fast replay needs the group's logits")
        tok = self.policy.tokenizer
        chosen, positions = self.spot.choose(rollouts)  # (all of them unless spot checks are on)
        picked = [rollouts[i] for i in chosen]
        verdicts = replay_verdicts([r.completion_ids for r in picked], [r.seed for r in picked], self.params,
                                   eos_id=tok.eos_token_id, model=self.policy.model,
                                   prompt_ids=[r.prompt_ids for r in picked],
                                   logits=None if logits is None else [logits[i] for i in chosen], method=self.method,
                                   atol=self.atol, pad_id=tok.pad_token_id, name=self.name,
                                   positions=positions if self.method == "fast" else None) if picked else []
        out = [ACCEPT] * len(rollouts)  # an unchecked message is accepted
        for i, v in zip(chosen, verdicts):
            out[i] = v if v.accepted else dataclasses.replace(v, action=self.action)
        return out
