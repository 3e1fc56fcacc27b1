"""Run configuration: one pydantic model, from a YAML file plus ``key=value`` overrides.

The sections every run has are documented here, each field once with its unit and paper symbol.
A section that names a kind (``task``, ``attack``, each of ``defenses``, ``swarm.transport``,
``federated.aggregator``) is validated by that kind's own config class, documented and checked next
to the kind (dgrpo.registry): e.g. ``attack.kind=equation`` → :class:`dgrpo.attacks.equation.EquationAttackConfig`.
Unknown keys are errors (``extra="forbid"``), inf and NaN are refused, and cross-field rules (G
divisible by m, …) are checked on construction: each kind's rules by its config's ``check``.
Every field that sizes memory or time has an upper bound (its description says it), names and paths
refuse control characters, ``true``/``false`` is not a number, and before validation a config file
is at most :data:`MAX_CONFIG_BYTES`, nested at most :data:`MAX_DEPTH` levels and holds no integer
beyond ±2^63: every malformed input is one :class:`ConfigError` line naming the field.
"""

from __future__ import annotations

import difflib
import types
import typing
import unicodedata
from pathlib import Path
from typing import Literal

from pydantic import Field, StrictInt, ValidationError, field_validator, model_serializer, model_validator

from dgrpo.attacks.base import NoAttackConfig
from dgrpo.config_inputs import MAX_CONFIG_BYTES, MAX_DEPTH, MAX_INT, apply_overrides, read_config_file  # noqa: F401 (the config's inputs)
from dgrpo.errors import ConfigError, UnknownKind, one_line
from dgrpo.hardening.config import HardeningConfig
from dgrpo.metrics.trackers import TrackingConfig
from dgrpo.policy.folders import check_model_folder  # noqa: F401 (also dgrpo.config.check_model_folder)
from dgrpo.registry import KindOf, PathText, StrictConfig, kind_field, lookup, names
from dgrpo.robust.config import EnsembleConfig, FederatedConfig
from dgrpo.swarm.protocol import ProtocolConfig
from dgrpo.swarm.clockconfig import auto_where_unset, check as check_clock, check_untimed, unset_elsewhere
from dgrpo.tasks.arithmetic import ArithmeticTaskConfig
from dgrpo.transports.dht.config import HivemindConfig, check_hivemind


NAME_MAX_BYTES = 255  # a folder name's limit on Linux and macOS file systems (NAME_MAX), UTF-8 bytes
_FILLERS = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u2800"}  # Hangul fillers, braille blank: print nothing


def _invisible(c: str) -> bool:
    """Whether ``c`` prints nothing: whitespace, a format character (Cf: zero-width spaces and joiners,
    bidi controls), a combining mark on its own (Mn, Me), or a filler letter."""
    return c.isspace() or unicodedata.category(c) in ("Cf", "Mn", "Me", "Zs") or c in _FILLERS


WEEK_S = 7 * 24 * 3600.0  # the longest timeout a config may set, seconds
MAX_ROUNDS = 100_000
TaskField = kind_field("task", default="arithmetic")  # a task config, validated by its kind's class
AttackField = kind_field("attack", default="none")
DefenseField = kind_field("defense")


class ModelConfig(StrictConfig):
    """The policy model: which one, its dtype and device."""

    name: PathText = Field("smollm2-135m-instruct", min_length=1, max_length=4096, description="Policy model: `smollm2-135m-instruct` (embedded GGUF default), a local folder or a Hugging Face hub id.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights and logits dtype. The top-k and replay defenses are exact only in float32 (docs/verification.md); bfloat16 generation is for runs without them (docs/gpu.md).")
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$", description="Where the policy, reference model, judge and detector run: auto (the GPU of this rank when CUDA is available, else the CPU), cpu, cuda (GPU $LOCAL_RANK under torchrun) or cuda:N (docs/gpu.md).")

    @field_validator("name")
    @classmethod
    def _a_folder_is_a_saved_model(cls, v: str) -> str:
        check_model_folder(v)
        return v


NODE_OVERRIDES = ("lr", "lora_rank")  # the grpo.* fields a swarm.models item may set for its node


class NodeModelConfig(ModelConfig):
    """One node of a heterogeneous swarm (an item of ``swarm.models``): its model and, optionally, its
    own optimiser settings; a field left unset (null) is the run's ``grpo.*`` value. One learning rate
    may not suit two architectures (issue 37: Qwen2.5-Coder-0.5B lost accuracy at the lr 1e-4 that
    SmolLM2-135M learnt at). An unset override is not written to the run's config.yaml, so a run
    without overrides keeps the config (and checkpoint identity) it had before these fields existed."""

    lr: float | None = Field(None, gt=0, description="This node's AdamW learning rate (null = grpo.lr); grpo.warmup_rounds scales it as it scales grpo.lr. A malicious node does not train: its lr is unused. The top-level `model` has no lr (a homogeneous swarm trains one policy: grpo.lr).")
    lora_rank: int | None = Field(None, ge=0, le=4096, description="This node's LoRA rank r, at most 4096 (null = grpo.lora_rank; 0 = full fine-tuning of this node). grpo.lora_alpha and grpo.lora_targets apply to every node (the scale α/r follows the node's r).")

    @model_serializer(mode="wrap")
    def _unset_overrides_left_out(self, handler):
        data = handler(self)
        for key in NODE_OVERRIDES:
            if data.get(key) is None:
                data.pop(key, None)
        return data


class SamplingConfig(StrictConfig):
    """The agreed sampling strategy every node generates with (seeded top-k)."""

    top_k: int = Field(10, ge=1, le=1 << 20, description="k of top-k sampling (paper §D.3: 10), at most 2^20. The top-k defense checks against it.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature; 0 = greedy.")
    max_new_tokens: int = Field(64, ge=1, le=1 << 17, description="Completion length limit, tokens (at most 131072); also dr_grpo's constant normaliser.")


class GRPOConfig(StrictConfig):
    """The GRPO update: loss, reward scaling, KL, optimiser (paper §1.1)."""

    loss_type: Literal["grpo", "dr_grpo", "bnpo"] = Field("grpo", description="grpo: mean of per-sequence token means (paper §1.1); bnpo: token mean over the batch (DAPO); dr_grpo: token sum / (N·max_new_tokens) (Dr. GRPO).")
    scale_rewards: Literal["group", "batch", "none"] = Field("group", description="Divide centred rewards by the group std (GRPO), the batch std, or not at all (Dr. GRPO).")
    beta: float = Field(0.0, ge=0, description="KL weight β against the frozen reference model (paper uses 0; §B.4 tries 0.01, 0.1). The reference model is loaded only when β > 0.")
    lr: float = Field(2e-5, gt=0, description="AdamW learning rate. Default 2e-5: the best of the CPU-scale sweep for SmolLM2-135M (results/baseline_sweep, docs/training.md; at 5e-5 the earlier 30-round baseline fell to 0 accuracy), also the paper's value with Qwen2.5-1.5B.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping (global L2 norm).")
    num_iterations: int = Field(1, ge=1, le=1000, description="μ: optimizer steps per generation (at most 1000). 1 = the paper's setting (ratio ≡ 1, no clipping).")
    epsilon: float = Field(0.2, gt=0, description="PPO clipping range ε, active when num_iterations > 1.")
    warmup_rounds: int = Field(0, ge=0, le=100_000, description="Linear learning-rate warm-up: round r trains at lr·min(1, (r+1)/warmup_rounds); 0 = none.")
    update_kernel: Literal["auto", "onednn", "mkl"] = Field("auto", description="Float32 linear kernel of the update's own forwards and backwards (the packed groups, the shared prefix's run for them, the reference model); the sampler and every forward a defense reads stay on oneDNN. auto: MKL on a GenuineIntel CPU (/proc/cpuinfo), oneDNN elsewhere: the faster one on each CPU measured (docs/training.md), chosen by this fixed rule, never by a timing.")
    lora_rank: int = Field(0, ge=0, le=4096, description="LoRA rank r of the trained policies (peft, Hu et al. 2021); 0 = full fine-tuning. Only the adapters train and sit in the optimizer.")
    lora_alpha: float = Field(32.0, gt=0, le=1e6, description="LoRA scaling numerator α (the update is (α/r)·BA).")
    lora_targets: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], min_length=1, description="Module names that get LoRA adapters (peft target_modules).")

    @model_serializer(mode="wrap")
    def _default_kernel_left_out(self, handler):
        """``update_kernel`` at its default (auto) is not written, so a run's config.yaml from before the field
        existed loads and dumps to the same dict (its checkpoints' config hash unchanged)."""
        data = handler(self)
        if data.get("update_kernel") == "auto":
            data.pop("update_kernel")
        return data


class SwarmConfig(StrictConfig):
    """The swarm: nodes, mode (Alg. 1/2), batch shape, malicious nodes, transport."""

    nodes: int = Field(4, ge=1, le=1024, description="m: number of nodes (honest + malicious), at most 1024.")
    mode: Literal["horizontal", "vertical"] = Field("horizontal", description="horizontal (Alg. 1): global prompts, G/m completions per node per prompt; vertical (Alg. 2): B/m local prompts per node, G completions each.")
    prompts_per_round: int = Field(4, ge=1, le=1 << 16, description="B: prompts per round (whole swarm), at most 65536; B·G at most 2^20 completions.")
    group_size: int = Field(8, ge=1, le=1 << 16, description="G: completions per prompt, at most 65536.")
    models: list[NodeModelConfig] | None = Field(None, description="Heterogeneous swarm: one model per node (None = homogeneous, every node holds `model`); each may set its own `lr` and `lora_rank` (null = grpo's).")
    malicious: list[StrictInt] = Field(default_factory=list, description="Ids of malicious nodes (they run `attack`).")
    transport: str = Field("inprocess", description="A registered transport (dgrpo.transports): inprocess, all nodes in this process; distributed, one node per torchrun rank; hivemind, one node per process over a hivemind DHT (docs/hivemind.md).")
    reject_mode: Literal["drop", "zero"] = Field("drop", description="What a defense rejection does: drop the completion from its group, or keep it with reward 0.")
    timeout_s: float = Field(900.0, gt=0, le=WEEK_S, description="Distributed and hivemind: the seconds (at most a week) a round may last at a node; a later peer is declared failed (dead or stalled) and named. torch.distributed: every wait of a round (payloads, relays, a waiter's extension) ends within timeout_s of the node's post; a peer's payload is waited for during the first (timeout_s - 2 S) / 2 (S = min(timeout_s/5, 1.5 s): 1.5 s at 5 s, 448.5 s at 900 s), which must exceed the spread of round time between honest nodes (generation plus evaluation of the slowest): keep that spread under 0.3 x timeout_s (docs/distributed.md). Hivemind: a whole round (payloads, then the commit's views and echo) ends within timeout_s of its start, the payloads within its first quarter, so timeout_s must exceed 4 times that spread (docs/hivemind.md).")
    startup_timeout_s: float = Field(900.0, gt=0, le=WEEK_S, description="Distributed and hivemind: seconds (at most a week) nodes wait for each other at launch (rendezvous or bootstrap, run name, config check).")
    on_peer_failure: Literal["abort", "continue"] = Field("abort", description="Distributed and hivemind, when a peer is declared failed: abort (every node exits non-zero naming it), or continue without it (its groups use the completions received, later rounds no longer wait for it).")
    protocol: ProtocolConfig = Field(default_factory=ProtocolConfig, description="What every honest node enforces on received messages: signatures, bound seeds, shares, bans (dgrpo.swarm.protocol).")
    unsafe_key_exchange: bool = Field(False, description="Distributed and hivemind without swarm.protocol.roster: let each process make its key and publish the public half through the transport at start. Unsafe (any peer can replace a key on its way, then speak as that node: a local process writing node k's record with its own key from its start takes k's identity at every reader, k is expelled and every rank stops at start-up, nobody named; issue 31's 'public key overwritten' case is met only with a roster file), so refused unless every peer is on this machine (loopback addresses); elsewhere write the roster with `dgrpo keys`.")
    backend: Literal["auto", "gloo", "nccl"] = Field("auto", description="Distributed: torch.distributed backend of the process group (auto: nccl when every local rank has its own GPU, else gloo). Messages travel through the group's c10d store either way.")
    hivemind: HivemindConfig = Field(HivemindConfig(), description="swarm.transport=hivemind: addresses, keys, joining nodes (timeout_s, startup_timeout_s and on_peer_failure apply too; dgrpo.transports.dht.config).")

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
        if self.prompts_per_round * self.group_size > 1 << 20:
            raise ValueError(f"B·G (prompts_per_round={self.prompts_per_round} × group_size={self.group_size}) must be at most 2^20 completions per round; lower one of them")
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
        if self.protocol.assign_prompts and (self.mode != "vertical" or not self.protocol.enforce_shares):
            raise ValueError("swarm.protocol.assign_prompts is a vertical share rule: it needs swarm.mode=vertical and "
                             "swarm.protocol.enforce_shares=true (horizontal prompts are the round's shared ones already)")
        check_hivemind(self)
        unset_elsewhere(self)  # (schedule: relative off distributed: unset, the config dumps as before)
        auto_where_unset(self)  # (schedule: clock on distributed without round_s: auto, as the default)
        check_clock(self)  # (swarm.protocol.schedule=clock, the default on distributed: transports/clocked.py)
        return self


class EvalConfig(StrictConfig):
    """Held-out evaluation: how often, on how many prompts."""

    every: int = Field(6, ge=1, le=MAX_ROUNDS, description="Evaluate on the validation split every k rounds (and after the last round).")
    first: bool = Field(True, description="Also evaluate before the first round (round 0). false skips it (every run of one model, seed and task starts from the same round-0 numbers, so a series of runs can take them from one); the drift metrics then take the first evaluation's completions as their reference.")
    n_prompts: int = Field(128, ge=1, le=1 << 20, description="Validation prompts per evaluation (at most 2^20). Default 128: a Wilson 95% interval of about ±0.08 on an accuracy near 0.3 (32 prompts: ±0.16, too wide to see learning).")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature for evaluation; None = the swarm's.")
    greedy: bool = Field(True, description="Also answer the validation prompts greedily (eval/greedy/…): sampled accuracy shows what training sees, greedy what a deployed model answers.")
    drift: bool = Field(True, description="Log eval/kl_to_start and eval/entropy on the first evaluation's completions (what shows a collapse coming; docs/training.md).")


class RunConfig(StrictConfig):
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Run seed, 0 to 2^32 − 1 (numpy's range): prompts, sampling seeds and initialisation derive from it.")
    rounds: int = Field(12, ge=1, le=MAX_ROUNDS, description="Rounds (at most 100000) (generation → exchange → update) to run. Default 12: the README command, about 4 minutes on 2 quiet CPU cores (results/readme_quiet_2026-12-05_evening).")
    out_dir: PathText = Field("runs", min_length=1, max_length=4096, description="Folder that receives the run directory.")
    name: PathText | None = Field(None, max_length=200, description="Run directory name (printable, at most 200 characters and 255 bytes in UTF-8); None = {task}__{attack}__{defense}__seed{n}__{time}.")
    threads: int | None = Field(None, ge=1, le=1024, description="torch CPU threads, at most 1024 (None = torch default).")
    checkpoint_every: int = Field(0, ge=0, le=MAX_ROUNDS, description="Save a checkpoint every k rounds (0 = only at the end).")
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
        # name=2024 or name=1.10: YAML reads a number, which keeps its text (dgrpo.config_yaml): "1.10", not "1.1"
        return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    @field_validator("name")
    @classmethod
    def _one_folder(cls, v: str | None) -> str | None:
        if v is not None and (v in ("", ".", "..") or "/" in v or "\\" in v):
            raise ValueError(f"name must be one folder name inside out_dir (no '/', '\\', '.' or '..'), got {v!r}")
        if v is not None and all(_invisible(c) for c in v):
            raise ValueError(f"name {v!r} prints nothing (only spaces, zero-width or format characters): "
                             "give the run a name a reader can see")
        if v is not None and len(v.encode("utf-8")) > NAME_MAX_BYTES:
            raise ValueError(f"name is {len(v.encode('utf-8'))} bytes in UTF-8 ({len(v)} characters); a folder name "
                             f"holds at most {NAME_MAX_BYTES} bytes: shorten it")
        return v

    @model_validator(mode="after")
    def _kinds_check_each_other(self):
        if sum(s is not None for s in (self.federated, self.ensemble, self.hardening)) > 1:
            raise ValueError("set at most one of federated, ensemble, hardening")
        kind = next((k for k in ("federated", "ensemble", "hardening") if getattr(self, k) is not None), None)
        if kind is not None and self.swarm.transport != "inprocess":  # (review r31d F1: no silent lone run; hivemind too)
            t = self.swarm.transport
            raise ValueError(f"{kind} runs keep their nodes in one process and build no {t} swarm (every "
                             f"{'torchrun rank' if t == 'distributed' else 'hivemind process'} would run the whole "
                             f"{kind} run alone{', off the clocked schedule' if t == 'distributed' else ''}): "
                             f"drop swarm.transport={t}, i.e. set swarm.transport=inprocess")
        for field in ("lora_rank", "warmup_rounds"):
            if getattr(self.grpo, field) and (self.federated is not None or self.hardening is not None):
                raise ValueError(f"grpo.{field} applies to swarm runs (horizontal, vertical, ensemble); set grpo.{field}=0 for federated and hardening runs (federated runs train LoRA with federated.lora=true)")
        if self.federated is not None:  # its malicious nodes attack updates: no completion attack applies
            self.federated.check(self)
            return self
        self.task.check(self)
        self.attack.check(self)
        if self.ensemble is not None:
            self.ensemble.check(self)
        for d in self.defenses:
            d.check(self)
        check_untimed(self)  # (swarm.protocol.round_s=auto: swarm/clockconfig.py)
        return self


def _section_class(path: tuple, data) -> tuple[type[StrictConfig] | None, tuple[str, str] | None]:
    """The config class validating the section at ``path`` of the raw ``data`` (a kind section: its
    kind's class; None when ``path`` leads nowhere known), and for a kind section (kind, the name it
    holds): ``("task", "gsm8k")``."""
    cls, value, parts, held = RunConfig, data, list(path), None
    while parts:
        name = str(parts.pop(0))
        f = cls.model_fields.get(name)
        if f is None:
            return None, None
        value = value.get(name) if isinstance(value, dict) else None
        ann, meta = f.annotation, list(f.metadata)
        if typing.get_origin(ann) in (typing.Union, types.UnionType):
            ann = next((a for a in typing.get_args(ann) if a is not type(None)), ann)
        if typing.get_origin(ann) is list:  # a list of sections: the next part is the index
            ann = typing.get_args(ann)[0]
            index = parts.pop(0) if parts else None
            value = value[int(index)] if isinstance(value, list) and str(index).isdigit() and int(index) < len(value) else None
        while typing.get_origin(ann) is typing.Annotated:
            ann, meta = typing.get_args(ann)[0], meta + list(typing.get_args(ann)[1:])
        kind, held = next((m for m in meta if isinstance(m, KindOf)), None), None
        if kind is not None:
            name = value.get("kind", kind.default) if isinstance(value, dict) else kind.default
            try:
                ann = lookup(kind.kind, name).config if isinstance(name, str) else None
            except UnknownKind:
                return None, None
            held = (kind.kind, name)
        if not (isinstance(ann, type) and issubclass(ann, StrictConfig)):
            return None, None
        cls = ann
    return cls, held


def _other_kinds(held: tuple[str, str], field: str) -> list[str]:
    """The registered kinds of ``held[0]`` other than ``held[1]`` whose config has ``field``."""
    out = []
    for name in names(held[0]):
        config = lookup(held[0], name).config
        if name != held[1] and config is not None and field in config.model_fields:
            out.append(name)
    return out


def _value_at(data, loc: tuple):
    """The value at ``loc`` in the raw config (None when the path is not there)."""
    for part in loc:
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return None
    return data


def _error_line(e: dict, data=None) -> str:
    msg = e["msg"].removeprefix("Value error, ")  # a validator's own message names its fields
    loc = tuple(e["loc"])
    if e["type"] == "extra_forbidden" and loc:  # a typo: name the closest keys (docs/config.md)
        section, held = _section_class(loc[:-1], data)
        prefix = ".".join(str(p) for p in loc[:-1])
        owners = _other_kinds(held, str(loc[-1])) if held is not None else []
        if owners:  # a field of another kind (task.difficulty with task.kind=gsm8k): name it and the fix
            kinds = " or ".join([", ".join(owners[:-1]), owners[-1]] if len(owners) > 1 else owners)
            fix = f"set {prefix}.kind={owners[0]} to use it" if len(owners) == 1 else f"set {prefix}.kind to one of them"
            return f"{prefix}.{loc[-1]}: a field of {prefix}.kind={kinds}, not of {prefix}.kind={held[1]}; {fix}, or drop {prefix}.{loc[-1]}"
        if loc[:-1] == ("model",) and loc[-1] in NODE_OVERRIDES:  # a per-node setting given to the one model
            return (f"model.{loc[-1]}: the top-level model has no {loc[-1]} (every node of a homogeneous swarm trains "
                    f"one policy with grpo.{loc[-1]}); set grpo.{loc[-1]}, or give each node its own model and "
                    f"swarm.models.N.{loc[-1]} (a heterogeneous swarm)")
        if str(loc[-1]) == "<<":  # a YAML 1.1 merge key: YAML 1.2 (how configs are read) has none
            return (f"{'.'.join(str(p) for p in loc)}: a YAML merge key (<<), which the YAML 1.2 core schema that "
                    f"configs are read with does not have; write the keys out under {prefix or 'the top level'}")
        # Whole dotted keys compared in lower case, as `dgrpo config KEY` compares them ("grpo.LR" → grpo.lr,
        # "attack.targt" → attack.text); a wrong section name is followed by the key given under it
        # ("SWARM.nodes" → swarm.nodes).
        keys = {(f"{prefix}.{f}" if prefix else f).lower(): (f"{prefix}.{f}" if prefix else f)
                for f in (section.model_fields if section else ())}
        wrong = f"{prefix}.{loc[-1]}" if prefix else str(loc[-1])
        close = [keys[c] for c in difflib.get_close_matches(wrong.lower(), sorted(keys), n=3)]
        node = _value_at(data, loc)
        if isinstance(node, dict) and len(node) == 1:  # a section's name mistyped ("SWARM.nodes", "swarm..nodes"):
            child = str(next(iter(node)))  # a suggestion is a key that has the one key written under it
            inner = [_section_class((*loc[:-1], c.rsplit(".", 1)[-1]), data)[0] for c in close]
            close = [f"{c}.{child}" for c, cls in zip(close, inner) if cls is not None and child in cls.model_fields]
            if not close and section is not None and child in section.model_fields:
                close = [f"{prefix}.{child}" if prefix else child]  # ("swarm..nodes": the empty key dropped)
        msg += f"; did you mean {', '.join(close)}?" if close else "; `dgrpo config` lists every key"
    elif e["type"] != "value_error" and "input" in e and not isinstance(e["input"], (dict, list)):
        # a wrong value of a built-in type check: show what was read (a validator's own message already does)
        msg += f" (got {_shown(e['input'])})"
    return f"{'.'.join(str(p) for p in loc)}: {msg}" if loc else msg


def _shown(value, limit: int = 40) -> str:
    """A config value as the user wrote it, for an error line: ``null``, ``''``, ``'３'`` (U+FF13), at most
    ``limit`` characters."""
    if value is None:
        return "null: no value"
    text = repr(value) if isinstance(value, str) else str(value)
    text = text if len(text) <= limit else text[:limit] + "…"
    odd = [c for c in str(value) if not c.isascii() and (c.isdigit() or c.isspace())][:1]
    return text + (f", {odd[0]!r} is U+{ord(odd[0]):04X}, not an ASCII digit or space" if odd else "")


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Build a :class:`RunConfig` from an optional YAML file and overrides.

    Raises:
        ConfigError: unreadable YAML or invalid fields, in one line (every problem with its path).
    """
    data: dict = read_config_file(path) if path is not None else {}
    apply_overrides(data, overrides or [])  # (`task.n_train=5` alone keeps the default task kind)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(one_line("invalid config: " + "; ".join(_error_line(e, data) for e in err.errors()))) from None
    except RecursionError:  # (a depth that _check_shape allows never gets here)
        raise ConfigError(f"config nested too deeply; keep it under {MAX_DEPTH} levels") from None
