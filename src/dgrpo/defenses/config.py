"""Defense configs: a discriminated union on ``kind``.

``action`` says what a rejection does: ``drop`` the completion from its group (group statistics
use what remains) or keep it with reward ``zero`` (the paper's r = r_verifiable × r_judge);
None uses ``swarm.reject_mode``.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Defense(_Strict):
    action: Literal["drop", "zero"] | None = Field(None, description="What a rejection does (None = swarm.reject_mode).")


class TopKDefenseConfig(_Defense):
    """Homogeneous token-generation check (paper §4.1)."""

    kind: Literal["topk"] = "topk"
    k: int | None = Field(None, ge=1, description="k of the support check (None = sampling.top_k).")
    atol: float = Field(1e-3, ge=0, description="A token counts as inside the top-k when its logit ≥ (k-th logit − atol); absorbs float32 batch noise (~1e-4, PROBE.md). Ties at the k-th logit count as inside.")


class ReplayDefenseConfig(_Defense):
    """Exact seeded replay (the paper's suggested fix, §4.1)."""

    kind: Literal["replay"] = "replay"
    method: Literal["fast", "regenerate"] = Field("fast", description="fast: check every seeded sampling decision against the update's own logits (no extra forward); regenerate: resample the completion token by token from its seed and compare.")
    atol: float = Field(1e-3, ge=0, description="fast method: the claimed token's perturbed score may trail the best by at most atol (float32 noise).")


class JudgeDefenseConfig(_Defense):
    """Heterogeneous LLM-as-a-judge (paper §4.2)."""

    kind: Literal["judge"] = "judge"
    model: str | None = Field(None, description="Judge model: any Hugging Face instruct model (None = the policy's base model).")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Judge weights dtype.")
    mode: Literal["generate", "logits"] = Field("generate", description="generate: greedy answer parsed as YES/NO; logits: compare the probabilities of 'YES' and 'NO' as the first answer token.")
    max_new_tokens: int = Field(16, ge=1, description="Length of a generated verdict.")
    threshold: float = Field(0.5, gt=0, lt=1, description="logits mode: accept when p(yes) / (p(yes) + p(no)) ≥ threshold (0.5 = the likelier word wins).")
    unparsed: Literal["accept", "reject"] = Field("reject", description="Verdict when the judge's answer is neither yes nor no (logged as 'unparsed'). Fails closed by default.")


class RewardOutlierDefenseConfig(_Defense):
    """Baseline: reject completions whose reward is an outlier of its group (paper §4, expected to fail)."""

    kind: Literal["reward_outlier"] = "reward_outlier"
    z: float = Field(1.5, gt=0, description="Reject when |r − mean_group| / std_group > z.")


DefenseConfig = Annotated[
    Union[TopKDefenseConfig, ReplayDefenseConfig, JudgeDefenseConfig, RewardOutlierDefenseConfig],
    Field(discriminator="kind"),
]
