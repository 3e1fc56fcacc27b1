"""A swarm over the internet: one node per process, messages through a hivemind DHT, no central store.

Launch one process per node, anywhere: ``dgrpo run swarm.transport=hivemind swarm.hivemind.node=K
'swarm.hivemind.initial_peers=[/ip4/…/tcp/…/p2p/…]' …``. The protocol, its failures and its trust
model are in docs/hivemind.md ("How a round moves"); in short:

* every value is a signed record (:mod:`dgrpo.transports.dht.records`) under ``dgrpo/{swarm}/{launch}/{tag}``
  with the subkey ``dgrpo:{node}:{public key}``; every DHT node refuses bad signatures and every
  receiver requires the roster's key for the node id; a missing, expired, forged or malformed record
  is a missing peer, never an exception;
* the launch (hellos → roster, config check, launch id) is in :mod:`dgrpo.transports.dht.launch`, joining (a
  quorum of the nodes' launch records, never one node's) in :mod:`dgrpo.transports.dht.joining`;
* an exchange posts, then reads until every expected live peer is in or its deadline has passed (later peers are
  named; ``on_peer_failure`` aborts or continues); a node stopping on an error says ``bye`` on its way out;
* a message round ends with a commit: every node publishes the signed digest of each payload it kept,
  then relays the views it read, so the honest nodes decide alike on the same views: a payload missed
  by most views is dropped by all (its late node leaves), a sender with two signed digests (or views)
  is named, a lone view changes nothing (:mod:`dgrpo.transports.dht.commit`); the whole round, its
  payloads, views, echo and second reads, ends within ``swarm.timeout_s`` of its start
  (:mod:`dgrpo.transports.dht.rounds`).

This module loads light (a config check imports it): hivemind, and through it torch, is imported
when the transport starts (:func:`hivemind_transport`), the DHT helpers through :class:`LazyModule`.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import time
from typing import TYPE_CHECKING, Iterable

from dgrpo.errors import ConfigError, PeerFailure
from dgrpo.registry import LazyModule, register
from dgrpo.transports.dht import byes, roundrecords
from dgrpo.transports.dht.config import check_fresh_join
from dgrpo.transports.dht.recordio import SignedRecords
from dgrpo.transports.dht.rounds import HeldStops, call_limit
from dgrpo.transports import payload as payload_codec
from dgrpo.transports.framing import OPEN, KeyCaps
from dgrpo.types import Message

if TYPE_CHECKING:
    from dgrpo.config import RunConfig

log = logging.getLogger(__name__)
dht_records = LazyModule("dgrpo.transports.dht.records")  # (import hivemind: loaded when the transport starts)
launch, dht_commit = LazyModule("dgrpo.transports.dht.launch"), LazyModule("dgrpo.transports.dht.commit")
dht_rounds = LazyModule("dgrpo.transports.dht.rounds")

class HivemindTransport:
    """All-gather of a round's messages through a hivemind DHT, one swarm node per process.

    Same members and meanings as :class:`~dgrpo.transports.distributed.DistributedTransport`
    (:class:`~dgrpo.transports.base.Transport`).

    Attributes:
        local_nodes: the node hosted here, ``[rank]``.
        alive: nodes in the swarm now (a joiner is added at its first round).
        failed: failed node → the exchange in which it was declared failed.
        labels: message key → ground-truth label (bound to ``Swarm.labels``; metrics only).
        rejected: (sender, reason) of records refused in the last all-gather (sender -1: unknown key; the first
            all-gather's also holds the launch's: nodes left out of it).
        caps, carriers: what decode reads of one sender per round (from its share), and who delivered each message.
        seals: exchange tag → node → record signature of the payload kept (the commit's views carry them).
        first_round: the round this node starts at (its join round; 0 for the initial nodes).
        roster: node → Ed25519 public key (hex) of every node, fixed at launch (joiners' keys by a roster file).
        signed: its :class:`~dgrpo.transports.dht.recordio.SignedRecords` (``key``, ``store``, ``records``, ``read``,
            ``reject``: every record stored or read goes through it; it reads :attr:`roster`, the same dict, so the
            roster is changed in place, never replaced).
        stops: a message round's aborts held to its commit and the byes it read, which this node's view relays
            (:class:`~dgrpo.transports.dht.rounds.HeldStops`); done_at: when it posted ``done`` (:meth:`post_done`).
        public_key, agreed, last_round: this node's record key (hex), the values :meth:`agree` agreed
            (a joiner's from a quorum of the launch records), the round of the last all-gather (None before it).
    The launch and commit helpers (:mod:`dgrpo.transports.dht`) read public members and change this node's
    view of the swarm only through its methods (:meth:`enter_launch`, :meth:`leave_out`, :meth:`readmit`, :meth:`leave`).
    """

    def __init__(self, dht, rank: int, world_size: int, *, signing_key, namespace: str, honest: Iterable[int],
                 timeout_s: float, on_peer_failure: str = "abort", max_messages: int = 1 << 20,
                 join: dict[int, int] | None = None, roster: dict[int, str] | None = None, fixed_roster: bool = False,
                 caps: KeyCaps = OPEN):
        self.dht, self.rank, self.world_size = dht, rank, world_size
        self.local_nodes, self.honest = [rank], sorted(honest)
        self.timeout_s, self.on_peer_failure, self.max_messages = timeout_s, on_peer_failure, max_messages
        self.limit_name = "swarm.timeout_s"  # the setting timeout_s comes from (named in errors)
        self.join, self.first_round = dict(join or {}), (join or {}).get(rank, 0)
        self.alive = {n for n in range(world_size) if n not in self.join} | {rank}
        self.failed, self.labels, self.rejected = {}, {}, []  # (see Attributes)
        self.verifier = None  # set by the run's build; signatures are checked by the swarm
        self.caps, self.carriers = caps, {}  # (payload.decode's caps, from the share; who delivered)
        self.seals: dict[str, dict[int, bytes]] = {}  # exchange tag → node → record signature of the payload kept
        self.peer_views, self.roster = {}, dict(roster or {})  # (peer_views: not shared over the DHT)
        self.fixed_roster = fixed_roster  # a roster file: no key is ever learnt from the DHT
        self.namespace, self.fingerprint = namespace, ""  # the config's fingerprint, set at launch
        self.retention_s, self.max_record_bytes = 3 * timeout_s + 60, dht_records.record_limit(world_size)  # (outlive every deadline)
        self.public_key = dht_records.public_hex(signing_key)
        self.agreed: dict[str, str] = {}  # tag → the value agreed (agree), published in the launch record
        self.signed = SignedRecords(dht, rank, signing_key, namespace, self.roster, self._refuse)
        self.last_round, self._closed, self.stop_why = None, False, None  # (stop_why: said in its bye, dht/byes.py)
        self.done_at: float | None = None  # time.monotonic() when this node posted its done (post_done)
        self.stops = HeldStops()  # (a message round: an abort held to its commit; the byes read, relayed in its view)
        atexit.register(self._exit)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, cfg: "RunConfig") -> "HivemindTransport":
        """Start this node's DHT and join the swarm (launch agreement, or joining at its round).

        Raises:
            ConfigError: a bad key, roster or address; configs differ between nodes (names them).
            PeerFailure: the daemon did not start, no bootstrap peer answered, peers missing at launch.
        """
        return launch.start_node(cls, cfg)

    # ------------------------------------------------------------------ roles
    @property
    def run_id(self) -> str:
        """The launch id agreed at launch (the signed records' key space; "" before :meth:`enter_launch`)."""
        return self.signed.run_id

    @property
    def is_main(self) -> bool:
        """The lowest live honest node writes metrics, plots and the run's metadata."""
        live = [n for n in self.honest if n in self.alive]
        return bool(live) and live[0] == self.rank

    # ------------------------------------------------------------------ exchange
    def post(self, tag: str, payload: bytes, deadline: float | None = None) -> None:
        """Publish this node's payload of exchange ``tag``, retried until ``deadline`` (``time.monotonic()``;
        default ``timeout_s`` from now).

        Raises:
            PeerFailure: the payload exceeds what one DHT message carries for every node.
        """
        if len(payload) > self.max_record_bytes:
            raise PeerFailure(f"node {self.rank}: its payload of {tag!r} has {len(payload)} bytes, above the "
                              f"{self.max_record_bytes} one DHT message carries for {self.world_size} nodes")
        deadline = time.monotonic() + self.timeout_s if deadline is None else deadline
        key = self.signed.key(tag)
        while not (sig := self.signed.store(key, payload, self.retention_s, min(10.0, max(0.5, deadline - time.monotonic())))):
            if time.monotonic() >= deadline:
                log.warning("node %d: no DHT node accepted its record of %r; peers will miss it", self.rank, tag)
                return
            time.sleep(0.5)
        self.seals.setdefault(tag, {})[self.rank] = sig

    def collect(self, tag: str, peers: Iterable[int], deadline: float | None = None, on_wait=None,
                limit: str | None = None) -> dict[int, bytes]:
        """Payloads of live ``peers`` in exchange ``tag``, read until they are in or ``deadline`` (``time.monotonic()``;
        default ``timeout_s`` from now).

        Peers that miss it (or said bye) are declared failed and left out (told they sent nothing within ``limit``,
        default ``swarm.timeout_s=…s``). ``on_wait()`` is called between reads (the launch keeps its hello alive so).

        Raises:
            PeerFailure: a peer failed and ``on_peer_failure`` is ``abort`` (names every missing peer).
        """
        deadline = time.monotonic() + self.timeout_s if deadline is None else deadline
        want = (set(peers) & self.alive) - {self.rank}
        got, left = {}, {}  # node → (its key, payload, record signature); node that said bye → its stop reason
        delay, next_bye = 0.02, time.monotonic() + 1.0
        while want - got.keys() - left.keys():
            for node, rec in self.signed.read(self.signed.key(tag), want, call_limit(deadline)).items():
                got.setdefault(node, rec)  # the first payload seen; the commit compares it with the peers'
            now = time.monotonic()
            if not want - got.keys() - left.keys() or now >= deadline:
                break
            if now >= next_bye:
                said = self.signed.read(self.signed.key("bye"), want - got.keys(), call_limit(deadline))
                left |= {n: byes.why_of(body) for n, (_, body, _) in said.items()}  # (its stop reason: dht/byes.py)
                self.stops.byes.update({n: (body, sig) for n, (_, body, sig) in said.items()})  # (the view relays them)
                next_bye = now + 1.0
            if on_wait is not None:
                on_wait()
            time.sleep(min(delay, max(0.0, deadline - now)))
            delay = min(delay * 1.5, 0.5)
        missing = sorted(want - got.keys())
        self.seals.setdefault(tag, {}).update({n: sig for n, (_, _, sig) in got.items()})
        if missing:
            self.declare_failed(missing, tag, left, limit=limit)
        return {n: body for n, (_, body, _) in got.items()}

    def declare_failed(self, peers: list[int], tag: str, left: dict[int, str | None] | None = None, why: str = "",
                       limit: str | None = None) -> None:
        """Take ``peers`` out of :attr:`alive` (failed in exchange ``tag``; ``left``: said bye → the stop reason
        its bye carries, quoted; ``why``: what they did; ``limit``: the wait they missed, default
        ``swarm.timeout_s=…s``), then raise :class:`PeerFailure` (``on_peer_failure=abort``, names them; the line is
        said in this node's bye too: :mod:`dgrpo.transports.dht.byes`) or go on. In a message round an abort is
        held to its commit (:attr:`stops`, :meth:`settle`)."""
        self.leave_out(peers, tag)
        text = byes.failed_line(peers, tag, left or {}, why, limit or f"{self.limit_name}={self.timeout_s:g}s")
        if self.on_peer_failure != "abort":
            return log.warning("%s; continuing without it (swarm.on_peer_failure=continue)", text)
        if not self.stops.hold(peers, text):  # (in a message round: acted on at its commit, alike at every honest node)
            self.settle(text)

    def settle(self, text: str | None = None) -> None:
        """Stop on ``text`` (raise :class:`PeerFailure`; said in this node's bye), or, with none, on the failures of the
        message round held to its commit that the commit left failed (:class:`~dgrpo.transports.dht.rounds.HeldStops`)."""
        text = text or self.stops.settle(self.failed)
        if text:
            self.stop_why = self.stop_why or text
            log.error("%s; aborting (swarm.on_peer_failure=abort)", text)
            raise PeerFailure(f"{text}; aborted (set swarm.on_peer_failure=continue to go on without it)")

    def exchange(self, tag: str, payload: bytes, on_wait=None, deadline: float | None = None,
                 limit: str | None = None) -> dict[int, bytes]:
        """Post ``payload`` and collect every live peer's (own payload included, under this rank) until ``deadline``
        (``time.monotonic()``; default ``timeout_s`` after the post; ``limit``: see :meth:`collect`)."""
        deadline = time.monotonic() + self.timeout_s if deadline is None else deadline
        self.post(tag, payload, deadline)
        return {self.rank: payload, **self.collect(tag, range(self.world_size), deadline, on_wait, limit)}

    def gather_values(self, tag: str, value: str, timeout_s: float | None = None, *, abort: bool = False,
                      on_wait=None) -> dict[int, str]:
        """Every live node's ``value`` (a small string), e.g. to agree on a run name or check configs.

        ``timeout_s``: a start-up wait (``swarm.startup_timeout_s``, named so in errors); default ``timeout_s``.
        ``abort``: a missing peer raises whatever ``on_peer_failure`` says; ``on_wait``: see :meth:`collect`.
        """
        saved = self.timeout_s, self.limit_name, self.on_peer_failure
        if timeout_s is not None:
            self.timeout_s, self.limit_name = timeout_s, "swarm.startup_timeout_s"
        self.on_peer_failure = "abort" if abort else self.on_peer_failure
        try:
            return {n: b.decode(errors="replace") for n, b in self.exchange(tag, value.encode(), on_wait).items()}
        finally:
            self.timeout_s, self.limit_name, self.on_peer_failure = saved

    def agree(self, tag: str, value: str) -> str:
        """The lowest live node's ``value``; a node that joined later takes it from a quorum of the launch records."""
        if tag in self.agreed:
            return self.agreed[tag]
        values = self.gather_values(tag, value)
        self.agreed[tag] = values[min(values)]
        launch.publish_launch(self)  # joiners read the agreed value there
        return self.agreed[tag]

    def collect_at_main(self, tag: str, payload: bytes, senders: Iterable[int]) -> dict[int, bytes] | None:
        """The main node reads the round records ``tag`` of live ``senders``, any other posts its own and gets None,
        both for at most ``timeout_s`` / 8 (:func:`dgrpo.transports.dht.roundrecords.collect_at_main`)."""
        return roundrecords.collect_at_main(self, tag, payload, senders)

    def late_records(self, tag: str, senders: Iterable[int]) -> dict[int, bytes]:
        """The main node's second read of records ``tag`` (:func:`dgrpo.transports.dht.roundrecords.late_records`)."""
        return roundrecords.late_records(self, tag, senders)

    def last_records(self, wanted: dict[str, Iterable[int]]) -> dict[str, dict[int, bytes]]:
        """The main node's read of the run's last records (:func:`dgrpo.transports.dht.roundrecords.last_records`)."""
        return roundrecords.last_records(self, wanted)

    # ------------------------------------------------------------------ membership (the helpers' way in)
    def enter_launch(self, run_id: str, fingerprint: str, roster: dict[int, str], alive: Iterable[int] | None = None,
                     agreed: dict[str, str] | None = None) -> None:
        """Take part in launch ``run_id`` of config ``fingerprint``: the roster's keys (a roster file's stay), and for a
        joiner the swarm's live nodes and agreed values (from its launch record)."""
        self.signed.run_id, self.fingerprint = run_id, fingerprint
        self.roster.update({} if self.fixed_roster else roster)
        self.roster[self.rank] = self.public_key
        self.alive = self.alive if alive is None else set(alive) | {self.rank}
        self.agreed.update(agreed or {})

    def leave_out(self, peers: Iterable[int], tag: str, reason: str = "") -> None:
        """Take ``peers`` out of :attr:`alive`, failed in exchange ``tag``; a ``reason`` is listed in :attr:`rejected`."""
        self.alive -= set(peers)
        self.failed.update(dict.fromkeys(peers, tag))
        self.rejected += [(n, reason) for n in peers if reason]

    def _refuse(self, sender: int, reason: str) -> None:
        """List a refused record in :attr:`rejected` (``signed``'s ``refuse``: it names each refusal once)."""
        self.rejected.append((sender, reason))

    def readmit(self, node: int) -> None:
        """Node ``node`` takes part again (this node missed it; its peers kept its payload)."""
        self.alive.add(node)
        self.failed.pop(node, None)
        self.stops.pending.pop(node, None)

    def leave(self) -> None:
        """This node leaves the swarm (its peers dropped it): it no longer counts itself live."""
        self.alive.discard(self.rank)

    # ------------------------------------------------------------------ messages
    def encode(self, messages: list[Message]) -> bytes:  # (payload.encode: messages and labels, metrics only)
        return payload_codec.encode(messages, self.labels)

    def decode(self, sender: int, payload: bytes) -> list[Message]:  # (payload.decode: schema-checked, refusals kept)
        return payload_codec.decode(sender, payload, caps=self.caps, max_messages=self.max_messages, labels=self.labels,
                                    verifier=self.verifier, rejected=self.rejected, carriers=self.carriers)

    def all_gather(self, local: dict[int, list[Message]]) -> list[Message]:
        """Alg.1 L6 / Alg.2 L7: every live node's messages, ordered by node id then by sending order, within
        ``timeout_s`` of this call (:mod:`dgrpo.transports.dht.rounds`).

        Raises:
            ValueError: ``local`` holds messages of a node this process does not host, or of several rounds.
            PeerFailure: see :meth:`collect`; or this node was left out of a peer's view (it was late).
        """
        clock = dht_rounds.RoundClock.now(self.timeout_s)
        if set(local) - {self.rank}:
            raise ValueError(f"node {self.rank} cannot send for nodes {sorted(set(local) - {self.rank})}")
        mine = local.get(self.rank, [])
        rounds = {m.round for m in mine}
        if len(rounds) > 1:
            raise ValueError(f"messages of several rounds {sorted(rounds)} in one exchange")
        round_idx = rounds.pop() if rounds else (self.last_round + 1 if self.last_round is not None else self.first_round)
        self.rejected, self.carriers, self.seals = [] if self.last_round is not None else self.rejected, {}, {}
        self.last_round = round_idx
        self.alive |= {n for n, r in self.join.items() if r == round_idx and n not in self.failed}  # joiners from now on
        try:
            payloads = dht_rounds.message_round(self, round_idx, self.encode(mine), clock)
        except PeerFailure as err:  # (left out by its peers, or their payload unreadable: said in its bye, byes.py)
            self.stop_why = self.stop_why or str(err)
            raise
        self.rejected += launch.dht_rejections(self, wait_s=clock.rest())  # (two local calls: milliseconds, before
        launch.publish_launch(self, round_idx, wait_s=clock.rest())  # the stop; a store not confirmed goes on in the DHT)
        out: list[Message] = []
        for node in sorted(payloads):
            out += mine if node == self.rank else self.decode(node, payloads[node])
        return out

    def commit(self, round_idx: int, payloads: dict[int, bytes], clock=None) -> dict[int, bytes]:
        """The payloads every peer's view lists alike (:func:`dgrpo.transports.dht.commit.commit`; ``clock``: the
        round's :class:`~dgrpo.transports.dht.rounds.RoundClock`, default one starting now)."""
        return dht_commit.commit(self, round_idx, payloads, clock)

    def check_startup(self, protocol, timeout_s: float) -> str:
        return self.run_id  # the run's agreed settings are checked at launch (dgrpo.transports.dht.launch)

    def starts_at(self, first: int) -> None:
        """Nothing: hivemind keeps no clocked rounds."""

    # ------------------------------------------------------------------ shutdown
    def exchanged_keys(self):
        """None: hivemind's keys come from the roster file or its own key exchange (docs/hivemind.md)."""
        return None

    def announce_stop(self, reason: str) -> None:
        """Said in this node's bye at exit (:meth:`_exit`), so its peers stop waiting for it and quote ``reason``."""
        self.stop_why = self.stop_why or reason

    def close(self, wait: bool = True) -> None:
        """Clean end of the run: post ``done`` (:meth:`post_done`, if not yet) and wait until every live peer is done or
        ``timeout_s`` after that post, then stop the DHT.

        A node that leaves takes its DHT storage with it; waiting keeps the last records readable.
        ``wait=False``: stop at once, saying nothing (a launch that failed: no peer counts on this node).
        """
        if self._closed:
            return
        self._closed = True
        try:
            if wait:
                self.collect("done", range(self.world_size), self.post_done() + self.timeout_s)
        except PeerFailure as err:
            log.warning("at shutdown: %s", err)
        self.dht.shutdown()

    def post_done(self) -> float:
        """Post this node's ``done`` (once: the main posts it before its last records' read, :meth:`last_records`);
        ``time.monotonic()`` when it was first posted: :meth:`close` waits for its peers' until ``timeout_s`` after."""
        if self.done_at is None:
            self.done_at = time.monotonic()
            self.post("done", b"1", self.done_at + self.timeout_s)
        return self.done_at

    def _exit(self) -> None:
        """At interpreter exit without :meth:`close` (an error): say bye so peers stop waiting at once."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.run_id:
                bye = byes.body(self.stop_why)  # (read by collect; its stop reason, if any: dht/byes.py)
                self.signed.store(self.signed.key("bye"), bye, self.retention_s, wait_s=3.0)
            self.dht.shutdown()
        except Exception:  # noqa: BLE001 - the DHT may be gone already; peers then time out
            pass


@register("transport", "hivemind")
def hivemind_transport(cfg: "RunConfig", resuming: bool = False) -> HivemindTransport:
    """This process's node of a hivemind swarm (:meth:`HivemindTransport.from_config`).

    Raises:
        ConfigError: hivemind is not installed, or a fresh node would join a homogeneous swarm
            (:func:`~dgrpo.transports.dht.config.check_fresh_join`; it must resume a peer's checkpoint).
    """
    if importlib.util.find_spec("hivemind") is None:
        raise ConfigError("swarm.transport=hivemind needs the hivemind package: pip install 'dgrpo[hivemind]' "
                          "(hivemind==1.1.12, whose wheel ships the p2p daemon)")
    if not resuming:
        check_fresh_join(cfg)  # before any DHT starts: a homogeneous joiner starts from a peer's checkpoint
    return HivemindTransport.from_config(cfg)
