"""Checkpoints: weights (safetensors), optimizer state, RNG states, the round to resume from and the
run they belong to.

Layout under ``run_dir/checkpoint``:

    node{k}/         one per trained policy this process hosts, k = the lowest node id holding it
                     (weights, config and tokenizer as ``save_pretrained`` lays them out, so the folder
                     is also a loadable model),
                     ``optimizer.pt`` (AdamW state) and ``state.json`` (next round, RNG states, the
                     SHA-256 of every other file of the folder, the run's identity, the node k and its
                     model name (run_identity.node_identity), and its own checksum)
    state.json       {"next_round": r, "run": identity} (sealed)
    replay_memory.json   last round's messages, for an attacker that re-sends them (replay_memory.py)

Every rank of a distributed swarm saves its own node (an attacker rank: the weights it mirrors). Each folder is written to a temporary name, every
file and the folder are fsynced, and then the old folder is swapped out (renamed ``.node{k}.old…``)
and the new one renamed in, so a crash never leaves a half-written node; a crash between the two
renames leaves the old copy, which :func:`load_checkpoint` renames back. A disk that fills during a
save is one :class:`CheckpointError` line naming the folder and the space to free; the temporary copy
is removed and the previous checkpoint stays as it was.

On load every state file's own checksum and every file's checksum are checked (a hand edit of
``next_round`` is refused, :mod:`dgrpo.training.durable`), the run identity must be the resuming
run's (seed, config, round: :mod:`dgrpo.training.run_identity`), a node folder must hold its own node's, ``next_round`` must lie in
0..rounds, the optimizer state must fit the parameters and the RNG states must be well formed;
anything else is a :class:`CheckpointError` naming the file. Nodes that disagree on the round are refused.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from dgrpo.config import read_config_file
from dgrpo.defenses.base import restore_counters, saved_counters
from dgrpo.errors import CheckpointError
from dgrpo.training import rng_state
from dgrpo.training.durable import (disk_full_error, folder_bytes, free_bytes, fsync, is_disk_full, seal, sha256,
                                    write_state)
from dgrpo.training.replay_memory import REPLAY_MEMORY, load_replay_memory, replay_memory_state
from dgrpo.training.main_dir import main_dir
from dgrpo.training.run_files import run_files
from dgrpo.training.run_identity import check_root_state, identity, node_identity, read_state

__all__ = ["load_checkpoint", "load_state_folder", "read_state", "save_checkpoint", "save_state_folder", "sha256", "write_state"]


def save_weights(model: torch.nn.Module, folder: Path) -> None:
    """``model.safetensors`` (tied weights once, as ``save_pretrained`` stores them) plus the configs.

    Not ``save_pretrained``: once torch.distributed is initialised it writes weights on rank 0 only,
    but every swarm node holds its own model.
    """
    seen, state = set(), {}
    for name, tensor in model.state_dict().items():  # (the embedding comes before the tied lm_head)
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            state[name] = tensor.detach().contiguous().cpu()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(folder)
    if model.generation_config is not None:  # (None for a model that does not generate)
        model.generation_config.save_pretrained(folder)


def _write_folder(tmp: Path, write, state: dict) -> None:
    """A checkpoint folder at ``tmp``: ``write(tmp)`` puts its files there, then ``state.json`` records
    every file's checksum and ``state`` (sealed); each file and the folder are fsynced."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write(tmp)
    files = {p.name: sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
    (tmp / "state.json").write_text(json.dumps(seal({**state, "files": files})))
    for p in tmp.iterdir():
        fsync(p)
    fsync(tmp)


def _write_node(tmp: Path, policy, optimizer) -> None:
    """One node's files: weights and configs, tokenizer, optimizer state."""
    save_weights(policy.model, tmp)
    policy.tokenizer.save_pretrained(tmp)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")


def _model_bytes(model: torch.nn.Module) -> int:
    """Weights plus AdamW's two moments of the trainable ones, bytes (a node folder's size before one exists)."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return weights + 2 * sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def _stage_state(path: Path, data: dict | None) -> Path | None:
    """``data`` sealed at a temporary name beside ``path`` (renamed over it by the save), or None."""
    if data is None:
        return None
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(seal(data)))
    fsync(tmp)
    return tmp


def save_checkpoint(run, next_round: int) -> Path:
    """Save every trained policy this process hosts under ``run_dir/checkpoint`` (layout above).

    Every node, the replay memory and the root ``state.json`` are written and fsynced under temporary
    names first; then each node is swapped in (old folder renamed aside, new one renamed in, the root
    fsynced) and the two files renamed over theirs; the old folders go last.

    Raises:
        CheckpointError: the disk filled during the save (names the folder and the space to free;
            nothing of the previous checkpoint was touched).
    """
    main = main_dir(run) is not None  # (first: a new main that holds no run folder saves in its own)
    root = Path(run.run_dir) / "checkpoint"
    root.mkdir(parents=True, exist_ok=True)
    previous = (root / "state.json").exists() or any(root.glob("node*/state.json"))  # (else: the first save)
    rng, pid, owners = rng_state.capture(), os.getpid(), run.swarm.trained
    config = run.cfg.model_dump(mode="json")
    state = {"next_round": next_round, "rng": rng,
             "run": {**identity(config, next_round), "run_files": run_files(run.run_dir, next_round, config, main)}}
    staged: list[Path | None] = []
    try:
        for owner, policy in owners.items():
            _write_folder(root / f".node{owner}.tmp{pid}",
                          lambda tmp: _write_node(tmp, policy, run.swarm.learners[policy].optimizer),
                          {**state, **node_identity(config, owner),
                           "defense_counters": saved_counters(run.swarm.defenses.get(owner, []))})
        staged = [_stage_state(root / REPLAY_MEMORY, replay_memory_state(run, next_round)),
                  _stage_state(root / "state.json", {"next_round": next_round, "run": state["run"]})]
    except Exception as err:
        needed = sum(folder_bytes(root / f"node{o}") or _model_bytes(p.model) for o, p in owners.items()) + (1 << 20)
        full = is_disk_full(err) or free_bytes(root) < needed  # (torch's writer words ENOSPC in its own ways)
        for leftover in [*(root / f".node{owner}.tmp{pid}" for owner in owners), *filter(None, staged)]:
            shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
        if full:
            raise disk_full_error(root, needed, previous) from None
        raise
    fsync(root)
    for owner in owners:
        target, old = root / f"node{owner}", root / f".node{owner}.old{pid}"
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.rename(target, old)
        os.rename(root / f".node{owner}.tmp{pid}", target)
        fsync(root)
    replay, root_state = staged
    if replay is None:
        (root / REPLAY_MEMORY).unlink(missing_ok=True)
    else:
        os.replace(replay, root / REPLAY_MEMORY)
    os.replace(root_state, root / "state.json")
    fsync(root)
    for owner in owners:
        for stale in root.glob(f".node{owner}.old*"):
            shutil.rmtree(stale, ignore_errors=True)
        for stale in root.glob(f".node{owner}.tmp*"):  # a save killed before its swap (this or another process)
            shutil.rmtree(stale, ignore_errors=True)
    return root


def recover_swaps(root: Path) -> list[Path]:
    """Rename back the old copy of every node a crash left between the two renames of a swap
    (``node{k}`` missing, ``.node{k}.old…`` complete); returns the folders recovered."""
    recovered = []
    for old in sorted(root.glob(".node*.old*"), key=lambda p: p.stat().st_mtime, reverse=True):
        target = root / old.name[1:].split(".old", 1)[0]
        if not target.exists() and (old / "state.json").is_file():
            try:
                os.rename(old, target)
            except OSError:  # another rank of the same file system got there first
                continue
            recovered.append(target)
    if recovered:
        fsync(root)
    return recovered


def _node_dir(root: Path, node: int, homogeneous: bool) -> Path:
    """The folder a node resumes from: its own, or in a homogeneous swarm any node's (equal weights)."""
    own = root / f"node{node}"
    if own.is_dir():
        return own
    others = sorted(root.glob("node*"), key=lambda p: int(p.name[4:]) if p.name[4:].isdigit() else 1 << 30)
    if homogeneous and others:
        return others[0]
    raise FileNotFoundError(f"no checkpoint of node {node} under {root}")


def load_weights(model: torch.nn.Module, folder: Path) -> None:
    """Load ``save_pretrained`` safetensors (all shards) into ``model`` in place.

    Raises:
        ValueError: the files hold unknown tensors or miss one that is not tied to a loaded one.
    """
    state: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        state.update(load_file(f))
    missing, unexpected = model.load_state_dict(state, strict=False)
    own = model.state_dict()
    loaded = {own[k].data_ptr() for k in state if k in own}
    untied = [k for k in missing if own[k].data_ptr() not in loaded]  # tied weights (lm_head) come along
    if unexpected or untied:
        raise ValueError(f"checkpoint {folder} does not fit the model: unexpected {unexpected[:5]}, missing {untied[:5]}")


def _check_files(folder: Path, state: dict, required: str | None = "optimizer.pt") -> None:
    """Every file the state lists is there with its recorded SHA-256, and the weights and optimizer
    files are all listed.

    Raises:
        CheckpointError: names the first file missing, changed or unlisted.
    """
    files = state.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise CheckpointError(f"{folder / 'state.json'}: no file checksums recorded (a damaged state, or saved by an older "
                              "dgrpo); the checkpoint cannot be verified")
    for name, digest in files.items():
        path = folder / name
        if "/" in name or not path.is_file():
            raise CheckpointError(f"{path}: missing from the checkpoint (state.json lists it)")
        if sha256(path) != digest:
            raise CheckpointError(f"{path}: checksum differs from the one recorded at the save (damaged or changed); "
                                  "restore it or resume from another checkpoint")
    unlisted = sorted(p.name for p in folder.iterdir() if p.suffix in (".safetensors", ".pt") and p.name not in files)
    if unlisted or (required and required not in files):
        raise CheckpointError(f"{folder / (unlisted[0] if unlisted else required)}: "
                              f"{'not recorded at the save' if unlisted else 'not recorded'}; the checkpoint is not one dgrpo wrote")


def _load_optimizer(optimizer: torch.optim.Optimizer, path: Path) -> None:
    """Load AdamW state from ``path`` after checking it fits ``optimizer``'s parameters.

    Raises:
        CheckpointError: unreadable, or groups, parameters or moment shapes that do not fit (names the file).
    """
    try:
        saved = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # (pickle, zip and tensor errors of every kind: a damaged file)
        raise CheckpointError(f"{path}: not a readable optimizer state ({type(err).__name__})") from None
    params = [p for g in optimizer.param_groups for p in g["params"]]
    groups = saved.get("param_groups") if isinstance(saved, dict) else None
    state = saved.get("state") if isinstance(saved, dict) else None
    if not isinstance(groups, list) or not isinstance(state, dict) or len(groups) != len(optimizer.param_groups) \
            or sum(len(g.get("params", [])) if isinstance(g, dict) else -1 for g in groups) != len(params):
        raise CheckpointError(f"{path}: the optimizer state does not fit this model ({len(params)} parameters)")
    for i, moments in state.items():
        if not (isinstance(i, int) and 0 <= i < len(params) and isinstance(moments, dict)):
            raise CheckpointError(f"{path}: optimizer state of an unknown parameter {i!r}")
        for key, value in moments.items():
            if not isinstance(value, torch.Tensor) or (key != "step" and value.shape != params[i].shape):
                raise CheckpointError(f"{path}: optimizer {key} of parameter {i} has shape "
                                      f"{tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__}, "
                                      f"the model's is {tuple(params[i].shape)}")
    try:
        optimizer.load_state_dict(saved)
    except (ValueError, KeyError, TypeError, RuntimeError) as err:
        raise CheckpointError(f"{path}: the optimizer state does not fit ({' '.join(str(err).split())[:200]})") from None


def load_checkpoint(run) -> int:
    """Restore weights, optimizer, RNG states and defense counters of every trained policy this process hosts.

    An interrupted swap is recovered first (:func:`recover_swaps`).

    Returns:
        The round to resume from.

    Raises:
        FileNotFoundError: no checkpoint for a hosted node.
        CheckpointError: a damaged, edited, foreign or mismatched file (named): a state's own checksum,
            a file's checksum, another run's identity, weights of other shapes, optimizer state, RNG
            states, ``next_round`` past rounds, or hosted nodes' checkpoints holding different rounds.
    """
    root = Path(run.run_dir) / "checkpoint"
    recover_swaps(root)
    homogeneous, config = run.cfg.swarm.models is None, run.cfg.model_dump(mode="json")
    rounds, rng = {}, None
    for owner, policy in run.swarm.trained.items():
        folder = _node_dir(root, owner, homogeneous)
        state = read_state(folder / "state.json", run.cfg.rounds, config, run.run_dir)
        _check_files(folder, state)
        rng_state.check(state.get("rng"), folder / "state.json")
        try:
            load_weights(policy.model, folder)
        except (ValueError, RuntimeError, SafetensorError, OSError) as err:
            raise CheckpointError(f"{folder / 'model.safetensors'}: does not fit the model "
                                  f"({' '.join(str(err).split())[:200]}); resume with the run's own model.name") from None
        _load_optimizer(run.swarm.learners[policy].optimizer, folder / "optimizer.pt")
        if folder.name == f"node{owner}":  # (not another node's folder: its counters are its own)
            restore_counters(run.swarm.defenses.get(owner, []), state.get("defense_counters"), folder / "state.json")
        rounds[owner], rng = state["next_round"], rng or state.get("rng")
    if len(set(rounds.values())) > 1:
        raise CheckpointError(f"checkpoints under {root} hold different rounds: {rounds}")
    if not rounds:  # nothing trained here (a heterogeneous attacker): the swarm's round
        rounds[-1] = read_state(root / "state.json", run.cfg.rounds, config, run.run_dir)["next_round"]
    elif (root / "state.json").exists():  # (bound like a node's; one save behind after a crash between the two)
        check_root_state(root, run.cfg.rounds, config, run.run_dir, {folder / "state.json": r for folder, r in zip(
            [_node_dir(root, o, homogeneous) for o in rounds], rounds.values())})
    if len(set(rounds.values())) > 1:
        raise CheckpointError(f"checkpoints under {root} hold different rounds: {rounds}")
    if rng is not None:
        rng_state.restore(rng)
    load_replay_memory(root, run, next(iter(rounds.values())))
    return next(iter(rounds.values()))


def _run_config(root: Path) -> dict | None:
    """The resolved config a run folder holds (``root.parent/config.yaml``), or None without one."""
    path = root.parent / "config.yaml"
    return read_config_file(path) if path.is_file() else None


def save_state_folder(root: Path, tensors: dict[str, torch.Tensor], optimizers: dict[str, torch.optim.Optimizer],
                      next_round: int, config: dict | None = None) -> Path:
    """A checkpoint of a run that is not a swarm of policies (federated): ``root/state/`` holds
    ``tensors.safetensors`` (named tensors, e.g. the trainable parameters), ``{name}.pt`` per optimizer
    and ``state.json`` (next round, RNG states, checksums, the run identity of ``config``, else of the
    run's ``config.yaml`` beside ``root``, and the run files of ``root.parent`` as a node's state binds
    them: :mod:`dgrpo.training.run_files`); written, fsynced and swapped in like a node.

    Raises:
        CheckpointError: the disk filled during the save (as :func:`save_checkpoint`).
    """
    root.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    tmp, target, old = root / f".state.tmp{pid}", root / "state", root / f".state.old{pid}"
    config = config if config is not None else _run_config(root) or {}
    bound = {**identity(config, next_round), "run_files": run_files(root.parent, next_round, config, True)}  # (as a node's)

    def write(folder: Path) -> None:
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(folder / "tensors.safetensors"))
        for name, opt in optimizers.items():
            torch.save(opt.state_dict(), folder / f"{name}.pt")

    try:
        _write_folder(tmp, write, {"next_round": next_round, "rng": rng_state.capture(), "run": bound})
    except Exception as err:
        needed = (folder_bytes(target) or 3 * sum(t.numel() * t.element_size() for t in tensors.values())) + (1 << 20)
        full = is_disk_full(err) or free_bytes(root) < needed
        shutil.rmtree(tmp, ignore_errors=True)
        if full:
            raise disk_full_error(root, needed, target.exists() or old.exists()) from None
        raise
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.rename(target, old)
    os.rename(tmp, target)
    fsync(root)
    for stale in (*root.glob(".state.old*"), *root.glob(".state.tmp*")):
        shutil.rmtree(stale, ignore_errors=True)
    return target


def load_state_folder(root: Path, rounds: int, optimizers: dict[str, torch.optim.Optimizer],
                      config: dict | None = None) -> tuple[int, dict]:
    """Check and load what :func:`save_state_folder` wrote: load the optimizers in place, restore the
    RNG states, and return (next round, the named tensors). The run identity is checked against
    ``config``, else the run's ``config.yaml`` beside ``root``, and the run files of ``root.parent``
    against those the save recorded.

    Raises:
        CheckpointError: a damaged, edited, foreign or mismatched file (named), as for a swarm's node.
    """
    recover_swaps_of(root, "state")
    folder = root / "state"
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: missing; the run stopped before its first save")
    state = read_state(folder / "state.json", rounds, config if config is not None else _run_config(root) or {}, root.parent)
    _check_files(folder, state, "tensors.safetensors")
    rng_state.check(state.get("rng"), folder / "state.json")
    try:
        tensors = load_file(folder / "tensors.safetensors")
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{folder / 'tensors.safetensors'}: not readable ({err})") from None
    for name, opt in optimizers.items():
        _load_optimizer(opt, folder / f"{name}.pt")
    rng_state.restore(state["rng"])
    return state["next_round"], tensors


def recover_swaps_of(root: Path, name: str) -> None:
    """:func:`recover_swaps` for a folder ``root/name`` (its old copy ``.{name}.old…``)."""
    if not (root / name).exists():
        for old in sorted(root.glob(f".{name}.old*"), key=lambda p: p.stat().st_mtime, reverse=True):
            if (old / "state.json").is_file():
                os.rename(old, root / name)
                fsync(root)
                return
