"""Checkpoints: weights (safetensors), optimizer state, RNG states and the round to resume from.

Layout under ``run_dir/checkpoint``:

    node{k}/         one per trained policy this process hosts, k = the lowest node id holding it
                     (weights, config and tokenizer as ``save_pretrained`` lays them out, so the folder
                     is also a loadable model),
                     ``optimizer.pt`` (AdamW state) and ``state.json`` (next round, RNG states)
    state.json       {"next_round": r}

In a distributed swarm every rank saves its own node (homogeneous honest ranks hold equal copies;
an attacker rank saves the weights it mirrors). Each folder is written to a temporary name and
renamed, so a crash never leaves a half-written node; ``node{k}/state.json`` says which round it
holds, and :func:`load_checkpoint` refuses nodes that disagree.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from dgrpo.errors import CheckpointError


def _rng_state() -> dict:
    """Python, numpy and torch RNG states as JSON (nothing here is ever unpickled)."""
    version, state, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(state), gauss], "numpy": [kind, keys.tolist(), pos, has_gauss, cached],
            "torch": torch.get_rng_state().tolist(),
            "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else []}


def _set_rng_state(s: dict) -> None:
    version, state, gauss = s["python"]
    random.setstate((version, tuple(state), gauss))
    kind, keys, pos, has_gauss, cached = s["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(s["torch"], dtype=torch.uint8))
    if s["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(c, dtype=torch.uint8) for c in s["cuda"]])


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)  # atomic: ranks sharing a file system may write the same file


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


def save_checkpoint(run, next_round: int) -> Path:
    """Save every trained policy this process hosts under ``run_dir/checkpoint`` (layout above)."""
    root = Path(run.run_dir) / "checkpoint"
    rng = _rng_state()
    for owner, policy in run.swarm.trained.items():
        target = root / f"node{owner}"
        tmp = root / f".node{owner}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_weights(policy.model, tmp)
        policy.tokenizer.save_pretrained(tmp)
        torch.save(run.swarm.learners[policy].optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps({"next_round": next_round, "rng": rng}))
        old = root / f".node{owner}.old{os.getpid()}"
        if target.exists():
            target.rename(old)
        tmp.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    _write_json(root / "state.json", {"next_round": next_round})
    return root


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


def _read_state(path: Path) -> dict:
    """A ``state.json``: an object with an integer ``next_round``.

    Raises:
        CheckpointError: it is not (names the file).
    """
    try:
        state = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        state = None
    if not isinstance(state, dict) or not isinstance(state.get("next_round"), int):
        raise CheckpointError(f"{path}: not a checkpoint state (a JSON object with an integer 'next_round')")
    return state


def load_checkpoint(run) -> int:
    """Restore weights, optimizer and RNG states of every trained policy this process hosts.

    Returns:
        The round to resume from.

    Raises:
        FileNotFoundError: no checkpoint for a hosted node.
        ValueError: hosted nodes' checkpoints hold different rounds.
        CheckpointError: a ``state.json`` is damaged.
    """
    root = Path(run.run_dir) / "checkpoint"
    homogeneous = run.cfg.swarm.models is None
    rounds, rng = {}, None
    for owner, policy in run.swarm.trained.items():
        folder = _node_dir(root, owner, homogeneous)
        load_weights(policy.model, folder)
        if (folder / "optimizer.pt").exists():
            run.swarm.learners[policy].optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=True))
        state = _read_state(folder / "state.json")
        rounds[owner], rng = state["next_round"], rng or state.get("rng")
    if not rounds:  # nothing trained here (a heterogeneous attacker): the swarm's round
        rounds[-1] = _read_state(root / "state.json")["next_round"]
    if len(set(rounds.values())) > 1:
        raise ValueError(f"checkpoints under {root} hold different rounds: {rounds}")
    if rng is not None:
        _set_rng_state(rng)
    return next(iter(rounds.values()))
