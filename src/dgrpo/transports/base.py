"""The transport protocol: everything the run uses to talk to the rest of the swarm.

A process hosts some nodes (in-process: all of them; distributed and hivemind: one per process).
The run loop, its records, checkpoints and resume reach the other processes only through these
members, which every transport implements (the in-process one trivially), so no caller asks which
transport it has. Each transport module registers a builder ``(run config, resuming=False) ->
Transport`` (``resuming``: ``dgrpo resume`` rather than a fresh run).
"""

from __future__ import annotations

from typing import Iterable, Protocol

from dgrpo.types import Message


class Transport(Protocol):
    """Moves a round's messages, and small values, between the processes of a swarm.

    Attributes:
        local_nodes: ids of the nodes this process hosts.
        alive: nodes still in the swarm (a failed peer leaves it).
        failed: failed node → the exchange in which it was declared failed.
        rejected: (sender, reason) of peer messages refused in the last all-gather, before the swarm
            saw them.
        carriers: ``id(message)`` → the node whose store key (or record) it came under, for the messages
            of the last all-gather where the transport knows it (distributed; empty elsewhere): who
            delivered a replay or a copy, for the per-peer accounting only (any rank can write any key).
        peer_views: rank → (node, reason) pairs its transport refused in the last all-gather, as that rank
            reported them (distributed: shared in the cross-check, so peers.jsonl names what another rank
            saw; empty elsewhere); a report, never a strike.
        labels: message key → ground-truth label (``honest`` / ``poisoned`` / ``malicious``) of every
            message this process has seen; simulation metrics only, never read by a defense.
        first_round: the round this process's nodes start at: 0, or the round a node joining a
            running swarm writes first (hivemind ``swarm.hivemind.join``); a resumed joiner's
            checkpoint must hold that round.
        verifier: the run's signature check (:class:`dgrpo.swarm.identity.SignatureVerifier`, set by the run's
            build when ``swarm.protocol.sign``; None: unsigned). A transport that can show peers
            different payloads (distributed) uses it to relay signed messages and prove
            equivocation; the others keep it and need nothing more (docs/protocol.md).
    """

    local_nodes: list[int]
    alive: set[int]
    failed: dict[int, str]
    rejected: list[tuple[int, str]]
    carriers: dict[int, int]
    peer_views: dict[int, list[tuple[int | None, str]]]
    labels: dict[tuple, str]
    first_round: int
    verifier: object | None

    @property
    def is_main(self) -> bool:
        """Whether this process writes metrics, plots and the run's metadata."""

    def all_gather(self, local: dict[int, list[Message]]) -> list[Message]:
        """Alg.1 L6 / Alg.2 L7: every live node's messages, ordered by node id then sending order.

        Args:
            local: the messages written by the nodes this process hosts.
        """

    def gather_values(self, tag: str, value: str, timeout_s: float | None = None) -> dict[int, str]:
        """Every live process's ``value`` (a small string), keyed by its lowest hosted node; also a barrier."""

    def agree(self, tag: str, value: str) -> str:
        """The value every process uses: the lowest live node's ``value``."""

    def collect_at_main(self, tag: str, payload: bytes, senders: Iterable[int]) -> dict[int, bytes] | None:
        """Bring ``payload`` of the processes hosting ``senders`` to the main process.

        Returns:
            On the main process: sender node → payload, for the senders it does not host itself.
            Elsewhere: None (after posting this process's payload).
        """

    def late_records(self, tag: str, senders: Iterable[int]) -> dict[int, bytes]:
        """On the main process, read again, briefly, the payloads of ``tag`` that :meth:`collect_at_main` missed (round
        records a held sender posted late: still the round's metrics); elsewhere ``{}``. A payload still missing fails
        nobody."""

    def last_records(self, wanted: dict[str, Iterable[int]]) -> dict[str, dict[int, bytes]]:
        """At the run's end, on the main process: the run's last round records that :meth:`collect_at_main` missed
        (``wanted``: tag → senders), read for a bounded wait (distributed: after posting this process's ``done``, until
        each sender's are in or its own ``done`` is served, at most ``timeout_s``); tag → sender → payload, ``{}``
        elsewhere. A payload still missing fails nobody."""

    def check_startup(self, protocol, timeout_s: float) -> str:
        """Before round 0: stop the run (one line naming the rank) when the values every process must
        share (run context, roster, honest nodes) differ between processes. A transport whose peers
        cannot show each other different values (in-process) or that checks them at launch (hivemind,
        :mod:`dgrpo.transports.dht.launch`) checks nothing here.

        Returns:
            this launch's id: a value every process of the launch holds and no single process chose
            (in-process: 32 fresh random hex digits; distributed: the SHA-256 of every rank's signed launch
            nonce; hivemind: the launch id, a hash of every initial node's hello nonce). Messages are
            signed for it (:meth:`dgrpo.swarm.protocol.Protocol.bind_launch`).

        Raises:
            PeerFailure: a peer's values differ or do not verify (distributed).
        """

    def starts_at(self, first: int) -> None:
        """The run's first round in this process is ``first`` (a fresh run's :attr:`first_round`, a resumed run's
        agreed round); called once, before its evaluation and compute. Distributed clocked rounds
        (``swarm.protocol.schedule=clock``): round ``first`` has the agreed start ``T0`` as its post deadline, and this
        node's skip-notice watcher is armed for it, so a node still computing then serves its signed notice
        (:mod:`dgrpo.transports.skips`). Elsewhere nothing."""

    def exchanged_keys(self):
        """Without a roster file: ``({node: its private key} for this process's nodes, Roster)`` of the keys the
        transport exchanged at start-up, which the run's messages are signed and checked with; None when it
        exchanged none (a roster file, or a transport whose protocol keys are made elsewhere: in-process,
        hivemind)."""

    def announce_stop(self, reason: str) -> None:
        """Tell the peers, before leaving at start-up, why this process stops (distributed: signed for its
        server's launch and pushed to its peers' servers, so one still reading quotes it instead of calling
        it silent; in-process and hivemind: nothing, their peers learn it otherwise)."""

    def close(self) -> None:
        """End of the run: wait until every live peer is done too."""
