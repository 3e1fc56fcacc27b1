"""Joining the torch.distributed process group torchrun describes, and what the ranks must agree on.

Used by :mod:`dgrpo.transports.distributed` (one node per rank); every failure is a one-line
:class:`~dgrpo.errors.ConfigError` (a launch mistake) or :class:`~dgrpo.errors.PeerFailure` (the
store's host or a peer is unreachable or died), never a traceback.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

from dgrpo.errors import ConfigError, PeerFailure
from dgrpo.registry import LazyModule
from dgrpo.transports.checkin import ABANDONED, Joined, check_in  # noqa: F401 (re-exported)
from dgrpo.transports.launchproof import settle
from dgrpo.transports.startgather import name_slow_answers
from dgrpo.transports.fingerprint import config_fingerprint  # noqa: F401 (the one fingerprint of every transport)
from dgrpo.transports.signedstore import seconds

if TYPE_CHECKING:
    from dgrpo.config import RunConfig

torch = LazyModule("torch")  # imported on first use: a config naming this transport imports this module
log = logging.getLogger(__name__)
dist = LazyModule("torch.distributed")


def pick_backend(choice: str) -> str:
    """``auto``: NCCL when every local rank has its own GPU, else gloo."""
    if choice != "auto":
        return choice
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= local_world else "gloo"


def join_group(cfg: "RunConfig"):
    """Rendezvous through torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and
    initialise the process group (gloo, or NCCL with ``cuda:$LOCAL_RANK``), waiting for that at most
    :data:`~dgrpo.transports.startgather.JOIN_S` (:func:`join_process_group`; how long: ``chan.group_wait``).

    Returns:
        (store, rank, world size, backend name, :class:`~dgrpo.transports.checkin.Joined`: the ranks a quorum
        gave up on at the check-in and the writers of refused check-in records, this rank's
        :class:`~dgrpo.transports.peerserve.PeerChannel`: its server, up since before the check-in).

    Raises:
        ConfigError: not launched by torchrun, or world size ≠ ``swarm.nodes``.
        PeerFailure: the store is unreachable within ``swarm.startup_timeout_s``, or its host died while the
            group was set up.
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
    startup = seconds(sw.startup_timeout_s)
    try:
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":  # torchrun's agent hosts the store
            store, _, _ = next(dist.rendezvous("env://", rank, world, timeout=startup))
        else:  # rank 0 hosts it, without waiting there for the others (check_in names who is missing)
            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, rank == 0,
                                  timeout=startup, wait_for_workers=False)
    except (dist.DistError, RuntimeError, ValueError) as err:  # (unreachable, refused, or timed out)
        raise PeerFailure(f"node {rank} cannot reach the rendezvous store at {os.environ['MASTER_ADDR']}:"
                          f"{os.environ['MASTER_PORT']} within swarm.startup_timeout_s={sw.startup_timeout_s:g}s "
                          f"({' '.join(str(err).split())[:160]})") from err
    from dgrpo.transports.peerserve import PeerChannel

    keys = address_keys(cfg, rank)  # this rank's server is up before the check-in: its peers challenge it there
    chan = PeerChannel(rank, dist.PrefixStore("dgrpo", store), keys=keys)
    early = _views_before(store, rank, world)
    try:
        joined = check_in(store, rank, world, sw.startup_timeout_s, go_on=sw.on_peer_failure == "continue", keys=keys,
                          chan=chan)
    except PeerFailure as err:
        if not early or "started after its peers stopped waiting" in str(err):
            raise
        raise PeerFailure(f"{err} (nodes {early} had written their views of who joined before node {rank} checked in: "
                          "it started after they stopped waiting for it, and their servers may be gone)") from err
    absent = joined.absent
    chan.checked_in = time.monotonic()  # (its start-up waits from here on add up to startup_timeout_s: startgather)
    backend = pick_backend(sw.backend)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized() and not absent:  # (the group's set-up is collective: not without them;
        # no round uses it, DistributedTransport.from_env takes the absent ranks out of the swarm)
        chan.group_wait = join_process_group(store, backend, rank, world)
    return store, rank, world, backend, joined, chan


_JOINING: list = []  # this process's group join, once begun (a thread: close tears no group down while it runs)


def group_joining() -> bool:
    """Whether this process's group join (:func:`join_process_group`) still runs, after its rank went on."""
    return bool(_JOINING) and _JOINING[0].is_alive()


def join_process_group(store, backend: str, rank: int, world: int) -> tuple[float, list[int], bool]:
    """Set up the process group, waiting for it at most :data:`~dgrpo.transports.startgather.JOIN_S` (review r31s S3).

    Its wait is torch's, which tells nobody who came last, and the store keys it waits for are unsigned (any rank can
    delete one, so they cannot name anyone); no round uses the group. So a rank that enters it late holds its peers
    there at most ``JOIN_S`` (as long as a start-up value may come late unnamed): they go on without a process group
    (a WARNING line), and the rest of a late rank's lateness shows, named, in its first start-up value
    (:func:`~dgrpo.transports.startgather.name_late`). It runs in a thread this rank stops waiting for at the deadline
    (gloo's own timeout, ``JOIN_S - 0.5`` s, ends its waits in the store; a rank that comes to the join after its
    peers left it can hang in gloo's connect several times that: not this rank's start-up). A rank held there over
    half of ``LATE_S``, or whose join did not finish (it may have come after its peers gave up, because another rank
    held it at its check-in), says so with its next start-up value (:meth:`StartBudget.joined
    <dgrpo.transports.startgather.StartBudget.joined>`), so it is named ``waited``, never ``late``, if it comes late.

    Returns:
        (seconds this rank waited there, the ranks it still waited for when it gave up: as the store's timeout names
        them, unchecked, [] if it joined or cannot tell; whether it joined).

    Raises:
        PeerFailure: the store's host died during the group's set-up.
    """
    import datetime
    import re
    import threading

    from dgrpo.transports.startgather import JOIN_S

    out: dict = {}

    def run() -> None:
        try:
            if backend == "nccl":  # (a thread's CUDA device is its own: as join_group set it for the rank)
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=JOIN_S - 0.5))
            out["joined"] = True
        except RuntimeError as err:  # (DistError included: a store wait that timed out, or a peer gone from the join)
            out["err"] = err

    start = time.monotonic()
    _JOINING[:] = [threading.Thread(target=run, name="dgrpo-group-join", daemon=True)]
    _JOINING[0].start()
    _JOINING[0].join(JOIN_S)
    waited, err = time.monotonic() - start, out.get("err")
    if out.get("joined"):
        return waited, [], True
    if err is not None:
        try:
            store.check(["pg/up"])  # (the store's host died during the group's set-up: as before, a stop)
        except (dist.DistError, RuntimeError) as gone:
            raise PeerFailure(f"node {rank} lost the rendezvous store while joining the process group: "
                              f"{type(gone).__name__}: {(str(gone).splitlines() or [''])[0][:200]}") from gone
    text = " ".join(str(err).split()) if err is not None else "still joining"
    missing = sorted({int(k) for k in re.findall(r"/pg/\S*?/(\d+)(?=[\s,]|$)", text) if int(k) != rank and
                      int(k) < world}) if "keys:" in text else []
    log.warning("node %d: the process group's join did not finish within %gs of this node entering it (%s): going on "
                "without a process group (no round uses it; a rank that entered it late shows as late in the first "
                "start-up exchange and is named there)", rank, JOIN_S,
                f"still waiting for the address of node{'s' if len(missing) > 1 else ''} "
                f"{', '.join(map(str, missing))} in the store" if missing else text[:160])
    return waited, missing, False


def _views_before(store, rank: int, world: int) -> list[int]:
    """The ranks whose check-in view (:func:`~dgrpo.transports.checkin.vote_key`) is in the store before this rank
    checks in: they stopped waiting already. Their views may not verify for a rank that starts after they left (their
    servers cannot answer for their launch), so a failed check-in of this rank says that it started late."""
    from dgrpo.transports.checkin import vote_key

    try:
        return [k for k in range(world) if k != rank and store.check([vote_key(k)])]
    except dist.DistError:  # (the store is gone: the check-in says so)
        return []


def _loopback(host: str) -> bool:
    import ipaddress

    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_key_exchange(cfg: "RunConfig") -> None:
    """Key exchange through the transport (no ``swarm.protocol.roster``) is an explicit, loopback-only opt-in.

    Raises:
        ConfigError: ``swarm.unsafe_key_exchange`` is off, or a peer address is not a loopback one.
    """
    sw = cfg.swarm
    fix = (f"write every node's key before the run with `dgrpo keys {sw.nodes} --out DIR` and give each process "
           "swarm.protocol.roster=DIR/roster.json swarm.protocol.key_dir=DIR (docs/protocol.md)")
    if not sw.unsafe_key_exchange:
        raise ConfigError(f"swarm.transport={sw.transport} with one node per process needs swarm.protocol.roster: "
                          f"{fix}; on one machine only, swarm.unsafe_key_exchange=true exchanges fresh keys at start "
                          "(any local process could replace one)")
    if sw.transport == "distributed":
        hosts = [os.environ.get("MASTER_ADDR", "")]
    else:
        h = sw.hivemind
        hosts = [a.split("/")[2] for a in (*h.listen, *h.announce, *h.initial_peers) if a.count("/") >= 2]
    far = [x for x in hosts if not _loopback(x)]
    if far:
        raise ConfigError(f"swarm.unsafe_key_exchange=true is refused for peers beyond this machine ({far[0]} is not "
                          f"a loopback address): {fix}")


def address_keys(cfg: "RunConfig", rank: int):
    """This rank's :class:`~dgrpo.transports.peerserve.AddressKeys` (it signs its server address in the
    store; peers check theirs) from ``swarm.protocol.roster`` and its key. Without a roster file and with
    ``swarm.unsafe_key_exchange`` (loopback only: :func:`check_key_exchange`), a fresh key whose public half
    travels in its address record, so every start-up value from the check-in on is signed as with a roster file
    (:meth:`AddressKeys.fresh`; the run's messages are signed with the same key:
    :meth:`DistributedTransport.exchanged_keys`; review r31h F6); None without either (the run's build then refuses
    the launch, :func:`dgrpo.training.build.build_protocol`).

    Raises:
        ConfigError: the roster file or this rank's private key is unreadable (names the file); a peer address is
            not a loopback one under ``swarm.unsafe_key_exchange``.
    """
    from pathlib import Path

    from dgrpo.swarm.identity import Roster, key_path, load_private_key
    from dgrpo.transports.peerserve import AddressKeys

    pc = cfg.swarm.protocol
    if pc.roster is None:
        if not cfg.swarm.unsafe_key_exchange:
            return None
        check_key_exchange(cfg)  # (refused beyond this machine, before any key is published)
        return AddressKeys.fresh(rank, config_fingerprint(cfg), cfg.swarm.nodes)
    try:
        roster = Roster.load(pc.roster)
        key = load_private_key(key_path(pc.key_dir or Path(pc.roster).parent, rank))
    except ValueError as err:
        raise ConfigError(str(err)) from err
    return AddressKeys(rank, key, roster, config_fingerprint(cfg))


def agree_at_start(transport, rank: int, cfg: "RunConfig") -> list[int]:
    """The honest nodes, once every rank runs the same config (roles and config fingerprints exchanged with
    ``transport.gather_values`` within ``swarm.startup_timeout_s``; ``rank``: this one).

    ``swarm.malicious`` is part of the agreed config, so the honest nodes (who reports metrics, who is the main rank)
    are those it leaves out; a declared role that contradicts it is named in the log and changes nothing (review r31p
    P2: taken from the declarations, a malicious rank 0 that declared itself honest became the main rank and received
    every honest node's round record, so no honest node wrote metrics). With a roster file each
    declaration is signed for its rank's server launch; the roles a rank read go into its signed start-up record
    (``transport.roles``), where one rank's two different signed roles are its proof of equivocation
    (:func:`~dgrpo.transports.startready.two_faced_roles`). The fingerprints are signed too, and every rank echoes
    those it read (:func:`~dgrpo.transports.startagree.checked_values`, review r31q Q2), so a mismatch left here is
    one every rank read alike.

    Raises:
        ConfigError: the ranks' config fingerprints differ (names the ranks).
        PeerFailure: a rank did not serve its values in time (:meth:`DistributedTransport.gather_values`), served a
            role or fingerprint its key did not sign, or signed two fingerprints, or answered for two launches, or
            did not answer this rank's challenge bound to its map of launches (names it:
            :func:`~dgrpo.transports.launchproof.settle`, first).
    """
    sw = cfg.swarm
    chan = transport.chan  # with a roster file each role is signed for its server's launch (review r31f H9)
    if chan.keys is not None:  # (one launch per owner: review r31r R2)
        budget = getattr(transport, "start_budget", None)
        if budget is None:
            settle(chan, transport.alive - {rank}, sw.startup_timeout_s)
        else:  # (within the start-up's one budget, the holder named: review r31s S1, S2)
            budget.begin(chan.checked_in)
            with budget.waiting():
                came = settle(chan, transport.alive - {rank}, sw.startup_timeout_s,
                              budget.settle_s(sw.startup_timeout_s))
            name_slow_answers(transport, came)
            if chan.group_wait is not None:  # (held in the group's join: review r31s S3)
                budget.joined(*chan.group_wait)
    role = "attacker" if rank in set(sw.malicious) else "honest"
    sig = chan.keys.sign(f"role|{rank}|{role}|{chan.nonce}") if chan.keys is not None else ""
    said = {n: (v.split("|", 1) + [""])[:2] for n, v in transport.gather_values(
        "role", f"{role}|{sig}", timeout_s=sw.startup_timeout_s).items()}
    bad = [n for n, (r, s) in sorted(said.items()) if chan.keys is not None and n != rank and
           chan.keys.signed_by(n, f"role|{n}|{r}|{chan.launches.get(n)}", s) != n]
    if bad:  # (served by its own server: its doing)
        why = (f"nodes {bad} served a start-up role that their keys did not sign for their servers' launches: "
               "stopping before round 0")
        chan.announce_stop(why)
        raise PeerFailure(why)
    transport.roles = {str(n): v for n, v in sorted(said.items())}  # (signed by each rank in its start-up record)
    roles = {n: r for n, (r, _) in said.items()}
    prints = transport.gather_values("config", config_fingerprint(cfg), timeout_s=sw.startup_timeout_s)
    odd = sorted(n for n, fp in prints.items() if fp != prints[min(prints)])
    if odd:
        raise ConfigError(f"nodes {odd} run another config than node {min(prints)}: every rank needs the same "
                          "config and overrides (out_dir, threads, tensorboard and tracking may differ)")
    malicious = set(sw.malicious)
    for n, role in sorted(roles.items()):
        if role != ("attacker" if n in malicious else "honest"):
            log.warning("node %d declared its start-up role %r, but the agreed swarm.malicious=%s says otherwise: "
                        "its declaration is ignored", n, str(role)[:20], sorted(malicious))
    return sorted(n for n in roles if n not in malicious)
