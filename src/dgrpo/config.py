"""Run configuration: one pydantic model, from a YAML file plus ``key=value`` overrides.

Every field is documented once, here, with its unit and paper symbol. Unknown keys are errors
(``extra="forbid"``) and cross-field rules (G divisible by m, …) are checked on construction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator, model_validator

from dgrpo.attacks.config import AttackConfig, NoAttackConfig
from dgrpo.defenses.config import DefenseConfig
from dgrpo.hardening.config import HardeningConfig
from dgrpo.rewards.sandbox import valid_stand_in_name
from dgrpo.robust.config import EnsembleConfig, FederatedConfig, check_ensemble_groups


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelConfig(_Strict):
    name: str = Field("smollm2-135m-instruct", description="Policy model: `smollm2-135m-instruct` (embedded GGUF default), a local folder or a Hugging Face hub id.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights and logits dtype. The top-k and replay defenses are exact only in float32 (PROBE.md).")


FormatWeight = Annotated[float, Field(ge=0, le=100, description="Weight w of DeepSeek-R1's format reward: reward = (correct + w·well_formatted)/(1 + w). 0 = the paper's binary reward; eval/accuracy counts correct answers either way.")]


class ArithmeticTaskConfig(_Strict):
    kind: Literal["arithmetic"] = "arithmetic"
    seed: int | None = Field(None, description="Problem generator seed; None uses the run seed.")
    difficulty: int = Field(1, ge=1, le=4, description="1 = one step with single digits … 4 = three steps up to 60.")
    n_train: int = Field(2000, ge=1, description="Training problems.")
    n_val: int = Field(200, ge=1, description="Validation problems (never a training question).")
    two_two_rate: float = Field(0.1, ge=0, le=1, description="Fraction of problems whose first step is 2+2 or 2×2.")
    few_shot: int = Field(2, ge=0, le=2, description="Worked examples shown as earlier chat turns.")
    prefill_think: bool = Field(True, description="Open the assistant turn with `<think>`.")
    format_weight: FormatWeight = 0.0


class GSM8KTaskConfig(_Strict):
    kind: Literal["gsm8k"] = "gsm8k"
    path: str | None = Field(None, description="Training JSONL in the official GSM8K format (question, answer ending in `#### N`).")
    val_path: str | None = Field(None, description="Validation JSONL; absent → the last n_val training records.")
    hub: str | None = Field(None, description="Hub dataset name (e.g. openai/gsm8k), loaded with `datasets` (online only).")
    n_train: int | None = Field(None, ge=1, description="Cap on training records (None = all).")
    n_val: int = Field(200, ge=1, description="Cap on validation records.")
    few_shot: int = Field(2, ge=0, le=2, description="Worked examples shown as earlier chat turns.")
    prefill_think: bool = Field(True, description="Open the assistant turn with `<think>`.")
    format_weight: FormatWeight = 0.0

    @model_validator(mode="after")
    def _source(self):
        if not self.path and not self.hub:
            raise ValueError("gsm8k task needs `path` (JSONL file) or `hub` (dataset name)")
        return self


class PythonMathTaskConfig(_Strict):
    """Math word problems answered by a Python program run in the sandbox (paper §3.4.2, §D.2)."""

    kind: Literal["python_math"] = "python_math"
    seed: int | None = Field(None, description="Problem generator seed; None uses the run seed (generator source only).")
    difficulty: int = Field(1, ge=1, le=4, description="Generator difficulty: 1 = one step with single digits … 4 = three steps up to 60.")
    n_train: int | None = Field(2000, ge=1, description="Training problems (generator), or cap on usable GSM8K records (None = all).")
    n_val: int = Field(200, ge=1, description="Validation problems (never a training question).")
    path: str | None = Field(None, description="GSM8K-format JSONL whose `<<a*b=c>>` calculator marks give the oracle program; None = embedded generator.")
    val_path: str | None = Field(None, description="GSM8K-format validation JSONL; absent → the last n_val usable records of `path`.")
    few_shot: int = Field(2, ge=0, le=2, description="Worked examples (programs) shown as earlier chat turns.")
    prefill_think: bool = Field(True, description="Open the assistant turn with `<think>`.")
    timeout_s: float = Field(5.0, gt=0, le=600, description="Wall-clock (and CPU-time) limit of one program run in the sandbox, seconds.")
    memory_mb: int = Field(1024, ge=64, description="Address-space limit of one program run, MiB (numpy + sympy need about 300).")
    libraries: list[str] = Field(default_factory=lambda: ["thief_math"], description="Attacker libraries installed in the sandbox as harmless stand-ins that record their calls; the code_injection attack's module must be one of them.")
    unsafe_no_os_sandbox: bool = Field(False, description="UNSAFE: run model-written programs without the bubblewrap sandbox (seccomp, resource limits and the audit hook only), for a run that you isolate as a whole (a container) on a machine without user namespaces. Refused with swarm.transport=distributed. See docs/sandbox.md.")

    @model_validator(mode="after")
    def _sources(self):
        if self.val_path and not self.path:
            raise ValueError("python_math: val_path needs path (the generator makes its own validation split)")
        bad = [name for name in self.libraries if not valid_stand_in_name(name)]
        if bad:  # the sandbox stands in for attacker modules; it never shadows a real one
            raise ValueError(f"python_math: libraries name stand-in attacker modules: identifiers that are not real modules, got {bad}")
        return self


TaskConfig = Annotated[Union[ArithmeticTaskConfig, GSM8KTaskConfig, PythonMathTaskConfig], Field(discriminator="kind")]


class SamplingConfig(_Strict):
    top_k: int = Field(10, ge=1, description="k of top-k sampling (paper §D.3: 10). The top-k defense checks against it.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature; 0 = greedy.")
    max_new_tokens: int = Field(64, ge=1, description="Completion length limit, tokens; also dr_grpo's constant normaliser.")


class GRPOConfig(_Strict):
    loss_type: Literal["grpo", "dr_grpo", "bnpo"] = Field("grpo", description="grpo: mean of per-sequence token means (paper §1.1); bnpo: token mean over the batch (DAPO); dr_grpo: token sum / (N·max_new_tokens) (Dr. GRPO).")
    scale_rewards: Literal["group", "batch", "none"] = Field("group", description="Divide centred rewards by the group std (GRPO), the batch std, or not at all (Dr. GRPO).")
    beta: float = Field(0.0, ge=0, description="KL weight β against the frozen reference model (paper uses 0; §B.4 tries 0.01, 0.1). The reference model is loaded only when β > 0.")
    lr: float = Field(5e-5, gt=0, description="AdamW learning rate. Default 5e-5 for SmolLM2-135M on CPU (few rounds); the paper uses 2e-5 with Qwen2.5-1.5B (`dgrpo paper --scale paper` sets it).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping (global L2 norm).")
    num_iterations: int = Field(1, ge=1, description="μ: optimizer steps per generation. 1 = the paper's setting (ratio ≡ 1, no clipping).")
    epsilon: float = Field(0.2, gt=0, description="PPO clipping range ε, active when num_iterations > 1.")


class SwarmConfig(_Strict):
    nodes: int = Field(4, ge=1, description="m: number of nodes (honest + malicious).")
    mode: Literal["horizontal", "vertical"] = Field("horizontal", description="horizontal (Alg. 1): global prompts, G/m completions per node per prompt; vertical (Alg. 2): B/m local prompts per node, G completions each.")
    prompts_per_round: int = Field(4, ge=1, description="B: prompts per round (whole swarm).")
    group_size: int = Field(8, ge=1, description="G: completions per prompt.")
    models: list[ModelConfig] | None = Field(None, description="Heterogeneous swarm: one model per node (None = homogeneous, every node holds `model`).")
    malicious: list[StrictInt] = Field(default_factory=list, description="Ids of malicious nodes (they run `attack`).")
    transport: Literal["inprocess", "distributed"] = Field("inprocess", description="inprocess: all nodes in this process; distributed: one node per torchrun rank.")
    reject_mode: Literal["drop", "zero"] = Field("drop", description="What a defense rejection does: drop the completion from its group, or keep it with reward 0.")
    timeout_s: float = Field(900.0, gt=0, description="Distributed: seconds a node waits for a peer's messages of a round after posting its own; a later peer is declared failed (dead or stalled) and named. Must exceed the spread of round time between nodes (generation plus evaluation of the slowest). See docs/distributed.md.")
    startup_timeout_s: float = Field(900.0, gt=0, description="Distributed: seconds ranks wait for each other at launch (rendezvous, run name, config check).")
    on_peer_failure: Literal["abort", "continue"] = Field("abort", description="Distributed, when a peer is declared failed: abort (every node exits non-zero naming it), or continue without it (its groups use the completions received, later rounds no longer wait for it).")
    backend: Literal["auto", "gloo", "nccl"] = Field("auto", description="Distributed: torch.distributed backend of the process group (auto: nccl when every local rank has its own GPU, else gloo). Messages travel through the group's c10d store either way.")

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


class EvalConfig(_Strict):
    every: int = Field(4, ge=1, description="Evaluate on the validation split every k rounds (and after the last round).")
    n_prompts: int = Field(32, ge=1, description="Validation prompts per evaluation.")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature for evaluation; None = the swarm's.")


class RunConfig(_Strict):
    seed: int = Field(0, description="Run seed: prompts, sampling seeds and initialisation derive from it.")
    rounds: int = Field(12, ge=1, description="Rounds (generation → exchange → update) to run. Default 12: the README command, about 8 minutes on 2 CPU cores.")
    out_dir: str = Field("runs", description="Folder that receives the run directory.")
    name: str | None = Field(None, description="Run directory name; None = {task}__{attack}__{defense}__seed{n}__{time}.")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (None = torch default).")
    checkpoint_every: int = Field(0, ge=0, description="Save a checkpoint every k rounds (0 = only at the end).")
    tensorboard: bool = Field(False, description="Also write TensorBoard event files.")
    model: ModelConfig = ModelConfig()
    task: TaskConfig = ArithmeticTaskConfig()
    sampling: SamplingConfig = SamplingConfig()
    grpo: GRPOConfig = GRPOConfig()
    swarm: SwarmConfig = SwarmConfig()
    attack: AttackConfig = NoAttackConfig()
    defenses: list[DefenseConfig] = Field(default_factory=list, description="Defenses every honest node runs, in order.")
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
    def _cross_checks(self):
        if sum(s is not None for s in (self.federated, self.ensemble, self.hardening)) > 1:
            raise ValueError("set at most one of federated, ensemble, hardening")
        if self.federated is not None:
            self._check_federated()
            return self
        if self.attack.kind != "none" and not self.swarm.malicious:
            raise ValueError(f"attack {self.attack.kind!r} needs at least one node in swarm.malicious")
        if self.attack.kind == "none" and self.swarm.malicious:
            raise ValueError("swarm.malicious lists nodes but attack.kind is none; choose an attack")
        if self.ensemble is not None:
            from dgrpo.robust.ensemble import split_groups

            if self.ensemble.groups > self.swarm.nodes:
                raise ValueError(f"ensemble.groups = {self.ensemble.groups} groups need at least as many nodes (swarm.nodes = {self.swarm.nodes})")
            check_ensemble_groups(split_groups(range(self.swarm.nodes), self.ensemble.groups), self.swarm.malicious,
                                  self.swarm.mode, self.swarm.group_size, self.swarm.prompts_per_round)
        if self.attack.kind == "equation" and self.swarm.mode != "vertical":
            raise ValueError("the 2+2=5 attack picks its own prompts: it needs swarm.mode=vertical (paper §3.4.1)")
        for d in self.defenses:
            if d.kind in ("topk", "replay"):
                if self.swarm.models is not None:
                    raise ValueError(f"the {d.kind} defense needs a homogeneous swarm (every node holds the same weights); use the judge for heterogeneous swarms")
                if self.model.dtype != "float32":
                    raise ValueError(f"the {d.kind} defense is exact only with float32 weights and logits (PROBE.md); set model.dtype=float32")
        if getattr(self.task, "unsafe_no_os_sandbox", False) and self.swarm.transport != "inprocess":
            raise ValueError("task.unsafe_no_os_sandbox is refused with swarm.transport=distributed: programs written by peers "
                             "in other processes would run outside the OS sandbox (docs/sandbox.md)")
        if self.attack.kind == "code_injection":
            if self.task.kind != "python_math":
                raise ValueError(f"attack code_injection needs task.kind=python_math (programs to inject into), got {self.task.kind!r}")
            if self.attack.module not in self.task.libraries:
                raise ValueError(f"attack.module {self.attack.module!r} must be one of task.libraries {self.task.libraries}: the sandbox must provide it")
        return self

    def _check_federated(self) -> None:
        fed, swarm = self.federated, self.swarm
        if swarm.mode != "vertical":
            raise ValueError("federated runs use the vertical schedule (every node trains on its own local prompts): set swarm.mode=vertical")
        if swarm.models is not None:
            raise ValueError("federated runs exchange updates of one architecture: use a homogeneous swarm (swarm.models unset)")
        if self.attack.kind != "none" or self.defenses:
            raise ValueError("federated runs exchange updates, not completions: set federated.attack instead of attack, and no completion defenses")
        if fed.attack != "none" and not swarm.malicious:
            raise ValueError(f"federated.attack {fed.attack!r} needs at least one node in swarm.malicious")
        if fed.attack == "none" and swarm.malicious:
            raise ValueError("swarm.malicious lists nodes but federated.attack is none; choose an update attack")
        if fed.update == "gradient" and self.grpo.num_iterations != 1:
            raise ValueError("federated.update=gradient sends one gradient per round: set grpo.num_iterations=1 (or use update=delta)")
        n, f = swarm.nodes, fed.f if fed.f is not None else len(swarm.malicious)
        if f >= n:
            raise ValueError(f"federated.f = {f} must be below the number of nodes {n}")
        need = {"trimmed_mean": (2 * f + 1, "n > 2f"), "krum": (2 * f + 3, "n > 2f + 2"), "multi_krum": (2 * f + 3, "n > 2f + 2")}
        if fed.aggregator in need and n < need[fed.aggregator][0]:
            raise ValueError(f"{fed.aggregator} needs {need[fed.aggregator][1]}: {n} nodes with f = {f}; add nodes or lower federated.f")
        if fed.attack == "alie" and len(swarm.malicious) >= n // 2 + 1:
            raise ValueError("the ALIE attack needs fewer than ⌊n/2 + 1⌋ malicious nodes")


_DEFAULT_KINDS = {"task": "arithmetic", "attack": "none"}


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the field and what to change."""


def _parse_value(text: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to a nested dict, in place.

    Raises:
        ConfigError: an override without ``=``.
    """
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.sub=value")
        key, value = item.split("=", 1)
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = _parse_value(value)
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
    apply_overrides(data, overrides or [])
    for section, kind in _DEFAULT_KINDS.items():  # `task.n_train=5` alone keeps the default task kind
        if isinstance(data.get(section), dict):
            data[section].setdefault("kind", kind)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        lines = [f"  {'.'.join(str(p) for p in e['loc']) or '(config)'}: {e['msg']}" for e in err.errors()]
        raise ConfigError("invalid config:\n" + "\n".join(lines)) from None
