"""Joining the torch.distributed process group torchrun describes, and what the ranks must agree on.

Used by :mod:`dgrpo.transports.distributed` (one node per rank); every failure is a one-line
:class:`~dgrpo.errors.ConfigError` (a launch mistake) or :class:`~dgrpo.errors.PeerFailure` (the
store's host or a peer is unreachable or died), never a traceback.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from typing import TYPE_CHECKING

from dgrpo.errors import ConfigError, PeerFailure
from dgrpo.registry import LazyModule

if TYPE_CHECKING:
    from dgrpo.config import RunConfig

torch = LazyModule("torch")  # imported on first use: a config naming this transport imports this module
dist = LazyModule("torch.distributed")


def _seconds(s: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(s, 0.001))


def config_fingerprint(cfg: "RunConfig") -> str:
    """Hash of everything that must match across nodes: not the run folder, threads, trackers, nor a
    node's own addresses and key folder (messages are signed for it: dgrpo.swarm.identity)."""
    from dgrpo.transports.dht.config import PER_NODE_FIELDS

    data = cfg.model_dump(mode="json", exclude={"out_dir", "threads", "tensorboard", "tracking"})
    for field in PER_NODE_FIELDS:  # a hivemind node's own addresses and identity
        data["swarm"]["hivemind"].pop(field, None)
    data["swarm"]["protocol"].pop("key_dir", None)  # where this node keeps its private key
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def pick_backend(choice: str) -> str:
    """``auto``: NCCL when every local rank has its own GPU, else gloo."""
    if choice != "auto":
        return choice
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= local_world else "gloo"


def join_group(cfg: "RunConfig"):
    """Rendezvous through torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and
    initialise the process group (gloo, or NCCL with ``cuda:$LOCAL_RANK``).

    Returns:
        (store, rank, world size, backend name).

    Raises:
        ConfigError: not launched by torchrun, or world size ≠ ``swarm.nodes``.
        PeerFailure: the store is unreachable within ``swarm.startup_timeout_s``, or its host or a
            peer died while the group was set up.
    """
    sw = cfg.swarm
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise ConfigError(f"swarm.transport=distributed needs torchrun ({', '.join(missing)} unset): launch with "
                          f"`torchrun --nproc-per-node {sw.nodes} -m dgrpo run swarm.transport=distributed ...`")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != sw.nodes:
        raise ConfigError(f"swarm.nodes={sw.nodes} but {world} processes were launched (WORLD_SIZE): the distributed "
                          f"swarm runs one node per rank, so launch nproc-per-node × nnodes = {sw.nodes}")
    startup = _seconds(sw.startup_timeout_s)
    try:
        store, _, _ = next(dist.rendezvous("env://", rank, world, timeout=startup))
    except (dist.DistError, RuntimeError, ValueError) as err:  # (unreachable, refused, or timed out)
        raise PeerFailure(f"node {rank} cannot reach the rendezvous store at {os.environ['MASTER_ADDR']}:"
                          f"{os.environ['MASTER_PORT']} within swarm.startup_timeout_s={sw.startup_timeout_s:g}s "
                          f"({' '.join(str(err).split())[:160]})") from err
    backend = pick_backend(sw.backend)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        try:
            dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=rank, world_size=world,
                                    timeout=startup)
        except dist.DistError as err:  # the store's host or a peer died during the group's set-up
            raise PeerFailure(f"node {rank} lost the rendezvous store or a peer while joining the process group: "
                              f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}") from err
    return store, rank, world, backend
