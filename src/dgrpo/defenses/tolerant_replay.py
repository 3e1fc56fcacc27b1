"""Tolerant seeded replay (issue 36): exact replay's check with a calibrated tolerance, for swarms
whose nodes sample on different kernel paths. A thin wrapper that plugs :mod:`dgrpo.verify.tolerant`
into the swarm, on the logits of the update's own forward pass (no extra forward)."""

from __future__ import annotations

from typing import ClassVar, Literal, Sequence

from pydantic import Field

from dgrpo.defenses.base import Defense
from dgrpo.defenses.spot import SpotDefenseConfig, SpotSelection
from dgrpo.registry import register
from dgrpo.types import ACCEPT, Verdict

# the defaults of dgrpo.verify.tolerant (TIE, THRESHOLD, EPS), repeated: this module loads without torch
TIE, THRESHOLD, EPS = 1e-4, 2e-4, 1e-6
WIDE = 1e-3  # a tie above this (a threshold above twice it) lets an adaptive sender swap digits: cautioned


class TolerantReplayDefenseConfig(SpotDefenseConfig):
    """``kind: tolerant_replay``: per-token divergence from the claimed seed's sampler (Token-DiFR's
    Gumbel-max margin over the top-k, rank swaps allowed among near-tied logits), rejected above a
    threshold calibrated on honest traffic across kernel paths (docs/verification.md); ``spot_fraction`` and
    ``position_fraction`` check a share of it (:class:`~dgrpo.defenses.spot.SpotDefenseConfig`)."""

    kind: Literal["tolerant_replay"] = "tolerant_replay"
    threshold: float = Field(THRESHOLD, ge=0, description="Reject a completion when any token's divergence (logit/temperature units) exceeds this; no honest float32 score measured came within 35x of the default (largest 5.7e-6 on 10,240 completions a CPU kernel pairing: results/nondeterminism/, which bound its false positives rather than calibrate it).")
    tie: float = Field(TIE, ge=0, description="Top-k logits closer than this (logit units) may have swapped rank on the sender's kernel path, and with it their Gumbel noise. Above 1e-3 (threshold above 2e-3) the run logs a WARNING: an adaptive sender can then claim digits and operators where logits are that close (results/tolerant_capacity).")
    eps: float = Field(EPS, ge=0, description="Tokens with divergence above eps are counted in the rejection's reason (a diagnostic; it rejects nothing).")

    needs_bound_seed: ClassVar[bool] = True  # a ground seed reproduces its own sample: only binding stops it

    def cautions(self, run) -> list[str]:
        """Also a ``tie`` or ``threshold`` wider than :data:`WIDE` (review u36 C: ``tie: 100`` was accepted
        silently and accepts any top-k token): measured on 512 honest SmolLM2 completions, at tie 1e-3 a
        sender could claim another token at 14 of 16,036 positions, a digit swap among them, at 1e-2 at 176,
        digit and operator swaps among them (results/tolerant_capacity)."""
        wide = [f"{name}={value:g}" for name, value, limit in (("tie", self.tie, WIDE), ("threshold", self.threshold, 2 * WIDE))
                if value > limit]
        return super().cautions(run) + ([
            f"the tolerant_replay defense's {' and '.join(wide)} is wider than the calibrated range (tie ≤ {WIDE:g}, "
            f"threshold ≤ {2 * WIDE:g}): an adaptive sender can then claim another top-k token, digits and operators "
            "among them, where the logits are that close (results/tolerant_capacity); keep them in range unless an "
            "honest pairing measured with benchmarks/nondeterminism.py needs more"] if wide else [])


@register("defense", "tolerant_replay", config=TolerantReplayDefenseConfig)
class TolerantReplayDefense(Defense):
    """Accept a completion when every token is within ``threshold`` of the claimed seed's sampling decision.

    Args:
        cfg: :class:`TolerantReplayDefenseConfig`; run_cfg for the agreed sampling strategy.
        policy: the receiver's policy (the tokenizer's eos id).
    """

    name = "tolerant_replay"
    stage = "logits"

    def __init__(self, cfg, run_cfg, policy, task=None):
        from dgrpo.policy.sampling import SamplingParams  # (torch: loaded on first use)

        s = run_cfg.sampling
        self.params = SamplingParams(s.top_k, s.temperature, s.max_new_tokens)
        self.cfg, self.action = cfg, cfg.action
        self.eos_id = policy.tokenizer.eos_token_id
        self.spot = SpotSelection(cfg)
        if not self.spot.checker.full:
            self.counters = self.spot.counters  # (cumulative: defense/tolerant_replay/spot_checked, ...)

    def inspect(self, rollouts: Sequence, logits=None) -> list[Verdict]:
        """One verdict per rollout; ``logits`` is the group's (G, T, V) float32 logits."""
        if logits is None:
            raise ValueError("tolerant replay needs the group's logits")
        from dgrpo.verify.tolerant import tolerant_mismatch

        out = [ACCEPT] * len(rollouts)  # an unchecked message is accepted
        for i, pos in zip(*self.spot.choose(rollouts)):
            r = rollouts[i]
            if r.seed is None:
                out[i] = Verdict(False, self.name, "no sampling seed claimed", 0, action=self.action)
                continue
            miss = tolerant_mismatch(logits[i], list(r.completion_ids), int(r.seed), self.params, self.eos_id,
                                     self.cfg.tie, self.cfg.threshold, self.cfg.eps, pos)
            if miss is not None:
                out[i] = Verdict(False, self.name, miss[1], miss[0], action=self.action)
        return out
