"""What the nodes of one run must agree on, as one fingerprint, whatever the transport.

Every node computes :func:`config_fingerprint` of its own config: the hivemind launch compares them
(:mod:`dgrpo.transports.dht.launch`), the distributed transport gathers and compares them at start,
and every run signs its messages for a context that includes it (:func:`dgrpo.swarm.identity.run_context`,
``training/build.py``), in process too. So a node that runs another config is named before round 0,
and a message signed under other settings does not verify.

Left out, because each node may set them for itself (:data:`PER_NODE`): the run folder, threads,
TensorBoard and trackers, a hivemind node's own id, addresses, identity folder and roster path
(:data:`~dgrpo.transports.dht.config.PER_NODE_FIELDS`; the roster's content is in instead), and
``swarm.protocol.key_dir`` (where this node keeps its private key; its public key is in the roster).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from dgrpo.transports.dht.config import PER_NODE_FIELDS

if TYPE_CHECKING:
    from dgrpo.config import RunConfig

# config fields each node sets for itself, as (section path, field); the hivemind ones are PER_NODE_FIELDS
PER_NODE: tuple[tuple[str, ...], ...] = (("out_dir",), ("threads",), ("tensorboard",), ("tracking",),
                                         ("swarm", "protocol", "key_dir"),
                                         *(("swarm", "hivemind", f) for f in PER_NODE_FIELDS))


def agreed_settings(cfg: "RunConfig") -> dict:
    """The settings every node of the run must share: the config as JSON without :data:`PER_NODE`, and
    with ``roster`` the content (node id → public key) of ``swarm.hivemind.roster`` when set.

    Raises:
        ValueError: ``swarm.hivemind.roster`` is unreadable (names the file).
    """
    data = cfg.model_dump(mode="json")
    for *path, name in PER_NODE:
        section = data
        for key in path:
            section = section[key]
        section.pop(name, None)
    if cfg.swarm.hivemind.roster:
        from dgrpo.transports.dht.records import load_roster  # (hivemind's; only a hivemind run names one)

        data["roster"] = sorted(load_roster(cfg.swarm.hivemind.roster).items())
    return data


def config_fingerprint(cfg: "RunConfig") -> str:
    """The first 16 hex digits of the SHA-256 of :func:`agreed_settings` (keys sorted)."""
    return hashlib.sha256(json.dumps(agreed_settings(cfg), sort_keys=True).encode()).hexdigest()[:16]
