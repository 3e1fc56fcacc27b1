"""A swarm over torch.distributed: one node per rank, messages as JSON served by each rank (peerserve).

Launch with ``torchrun --nproc-per-node 4 -m dgrpo run swarm.transport=distributed …`` (see
``docs/distributed.md``). Rank k is swarm node k; WORLD_SIZE must equal ``swarm.nodes``.

Why not collectives. A collective needs every member: when one dies or stalls, gloo and NCCL fail
the whole group after a group-wide timeout, do not say which member was missing, and a group cannot
be rebuilt without the dead rank (gloo point-to-point closes a pair for good on a receive timeout).
Why not the c10d store either: any rank can delete or overwrite any key there, so round data kept
there could be withheld from some readers or padded by any rank and nobody could say who (issue 31,
review r31b). So each rank serves its own round data from its own read-only HTTP server
(:mod:`dgrpo.transports.peerserve`) and reads its peers' with bounded requests; the store keeps the
start-up rendezvous (check-in, each rank's server address, signed leave marks). Only bytes move: payloads are JSON,
never pickles, and every peer message is schema-checked (:mod:`dgrpo.transports.payload`); the swarm's receive
verifies each message's signature against the roster (:mod:`dgrpo.swarm.identity`) before anything else, then
applies the protocol's rules (:mod:`dgrpo.swarm.protocol`).

The process group (gloo on CPU, NCCL when every local rank has a GPU) is set up for later collectives; no round waits on it.

Exchange protocol, for an exchange named ``tag`` (``r{round}`` for messages; :mod:`storewait`):

    {tag}/data/{k}    node k's payload, served by k (a round's messages as one frame,
                      :mod:`dgrpo.transports.framing`); ``eq{round}``: the signed messages k received
                      (:meth:`DistributedTransport.cross_check`, docs/protocol.md)
    accuse            node k's signed accusations of the peers it found missing, served by k; a quorum
                      of a node's live peers in one exchange expels it
    {tag}/status/{k}  (store) a leave mark signed by k when it stops on an error

A node waits for each live peer within ``swarm.timeout_s`` of posting its round payload (the round's schedule,
:class:`~dgrpo.transports.waits.Schedule`: a payload window, one extension for a signed waiter, a relay slack). A missing
peer is named in the log; with ``on_peer_failure=abort`` the node raises :class:`PeerFailure` (the
CLI exits non-zero), with ``continue`` the round goes on without it, and later exchanges drop it once
a quorum accused it. A node that finds itself expelled (it stalled past its peers' timeout) leaves
with :class:`PeerFailure`. A node that stops on an error marks its next exchanges left on the way
out, so its peers need not wait for the timeout.

The transport is built of four objects, each given what it needs: :class:`~dgrpo.transports.peerserve.PeerChannel`
(this rank's server, bounded reads of its peers'), :class:`~dgrpo.transports.signedstore.SignedStore` (store calls,
signed leave marks, the start-up record), :class:`~dgrpo.transports.accusations.AccusationLedger` (accusations and
the quorum) and :class:`~dgrpo.transports.storewait.StoreExchange` (post, collect until the deadline, blame).
What a rank does once around the rounds (the signed start-up check, the shutdown, the leave marks at an error's
exit) is :mod:`dgrpo.transports.ranklife`. With ``swarm.protocol.schedule=clock`` the rounds run on absolute deadlines
from a start agreed at start-up instead (:mod:`dgrpo.transports.clocked`: no holds, one message set per round).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import time
from typing import TYPE_CHECKING, Iterable

from dgrpo.registry import LazyModule, register
from dgrpo.transports import payload as payload_codec
from dgrpo.transports.framing import OPEN, KeyCaps, frame
from dgrpo.transports.rendezvous import address_keys, agree_at_start, config_fingerprint, join_group, pick_backend  # noqa: F401 (re-exported)
from dgrpo.transports.peerserve import AddressKeys, PeerChannel
from dgrpo.transports.accusations import AccusationLedger
from dgrpo.transports.signedstore import SignedStore, Wait
from dgrpo.transports import clocked, crosscheck, ranklife, recordreads, startgather
from dgrpo.transports.startgather import StartBudget
from dgrpo.transports.storewait import StoreExchange, cap_of
from dgrpo.swarm.validation import Limits
from dgrpo.types import Message

if TYPE_CHECKING:
    from dgrpo.config import RunConfig

log = logging.getLogger(__name__)
_HELD = 2  # exchanges whose keys this node keeps served while a live peer lags behind (exchange)
torch = LazyModule("torch")  # imported on first use: a config naming this transport imports this module
dist = LazyModule("torch.distributed")

class DistributedTransport:
    """All-gather of a round's messages between torchrun ranks, one swarm node per rank.

    Args:
        store: the process group's c10d store (keys are put under ``dgrpo/``).
        rank / world_size: this node's id and the swarm size.
        honest: ids of honest nodes (the lowest live one writes metrics).
        timeout_s: how long to wait for a peer after posting (``swarm.timeout_s``; kept in :attr:`wait`).
        on_peer_failure: ``abort`` or ``continue``.
        max_messages: most messages accepted from one peer in a round (B·G: a node never writes more).

    Attributes:
        local_nodes: the node hosted here, ``[rank]``.
        alive: nodes still in the swarm.
        failed: failed node → the exchange in which it was declared failed.
        labels: message key → ground-truth label (bound to ``Swarm.labels``; metrics only).
        rejected: (sender, reason) of peer messages refused in the last all-gather.
        verifier: the run's signature check (set by the run's build); with it, every all-gather
            ends with the exchange of signed headers that detects equivocation.
        equivocators: sender → round in which it was caught equivocating.
        wait: the exchanges' :class:`~dgrpo.transports.signedstore.Wait` (timeout and the setting it comes from).
        signed_store: the :class:`~dgrpo.transports.signedstore.SignedStore`: store calls, leave marks, the
            signatures of marks and accusations (armed by :meth:`check_startup`).
        ledger: the :class:`~dgrpo.transports.accusations.AccusationLedger`: this node's accusations and the
            quorum that expels a peer.
        exchanger: the :class:`~dgrpo.transports.storewait.StoreExchange`: posts, collects until a deadline,
            blames a peer that misses it.
    """

    HELD = _HELD  # (clocked rounds keep their keys as exchange does: transports/clocked.py)

    def __init__(self, store: dist.Store, rank: int, world_size: int, *, honest: Iterable[int], timeout_s: float,
                 on_peer_failure: str = "abort", max_messages: int = 1 << 20, keys: AddressKeys | None = None,
                 chan: PeerChannel | None = None):
        self.store = dist.PrefixStore("dgrpo", store)
        self.rank, self.world_size = rank, world_size
        self.local_nodes = [rank]
        self.honest = sorted(honest)
        self.max_messages = max_messages
        self.wait = Wait(timeout_s)  # how long an exchange waits for a peer, and the setting it comes from
        self.alive = set(range(world_size))
        self.failed, self.labels, self.rejected = {}, {}, []  # see transports/base.py: Transport
        self.first_round = 0  # every rank starts together (a world of fixed size)
        self.roles: dict[str, list[str]] = {}  # node → [its declared role, its signature] (rendezvous.agree_at_start)
        self.verifier = None
        self.start_budget = StartBudget()  # this rank's start-up waits, summed (startgather: review r31r R3)
        self.equivocators: dict[int, int] = {}
        self.signed_store = SignedStore(self.store, rank, self.alive, self.wait)
        # (key, _, framed) of this node's served payloads that peers may still read; deleted once they moved on
        self._own_keys: list[tuple[str, bytes, bool]] = []
        self._held: list[list[tuple[str, bytes, bool]]] = []  # keys of earlier exchanges a lagging peer may still read
        self._records: list[str] = []  # keys of this node's last two round records (collect_at_main)
        self.done_at: float | None = None  # when this node posted its done (ranklife.post_done), None: not yet
        self.done_got: dict[int, bytes] = {}  # peer → its done, read with the main's last records (recordreads)
        self.chan = chan or PeerChannel(rank, self.store, keys=keys)  # this rank's own server of its round data
        self.ledger = AccusationLedger(rank, self.alive, self.chan, self.signed_store, self._refuse)
        self.exchanger = StoreExchange(rank, self.alive, self.failed, self.chan, self.signed_store, self.ledger,
                                       self.wait, on_peer_failure, self._refuse)
        self._notes: list[tuple[int, str]] = []  # refusals to report with the next all-gather (a rank that never joined)
        # rank → (node, reason) its transport refused in the last round (shared in the cross-check: peers.jsonl)
        self.peer_views: dict[int, list[tuple[int | None, str]]] = {}
        # what a reader takes from one key a round (framing.KeyCaps; from_env sizes them from the share)
        self.caps = OPEN
        self.carriers: dict[int, int] = {}  # id(message) → the node whose server served it, last all-gather
        self._last_round: int | None = None
        self.clock = None  # swarm.protocol.schedule=clock: the agreed Clock (transports/clocked.py), set by check_startup
        self._clock_cfg = None  # (that config, kept by from_env until the start-up check agrees on T0)
        self.round_estimate = None  # round_s=auto: this rank's proposal, seconds (training.roundtime, before the check)
        self.skips = None  # clocked rounds: this node's signed skip notices and its peers' (transports/skips.py)
        self._closed = False
        atexit.register(self._exit)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_env(cls, cfg: "RunConfig") -> "DistributedTransport":
        """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

        Raises:
            ConfigError: not launched by torchrun, world size ≠ ``swarm.nodes``, or the ranks' configs
                differ (names the ranks).
        """
        sw = cfg.swarm
        store, rank, world, backend, joined, chan = join_group(cfg)
        transport = cls(store, rank, world, honest=range(world), timeout_s=sw.timeout_s,
                        on_peer_failure=sw.on_peer_failure, max_messages=sw.prompts_per_round * sw.group_size,
                        chan=chan)
        transport._notes.extend(joined.named)  # refused check-in records and lone views, under their writers
        for node in joined.absent:  # started too late, under on_peer_failure=continue: out from the start
            transport.alive.discard(node)
            transport.failed[node] = "join"
            transport._notes.append((node, f"join: did not join within swarm.startup_timeout_s={sw.startup_timeout_s:g}s"))
        transport.caps = KeyCaps.of(max(1, sw.prompts_per_round * sw.group_size // world),
                                    Limits.for_completions(cfg.sampling.max_new_tokens))
        transport.honest = agree_at_start(transport, rank, cfg)  # (roles and config: rendezvous)
        if sw.protocol.schedule == "clock":
            transport._clock_cfg = (sw.protocol, sw.startup_timeout_s, sw.timeout_s)
        log.info("node %d of %d joined (backend %s)", rank, world, backend)
        return transport

    def check_startup(self, protocol, timeout_s: float) -> str:
        """:func:`ranklife.check_startup`: every rank's signed start-up values compared, then the ready barrier.

        Returns:
            the launch id (every rank's signed launch nonce).

        Raises:
            PeerFailure: a rank's record or ready confirmation is wrong or missing (names the rank; said to the
                peers, signed, first).
        """
        launch = ranklife.check_startup(self, protocol, timeout_s)
        if self._clock_cfg is not None:  # (clocked rounds: T0 signed and compared by every rank, transports/clocked.py)
            self.clock = clocked.agree_start(self, *self._clock_cfg)
            self.exchanger.bounds = lambda tag: clocked.bound_of(self.clock, tag)  # (named in failure lines)
            self.skips = clocked.Skips(self, self._clock_cfg[0].max_skips)
        return launch

    def starts_at(self, first: int) -> None:
        """Clocked rounds: round ``first`` is posted by ``T0``, and this node's skip-notice watcher serves its signed
        notice then if its payload is not served (:func:`clocked.start_at`; before, the watcher started after the first
        round: a node still computing at ``T0`` served nothing and its peers' quorum expelled it). Else nothing."""
        if self.clock is not None:
            clocked.start_at(self, first)

    def exchanged_keys(self):
        """Without a roster file (``swarm.unsafe_key_exchange``): ``({rank: its private key}, Roster)`` of the keys
        exchanged at the check-in (each live rank's, learned from its address record: :class:`AddressKeys`), which
        the run's messages are signed and checked with (:func:`dgrpo.training.build.build_protocol`); None with a
        roster file."""
        keys = self.chan.keys
        if keys is None or keys.world is None:
            return None
        from dgrpo.swarm.identity import Roster

        return {self.rank: keys.key}, Roster({n: k for n, k in keys.roster.keys.items() if n in self.alive})

    def _refuse(self, node: int, reason: str) -> None:
        """Record a refusal under ``node`` in this all-gather's :attr:`rejected` (peers.jsonl)."""
        self.rejected.append((node, reason))

    # ------------------------------------------------------------------ roles
    @property
    def main(self) -> int | None:
        """The lowest live honest node (None: none left): it writes metrics, plots and the run's metadata."""
        return next((n for n in self.honest if n in self.alive), None)

    @property
    def is_main(self) -> bool:
        """Whether this node is :attr:`main`."""
        return self.main == self.rank

    # ------------------------------------------------------------------ exchange (post, collect: StoreExchange)
    _frame = staticmethod(frame)

    def post(self, tag: str, payload: bytes, framed: bool = False) -> None:
        """Serve this node's payload of exchange ``tag`` from its own server (``framed``: as one frame).

        Raises:
            PeerFailure: a quorum of its peers expelled this node (it stalled past their timeout).
        """
        key = self.exchanger.post(tag, self._frame(payload) if framed else payload)
        self._own_keys.append((key, b"", framed))

    def collect(self, tag: str, peers: Iterable[int], deadline: float | None = None) -> dict[int, bytes]:
        """Payloads of live ``peers`` in exchange ``tag`` until ``deadline`` (default: now + timeout_s), each
        capped by this node's share (:meth:`StoreExchange.collect`: who is blamed for a missing one).

        Raises:
            PeerFailure: a peer failed and ``on_peer_failure`` is ``abort`` (names it).
        """
        cap = cap_of(tag, self.caps, self.world_size)
        if self.clock is not None and deadline is not None and re.fullmatch(r"(r|eq)\d+", tag):  # (no hold, no extension)
            return clocked.collect(self, tag, peers, deadline, cap)
        return self.exchanger.collect(tag, peers, deadline, cap)

    def exchange(self, tag: str, payload: bytes, framed: bool = False, until: float | None = None) -> dict[int, bytes]:
        """Post ``payload`` and collect every live peer's (own payload included, under this rank), until timeout_s
        after the post or ``until`` (monotonic), the earlier."""
        stale = self._own_keys
        self._own_keys = []
        self.post(tag, payload, framed)
        deadline = min(time.monotonic() + self.wait.timeout_s, until if until is not None else float("inf"))
        self._own_keys = stale + self._own_keys  # restored if deleted while peers may still read them
        got = {self.rank: payload, **self.collect(tag, range(self.world_size), deadline)}
        # A live peer that posted `tag` is done reading what this node posted before; one that did not (cut in this
        # collect under on_peer_failure=continue, still live) may read it yet: kept for it, at most _HELD exchanges
        # (review r31n G3: deleted at once, a lagging peer found this node's relay gone and accused it). Those of the
        # exchange before are kept one exchange more in any case (a round payload r{n} to the end of r{n+1}): a peer
        # that missed it as a fellow's reads it in eq{n} to tell late from missing (Schedule.owed_in; review r31n G1).
        self._own_keys = self._own_keys[len(stale):]
        self._held.append(stale)
        lagging = any(p not in got for p in self.alive if p != self.rank)
        while len(self._held) > (_HELD if lagging else 1):
            for key, _, _ in self._held.pop(0):
                self.chan.delete_key(key)
        return got

    def gather_values(self, tag: str, value: str, timeout_s: float | None = None) -> dict[int, str]:
        """Every live node's ``value`` (a small string), e.g. to agree on a run name or check configs: see
        :func:`dgrpo.transports.startgather.gather` (``timeout_s``: a start-up wait, ``swarm.startup_timeout_s``)."""
        return startgather.gather(self, tag, value, timeout_s)

    def agree(self, tag: str, value: str) -> str:
        """The lowest live node's ``value``: the one all nodes use (run names differ by start second)."""
        values = self.gather_values(tag, value)
        return values[min(values)]

    def collect_at_main(self, tag: str, payload: bytes, senders: Iterable[int]) -> dict[int, bytes] | None:
        """The main rank reads the round records ``tag`` (``rec{r}``) of live ``senders`` (a missing one fails nobody:
        :func:`~dgrpo.transports.recordreads.read_records`, review r31g J5/J7); any other rank posts its own, keeps it
        served until it posted its next two (the main may read a late one again at its next record: review r31o H7),
        and gets None."""
        if not self.is_main:
            self.exchanger.record_reader = self.main  # (it may be held reading records: StoreExchange._held)
            before = len(self._own_keys)
            self.post(tag, payload)
            self._records += [key for key, _, _ in self._own_keys[before:]]  # (kept apart from the exchanges' keys)
            del self._own_keys[before:]
            while len(self._records) > 2:
                self.chan.delete_key(self._records.pop(0))
            return None
        return recordreads.read_records(self.exchanger, tag, senders, cap_of(tag, self.caps, self.world_size),
                                        None if self.clock is None else recordreads.LATE_READ_S)  # (review h31r2)

    def late_records(self, tag: str, senders: Iterable[int]) -> dict[int, bytes]:
        """The main rank's second read of the round records ``tag`` it missed (review r31o H7): see
        :func:`dgrpo.transports.recordreads.late_records`; {} at any other rank."""
        if not self.is_main:
            return {}
        return recordreads.late_records(self, tag, senders, cap_of(tag, self.caps, self.world_size))

    def last_records(self, wanted: dict[str, Iterable[int]]) -> dict[str, dict[int, bytes]]:
        """The main's read of the run's last records (:func:`dgrpo.transports.recordreads.last_records`); {} elsewhere."""
        caps = {tag: cap_of(tag, self.caps, self.world_size) for tag in wanted}
        return recordreads.last_records(self, wanted, caps) if self.is_main else {tag: {} for tag in wanted}

    # ------------------------------------------------------------------ messages
    def encode(self, messages: list[Message]) -> bytes:
        """This node's payload (:func:`dgrpo.transports.payload.encode`: messages and labels, metrics only)."""
        return payload_codec.encode(messages, self.labels)

    def decode(self, sender: int, payload: bytes) -> list[Message]:
        """Peer ``sender``'s messages, schema-checked (:func:`dgrpo.transports.payload.decode`): refusals go to
        :attr:`rejected`, labels to :attr:`labels`, the deliverer to :attr:`carriers`."""
        return payload_codec.decode(sender, payload, caps=self.caps, max_messages=self.max_messages, labels=self.labels,
                                    verifier=self.verifier, rejected=self.rejected, carriers=self.carriers)

    def cross_check(self, round_idx: int, messages: list[Message]) -> list[Message]:
        """Every node relays the signed messages it read this round and what its transport refused; then
        every node keeps :func:`dgrpo.swarm.protocol.merge_views` of the relays: the senders proved to
        equivocate dropped, and one list of the validly signed messages anyone read (a rank that replaced
        a sender that showed some readers other messages changes nothing), in one order, so every honest node
        accepts the same messages and decides the same strikes and bans (docs/protocol.md); and every node takes out of
        its view a peer whose own signed departure any relay carries (:mod:`dgrpo.transports.departures`); in its
        first round, a peer's start-up stop notice that a relay carries stops every node unless a relay carries the
        peer's messages of that round (then it is an equivocator: :mod:`dgrpo.transports.startstops`).
        """
        return crosscheck.cross_check(self, round_idx, messages)

    def all_gather(self, local: dict[int, list[Message]]) -> list[Message]:
        """Alg.1 L6 / Alg.2 L7: every live node's messages, ordered by node id then by sending order.

        Raises:
            ValueError: ``local`` holds messages of a node this process does not host, or of several rounds.
            PeerFailure: see :meth:`collect`.
        """
        if set(local) - {self.rank}:
            raise ValueError(f"node {self.rank} cannot send for nodes {sorted(set(local) - {self.rank})}")
        mine = local.get(self.rank, [])
        rounds = {m.round for m in mine}
        if len(rounds) > 1:
            raise ValueError(f"messages of several rounds {sorted(rounds)} in one exchange")
        round_idx = rounds.pop() if rounds else (self._last_round + 1 if self._last_round is not None else 0)
        self.rejected, self.carriers, self._notes = self._notes, {}, []
        self._last_round = round_idx
        if self.clock is not None:  # swarm.protocol.schedule=clock: absolute deadlines, Dolev-Strong relay
            return clocked.gather_round(self, mine, round_idx)
        payloads = self.exchange(f"r{round_idx}", self.encode(mine), framed=True)
        out: list[Message] = []
        for node in sorted(payloads):
            out += mine if node == self.rank else self.decode(node, payloads[node])
        out = out if self.verifier is None else self.cross_check(round_idx, out)
        # (read within the round's budget: this node's r{n} post + timeout_s; past it, the store's signed copies)
        self.ledger.report_lone_accusations(self.exchanger.schedule.cap(f"r{round_idx}", time.monotonic()))
        return out

    # ------------------------------------------------------------------ shutdown
    def announce_stop(self, reason: str) -> None:
        """:meth:`PeerChannel.announce_stop`: the reason, signed, pushed to the peers' servers."""
        self.chan.announce_stop(reason)

    def close(self) -> None:
        """Clean end of the run (:func:`ranklife.close`: every live peer done too, within timeout_s); once."""
        if self.skips is not None:  # (no notice once the run ends)
            self.skips.stop()
        if not self._closed:
            self._closed = True
            ranklife.close(self)

    def _exit(self) -> None:
        """At interpreter exit without :meth:`close` (an error): :func:`ranklife.leave_on_exit` (signed leave marks,
        so peers stop waiting for it at once); nothing after a start-up stop (its peers hold its signed notice)."""
        if self.skips is not None:
            self.skips.stop()
        if not (self._closed or self.chan.stopped):
            self._closed = True
            ranklife.leave_on_exit(self, self._last_round)


@register("transport", "distributed")
def distributed_transport(cfg: "RunConfig", resuming: bool = False) -> DistributedTransport:
    """One node per torchrun rank (:meth:`DistributedTransport.from_env`; ``resuming`` changes nothing)."""
    return DistributedTransport.from_env(cfg)
