"""``swarm.hivemind``: settings of the hivemind DHT transport (``swarm.transport=hivemind``, docs/hivemind.md).

Light on purpose (pydantic only): the config is checked before hivemind or torch is imported.
"""

from __future__ import annotations

from pydantic import Field, NonNegativeInt, PositiveInt

from dgrpo.errors import ConfigError
from dgrpo.registry import StrictConfig

# Fields that differ from process to process; they are left out of the config check between peers.
PER_NODE_FIELDS = ("node", "listen", "announce", "initial_peers", "identity_dir", "roster")


class HivemindConfig(StrictConfig):
    node: NonNegativeInt | None = Field(None, description="This process's node id (0..m-1; one node per process). Required with swarm.transport=hivemind; differs per process.")
    listen: list[str] = Field(["/ip4/127.0.0.1/tcp/0"], description="Multiaddrs the DHT listens on. Across machines: /ip4/0.0.0.0/tcp/PORT with a fixed PORT that peers can reach (tcp/0 = any free port).")
    announce: list[str] = Field(default_factory=list, description="Multiaddrs announced to peers instead of the listening ones (a public address or forwarded port; explicit port).")
    initial_peers: list[str] = Field(default_factory=list, description="Bootstrap peers, /ip4/HOST/tcp/PORT/p2p/PEER_ID (each node logs its own at start); empty for the first node. Retried until swarm.startup_timeout_s.")
    identity_dir: str | None = Field(None, description="This node's keys: p2p.key (libp2p identity, hence a stable peer id) and signing.key (Ed25519, signs its records); created on first use. None = {out_dir}/.hivemind/node{node}.")
    roster: str | None = Field(None, description="JSON file {node id: Ed25519 public key hex} fixing every node's key before the run (`python -m dgrpo.transports.dht.records DIR` prints a node's key). None = each node's key is the one it announced at start (trust on first use).")
    join: dict[NonNegativeInt, PositiveInt] = Field(default_factory=dict, description="Heterogeneous swarms: node id → first round it writes (it joins later; earlier rounds neither wait for nor score it, and refuse its messages). Needs a roster naming it, fixed before the run: swarm.protocol.roster (`dgrpo keys`; or swarm.hivemind.roster with swarm.protocol.sign=false).")
    run_id: str | None = Field(None, description="Name space of the swarm's DHT keys: swarms that share a DHT (a common bootstrap peer) need different ones. None = `swarm`.")
    daemon_timeout_s: float = Field(60.0, gt=0, description="Seconds the p2p daemon may take to start (hivemind's own 15 s is often too short on a loaded machine).")
    use_relay: bool = Field(True, description="Allow libp2p circuit-relay connections (to reach peers behind NAT through a relay).")
    use_auto_relay: bool = Field(False, description="Behind NAT with no reachable port: find relays among the peers and be reachable through them.")
    client_mode: bool = Field(False, description="DHT client only: this node reaches the others but serves no DHT requests and stores no peer's records (behind NAT or a firewall without relays). At least one node must not be a client.")


def check_hivemind(swarm) -> None:
    """Cross-field rules of a ``SwarmConfig`` that uses (or mentions) the hivemind transport.

    Raises:
        ValueError: one line naming the field and the fix.
    """
    h: HivemindConfig = swarm.hivemind
    m = swarm.nodes
    if swarm.transport == "hivemind":
        if h.node is None:
            raise ValueError("swarm.transport=hivemind needs swarm.hivemind.node=K: this process's node id, 0.."
                             f"{m - 1}, a different one in every process")
        if h.node >= m:
            raise ValueError(f"swarm.hivemind.node={h.node} is not in 0..{m - 1} (swarm.nodes={m})")
    if not h.join:
        return
    if swarm.transport != "hivemind":
        raise ValueError("swarm.hivemind.join needs swarm.transport=hivemind (nodes join a running DHT swarm)")
    bad = sorted(n for n in h.join if n >= m)
    if bad:
        raise ValueError(f"swarm.hivemind.join names nodes {bad} outside 0..{m - 1}")
    honest = [n for n in range(m) if n not in set(swarm.malicious)]
    initial_honest = [n for n in honest if n not in h.join]
    if not initial_honest or initial_honest[0] != honest[0]:
        raise ValueError(f"swarm.hivemind.join: node {honest[0]}, the lowest honest node, writes the metrics from round 0 "
                         "and cannot join later; let a higher node id join")


def check_fresh_join(cfg) -> None:
    """A node joining a homogeneous swarm must start from a peer's checkpoint of its round, never afresh.

    Raises:
        ConfigError: this process would join a homogeneous swarm with the initial weights.
    """
    h = cfg.swarm.hivemind
    if cfg.swarm.transport == "hivemind" and h.node in h.join and cfg.swarm.models is None:
        r = h.join[h.node]
        raise ConfigError(f"node {h.node} joins a homogeneous swarm at round {r}, whose honest nodes then hold one copy of "
                          f"round {r}'s weights and optimizer state, not the initial ones: start it from a peer's checkpoint "
                          f"of round {r} (checkpoint_every on the peers; copy a peer's run folder, then `dgrpo resume COPY "
                          f"swarm.hivemind.node={h.node} ...`, docs/hivemind.md), or join a heterogeneous swarm")
