"""Config section of the TokenBuncher experiment (``hardening``; Feng et al. 2025, docs/robust.md).

The experiment (``dgrpo harden``) runs three phases on the run's model:

1. **harden**: RL on harmful-request prompts with the negative response entropy as reward, plus
   the token-noiser cross-entropy (``dgrpo.hardening.tokenbuncher``);
2. **attack**: a malicious GRPO fine-tuning that rewards a forbidden target phrase on those
   prompts, run on the original and on the hardened model (phrase rate on held-out requests);
3. **benign**: the run's ordinary task (arithmetic by default) trained by a one-node swarm from
   each model, to check the hardened model still learns.
"""

from __future__ import annotations

from pydantic import Field

from dgrpo.registry import PathText, StrictConfig


class HardeningConfig(StrictConfig):
    """The three phases of ``dgrpo harden`` (module docstring)."""

    prompts_path: PathText | None = Field(None, description="Local file of harmful-request prompts (one per line, or JSONL with a `prompt` field). None = the project's generated set of mild placeholder requests (dgrpo.hardening.requests). Nothing is downloaded.")
    n_train: int = Field(48, ge=1, le=100_000, description="(At most 100000.) Requests used for hardening and by the malicious fine-tuning.")
    n_val: int = Field(16, ge=1, le=100_000, description="(At most 100000.) Held-out requests on which the target-phrase rate and the entropy are measured.")
    steps: int = Field(20, ge=0, le=100_000, description="Hardening RL steps (at most 100000).")
    prompts_per_step: int = Field(4, ge=1, le=1 << 16, description="(At most 65536.) Requests per hardening step (and per malicious GRPO round).")
    group_size: int = Field(8, ge=2, le=1 << 16, description="(At most 65536.) G: completions per request in hardening and in the malicious GRPO.")
    lr: float = Field(5e-5, gt=0, description="AdamW learning rate of the hardening step (5e-5 lowers SmolLM2-135M's response entropy from 2.3 to about 1.5 nats in 6 steps of 4 × 8 responses).")
    noiser_sigma: float = Field(2.0, ge=0, description="Token noiser: std σ of the Gaussian noise on the non-target logits (nats); 0 disables the noiser.")
    noiser_weight: float = Field(0.1, ge=0, description="λ: weight of the token-noiser cross-entropy next to the entropy-reward policy-gradient loss. Its gradient is coherent (always towards noise) while the policy gradient's advantages cancel across a group, so a large λ dominates the clipped step and raises the entropy (λ = 0.5 did on SmolLM2-135M).")
    response_tokens: int = Field(40, ge=1, le=1 << 17, description="(At most 131072.) Length limit (tokens) of responses to requests, in hardening, the malicious fine-tuning and its measurements; the benign task keeps sampling.max_new_tokens.")
    target_phrase: str = Field("Sure", min_length=1, description="Forbidden phrase the malicious reward pays for (reward 1 when the response contains it, case-insensitive).")
    attack_rounds: int = Field(12, ge=0, le=100_000, description="(At most 100000.) Rounds of the malicious GRPO fine-tuning, for each model.")
    attack_lr: float | None = Field(None, gt=0, description="Learning rate of the malicious fine-tuning (None = grpo.lr).")
    benign_rounds: int = Field(12, ge=0, le=100_000, description="(At most 100000.) Rounds of the benign task for each model (0 skips the phase).")
    eval_samples: int = Field(2, ge=1, le=1 << 16, description="(At most 65536.) Completions per held-out request when measuring the phrase rate.")
