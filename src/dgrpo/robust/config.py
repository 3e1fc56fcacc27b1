"""Config sections of the robust-FRL experiments, with their cross-field rules: update exchange
(``federated``) and the ensemble of swarms decided by vote (``ensemble``). Both are optional sections
of :class:`dgrpo.config.RunConfig`; a run sets at most one of them.

``federated.aggregator`` and ``federated.attack`` name registered ``aggregator`` / ``update_attack``
kinds (dgrpo.robust.aggregators, dgrpo.robust.update_attacks), whose node conditions the checks read.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from dgrpo.registry import StrictConfig, lookup


class FederatedConfig(StrictConfig):
    """A swarm whose nodes exchange policy updates and aggregate them (robust FRL, Fang, Wang & Gong 2025).

    Every honest node samples G completions of its own B/m local prompts (vertical schedule),
    takes a local GRPO step on them alone and sends its update; the malicious nodes send poisoned
    updates computed from all honest ones (omniscient, colluding); every honest node applies the
    aggregate of all m updates. Completions never leave their node.
    """

    aggregator: str = Field("average", description="Aggregation rule applied to the m updates (dgrpo.robust.aggregators): average (FedAvg, not robust), coordinate-wise median or trimmed_mean (Yin et al. 2018), geometric_median (Weiszfeld/RFA), krum / multi_krum (Blanchard et al. 2017), centered_clipping (Karimireddy et al. 2021).")
    f: int | None = Field(None, ge=0, le=1024, description="f: Byzantine nodes the aggregator is told to tolerate (trimmed mean drops f per side, Krum scores n − f − 2 neighbours). None = the number of malicious nodes.")
    update: Literal["delta", "gradient"] = Field("delta", description="What travels: delta = θ_after − θ_before of the node's local optimizer step(s) (each node keeps its own AdamW state); gradient = the node's clipped GRPO gradient, and one AdamW step on the aggregate (num_iterations must be 1).")
    lora: bool = Field(False, description="Train and exchange LoRA adapters only (peft): the update is the flattened adapter weights; the base weights stay frozen.")
    lora_rank: int = Field(8, ge=1, le=1 << 16, description="LoRA rank r (at most 65536).")
    lora_alpha: float = Field(16.0, gt=0, description="LoRA scaling α (the adapter output is scaled by α/r).")
    lora_targets: list[str] = Field(default_factory=lambda: ["q_proj", "v_proj"], min_length=1, description="Module names that receive adapters.")
    attack: str = Field("none", description="What the malicious nodes send (dgrpo.robust.update_attacks): normalized (Fang et al. 2025: honest-looking norm, direction chosen to maximise the deviation angle of this aggregator), sign_flipping (−μ), alie ('a little is enough', μ − zσ, Baruch et al. 2019), none.")
    sign_flip_scale: float = Field(1.0, gt=0, description="Sign flipping sends −scale · μ.")
    alie_z: float | None = Field(None, description="z of ALIE; None = z^max of Baruch et al. for n, f.")
    normalized_scales: list[float] = Field(default_factory=lambda: [1.0, 0.5, 0.25], min_length=1, description="Normalized attack: norms tried, as multiples of the median honest norm (1 = exactly honest-looking).")
    normalized_random: int = Field(8, ge=0, le=1 << 16, description="Normalized attack: random directions orthogonal to μ tried besides −μ and −sign(μ).")
    cc_tau: float | None = Field(None, gt=0, description="Centered clipping radius τ (update units). None = the median norm of the non-zero honest updates of the round (an oracle radius, favourable to the defense).")
    cc_iterations: int = Field(1, ge=1, le=10_000, description="Centered clipping iterations L; the reference is the previous round's aggregate (zero at round 0).")
    multi_krum_m: int | None = Field(None, ge=1, le=1024, description="Multi-Krum: updates averaged (None = n − f).")
    probe: bool = Field(False, description="Each round, also measure on this round's honest updates the deviation angle every aggregator suffers under every update attack (metrics probe/<aggregator>/<attack>/angle); costs only aggregations.")

    @field_validator("aggregator")
    @classmethod
    def _registered_rule(cls, v: str) -> str:
        lookup("aggregator", v)
        return v

    @field_validator("attack")
    @classmethod
    def _registered_attack(cls, v: str) -> str:
        if v != "none":
            lookup("update_attack", v)
        return v

    def check(self, run) -> None:
        """Rules a federated run needs of the rest of the config (``run``: the RunConfig)."""
        swarm = run.swarm
        if swarm.mode != "vertical":
            raise ValueError("federated runs use the vertical schedule (every node trains on its own local prompts): set swarm.mode=vertical")
        if swarm.models is not None:
            raise ValueError("federated runs exchange updates of one architecture: use a homogeneous swarm (swarm.models unset)")
        if run.attack.kind != "none" or run.defenses:
            raise ValueError("federated runs exchange updates, not completions: set federated.attack instead of attack, and no completion defenses")
        if self.attack != "none" and not swarm.malicious:
            raise ValueError(f"federated.attack {self.attack!r} needs at least one node in swarm.malicious")
        if self.attack == "none" and swarm.malicious:
            raise ValueError("swarm.malicious lists nodes but federated.attack is none; choose an update attack")
        if self.update == "gradient" and run.grpo.num_iterations != 1:
            raise ValueError("federated.update=gradient sends one gradient per round: set grpo.num_iterations=1 (or use update=delta)")
        n, f = swarm.nodes, self.f if self.f is not None else len(swarm.malicious)
        if f >= n:
            raise ValueError(f"federated.f = {f} must be below the number of nodes {n}")
        rule = lookup("aggregator", self.aggregator)
        if not rule.meta.get("fits", lambda n, f: True)(n, f):
            raise ValueError(f"{self.aggregator} needs {rule.meta['needs']}: {n} nodes with f = {f}; add nodes or lower federated.f")
        if self.attack == "alie" and len(swarm.malicious) >= n // 2 + 1:
            raise ValueError("the ALIE attack needs fewer than ⌊n/2 + 1⌋ malicious nodes")


class EnsembleConfig(StrictConfig):
    """Ensemble of swarms decided by majority vote (Fang, Wang & Gong 2025).

    The m nodes are split into K disjoint, balanced groups of consecutive ids
    (:func:`dgrpo.robust.ensemble.split_groups`); each group is an ordinary swarm with the run's
    swarm settings (B prompts × G completions per round, same mode) and the malicious nodes it
    contains. The ensemble answers a question by the majority of the K groups' parsed answers.
    """

    groups: int = Field(3, ge=1, le=1024, description="K: number of disjoint groups, each training its own policy.")
    baseline: bool = Field(True, description="Also train the single swarm of all m nodes under the same attack (run directory `single/`), for comparison.")

    def check(self, run) -> None:
        """Every group must be a valid swarm: an honest node, and G (horizontal) or B (vertical)
        divisible by its size (``run``: the RunConfig)."""
        from dgrpo.robust.ensemble import split_groups

        swarm = run.swarm
        if self.groups > swarm.nodes:
            raise ValueError(f"ensemble.groups = {self.groups} groups need at least as many nodes (swarm.nodes = {swarm.nodes})")
        bad = set(swarm.malicious)
        for g, members in enumerate(split_groups(range(swarm.nodes), self.groups)):
            if set(members) <= bad:
                raise ValueError(f"ensemble group {g} = nodes {members} has no honest node; use fewer groups or other malicious ids")
            size = len(members)
            if swarm.mode == "horizontal" and swarm.group_size % size:
                raise ValueError(f"ensemble group {g} has {size} nodes: horizontal mode needs G (group_size={swarm.group_size}) divisible by every group size")
            if swarm.mode == "vertical" and swarm.prompts_per_round % size:
                raise ValueError(f"ensemble group {g} has {size} nodes: vertical mode needs B (prompts_per_round={swarm.prompts_per_round}) divisible by every group size")
