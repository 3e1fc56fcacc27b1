"""Construct everything a run needs from its config, in dependency order (``build_*``)."""

from __future__ import annotations

import logging
import random
import shutil
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from dgrpo import config_yaml
from dgrpo.attacks import build_attack
from dgrpo.config import NODE_OVERRIDES, ModelConfig, NodeModelConfig, RunConfig
from dgrpo.defenses import build_defenses, share_verdicts
from dgrpo.errors import ConfigError, PeerFailure
from dgrpo.grpo.learner import GRPOParams, Learner
from dgrpo.metrics.logger import MetricsLogger
from dgrpo.policy.loading import load_policy
from dgrpo.policy.lora import add_lora
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams
from dgrpo.registry import lookup
from dgrpo.swarm.identity import (ROSTER_FILE, Roster, Signer, SignatureVerifier, generate_keys, key_path, load_private_key,
                                  public_hex, run_context)
from dgrpo.swarm.clockconfig import resolved
from dgrpo.swarm.protocol import BanList, Protocol, Schedule
from dgrpo.swarm.swarm import Swarm
from dgrpo.swarm.validation import Limits
from dgrpo.tasks.base import Task
from dgrpo.training.heap import keep_freed_memory
from dgrpo.training.run_dir import check_paths, claim, drop_unused, made, release
from dgrpo.training.run_files import record_roster
from dgrpo.transports.base import Transport

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (sampling does not depend on these: it uses per-completion seeds)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def prepare(cfg: RunConfig) -> None:
    """What every run does first: seed everything, set torch's CPU threads (``threads``) and keep freed
    memory in the heap for reuse (:func:`dgrpo.training.heap.keep_freed_memory`)."""
    keep_freed_memory()
    seed_everything(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)


def run_name(cfg: RunConfig) -> str:
    """``{task}__{attack}__{defenses}__seed{n}__{time}`` (run names as cleanrl writes them)."""
    defenses = "+".join(d.kind for d in cfg.defenses) or "nodefense"
    return f"{cfg.task.kind}__{cfg.attack.kind}__{defenses}__seed{cfg.seed}__{time.strftime('%Y%m%d-%H%M%S')}"


def agreed_name(cfg: RunConfig, transport: Transport, proposed: str) -> str:
    """``proposed`` (the run name the transport agreed: the lowest live node's, :meth:`Transport.agree`) if it passes
    exactly the checks of a locally given ``name=`` (``RunConfig``'s validators: one printable folder name inside
    ``out_dir``, no ``/``, ``\\``, ``.`` or ``..``, at most 200 characters and 255 bytes).

    Raises:
        ConfigError: one line naming the node that proposed it (review r31f H8: node 0 proposed an absolute path
            and every rank wrote its run folder, config and checkpoints outside ``out_dir``).
    """
    from pydantic import ValidationError

    try:
        RunConfig.__pydantic_validator__.validate_assignment(cfg.model_copy(), "name", proposed)
    except ValidationError as err:
        why = err.errors()[0]["msg"].removeprefix("Value error, ")
        text = (f"the run name {proposed[:120]!r} proposed by {_proposer(transport)}, is refused: {why}; no run folder "
                "was made (that node runs other code than this one; set name= on every node to choose it)")
        transport.announce_stop(text)  # (a peer still reading this rank's value reads why it stopped, signed)
        raise ConfigError(text) from None
    return proposed


def _proposer(transport: Transport) -> str:
    """Who chose the agreed run name (for a line naming it)."""
    return (f"node {min(transport.alive)}, the lowest live node, whose value every node takes" if not transport.first_round
            else "the launch records (a value more than half of the live nodes' signed records agree on)")


def new_run_dir(cfg: RunConfig, transport: Transport, name: str) -> Path:
    """:func:`build_run_dir` of a new run named ``name`` (``cfg.name``, or the one the transport agreed); a folder
    this rank cannot make or that already holds a run stops this rank at start-up with its signed stop notice
    (review r31g J4: the FileExistsError came before any notice and its peers called it silent after
    ``startup_timeout_s``; an agreed name is quoted with its proposer).

    Raises:
        FileExistsError, ConfigError: as :func:`build_run_dir`, one line (naming the proposer of an agreed name).
    """
    try:
        return build_run_dir(cfg, name, owner=transport.is_main)
    except (FileExistsError, ConfigError) as err:
        alone = len(transport.local_nodes) == cfg.swarm.nodes  # (one process: the name is its own)
        text = str(err) if cfg.name or alone else (f"{err} (on this machine; the run name {name[:120]!r} was proposed "
                                                   f"by {_proposer(transport)}; set name= on every node to choose another)")
        transport.announce_stop(text)  # (a peer still reading this rank's value reads why it stopped, signed)
        raise type(err)(text) from None


def build_run_dir(cfg: RunConfig, name: str | None = None, owner: bool = True) -> Path:
    """Create the run directory ``out_dir/name`` (default: ``cfg.name`` or :func:`run_name`), claim it
    for this process (``owner``: the process that writes metrics; :mod:`dgrpo.training.run_dir`), write
    the resolved config into it and print where it is.

    Raises:
        ConfigError: a path the run needs is missing, the directory cannot be created (out_dir not
            writable, a file in the way), or another process is writing the directory.
        FileExistsError: the directory already holds a run (metrics.jsonl).
    """
    check_paths(cfg)  # (before anything is created or loaded)
    run_dir = Path(cfg.out_dir) / (name or cfg.name or run_name(cfg))
    try:
        held = (run_dir / "metrics.jsonl").exists()
        if not held:
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            with suppress(FileExistsError):  # (another process's, or a file in the way: then raised below)
                run_dir.mkdir()
                made.add(run_dir.resolve())  # (this process created it: a start-up stop may remove it, drop_unused)
            run_dir.mkdir(exist_ok=True)
    except OSError as err:  # (read-only, no permission, a file in the way, a name too long: one line, not a traceback)
        raise ConfigError(f"out_dir={cfg.out_dir}: cannot create the run folder {run_dir} ({err.strerror}); "
                          "choose an out_dir this user can write (or another name)") from None
    if held:
        raise FileExistsError(f"{run_dir} already holds a run; pick another name or use `dgrpo resume`")
    if owner:
        claim(run_dir)
        if (run_dir / "metrics.jsonl").exists():  # (written by a run that ended while this one waited)
            raise FileExistsError(f"{run_dir} already holds a run; pick another name or use `dgrpo resume`")
        print(f"run directory: {run_dir}", flush=True)
    (run_dir / "config.yaml").write_text(config_yaml.dump(cfg.model_dump(mode="json")))
    return run_dir


def build_task(cfg: RunConfig) -> Task:
    """The task of the run: its kind's builder called with its config (a seed it leaves open is the run seed)."""
    task_cfg = cfg.task.seeded(cfg.seed)
    return lookup("task", task_cfg.kind).builder(**task_cfg.model_dump(exclude={"kind"}))


def grpo_params(cfg: RunConfig, **changes) -> GRPOParams:
    """The update's hyper-parameters (:class:`dgrpo.config.GRPOConfig`), with ``changes`` applied."""
    g = cfg.grpo
    params = dict(loss_type=g.loss_type, scale_rewards=g.scale_rewards, beta=g.beta, lr=g.lr,
                  weight_decay=g.weight_decay, max_grad_norm=g.max_grad_norm, num_iterations=g.num_iterations,
                  epsilon=g.epsilon, warmup_rounds=g.warmup_rounds, max_len=cfg.sampling.max_new_tokens, reject_mode=cfg.swarm.reject_mode,
                  update_kernel=g.update_kernel)
    return GRPOParams(**{**params, **changes})


def sampling_params(cfg: RunConfig, max_new_tokens: int | None = None, temperature: float | None = None) -> SamplingParams:
    """The swarm's agreed sampling strategy (``sampling``), with a length or temperature changed."""
    s = cfg.sampling
    return SamplingParams(s.top_k, s.temperature if temperature is None else temperature,
                          max_new_tokens or s.max_new_tokens)


def run_device(model_cfg: ModelConfig, cfg: RunConfig):
    """The torch device of a model (``model.device``); TF32 goes off on a GPU when a logit-level
    defense re-derives sampling decisions from logits (docs/gpu.md)."""
    from dgrpo.policy.device import exact_float32, resolve_device

    device = resolve_device(model_cfg.device)
    if any(d.needs_exact_logits for d in cfg.defenses):  # declared by each defense's config
        exact_float32(device)
    return device


def node_overrides(model_cfg: ModelConfig) -> dict:
    """The ``grpo.*`` values a heterogeneous node's model entry sets for its own learner (``lr``,
    ``lora_rank``: :class:`dgrpo.config.NodeModelConfig`); {} for the top-level ``model``."""
    if not isinstance(model_cfg, NodeModelConfig):
        return {}
    return {k: v for k, v in model_cfg.model_dump(include=set(NODE_OVERRIDES)).items() if v is not None}


def build_policy(model_cfg: ModelConfig, cfg: RunConfig, trainable: bool) -> tuple[Policy, Learner | None]:
    """Load one model; give it a learner (and a reference model when β > 0) if it is trained, with the
    node's own ``lr`` and ``lora_rank`` where its ``swarm.models`` entry sets them (else ``grpo``'s)."""
    device = run_device(model_cfg, cfg)
    model, tokenizer = load_policy(model_cfg.name, model_cfg.dtype, trainable=trainable, device=device)
    learner, own = None, node_overrides(model_cfg)
    rank = own.get("lora_rank", cfg.grpo.lora_rank)
    if trainable and rank:
        add_lora(model, rank, cfg.grpo.lora_alpha, cfg.grpo.lora_targets)
    if trainable:
        ref = (load_policy(model_cfg.name, model_cfg.dtype, trainable=False, device=device)[0]
               if cfg.grpo.beta > 0 else None)
        params = grpo_params(cfg, **({"lr": own["lr"]} if "lr" in own else {}))
        learner = Learner(model, params, tokenizer.eos_token_id, tokenizer.pad_token_id, ref)
    return Policy(model_cfg.name, model, tokenizer, sampling_params(cfg)), learner


def build_swarm(cfg: RunConfig, task: Task, local_nodes: list[int]) -> Swarm:
    """Policies, learners, attacks and defenses of the nodes this process hosts.

    Homogeneous: one trained policy shared by every honest node; attackers hold the same object
    (the paper's attacker may know the weights) but never update it (an attacker alone in its
    process mirrors the honest update instead). Heterogeneous: one policy per node, loaded from
    ``swarm.models``.
    """
    malicious = set(cfg.swarm.malicious)
    policies, attacker_policies, attacks, learners = {}, {}, {}, {}
    if cfg.swarm.models is None:
        # Trained even when this process hosts only attackers (a distributed rank): the attacker
        # knows the weights, so it replays the honest update (Swarm.mirror_policies).
        shared, learner = build_policy(cfg.model, cfg, trainable=True)
        learners[shared] = learner
        for n in local_nodes:
            (attacker_policies if n in malicious else policies)[n] = shared
    else:
        for n in local_nodes:
            policy, learner = build_policy(cfg.swarm.models[n], cfg, trainable=n not in malicious)
            (attacker_policies if n in malicious else policies)[n] = policy
            if learner is not None:
                learners[policy] = learner
    for n in local_nodes:
        if n in malicious:
            attacks[n] = build_attack(cfg.attack, cfg)
    swarm = Swarm(task, policies, attacks, attacker_policies, learners, {}, cfg.seed, cfg.swarm.group_size,
                  Limits.for_completions(cfg.sampling.max_new_tokens), cfg.swarm.mode)
    swarm.malicious = frozenset(malicious)  # every rank's, hosted here or not (Swarm.label)
    for owner, policy in swarm.trained.items():  # a mirror runs the honest defenses too: same update
        swarm.defenses[owner] = build_defenses(cfg.defenses, cfg, policy, task)
    share_verdicts(swarm.defenses)  # a frozen judge's verdict on a completion is asked once per process
    swarm.prover = next((p for d in cfg.defenses if (p := d.sender_proof()) is not None), None)
    return swarm


def build_protocol(cfg: RunConfig, task: Task, transport: Transport, run_dir: Path) -> Protocol:
    """Keys, roster and rules of the swarm protocol (``swarm.protocol``, :mod:`dgrpo.swarm.protocol`).

    The roster is fixed here, before round 0: read from ``swarm.protocol.roster`` (each node reads its
    own private key from ``key_dir``), else fresh keys: in-process every node's, distributed each rank
    its own, public keys exchanged through the transport at startup (distributed: at the check-in, in each rank's
    signed address record, :meth:`DistributedTransport.exchanged_keys`). A hivemind swarm with joiners
    (``swarm.hivemind.join``) must give the roster file, which names the joiners too (the transport
    refuses the run otherwise, :func:`dgrpo.transports.dht.launch.node_keys`): a joiner cannot bring a
    key that nobody agreed on before round 0, and the running nodes never wait for it at startup. The
    schedule gives a joiner no slots before its join round. Messages are signed for the run context
    (the run's name: ``name``, else its directory's, for a joiner the one agreed at launch; and the
    config fingerprint); ``roster.json`` in the run directory records the roster, its fingerprint
    and the context.

    Raises:
        ConfigError: the roster file or a private key is unreadable, or a key does not match the roster.
    """
    from dgrpo.errors import ConfigError
    from dgrpo.transports.fingerprint import config_fingerprint  # (the one of every transport)
    from dgrpo.transports.rendezvous import check_key_exchange

    pc = cfg.swarm.protocol
    local = transport.local_nodes
    try:
        if pc.roster is not None:
            roster = Roster.load(pc.roster)
            private = {n: load_private_key(key_path(pc.key_dir or Path(pc.roster).parent, n)) for n in local}
        elif (exchanged := transport.exchanged_keys()) is not None:
            private, roster = exchanged  # (distributed, unsafe_key_exchange: the keys exchanged at the check-in)
        else:
            private = {n: k for n, k in generate_keys(cfg.swarm.nodes).items() if n in local}
            if len(local) == cfg.swarm.nodes:
                roster = Roster.of(private)
            else:  # one node per process: each makes its own key and publishes the public half
                check_key_exchange(cfg)  # (unsafe: any peer can replace a key on its way; loopback opt-in only)
                pubs = transport.gather_values("roster", public_hex(private[local[0]]))
                roster = Roster({int(n): k for n, k in pubs.items()})
    except ValueError as err:
        raise ConfigError(str(err)) from err
    missing = sorted(set(range(cfg.swarm.nodes)) - set(transport.failed) - set(roster.keys))  # (not one that never joined)
    wrong = [n for n, k in private.items() if roster.keys.get(n) != public_hex(k)]
    if missing or wrong:
        raise ConfigError(f"swarm.protocol.roster: the roster lacks nodes {missing} or does not hold the public key of "
                          f"nodes {wrong}; write roster and keys together with `dgrpo keys`")
    # The run's name, not its folder's: a hivemind joiner may resume a copy of a peer's run folder
    # under another name, and takes the name agreed at launch (a fresh run agreed it in build_run).
    name = cfg.name or (agreed_name(cfg, transport, transport.agree("name", run_dir.name)) if transport.first_round
                        else run_dir.name)
    context = run_context(name, config_fingerprint(cfg))
    if transport.is_main:
        (run_dir / ROSTER_FILE).write_text(roster.to_json(context=context))
    return protocol_of(cfg, task, private, roster, context, BanList.load(run_dir, pc.ban_after))


def protocol_of(cfg: RunConfig, task: Task, private: dict, roster: Roster, context: str, bans: BanList) -> Protocol:
    """The protocol of the nodes holding ``private`` (node id → Ed25519 key): their signers for
    ``context``, the verifier of ``roster``, the schedule of ``cfg`` and the rules of ``swarm.protocol``."""
    s = cfg.swarm
    schedule = Schedule(s.mode, s.nodes, s.prompts_per_round, s.group_size, cfg.seed, task.train,
                        s.protocol.assign_prompts, dict(s.hivemind.join))  # a planned joiner has no slots before its round
    return Protocol(s.protocol, schedule, cfg.sampling.max_new_tokens,
                    {n: Signer(n, k, context) for n, k in private.items()}, SignatureVerifier(roster, context), bans,
                    homogeneous=s.models is None)


def in_process_protocol(cfg: RunConfig, task: Task, name: str) -> Protocol:
    """The protocol of a swarm whose nodes all live in this process with fresh keys, as an in-process
    run's (:func:`build_protocol`), without a run directory (no ``roster.json``, no ``bans.json``):
    ``dgrpo paper matrix`` signs and admits its messages with it. ``name``: the run context's name."""
    from dgrpo.transports.fingerprint import config_fingerprint

    private = generate_keys(cfg.swarm.nodes)
    return protocol_of(cfg, task, private, Roster.of(private), run_context(name, config_fingerprint(cfg)),
                       BanList(cfg.swarm.protocol.ban_after))


def auto_round_s(cfg: RunConfig, swarm: Swarm, task: Task) -> float:
    """``swarm.protocol.round_s: auto``: this rank's proposal, seconds (:func:`dgrpo.training.roundtime.propose` on the
    first policy this process trains, and its learner; its direct_s + relay_s added)."""
    from dgrpo.swarm.clockconfig import windows
    from dgrpo.training.roundtime import propose

    policy = next(iter([*swarm.trained.values(), *swarm.policies.values(), *swarm.attacker_policies.values()]))
    _, a, b = windows(cfg.swarm.protocol, 0.0)
    return propose(cfg, policy, swarm.learners.get(policy), task, a + b, swarm.attacks)


def build_transport(cfg: RunConfig, resuming: bool = False) -> Transport:
    """The registered transport ``swarm.transport`` (in-process by default); ``resuming``: the run
    continues from a checkpoint (a node joining a homogeneous hivemind swarm must)."""
    return lookup("transport", cfg.swarm.transport).builder(cfg, resuming=resuming)


@dataclass
class Run:
    """Everything a running experiment holds."""

    cfg: RunConfig
    run_dir: Path
    task: Task
    swarm: Swarm
    transport: Transport
    logger: MetricsLogger
    start_round: int = 0
    held_records: list[dict] = field(default_factory=list)  # the main's round records held for late reporters' (records.py)
    owns_dir: bool = True  # this process holds run_dir's lock as the main's writer (training/main_dir.py)


def build_run(cfg: RunConfig, run_dir: Path | None = None) -> Run:
    """Set up a run: seed, threads, transport, run dir, task, swarm, metrics logger. An ``eval.n_prompts``
    over the task's validation prompts is one warning line naming both numbers (the evaluations use them all).

    A new run's directory is named once for every process (the transport agrees on the name). A new run on the
    default schedule runs, and records, ``schedule: clock`` with ``round_s: auto``
    (:func:`dgrpo.swarm.clockconfig.resolved`; a resume on it is refused there in one line).
    """
    cfg = resolved(cfg, run_dir)  # (swarm.transport=distributed, swarm.protocol.schedule unset: the clock)
    prepare(cfg)
    fresh = run_dir is None
    transport = build_transport(cfg, resuming=not fresh)
    if fresh:  # (named once for every process: ranks start at different seconds)
        name = cfg.name or agreed_name(cfg, transport, transport.agree("name", run_name(cfg)))  # (checked: H8)
        run_dir = new_run_dir(cfg, transport, name)  # (a refusal is said to the peers: J4)
    elif transport.is_main:
        claim(run_dir)  # a resumed run: no second process may resume or run it at the same time
    try:
        task = build_task(cfg)
        if transport.is_main and cfg.eval.n_prompts > len(task.val):  # (the evaluations cut it: say so once)
            log.warning("eval.n_prompts=%d but the task has only %d validation prompts: each evaluation uses those %d",
                        cfg.eval.n_prompts, len(task.val), len(task.val))
        swarm = build_swarm(cfg, task, transport.local_nodes)
        swarm.protocol = build_protocol(cfg, task, transport, run_dir)
        if cfg.swarm.protocol.round_s == "auto":  # (clocked rounds: this rank's round_s, timed here, agreed at the check)
            transport.round_estimate = auto_round_s(cfg, swarm, task)
        # distributed: ranks sign what they run with; every transport: messages are signed for this launch only
        swarm.protocol.bind_launch(transport.check_startup(swarm.protocol, cfg.swarm.startup_timeout_s))
    except BaseException as err:
        # nothing was run: leave no empty run directory, unless peers in other processes may go on in it (ranks
        # on one machine share it: a rank whose start-up check failed must not delete the survivors' folder). A
        # start-up stop (PeerFailure) stops every rank (they start together or not at all): a folder this process
        # made holding its config alone goes (drop_unused)
        alone = len(transport.local_nodes) == cfg.swarm.nodes
        if fresh and alone and not (run_dir / "metrics.jsonl").exists():
            shutil.rmtree(run_dir, ignore_errors=True)
        if fresh and isinstance(err, PeerFailure):
            drop_unused(run_dir)
        release(run_dir)
        raise
    if fresh and transport.is_main:  # the roster history (a resume records its own start: training.resume)
        record_roster(run_dir, transport.first_round)
    transport.labels = swarm.labels  # simulation ground truth travels beside the messages (metrics only)
    # Signed headers let a transport that can show peers different payloads prove equivocation.
    transport.verifier = swarm.protocol.verifier if cfg.swarm.protocol.sign else None
    # a node joining a running swarm (hivemind) starts at its round
    return Run(cfg, run_dir, task, swarm, transport, MetricsLogger.for_run(run_dir, cfg, transport.is_main), transport.first_round,
               owns_dir=transport.is_main)
