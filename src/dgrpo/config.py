"""Run configuration: one pydantic model, from a YAML file plus ``key=value`` overrides.

The sections every run has are documented here, each field once with its unit and paper symbol.
A section that names a kind (``task``, ``attack``, each of ``defenses``, ``swarm.transport``,
``federated.aggregator``) is validated by that kind's own config class, documented and checked next
to the kind (dgrpo.registry): e.g. ``attack.kind=equation`` → :class:`dgrpo.attacks.equation.EquationAttackConfig`.
Unknown keys are errors (``extra="forbid"``), inf and NaN are refused, and cross-field rules (G
divisible by m, …) are checked on construction: each kind's rules by its config's ``check``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, StrictInt, ValidationError, field_validator, model_validator

from dgrpo.attacks.base import NoAttackConfig
from dgrpo.errors import ConfigError
from dgrpo.hardening.config import HardeningConfig
from dgrpo.metrics.trackers import TrackingConfig
from dgrpo.registry import StrictConfig, kind_field, lookup
from dgrpo.robust.config import EnsembleConfig, FederatedConfig
from dgrpo.tasks.arithmetic import ArithmeticTaskConfig


TaskField = kind_field("task", default="arithmetic")  # a task config, validated by its kind's class
AttackField = kind_field("attack", default="none")
DefenseField = kind_field("defense")


class ModelConfig(StrictConfig):
    """The policy model: which one, its dtype and device."""

    name: str = Field("smollm2-135m-instruct", description="Policy model: `smollm2-135m-instruct` (embedded GGUF default), a local folder or a Hugging Face hub id.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights and logits dtype. The top-k and replay defenses are exact only in float32 (docs/verification.md); bfloat16 generation is for runs without them (docs/gpu.md).")
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$", description="Where the policy, reference model, judge and detector run: auto (the GPU of this rank when CUDA is available, else the CPU), cpu, cuda (GPU $LOCAL_RANK under torchrun) or cuda:N (docs/gpu.md).")


class SamplingConfig(StrictConfig):
    """The agreed sampling strategy every node generates with (seeded top-k)."""

    top_k: int = Field(10, ge=1, description="k of top-k sampling (paper §D.3: 10). The top-k defense checks against it.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature; 0 = greedy.")
    max_new_tokens: int = Field(64, ge=1, description="Completion length limit, tokens; also dr_grpo's constant normaliser.")


class GRPOConfig(StrictConfig):
    """The GRPO update: loss, reward scaling, KL, optimiser (paper §1.1)."""

    loss_type: Literal["grpo", "dr_grpo", "bnpo"] = Field("grpo", description="grpo: mean of per-sequence token means (paper §1.1); bnpo: token mean over the batch (DAPO); dr_grpo: token sum / (N·max_new_tokens) (Dr. GRPO).")
    scale_rewards: Literal["group", "batch", "none"] = Field("group", description="Divide centred rewards by the group std (GRPO), the batch std, or not at all (Dr. GRPO).")
    beta: float = Field(0.0, ge=0, description="KL weight β against the frozen reference model (paper uses 0; §B.4 tries 0.01, 0.1). The reference model is loaded only when β > 0.")
    lr: float = Field(5e-5, gt=0, description="AdamW learning rate. Default 5e-5 for SmolLM2-135M on CPU (few rounds); the paper uses 2e-5 with Qwen2.5-1.5B (`dgrpo paper --scale paper` sets it).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping (global L2 norm).")
    num_iterations: int = Field(1, ge=1, description="μ: optimizer steps per generation. 1 = the paper's setting (ratio ≡ 1, no clipping).")
    epsilon: float = Field(0.2, gt=0, description="PPO clipping range ε, active when num_iterations > 1.")


class SwarmConfig(StrictConfig):
    """The swarm: nodes, mode (Alg. 1/2), batch shape, malicious nodes, transport."""

    nodes: int = Field(4, ge=1, description="m: number of nodes (honest + malicious).")
    mode: Literal["horizontal", "vertical"] = Field("horizontal", description="horizontal (Alg. 1): global prompts, G/m completions per node per prompt; vertical (Alg. 2): B/m local prompts per node, G completions each.")
    prompts_per_round: int = Field(4, ge=1, description="B: prompts per round (whole swarm).")
    group_size: int = Field(8, ge=1, description="G: completions per prompt.")
    models: list[ModelConfig] | None = Field(None, description="Heterogeneous swarm: one model per node (None = homogeneous, every node holds `model`).")
    malicious: list[StrictInt] = Field(default_factory=list, description="Ids of malicious nodes (they run `attack`).")
    transport: str = Field("inprocess", description="A registered transport (dgrpo.transports): inprocess, all nodes in this process; distributed, one node per torchrun rank.")
    reject_mode: Literal["drop", "zero"] = Field("drop", description="What a defense rejection does: drop the completion from its group, or keep it with reward 0.")
    timeout_s: float = Field(900.0, gt=0, description="Distributed: seconds a node waits for a peer's messages of a round after posting its own; a later peer is declared failed (dead or stalled) and named. Must exceed the spread of round time between nodes (generation plus evaluation of the slowest). See docs/distributed.md.")
    startup_timeout_s: float = Field(900.0, gt=0, description="Distributed: seconds ranks wait for each other at launch (rendezvous, run name, config check).")
    on_peer_failure: Literal["abort", "continue"] = Field("abort", description="Distributed, when a peer is declared failed: abort (every node exits non-zero naming it), or continue without it (its groups use the completions received, later rounds no longer wait for it).")
    backend: Literal["auto", "gloo", "nccl"] = Field("auto", description="Distributed: torch.distributed backend of the process group (auto: nccl when every local rank has its own GPU, else gloo). Messages travel through the group's c10d store either way.")

    @field_validator("transport")
    @classmethod
    def _registered_transport(cls, v: str) -> str:
        lookup("transport", v)
        return v

    @model_validator(mode="after")
    def _shapes(self):
        m = self.nodes
        if self.mode == "horizontal" and self.group_size % m:
            raise ValueError(f"horizontal mode needs G (group_size={self.group_size}) divisible by m (nodes={m}): each node writes G/m completions per prompt")
        if self.mode == "vertical" and self.prompts_per_round % m:
            raise ValueError(f"vertical mode needs B (prompts_per_round={self.prompts_per_round}) divisible by m (nodes={m}): each node answers B/m prompts")
        if self.models is not None and len(self.models) != m:
            raise ValueError(f"models lists {len(self.models)} models for {m} nodes")
        bad = [i for i in self.malicious if not 0 <= i < m]
        if bad:
            raise ValueError(f"malicious node ids {bad} are not in 0..{m - 1}")
        if len(set(self.malicious)) != len(self.malicious):
            raise ValueError(f"malicious node ids {self.malicious} list a node twice")
        if len(set(self.malicious)) >= m:
            raise ValueError("at least one node must be honest")
        return self


class EvalConfig(StrictConfig):
    """Held-out evaluation: how often, on how many prompts."""

    every: int = Field(4, ge=1, description="Evaluate on the validation split every k rounds (and after the last round).")
    n_prompts: int = Field(32, ge=1, description="Validation prompts per evaluation.")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature for evaluation; None = the swarm's.")


class RunConfig(StrictConfig):
    seed: int = Field(0, description="Run seed: prompts, sampling seeds and initialisation derive from it.")
    rounds: int = Field(12, ge=1, description="Rounds (generation → exchange → update) to run. Default 12: the README command, about 8 minutes on 2 CPU cores.")
    out_dir: str = Field("runs", description="Folder that receives the run directory.")
    name: str | None = Field(None, description="Run directory name; None = {task}__{attack}__{defense}__seed{n}__{time}.")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (None = torch default).")
    checkpoint_every: int = Field(0, ge=0, description="Save a checkpoint every k rounds (0 = only at the end).")
    tensorboard: bool = Field(False, description="Also write TensorBoard event files (RUN_DIR/tb; the same as tracking.trackers=[tensorboard]).")
    tracking: TrackingConfig = TrackingConfig()
    model: ModelConfig = ModelConfig()
    task: TaskField = ArithmeticTaskConfig()
    sampling: SamplingConfig = SamplingConfig()
    grpo: GRPOConfig = GRPOConfig()
    swarm: SwarmConfig = SwarmConfig()
    attack: AttackField = NoAttackConfig()
    defenses: list[DefenseField] = Field(default_factory=list, description="Defenses every honest node runs, in order.")
    eval: EvalConfig = EvalConfig()
    federated: FederatedConfig | None = Field(None, description="Nodes also exchange policy updates and aggregate them robustly (`dgrpo federated`, docs/robust.md).")
    ensemble: EnsembleConfig | None = Field(None, description="K disjoint groups train K swarms decided by majority vote (`dgrpo ensemble`, docs/robust.md).")
    hardening: HardeningConfig | None = Field(None, description="TokenBuncher entropy hardening and the malicious/benign fine-tuning that measures it (`dgrpo harden`, docs/robust.md).")

    @field_validator("name", mode="before")
    @classmethod
    def _number_names_are_text(cls, v):
        return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v  # name=2024 (YAML reads a number)

    @field_validator("name")
    @classmethod
    def _one_folder(cls, v: str | None) -> str | None:
        if v is not None and (v in ("", ".", "..") or "/" in v or "\\" in v):
            raise ValueError(f"name must be one folder name inside out_dir (no '/', '\\', '.' or '..'), got {v!r}")
        return v

    @model_validator(mode="after")
    def _kinds_check_each_other(self):
        if sum(s is not None for s in (self.federated, self.ensemble, self.hardening)) > 1:
            raise ValueError("set at most one of federated, ensemble, hardening")
        if self.federated is not None:  # its malicious nodes attack updates: no completion attack applies
            self.federated.check(self)
            return self
        self.task.check(self)
        self.attack.check(self)
        if self.ensemble is not None:
            self.ensemble.check(self)
        for d in self.defenses:
            d.check(self)
        return self


def _parse_value(text: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to a nested dict, in place.

    A numeric part indexes a list (``defenses.0.atol=1e-4``); the index equal to the list's length
    appends an item (``defenses.1.kind=replay``). Why dgrpo parses overrides itself rather than with
    pydantic-settings' CLI: docs/config.md.

    Raises:
        ConfigError: an override without ``=``, an index past the end of a list, or a key that
            descends into a value that is neither a mapping nor a list.
    """
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.sub=value")
        key, value = item.split("=", 1)
        parts = key.strip().split(".")
        node: dict | list = data
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            fresh = [] if not last and parts[depth + 1].isdigit() else {}
            where = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) > len(node):
                    raise ConfigError(f"override {item!r}: {where} indexes a list of {len(node)} items (indices 0..{len(node)}; {len(node)} appends)")
                if int(part) == len(node):
                    node.append(None)
                index: int | str = int(part)
            else:
                index = part
            if last:
                node[index] = _parse_value(value)
                break
            child = node[index] if isinstance(node, list) else node.get(index)
            if not isinstance(child, (dict, list)):
                child = fresh  # a new section (or list); an override replaces a scalar or null there
                node[index] = child
            node = child
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Build a :class:`RunConfig` from an optional YAML file and overrides.

    Raises:
        ConfigError: unreadable YAML or invalid fields (every problem listed with its path).
    """
    data: dict = {}
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            raise ConfigError(f"cannot read config {path}: {err}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config {path} must be a mapping at the top level")
    apply_overrides(data, overrides or [])  # (`task.n_train=5` alone keeps the default task kind)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        lines = [f"  {'.'.join(str(p) for p in e['loc']) or '(config)'}: {e['msg']}" for e in err.errors()]
        raise ConfigError("invalid config:\n" + "\n".join(lines)) from None
