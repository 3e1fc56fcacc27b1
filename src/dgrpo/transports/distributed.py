"""A swarm over torch.distributed: one node per rank, messages as JSON through the group's c10d store.

Launch with ``torchrun --nproc-per-node 4 -m dgrpo run swarm.transport=distributed …`` (see
``docs/distributed.md``). Rank k is swarm node k; WORLD_SIZE must equal ``swarm.nodes``.

Why the store and not ``all_gather`` of byte tensors. A collective needs every member: when one dies
or stalls, gloo and NCCL fail the whole group after a group-wide timeout, do not say which member
was missing, and a group cannot be rebuilt without the dead rank (``new_group`` is itself
collective). The c10d store of the same process group gives what fault handling needs: a wait with
its own timeout per key (so the error names the missing peer), an atomic ``compare_set`` on which
all nodes agree who failed, and a swarm that goes on without a peer. Messages are small (text and
token ids, about 10 kB per completion) and a round lasts seconds to minutes, so the bytes through
one store server cost little next to generation. Only bytes move: payloads are JSON, never pickles,
and every peer message is schema-checked (:func:`parse_message`); the transport never decides who
sent a message: any rank can write any store key, so the swarm's receive verifies each message's
signature against the roster (:mod:`dgrpo.swarm.identity`) before anything else, then applies the
protocol's rules (:mod:`dgrpo.swarm.protocol`).

The process group itself (gloo on CPU, NCCL when every local rank has a GPU) is initialised for
whatever needs collectives later (e.g. robust aggregation of shared updates); no round waits on it.

Exchange protocol, for an exchange named ``tag`` (``r{round}`` for messages), keys under ``dgrpo/``:

    {tag}/data/{k}    node k's payload (set first); a round's messages are appended as frames
                      (:mod:`dgrpo.transports.framing`); ``eq{round}``: the signed messages k received
                      (:meth:`DistributedTransport.cross_check`, docs/protocol.md)
    {tag}/status/{k}  "posted", set by k after its payload, or "failed", set by the first node that
                      timed out waiting for k. Both go through ``compare_set(key, "", value)``, so
                      the first writer decides for every node: all nodes agree whether k took part.

A node waits for each live peer until ``swarm.timeout_s`` after posting its own payload. A peer
declared failed is named in the log; with ``on_peer_failure=abort`` the node raises
:class:`PeerFailure` (the CLI exits non-zero), with ``continue`` it drops the peer from this and all
later exchanges. A node that finds itself declared failed (it stalled past its peers' timeout)
leaves with :class:`PeerFailure`. A node that stops on an error marks its next exchanges failed on
the way out, so its peers need not wait for the timeout.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import time
from typing import TYPE_CHECKING, Iterable

from dgrpo.errors import ConfigError, PeerFailure
from dgrpo.registry import LazyModule, register
from dgrpo.swarm.protocol import compare_views
from dgrpo.transports.framing import frame, relayed, unframe
from dgrpo.transports.rendezvous import _seconds, config_fingerprint, join_group, pick_backend  # noqa: F401 (re-exported)
from dgrpo.swarm.validation import parse_message
from dgrpo.types import Message

if TYPE_CHECKING:
    from dgrpo.config import RunConfig

log = logging.getLogger(__name__)
torch = LazyModule("torch")  # imported on first use: a config naming this transport imports this module
dist = LazyModule("torch.distributed")

LABELS = frozenset({"honest", "poisoned", "malicious"})  # simulation ground truth (metrics only)
MAX_PAYLOAD_BYTES = 64 * 2**20  # a peer's payload is refused unread above this (JSON parser memory)
_POSTED, _FAILED = b"posted", b"failed"
class DistributedTransport:
    """All-gather of a round's messages between torchrun ranks, one swarm node per rank.

    Args:
        store: the process group's c10d store (keys are put under ``dgrpo/``).
        rank / world_size: this node's id and the swarm size.
        honest: ids of honest nodes (the lowest live one writes metrics).
        timeout_s: how long to wait for a peer after posting (``swarm.timeout_s``).
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
    """

    def __init__(self, store: dist.Store, rank: int, world_size: int, *, honest: Iterable[int], timeout_s: float,
                 on_peer_failure: str = "abort", max_messages: int = 1 << 20):
        self.store = dist.PrefixStore("dgrpo", store)
        self.rank, self.world_size = rank, world_size
        self.local_nodes = [rank]
        self.honest = sorted(honest)
        self.timeout_s, self.on_peer_failure, self.max_messages = timeout_s, on_peer_failure, max_messages
        self.alive = set(range(world_size))
        self.failed, self.labels, self.rejected = {}, {}, []  # see transports/base.py: Transport
        self.first_round = 0  # every rank starts together (a world of fixed size)
        self.verifier = None
        self.equivocators: dict[int, int] = {}
        self._own_keys: list[str] = []  # payload keys of the previous exchange, deleted once peers moved on
        self._last_round: int | None = None
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
        store, rank, world, backend = join_group(cfg)
        transport = cls(store, rank, world, honest=range(world), timeout_s=sw.timeout_s,
                        on_peer_failure=sw.on_peer_failure, max_messages=sw.prompts_per_round * sw.group_size)
        # Each rank knows only whether it itself attacks (its own config); which ranks report metrics
        # is decided from what each declares, never from the others' entries of swarm.malicious.
        roles = transport.gather_values("role", "attacker" if rank in set(sw.malicious) else "honest",
                                        timeout_s=sw.startup_timeout_s)
        transport.honest = sorted(n for n, role in roles.items() if role == "honest")
        prints = transport.gather_values("config", config_fingerprint(cfg), timeout_s=sw.startup_timeout_s)
        odd = sorted(n for n, fp in prints.items() if fp != prints[min(prints)])
        if odd:
            raise ConfigError(f"nodes {odd} run another config than node {min(prints)}: every rank needs the same "
                              "config and overrides (out_dir, threads, tensorboard and tracking may differ)")
        log.info("node %d of %d joined (backend %s)", rank, world, backend)
        return transport

    # ------------------------------------------------------------------ roles
    @property
    def is_main(self) -> bool:
        """The lowest live honest node writes metrics, plots and the run's metadata."""
        live = [n for n in self.honest if n in self.alive]
        return bool(live) and live[0] == self.rank

    # ------------------------------------------------------------------ exchange
    @staticmethod
    def _raise(err: Exception):
        raise err

    def _store_call(self, fn, *args):
        try:
            return fn(*args)
        except dist.DistError as err:
            raise PeerFailure(f"node {self.rank} lost the rendezvous store (MASTER_ADDR:MASTER_PORT; hosted by the "
                              f"torchrun agent of the first machine, or by rank 0 without torchrun): "
                              f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}") from err

    def _arrived(self, key: str, deadline: float) -> bool:
        """Wait for a status key until ``deadline``; on timeout try to declare it failed. True if posted."""
        try:
            self.store.wait([key], _seconds(deadline - time.monotonic()))
        except dist.DistStoreError:
            pass  # timed out; the compare_set below decides (the peer may have posted meanwhile)
        except dist.DistError as err:  # the store's host died while we waited (DistNetworkError)
            self._store_call(self._raise, err)
        return self._store_call(self.store.compare_set, key, "", "failed") == _POSTED

    def post(self, tag: str, payload: bytes, framed: bool = False) -> None:
        """Publish this node's payload of exchange ``tag`` (``framed``: appended as a frame).

        Raises:
            PeerFailure: the peers already declared this node failed in ``tag``.
        """
        data_key = f"{tag}/data/{self.rank}"
        if framed:
            self._store_call(self.store.append, data_key, frame(payload))
        else:
            self._store_call(self.store.set, data_key, payload)
        self._own_keys.append(data_key)
        state = self._store_call(self.store.compare_set, f"{tag}/status/{self.rank}", "", "posted")
        if state != _POSTED:
            self.alive.discard(self.rank)
            raise PeerFailure(f"node {self.rank} was declared failed by its peers in exchange {tag!r}: it came more "
                              f"than swarm.timeout_s={self.timeout_s:g}s after them (stalled?); leaving the swarm")

    def collect(self, tag: str, peers: Iterable[int], deadline: float | None = None) -> dict[int, bytes]:
        """Payloads of ``peers`` in exchange ``tag``, waiting until ``deadline`` (default: now + timeout_s).

        Peers that miss it are declared failed (see module docstring) and left out.

        Raises:
            PeerFailure: a peer failed and ``on_peer_failure`` is ``abort`` (names every missing peer).
        """
        deadline = time.monotonic() + self.timeout_s if deadline is None else deadline
        got, missing = {}, []
        for peer in sorted((set(peers) & self.alive) - {self.rank}):
            if self._arrived(f"{tag}/status/{peer}", deadline):
                got[peer] = self._store_call(self.store.get, f"{tag}/data/{peer}")
            else:
                missing.append(peer)
        if missing:
            self._declare_failed(missing, tag)
        return got

    def _declare_failed(self, peers: list[int], tag: str) -> None:
        nxt = 0 if self._last_round is None else self._last_round + 1
        for peer in peers:
            self.alive.discard(peer)
            self.failed[peer] = tag
            # Also for the next message round, so that a peer missed only by this node (a metrics
            # exchange) is dropped by every node: all keep training on the same messages.
            self._store_call(self.store.compare_set, f"r{nxt}/status/{peer}", "", "failed")
        what = f"node{'s' if len(peers) > 1 else ''} {', '.join(map(str, peers))}"
        text = (f"{what} sent nothing for exchange {tag!r} within swarm.timeout_s={self.timeout_s:g}s "
                "(dead or stalled)")
        if self.on_peer_failure == "abort":
            log.error("%s; aborting (swarm.on_peer_failure=abort)", text)
            raise PeerFailure(f"{text}; aborted (set swarm.on_peer_failure=continue to go on without it)")
        log.warning("%s; continuing without it (swarm.on_peer_failure=continue)", text)

    def exchange(self, tag: str, payload: bytes, framed: bool = False) -> dict[int, bytes]:
        """Post ``payload`` and collect every live peer's (own payload included, under this rank)."""
        stale, self._own_keys = self._own_keys, []
        self.post(tag, payload, framed)
        deadline = time.monotonic() + self.timeout_s
        got = {self.rank: payload, **self.collect(tag, range(self.world_size), deadline)}
        # Every live peer has posted `tag`, so it is done reading what this node posted before.
        for key in stale:
            self._store_call(self.store.delete_key, key)
        return got

    def gather_values(self, tag: str, value: str, timeout_s: float | None = None) -> dict[int, str]:
        """Every live node's ``value`` (a small string), e.g. to agree on a run name or check configs."""
        saved = self.timeout_s
        self.timeout_s = timeout_s or saved
        try:
            return {n: b.decode() for n, b in self.exchange(tag, value.encode()).items()}
        finally:
            self.timeout_s = saved

    def agree(self, tag: str, value: str) -> str:
        """The lowest live node's ``value``: the one all nodes use (run names differ by start second)."""
        values = self.gather_values(tag, value)
        return values[min(values)]

    def collect_at_main(self, tag: str, payload: bytes, senders: Iterable[int]) -> dict[int, bytes] | None:
        """The main rank collects the payloads of ``senders`` (a sender missing the timeout is declared
        failed); any other rank posts its own and gets None."""
        if not self.is_main:
            self.post(tag, payload)
            return None
        return self.collect(tag, senders)

    # ------------------------------------------------------------------ messages
    def encode(self, messages: list[Message]) -> bytes:
        """This node's payload: its messages and, beside them, their ground-truth labels (metrics only)."""
        return json.dumps({"messages": [m.to_dict() for m in messages],
                           "labels": [self.labels.get(m.key, "honest") for m in messages]}).encode()

    def decode(self, sender: int, payload: bytes) -> list[Message]:
        """Parse the frames under a peer's key; refuse (and log) anything malformed.

        ``sender`` only names the store key: the messages' authors are decided by their signatures
        (:meth:`dgrpo.swarm.swarm.Swarm.receive`), since any rank can append under any key.
        """
        def refuse(reason: str) -> None:
            log.warning("rejected message from node %d: %s", sender, reason)
            self.rejected.append((sender, reason))

        if len(payload) > MAX_PAYLOAD_BYTES:
            refuse(f"size: payload of {len(payload)} bytes (limit {MAX_PAYLOAD_BYTES})")
            return []
        out = []
        for body in unframe(payload) or [payload]:  # (an unframed payload: one JSON object)
            try:
                data = json.loads(body)
            except (ValueError, RecursionError) as err:  # (not UTF-8, not JSON, nested too deep)
                refuse(f"schema: payload is not JSON ({type(err).__name__}: {str(err)[:80]})")
                continue
            if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
                refuse("schema: payload must be an object with a 'messages' list")
                continue
            raws, labels = data["messages"], data.get("labels")
            labels = labels if isinstance(labels, list) and len(labels) == len(raws) else ["honest"] * len(raws)
            if len(raws) > self.max_messages:
                refuse(f"size: {len(raws)} messages (limit {self.max_messages}); the excess is dropped")
                raws = raws[: self.max_messages]
            for raw, label in zip(raws, labels):
                msg, reason = parse_message(raw)
                if msg is None:
                    refuse(reason)
                    continue
                if msg.key not in self.labels:  # simulation truth, metrics only; the first frame's stays
                    self.labels[msg.key] = label if isinstance(label, str) and label in LABELS else "honest"
                out.append(msg)
        return out

    def cross_check(self, round_idx: int, messages: list[Message]) -> list[Message]:
        """Every node relays the signed messages it received this round; each node then

        * drops every message of a sender that signed different completions for one slot
          (:func:`dgrpo.swarm.protocol.equivocators`: each honest node sees the same proofs), and
        * adds the validly signed messages of this round that a peer received and it did not (a rank
          replaced the sender's store key after some peers read it), so all use the same messages.
        """
        relay = {"messages": [m.to_dict() for m in messages if m.signature is not None]}
        try:
            reports = self.exchange(f"eq{round_idx}", json.dumps(relay).encode())
        except (TypeError, ValueError):  # a field that is not JSON: its message fails in receive anyway
            return messages
        limit = self.max_messages * self.world_size
        views = {n: messages if n == self.rank else relayed(raw, limit) for n, raw in reports.items()}
        caught, extra = compare_views(self.rank, views, self.verifier, round_idx)
        for node, reason in caught.items():
            log.warning("rejected every message from node %d in round %d: %s", node, round_idx, reason)
            self.rejected.append((node, reason))
            self.equivocators.setdefault(node, round_idx)
        if extra:
            log.warning("round %d: %d signed messages of nodes %s reached this node only through peers' relays "
                        "(their store keys were overwritten?)", round_idx, len(extra), sorted({m.node for m in extra}))
        merged = sorted([*messages, *extra], key=lambda m: m.node)  # stable: a node's own order, then recovered
        return [m for m in merged if m.node not in caught]

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
        self.rejected = []
        self._last_round = round_idx
        payloads = self.exchange(f"r{round_idx}", self.encode(mine), framed=True)
        out: list[Message] = []
        for node in sorted(payloads):
            out += mine if node == self.rank else self.decode(node, payloads[node])
        return out if self.verifier is None else self.cross_check(round_idx, out)

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Clean end of the run: wait (up to timeout_s) until every live peer is done too.

        Without torchrun, rank 0 hosts the store; leaving first would cut the others off it.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.exchange("done", b"1")
        except PeerFailure as err:
            log.warning("at shutdown: %s", err)
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except (dist.DistError, RuntimeError) as err:  # a peer or the store is gone already
                log.warning("at shutdown: %s", " ".join(str(err).split())[:200])

    def _exit(self) -> None:
        """At interpreter exit without :meth:`close` (an error): mark this node's next exchanges
        failed so peers stop waiting for it at once instead of after the timeout."""
        if self._closed:
            return
        self._closed = True
        nxt = 0 if self._last_round is None else self._last_round + 1
        try:
            for tag in (f"r{nxt}", f"eq{nxt - 1}", f"rec{nxt - 1}", f"rec{nxt}", "done"):
                self.store.compare_set(f"{tag}/status/{self.rank}", "", "failed")
        except Exception:  # noqa: BLE001 - the store may be gone already; peers then time out
            pass


@register("transport", "distributed")
def distributed_transport(cfg: "RunConfig", resuming: bool = False) -> DistributedTransport:
    """One node per torchrun rank (:meth:`DistributedTransport.from_env`; ``resuming`` changes nothing)."""
    return DistributedTransport.from_env(cfg)
