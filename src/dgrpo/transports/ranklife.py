"""A torch.distributed rank's way in and way out: the start-up check after the keys exist, and the shutdown.

:mod:`dgrpo.transports.distributed` moves a round's data between the ranks; this module holds what happens once
per rank around the rounds, on the same :class:`~dgrpo.transports.distributed.DistributedTransport`:

* :func:`check_startup`: every rank signs the values it runs with (run context, roster, honest nodes, roles, its
  peers' server addresses) and compares everyone's with its own, then the ready barrier
  (:mod:`dgrpo.transports.startready`); a rank whose check fails says why, signed, before it raises
  (:func:`stop_at_start`);
* :func:`close`: the clean end (a ``done`` exchange, then serving it until every live peer read it, at most
  ``min(timeout_s, 10)`` s: :func:`serve_until_read`) and the process group's teardown; a main rank reading its peers'
  last records posts its ``done`` before them (:func:`post_done`);
* :func:`leave_on_exit`: at interpreter exit after an error, signed leave marks for this rank's next exchanges, so
  its peers stop waiting for it at once.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from dgrpo.errors import PeerFailure
from dgrpo.registry import LazyModule
from dgrpo.transports.startready import barrier, check_ready, name_late_readies, ready_record, two_faced_roles

if TYPE_CHECKING:
    from dgrpo.transports.distributed import DistributedTransport

log = logging.getLogger("dgrpo.transports.distributed")
dist = LazyModule("torch.distributed")


def check_startup(t: "DistributedTransport", protocol, timeout_s: float) -> str:
    """Once the keys exist: every rank signs what it runs with (run context, hence the run name and config; the
    roster; the honest nodes) and checks everyone's against its own, so a value a rank overwrote in the store
    stops the run here instead of splitting the swarm.

    Args:
        t: this rank's transport.
        protocol: the run's :class:`~dgrpo.swarm.protocol.Protocol` (this node's signer, the roster).
        timeout_s: seconds to wait for every rank's record (``swarm.startup_timeout_s``).

    Returns:
        the launch id (:meth:`SignedStore.launch_id`: of every rank's signed launch nonce; every rank holds the same
        records once the check passes, and no rank chooses it alone).

    Raises:
        PeerFailure: a rank's record does not verify under its roster key, or its values differ (one line naming
            the ranks and the values: :meth:`SignedStore.check_records`); a rank signed two records or a false ready
            confirmation, or one did not confirm within ``timeout_s``, or stopped (the ready barrier:
            :mod:`dgrpo.transports.startready`); this rank then tells its peers why, signed for its server's launch
            (:meth:`PeerChannel.announce_stop`: its peers may have passed, and its leave marks, bound to a launch id
            it never holds, verify for nobody).
    """
    t.signed_store.arm(protocol.signers.get(t.rank), protocol.verifier)  # (draws this launch's nonce)
    chan = t.chan  # every rank's server address as this rank resolved it (an address overwritten in
    # the store before a rank read it would show here as a different map): never read again after this
    values = {"context": protocol.verifier.context, "honest": t.honest,  # equal on every rank
              "roster": protocol.verifier.roster.fingerprint, "roles": t.roles,
              "servers": {str(k): chan.address_of(k) for k in range(t.world_size) if k in t.alive}}
    servers = dict(chan.launches) if chan.keys is not None else None  # (each server's launch, as proved)
    records = t.gather_values("startup", t.signed_store.startup_record(values, chan.nonce), timeout_s=timeout_s)
    chan.frozen = True
    try:  # (then the ready barrier: transports/startready.py)
        t.signed_store.check_records(values, records, servers)
    except PeerFailure as err:  # (a rank that showed its peers different roles: named, signed proof)
        stop_at_start(t, PeerFailure(two_faced_roles(t.signed_store, values, records, chan) or err), "startup")
    budget = t.start_budget  # (the ready barrier too ends within what is left of the start-up's one budget: startgather)
    came: dict[int, float] = {}
    with budget.waiting():
        until = time.monotonic() + budget.wait_s("ready", timeout_s)
        readies = barrier(t, ready_record(t.signed_store, budget.held), timeout_s, until=until, came=came)
    name_late_readies(t, readies, came)  # (a confirmation over LATE_S late names its rank)
    try:
        check_ready(t.signed_store, values, readies, servers, chan)
    except PeerFailure as err:
        stop_at_start(t, err, "ready")
    return t.signed_store.launch_id()


def stop_at_start(t: "DistributedTransport", err: PeerFailure, tag: str) -> None:
    """Raise ``err`` (this rank's start-up check failed) after saying why to its peers, signed for its server's
    launch (its leave marks, bound to a launch id it never holds, would verify for nobody), and serving its value
    of ``tag`` until they read it (a slower peer still checks it).

    Raises:
        PeerFailure: ``err``, always.
    """
    t.chan.announce_stop(str(err))
    serve_until_read(t, f"{tag}/data/{t.rank}")
    raise err


def serve_until_read(t: "DistributedTransport", key: str) -> None:
    """Keep serving ``key`` until every live peer read it (as each says), at most ``min(timeout_s, 10)`` seconds:
    before leaving, so that a slower peer still reads it (a peer that never does only logs at its own shutdown, or
    names this node's stop notice)."""
    end = time.monotonic() + min(t.wait.timeout_s, 10.0)
    while time.monotonic() < end and not t.chan.read_by(key, t.alive - {t.rank} - t.exchanger.leaving):  # (leaving:
        # a peer whose signed departure this node read and no relay acted on yet, as in the run's last relay exchange)
        time.sleep(0.02)


def post_done(t: "DistributedTransport") -> None:
    """Serve this rank's ``done`` mark now (once; ``t.done_at``: when): it has nothing more to send, and still reads
    (the main rank, its peers' last records: :func:`~dgrpo.transports.recordreads.last_records`); :func:`close`
    then waits for its peers' until ``timeout_s`` after this post. Not posted (``done_at`` stays None) if a quorum
    expelled this node: its ``close`` then tries the ``done`` exchange and says why, as it did before."""
    if t.done_at is not None:
        return
    try:
        t.post("done", b"1")
    except PeerFailure:  # (expelled by a quorum: out of the swarm, no main any more; close says so, at shutdown)
        return
    t.done_at = time.monotonic()


def close(t: "DistributedTransport") -> None:
    """Clean end of the run: wait (up to timeout_s after its ``done`` post) until every live peer is done too, then
    tear the process group down (a peer or the store already gone is logged, not raised). A main rank that posted its
    ``done`` before reading its peers' last records (:func:`post_done`) waits for the ``done`` marks it did not read
    then (``t.done_got``) until the same deadline.

    Without torchrun, rank 0 hosts the store; leaving first would cut the others off it.
    """
    try:
        if t.done_at is None:
            t.exchange("done", b"1")
        else:
            rest = [p for p in range(t.world_size) if p != t.rank and p not in t.done_got]
            if rest:
                t.collect("done", rest, t.done_at + t.wait.timeout_s)
        serve_until_read(t, f"done/data/{t.rank}")
    except PeerFailure as err:
        log.warning("at shutdown: %s", err)
    from dgrpo.transports.rendezvous import group_joining

    if dist.is_initialized() and not group_joining():  # (a join this rank stopped waiting for: left to gloo's timeout)
        try:
            dist.destroy_process_group()
        except (dist.DistError, RuntimeError) as err:  # a peer or the store is gone already
            log.warning("at shutdown: %s", " ".join(str(err).split())[:200])


def leave_on_exit(t: "DistributedTransport", last_round: int | None) -> None:
    """At interpreter exit without :func:`close` (an error): mark this node's next exchanges after ``last_round``
    (None: before round 0) left, signed, so peers stop waiting for it at once instead of after the timeout.
    A store already gone is ignored (peers then time out)."""
    nxt = 0 if last_round is None else last_round + 1
    try:
        t.signed_store.leave((f"r{nxt}", f"eq{nxt - 1}", f"rec{nxt - 1}", f"rec{nxt}", "done"))
    except Exception:  # noqa: BLE001 - the store may be gone already; peers then time out
        pass
