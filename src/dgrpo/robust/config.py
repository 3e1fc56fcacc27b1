"""Config sections of the robust-FRL experiments: update exchange (``federated``) and the
ensemble of swarms decided by vote (``ensemble``). Both are optional sections of
:class:`dgrpo.config.RunConfig`; a run sets at most one of them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

AggregatorName = Literal["average", "median", "trimmed_mean", "geometric_median", "krum", "multi_krum", "centered_clipping"]
UpdateAttackName = Literal["none", "normalized", "sign_flipping", "alie"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FederatedConfig(_Strict):
    """A swarm whose nodes exchange policy updates and aggregate them (robust FRL, MISSION §5).

    Every honest node samples G completions of its own B/m local prompts (vertical schedule),
    takes a local GRPO step on them alone and sends its update; the malicious nodes send poisoned
    updates computed from all honest ones (omniscient, colluding); every honest node applies the
    aggregate of all m updates. Completions never leave their node.
    """

    aggregator: AggregatorName = Field("average", description="Aggregation rule applied to the m updates (dgrpo.robust.aggregators): average (FedAvg, not robust), coordinate-wise median or trimmed_mean (Yin et al. 2018), geometric_median (Weiszfeld/RFA), krum / multi_krum (Blanchard et al. 2017), centered_clipping (Karimireddy et al. 2021).")
    f: int | None = Field(None, ge=0, description="f: Byzantine nodes the aggregator is told to tolerate (trimmed mean drops f per side, Krum scores n − f − 2 neighbours). None = the number of malicious nodes.")
    update: Literal["delta", "gradient"] = Field("delta", description="What travels: delta = θ_after − θ_before of the node's local optimizer step(s) (each node keeps its own AdamW state); gradient = the node's clipped GRPO gradient, and one AdamW step on the aggregate (num_iterations must be 1).")
    lora: bool = Field(False, description="Train and exchange LoRA adapters only (peft): the update is the flattened adapter weights; the base weights stay frozen.")
    lora_rank: int = Field(8, ge=1, description="LoRA rank r.")
    lora_alpha: float = Field(16.0, gt=0, description="LoRA scaling α (the adapter output is scaled by α/r).")
    lora_targets: list[str] = Field(default_factory=lambda: ["q_proj", "v_proj"], min_length=1, description="Module names that receive adapters.")
    attack: UpdateAttackName = Field("none", description="What the malicious nodes send (dgrpo.robust.update_attacks): normalized (Fang et al. 2025: honest-looking norm, direction chosen to maximise the deviation angle of this aggregator), sign_flipping (−μ), alie ('a little is enough', μ − zσ, Baruch et al. 2019), none.")
    sign_flip_scale: float = Field(1.0, gt=0, description="Sign flipping sends −scale · μ.")
    alie_z: float | None = Field(None, description="z of ALIE; None = z^max of Baruch et al. for n, f.")
    normalized_scales: list[float] = Field(default_factory=lambda: [1.0, 0.5, 0.25], min_length=1, description="Normalized attack: norms tried, as multiples of the median honest norm (1 = exactly honest-looking).")
    normalized_random: int = Field(8, ge=0, description="Normalized attack: random directions orthogonal to μ tried besides −μ and −sign(μ).")
    cc_tau: float | None = Field(None, gt=0, description="Centered clipping radius τ (update units). None = the median norm of the non-zero honest updates of the round (an oracle radius, favourable to the defense).")
    cc_iterations: int = Field(1, ge=1, description="Centered clipping iterations L; the reference is the previous round's aggregate (zero at round 0).")
    multi_krum_m: int | None = Field(None, ge=1, description="Multi-Krum: updates averaged (None = n − f).")
    probe: bool = Field(False, description="Each round, also measure on this round's honest updates the deviation angle every aggregator suffers under every update attack (metrics probe/<aggregator>/<attack>/angle); costs only aggregations.")


class EnsembleConfig(_Strict):
    """Ensemble of swarms decided by majority vote (Fang, Wang & Gong 2025; MISSION §5).

    The m nodes are split into K disjoint, balanced groups of consecutive ids
    (:func:`dgrpo.robust.ensemble.split_groups`); each group is an ordinary swarm with the run's
    swarm settings (B prompts × G completions per round, same mode) and the malicious nodes it
    contains. The ensemble answers a question by the majority of the K groups' parsed answers.
    """

    groups: int = Field(3, ge=1, description="K: number of disjoint groups, each training its own policy.")
    baseline: bool = Field(True, description="Also train the single swarm of all m nodes under the same attack (run directory `single/`), for comparison.")


def check_ensemble_groups(groups: list[list[int]], malicious: list[int], mode: str, group_size: int, prompts_per_round: int) -> None:
    """Every group must be a valid swarm: an honest node, and G (horizontal) or B (vertical) divisible by its size.

    Raises:
        ValueError: names the group and what to change.
    """
    bad = set(malicious)
    for g, members in enumerate(groups):
        if set(members) <= bad:
            raise ValueError(f"ensemble group {g} = nodes {members} has no honest node; use fewer groups or other malicious ids")
        size = len(members)
        if mode == "horizontal" and group_size % size:
            raise ValueError(f"ensemble group {g} has {size} nodes: horizontal mode needs G (group_size={group_size}) divisible by every group size")
        if mode == "vertical" and prompts_per_round % size:
            raise ValueError(f"ensemble group {g} has {size} nodes: vertical mode needs B (prompts_per_round={prompts_per_round}) divisible by every group size")

