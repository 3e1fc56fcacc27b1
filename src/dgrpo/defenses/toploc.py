"""TOPLOC (Ong et al. 2025, arXiv 2501.16007) as a defense: every sender commits to the last-layer hidden
states of its own sampling (the message's signed ``proof``, built while it samples:
:meth:`dgrpo.policy.policy.Policy.generate_proved`); the receiver re-computes them with one scoring forward
per group (its own, or with ``shared_forward`` the update's) and checks the commitment (:mod:`dgrpo.verify.toploc`, the ``toploc`` library).

A message without a proof, or whose proof does not match, is rejected; like every defense rejection of an
accepted rollout it is a ban strike (docs/protocol.md): the proof is covered by the signature, so only the
signer could have sent it. What it cannot see: how the tokens were chosen. A sender holding the weights
proves any token sequence by prefilling it (:func:`dgrpo.policy.proofs.prove_by_prefill`), and dgrpo's
attackers do (docs/verification.md has the measured matrix column).
"""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import Field

from dgrpo.defenses.base import Defense, DefenseConfig
from dgrpo.registry import register
from dgrpo.types import ACCEPT, Verdict

# the defaults of dgrpo.policy.proofs (CHUNK, TOPK, EXP_MATCH, MANT_MEAN, MANT_MEDIAN), repeated: this
# module loads without torch
CHUNK, TOPK, EXP_MATCH, MANT_MEAN, MANT_MEDIAN = 32, 128, 90 / 128, 10.0, 8.0


class TOPLOCDefenseConfig(DefenseConfig):
    """``kind: toploc``: senders attach TOPLOC proofs of their sampling's hidden states; receivers check
    them with one prefill. Thresholds: the library's validator (``vllm_validate_poly.py``)."""

    kind: Literal["toploc"] = "toploc"
    chunk: int = Field(CHUNK, ge=1, description="Decoding steps per proof (TOPLOC's decode_batching_size).")
    topk: int = Field(TOPK, ge=1, description="Hidden-state values committed per chunk (capped at the hidden size).")
    exp_match: float = Field(EXP_MATCH, ge=0, le=1, description="Least share of the top-k whose bf16 exponents must agree (90 of 128).")
    mant_mean: float = Field(MANT_MEAN, ge=0, description="Most mean bf16 mantissa difference of the agreeing values (units of 2^-7).")
    mant_median: float = Field(MANT_MEDIAN, ge=0, description="Most median bf16 mantissa difference of the agreeing values.")
    shared_forward: bool = Field(False, description="Check proofs on the hidden states of the update's own scoring "
                                 "forward (stage logits, no prefill of its own); false: one prefill per group, before the update.")

    def check(self, run) -> None:
        if run.swarm.models is not None:
            raise ValueError("the toploc defense needs a homogeneous swarm (a proof is checked against the receiver's "
                             "own weights); use the judge for heterogeneous swarms")

    def sender_proof(self):
        """The :class:`dgrpo.policy.proofs.ProofParams` every node builds and checks proofs with."""
        from dgrpo.policy.proofs import ProofParams

        return ProofParams(self.chunk, self.topk, self.exp_match, self.mant_mean, self.mant_median)


@register("defense", "toploc", config=TOPLOCDefenseConfig)
class TOPLOCDefense(Defense):
    """Reject a completion whose message carries no TOPLOC proof or one its hidden states do not match.

    Args:
        cfg: :class:`TOPLOCDefenseConfig`.
        policy: the receiver's policy (its weights re-compute the hidden states).

    Attributes:
        prover: the proof parameters (senders build theirs with the same, :meth:`TOPLOCDefenseConfig.sender_proof`).
    """

    name = "toploc"
    stage = "rollouts"

    def __init__(self, cfg, run_cfg, policy, task=None):
        self.prover, self.action, self.policy = cfg.sender_proof(), cfg.action, policy
        if cfg.shared_forward:  # judged when the update reads the group, on the hidden states of its forward
            self.stage, self.reads_hidden = "logits", True

    def inspect(self, rollouts: Sequence, logits=None, hidden: Sequence | None = None) -> list[Verdict]:
        """One verdict per rollout; the proved ones of each prompt are re-computed in one prefill, or read from
        ``hidden`` (per rollout (len, H), the update's forward: ``shared_forward``) when given."""
        from dgrpo.verify.toploc import proof_problem

        out = [ACCEPT] * len(rollouts)
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(rollouts):
            if not r.proof:
                out[i] = Verdict(False, self.name, "no TOPLOC proof", 0, action=self.action)
            elif r.completion_ids:
                groups.setdefault(tuple(r.prompt_ids), []).append(i)
        for prompt, members in groups.items():
            states = ([hidden[i] for i in members] if hidden is not None else
                      self._recompute(list(prompt), [rollouts[i].completion_ids for i in members]))
            for i, h in zip(members, states):
                bad = proof_problem(h, rollouts[i].proof, self.prover)
                if bad is not None:
                    out[i] = Verdict(False, self.name, bad[1], bad[0], action=self.action)
        return out

    def _recompute(self, prompt: list[int], completions: list) -> list:
        """Per completion (len, H) bf16: the group's scoring forward (the prompt once, the completions packed:
        :func:`dgrpo.policy.scoring.group_logits`) without grad, in eval mode, keeping the output embedding's input.
        A padded prefill of prompt + completion per row (:func:`dgrpo.policy.proofs.prefill_hidden`) ran the
        prompt G times: 1.42 s a SmolLM2 completion against 0.46 s (``results/attack_matrix_toploc/``)."""
        import torch

        from dgrpo.policy.scoring import group_logits
        from dgrpo.verify.forward import eval_mode

        kept: list = []
        with torch.no_grad(), eval_mode(self.policy.model):
            group_logits(self.policy.model, prompt, [list(c) for c in completions], self.policy.tokenizer.pad_token_id,
                         hidden=kept)
        return kept
