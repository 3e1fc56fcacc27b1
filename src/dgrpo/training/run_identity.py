"""Which run a checkpoint belongs to: the config that decides the run's trajectory, its hash, the seed
and the round the checkpoint holds, recorded in every checkpoint state (under the state's own
checksum, :mod:`dgrpo.training.durable`) and compared at every resume.

What a resume may change is left out of the hash: ``rounds`` (to extend a run), where and how the run
is written and tracked (``out_dir``, ``name``, ``threads``, ``checkpoint_every``, ``tensorboard``,
``tracking``), the device, and how the nodes reach each other (``swarm.transport``, timeouts, the
hivemind addresses, where a node keeps its key): a node may resume a peer's copy on another machine.
``name`` and ``out_dir`` are recorded beside the hash and may not change either (:func:`check_place`:
the name is part of the signing context); a copy of the folder keeps both in its config.yaml.
Everything else — seed, model, task, sampling, the GRPO update, the swarm's shape, attack, defenses,
evaluation — is this run's and only this run's.

:func:`check_root_state` checks the swarm's own ``checkpoint/state.json`` against its nodes' states (at a
resume's first check and when a checkpoint loads).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from dgrpo.errors import CheckpointError
from dgrpo.training.durable import check_seal
from dgrpo.training.run_files import check_run_files

RESUMABLE = ("rounds", "out_dir", "name", "threads", "checkpoint_every", "tensorboard", "tracking")
RESUMABLE_SWARM = ("transport", "timeout_s", "startup_timeout_s", "on_peer_failure", "backend", "hivemind")


def trajectory(config: dict) -> dict:
    """The fields of a resolved config (``RunConfig.model_dump(mode="json")``) that decide what the
    run computes: all but the resumable ones above."""
    data = json.loads(json.dumps(config))  # (a deep copy)
    for key in RESUMABLE:
        data.pop(key, None)
    for model in [data.get("model")] + list((data.get("swarm") or {}).get("models") or []):
        if isinstance(model, dict):
            model.pop("device", None)
    swarm = data.get("swarm") or {}
    for key in RESUMABLE_SWARM:
        swarm.pop(key, None)
    for key in ("key_dir", "roster"):
        (swarm.get("protocol") or {}).pop(key, None)
    if (swarm.get("protocol") or {}).get("schedule") == "relative":  # (written since the clocked default, task
        swarm["protocol"].pop("schedule")  # h31d; left out before: one run, one hash, whichever way it was saved)
    return data


def data_digests(config: dict) -> dict[str, str | None]:
    """SHA-256 (hex) of each data file the task reads (``task.<field>`` ending in ``path``, read from the
    working directory as the run reads it); None for a file that is not there. A config names its files by
    path, so the same config resumed from another folder could read other files under the same names."""
    out = {}
    for key, value in sorted((config.get("task") or {}).items()):
        if key.endswith("path") and isinstance(value, str) and value:
            try:
                out[f"task.{key}"] = hashlib.sha256(Path(value).read_bytes()).hexdigest()
            except OSError:
                out[f"task.{key}"] = None
    return out


def identity(config: dict, next_round: int) -> dict:
    """What a checkpoint records of its run: the trajectory config, its hash, the seed and the round,
    the digests of the task's data files (:func:`data_digests`), and (outside the hash, checked by
    :func:`check_place`) the run's ``name`` and ``out_dir``."""
    data = trajectory(config)
    return {"config_sha256": hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest(),
            "seed": config.get("seed"), "round": next_round, "config": data, "data": data_digests(config),
            "name": config.get("name"), "out_dir": config.get("out_dir")}


def check_place(path: Path, config: dict, run_dir: Path) -> None:
    """Refuse a resume whose ``config.yaml`` gives another ``name`` or ``out_dir`` than the run had when
    the checkpoint state ``path`` (already checked by :func:`read_state`) was saved: the name is part of
    the context every message is signed for, and both say which run the folder holds. A copy of the
    folder keeps both (its config.yaml is copied too), so it resumes. A state saved before dgrpo
    recorded them is not checked.

    Raises:
        CheckpointError: one line naming the field, both values and the fix.
    """
    saved = json.loads(path.read_text()).get("run")
    for key in ("name", "out_dir"):
        if isinstance(saved, dict) and key in saved and saved[key] != config.get(key):
            raise CheckpointError(f"{key}: {run_dir}/config.yaml says {config.get(key)!r}, but the checkpoint {path} was "
                                  f"saved by the run with {key} {saved[key]!r} (config.yaml edited after the save); a run "
                                  f"keeps its {key}: put `{key}: {saved[key]}` back in config.yaml (copy the folder to "
                                  "continue the run elsewhere)")


def _flat(data, prefix: str = "") -> dict:
    if isinstance(data, dict):
        return {k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    if isinstance(data, list) and data and all(isinstance(v, dict) for v in data):
        return {k: v for i, value in enumerate(data) for k, v in _flat(value, f"{prefix}{i}.").items()}
    return {prefix[:-1]: data}


def node_identity(config: dict, node: int) -> dict:
    """What a node's checkpoint records of its node (sealed with its state and file checksums): its
    index and the name of the model the config gives it (``swarm.models[node].name``, else ``model.name``)."""
    models = (config.get("swarm") or {}).get("models")
    model = models[node] if isinstance(models, list) and 0 <= node < len(models) else config.get("model")
    return {"node": node, "model": (model or {}).get("name") if isinstance(model, dict) else None}


def check_node(path: Path, state: dict, config: dict) -> None:
    """Refuse a ``node{k}/state.json`` that records another node than k, or another model than the one
    ``config`` gives node k: a node folder swapped with or copied over another's.

    Raises:
        CheckpointError: one line naming the folder, the node and model it holds, and the fix.
    """
    match = re.fullmatch(r"node(\d+)", path.parent.name)
    if match is None:
        return
    want, held = node_identity(config, int(match[1])), {k: state.get(k) for k in ("node", "model")}
    if held != want:
        raise CheckpointError(f"{path.parent}: holds the checkpoint of node {held['node']!r} (model {held['model']!r}), "
                              f"not of node {want['node']} (model {want['model']!r}): a node folder was swapped with or "
                              "copied over another's; restore the checkpoint as saved, or start a new run")


def check_identity(path: Path, saved, config: dict, next_round: int) -> None:
    """Refuse a checkpoint state of another run, or one whose round is not the one it records.

    Args:
        path: the state file (named in the error).
        saved: its ``run`` record (:func:`identity` at the save).
        config: the resuming run's resolved config.
        next_round: the round the state says it holds.

    Raises:
        CheckpointError: no identity recorded, another seed or config (the differing fields named), a
            round that is not the recorded one, or a task data file whose content is not the one recorded.
    """
    if not (isinstance(saved, dict) and isinstance(saved.get("config"), dict) and isinstance(saved.get("config_sha256"), str)):
        raise CheckpointError(f"{path}: records no run identity (written by an older dgrpo); it cannot be tied to this run")
    if saved.get("round") != next_round:
        raise CheckpointError(f"{path}: holds round {next_round} but recorded round {saved.get('round')!r} at the save; "
                              "the state was edited: restore it, or resume from another checkpoint")
    now = identity(config, next_round)
    if now["config_sha256"] == saved["config_sha256"] and now["seed"] == saved.get("seed"):
        _check_data(path, saved.get("data"), now["data"], config)
        return
    before, after = _flat(saved["config"]), _flat(now["config"])
    for flat in (before, after):  # (trajectory leaves relative out of the hash: name it as the user wrote it)
        if any(k.startswith("swarm.protocol.") for k in flat):
            flat.setdefault("swarm.protocol.schedule", "relative")
    diff = [f"{k}: {before.get(k, '(unset)')!r} at the save, {after.get(k, '(unset)')!r} now"
            for k in sorted(before.keys() | after.keys()) if before.get(k, "(unset)") != after.get(k, "(unset)")]
    raise CheckpointError(f"{path}: saved by another run ({'; '.join(diff[:4]) or 'another config'}"
                          f"{f'; {len(diff) - 4} more' if len(diff) > 4 else ''}): resume it with the config it was saved "
                          "with (its config.yaml), or start a new run")


def _check_data(path: Path, saved, now: dict, config: dict) -> None:
    """Refuse a resume whose task data files differ from those the run read (a state saved before dgrpo
    recorded them is not checked)."""
    if not isinstance(saved, dict):
        return
    for field, digest in saved.items():
        if now.get(field) != digest:
            value = (config.get("task") or {}).get(field.removeprefix("task."))
            what = ("is not there" if now.get(field) is None else
                    f"holds other content than the run read (sha256 {str(digest)[:12]}… when {path} was saved)")
            raise CheckpointError(f"{field}: {value!r}, read from {Path.cwd()}, {what}: resume from the folder the "
                                  f"run started in, or set {field} to the file the run read")


def read_state(path: Path, rounds: int | None = None, config: dict | None = None, run_dir: Path | None = None) -> dict:
    """A checkpoint's sealed ``state.json``: an object whose ``next_round`` is an integer in
    0..``rounds`` and, with ``config`` (the resuming run's resolved config), whose run identity is
    that config's; with ``run_dir`` too, whose run folder holds the files it was saved with
    (:mod:`dgrpo.training.run_files`: metrics, bans, drift references, model files). Reads no tensor:
    ``dgrpo resume`` checks every state before any model loads.

    Raises:
        CheckpointError: it is not (names the file): missing, unreadable, edited after the save, of
            another run, holding more rounds than ``rounds`` asks for, or bound to run files that changed.
    """
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing; the checkpoint is incomplete, resume from another copy") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, OSError):
        state = None
    if not isinstance(state, dict) or type(state.get("next_round")) is not int:
        raise CheckpointError(f"{path}: not a checkpoint state (a JSON object with an integer 'next_round')")
    check_seal(path, state)
    held = state["next_round"]
    if held < 0:
        raise CheckpointError(f"{path}: next_round={held} is negative; the file is damaged")
    if rounds is not None and held > rounds:
        raise CheckpointError(f"{path}: the checkpoint holds round {held}, past rounds={rounds}: a run cannot be "
                              f"shortened; resume with rounds of at least {held} (more extends it), or start a new run")
    if config is not None:
        check_identity(path, state.get("run"), config, held)
        check_node(path, state, config)
        if run_dir is not None:
            check_run_files(path, state["run"].get("run_files"), run_dir, held, config)
    return state


def check_root_state(root: Path, rounds: int, config: dict, run_dir: Path, held: dict) -> int:
    """Check ``root/state.json`` (the swarm's round, sealed and bound like a node's state) against the
    rounds ``held`` by the node states beside it, and return its round. The nodes are swapped in
    before it at a save, so a crash between the two leaves it one save behind: that is accepted (its
    seal and run are checked, the run files are the nodes'); ahead of the nodes, or of another round
    among them, it was replaced or edited.

    Raises:
        CheckpointError: names the states and their rounds.
    """
    nodes = set(held.values())
    state = read_state(root / "state.json", rounds, config, None if nodes and max(nodes) > _round(root) else run_dir)
    if len(nodes) > 1 or (nodes and state["next_round"] > max(nodes)):
        every = {**{p.relative_to(root): r for p, r in held.items()}, "state.json": state["next_round"]}
        raise CheckpointError(f"the checkpoint states under {root} hold different rounds "
                              f"({', '.join(f'{p}: {r}' for p, r in every.items())}): one was replaced or edited; "
                              "restore the checkpoint as saved, or start a new run")
    return state["next_round"]


def _round(root: Path) -> int:
    try:
        return int(json.loads((root / "state.json").read_text()).get("next_round"))
    except (ValueError, TypeError, AttributeError, OSError):
        return -1  # (read_state names what is wrong with it)
