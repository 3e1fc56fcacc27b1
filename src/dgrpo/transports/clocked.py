"""Clocked rounds for the torch.distributed transport (``swarm.protocol.schedule=clock``; issue 31, task h31v).

Why. In the default schedule (``relative``, :mod:`dgrpo.transports.waits`) every node decides its round-``n`` message
set on its own clock: its own post plus windows, held longer for late peers. A malicious rank makes victims late (it
withholds their relays) and then serves its payload so that it lands inside the late victims' windows but after the
on-time node left: the honest nodes train on different sets (s4n2ev2, docs/distributed.md "Held victims ...",
*Limits (open)*). No rule local to the victims closes it. Here nobody's deadline depends on anyone's lateness:

* A common schedule fixed at start-up (:func:`agree_start`): every rank proposes a start (wall-clock seconds,
  ``time.time()``), signed and compared by every rank (the start-up exchange ``clock``,
  :mod:`dgrpo.transports.startagree`: the same values everywhere or the run stops in one line); ``T0`` is the latest. Round ``n`` then has the absolute
  deadlines of :class:`Clock`: post by ``P_n = T0 + n·round_s``, direct reads count until ``A_n = P_n + a``, relays
  until ``B_n = A_n + b`` (``a`` = ``swarm.protocol.direct_s``, ``b`` = ``swarm.protocol.relay_s``). No node waits on
  any peer past them.
* Phase 1: a node whose round payload is ready by ``P_n`` (its own clock) serves it; one that is not does not serve
  that round at all (:func:`gather_round`: every node leaves it out alike, never half-seen). Each node reads every
  live peer's payload until ``A_n``: what it read whole by then is *direct*.
* Phase 2: each node serves its relay (the owner-signed messages it read directly; served by its own server, whose
  address its roster key signed) as soon as its direct reads end, and reads every peer's relay until ``B_n``. A
  message relayed by ``j`` counts only if ``j`` is not its signer (two signatures: owner and relayer; Dolev-Strong's
  rule for ``f = 1``).
* The round's set is direct ∪ relayed-by-a-non-owner (:func:`round_set`; in the transport
  :func:`~dgrpo.swarm.protocol.merge_views`, which already counts a relay only for others' messages): a union, so
  nobody drops a message on another peer's word.

Why the honest sets are equal (``f = 1``; the assumptions below): an honest owner that served by ``P_n`` is read by
every honest node by ``A_n`` (margin ``a`` covers an honest transfer), so its messages are direct everywhere. The
attacker's message read directly by some honest node by ``A_n`` is in that node's relay, read by every honest node by
``B_n`` (``b`` covers an honest relay), so it is in every honest set; read by no honest node by ``A_n``, only the
attacker itself could relay it, and its own relay does not count for its own messages. Any other message the
attacker relays is an honest node's, in every set already. Equivocation (two contents for one slot) reaches every
honest node the same way, so all drop the equivocator alike.

Assumptions, and what happens when they fail: (1) the ranks' wall clocks agree within a skew well under ``a`` and
``b`` (one machine; else NTP): with a larger skew a node's deadlines fall before or after its peers'. (2) an honest
payload is served and read whole within ``a`` of ``P_n``, an honest relay within ``b`` of ``A_n``: a slower link
leaves that payload out of some sets. (3) a node's compute of round ``n`` fits between ``B_{n-1}`` and ``P_n``
(``round_s − a − b``): a node past ``P_n`` skips the round; it serves a signed skip notice instead
(:mod:`dgrpo.transports.skips`), and is accused by nobody while its messages were in one of the last ``max_skips``
round sets (before, it was missing at every peer's ``A_n``, accused by each and expelled by the quorum: task h31k). Accusations keep their rules (a payload or relay missing at
its deadline is accused by whoever missed it; a quorum expels): under the assumptions an honest node is missed by
nobody honest, so at most the attacker accuses it, alone.
"""

from __future__ import annotations

import logging
import math
import re
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Hashable

from dgrpo.swarm.clockconfig import windows
from dgrpo.transports.framing import cap_of
from dgrpo.transports.skips import Skips, read_notice

if TYPE_CHECKING:
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.types import Message

log = logging.getLogger("dgrpo.transports.distributed")

LEAD = 2.0  # T0 is this many round_s after the proposer's proposal: round 0's compute and the agreement itself
_POLL_S = 0.05  # pause between two reads of a peer that has not served yet
_GRACE_S = 1.0  # a read in flight at its deadline ends by then (PeerChannel.fetch); waited for at most this long
_ENTRY_S = {"r": 0.5, "eq": _GRACE_S + 0.5}  # a node entering an exchange this long past its opening blames nobody
# (or past half its window, direct_s or relay_s, if less: review h31r2)


@dataclass(frozen=True)
class Clock:
    """The common schedule of clocked rounds (wall-clock seconds, ``time.time()``).

    Attributes:
        t0: round 0's post deadline ``P_0`` (agreed at start-up: :func:`agree_start`).
        round_s: seconds between two rounds' post deadlines (``swarm.protocol.round_s``).
        direct_s: ``a``, from ``P_n`` to the end of direct reads ``A_n``.
        relay_s: ``b``, from ``A_n`` to the end of relay reads ``B_n``.
        first: the run's first round here (a resumed run's: the round it resumes at), whose post deadline is ``t0``.
    """

    t0: float
    round_s: float
    direct_s: float
    relay_s: float
    first: int | None = 0

    def post_by(self, n: int) -> float:
        """``P_n``: a node serves round ``n``'s payload by then or not at all."""
        return self.t0 + (n - self.first) * self.round_s

    def direct_until(self, n: int) -> float:
        """``A_n = P_n + a``: a payload read whole by then is direct."""
        return self.post_by(n) + self.direct_s

    def relay_until(self, n: int) -> float:
        """``B_n = A_n + b``: a relay read by then counts."""
        return self.direct_until(n) + self.relay_s


def bound_of(clock: Clock, tag: str | None) -> tuple[str, float] | None:
    """(setting, seconds) that bounds exchange ``tag`` on the clock, as failure lines name it: ``r{n}``:
    ``swarm.protocol.direct_s`` (read from ``P_n``), ``eq{n}``: ``swarm.protocol.relay_s`` (from ``A_n``), None (a
    round, post to post): ``swarm.protocol.round_s``; any other exchange (records, ``done``): None, ``swarm.timeout_s``
    still bounds it (task h31k: every clocked line said ``within swarm.timeout_s``)."""
    if tag is None:
        return "swarm.protocol.round_s", clock.round_s
    kind = "r" if re.fullmatch(r"r\d+", tag) else "eq" if re.fullmatch(r"eq\d+", tag) else None
    return {"r": ("swarm.protocol.direct_s", clock.direct_s), "eq": ("swarm.protocol.relay_s", clock.relay_s)}.get(kind)


# ------------------------------------------------------------------ the set rule (pure)
def relay_of(direct: dict[Hashable, tuple[int, float]], clock: Clock, n: int) -> dict[Hashable, int]:
    """What an honest node relays in round ``n``: key → owner of each message it read directly by ``A_n``
    (``direct``: key → (owner, when read, wall-clock seconds); its own messages: read when served)."""
    end = clock.direct_until(n)
    return {k: owner for k, (owner, at) in direct.items() if at <= end}


def round_set(own: int, direct: dict[Hashable, tuple[int, float]],
              relays: dict[int, tuple[float, dict[Hashable, int]]], clock: Clock, n: int) -> set:
    """The keys of node ``own``'s round-``n`` set: direct ∪ relayed-by-a-non-owner.

    Args:
        own: this node.
        direct: key → (owner, when this node read it whole, wall-clock seconds); counted if read by ``A_n``.
        relays: relayer → (when this node read its relay, {key: owner}); a relay counts if read by ``B_n``, and then
            only for keys whose owner is not the relayer (``own``'s entry, if any, is ignored: its relay is its direct
            reads).

    Returns:
        the set of keys this node trains on (the transport applies the same rule to signed messages: its direct reads
        end at ``A_n``, its relay reads at ``B_n``, and :func:`~dgrpo.swarm.protocol.merge_views` drops a relay's own
        messages).
    """
    out = set(relay_of(direct, clock, n))
    end = clock.relay_until(n)
    for j, (at, items) in relays.items():
        if j != own and at <= end:
            out |= {k for k, owner in items.items() if owner != j}
    return out


# ------------------------------------------------------------------ the transport's side
def _mono(wall: float) -> float:
    """Monotonic time of wall-clock instant ``wall`` (as this process's clocks stand now)."""
    return time.monotonic() + (wall - time.time())


def agree_start(t: "DistributedTransport", protocol_cfg, startup_timeout_s: float, bound_s: float | None = None) -> Clock:
    """The run's :class:`Clock`: every rank proposes its wall clock + :data:`LEAD` × round_s, signed and compared by
    every rank (start-up exchange ``clock``: every rank holds the same values or the run stops), and ``T0`` is the
    latest proposal, so it is at least :data:`LEAD` rounds after every honest rank proposed (a proposal in the past
    cannot make the honest ranks skip their first rounds); it must lie within startup_timeout_s of the second-latest
    proposal (of 3 ranks or more; with 2, of this rank's now + LEAD × round_s), so a proposal far ahead cannot stall
    the run for longer, and every rank decides it from the same values alike. With ``round_s: auto`` each proposal
    also carries its rank's round_s (``t.round_estimate``, seconds), the agreed one is the largest, at most
    ``bound_s`` (``swarm.timeout_s``), ``T0`` leaves every honest proposer LEAD agreed rounds, and the bound above
    applies to each proposer's now (its start less LEAD × its round_s, at most the agreed one; with 2 ranks: within
    startup_timeout_s of this rank's now), so neither an honest rank's larger round_s is a start far ahead nor an
    attacker's tiny one stretches T0 past the bound (:mod:`dgrpo.transports.clockauto`, review r31p).

    Raises:
        PeerFailure: one line naming the rank whose proposal is not such a time, or (auto) not in the one form
            (said to the peers, signed), or a two-faced one (:func:`~dgrpo.transports.startagree.checked_values`).
    """
    from dgrpo.errors import PeerFailure
    from dgrpo.transports import clockauto

    auto = protocol_cfg.round_s == "auto"
    r = t.round_estimate if auto else windows(protocol_cfg)[0]
    mine = clockauto.proposal(time.time() + LEAD * min(r, bound_s), r) if auto else f"{time.time() + LEAD * r:.3f}"
    values = t.gather_values("clock", mine, timeout_s=startup_timeout_s)
    now, times, props = time.time(), {}, {}
    if auto:
        props, malformed = clockauto.parse(values)
        if malformed:
            why = (f"node {malformed[0]} proposed the clock start and round_s {values[malformed[0]][:40]!r}, not "
                   "'{start:.3f} {round_s:.3f}' with round_s > 0 (swarm.protocol.round_s=auto): stopping before round 0")
            t.chan.announce_stop(why)
            raise PeerFailure(why)
        agreed = clockauto.agree(props, bound_s)
        clockauto.say(t.rank, agreed, props, bound_s)
        t._notes.extend(clockauto.slow(agreed, props, bound_s))  # (peers.jsonl of the first round here: task h31h)
        r = agreed.round_s
    for node, raw in sorted(values.items()):
        try:  # (auto: the proposer's now, its start less LEAD × its round_s, at most the agreed one: review r31p)
            times[node] = props[node][0] - LEAD * min(props[node][1], r) if auto else float(raw)
        except ValueError:
            times[node] = math.nan
    # (the bound is a function of the agreed values alone, so every honest rank decides alike, review h31r: judged
    # against each rank's clock when its gather returned, which the attacker sets by when it serves each its value, a
    # value at the edge stopped one honest rank and left the others waiting for T0. The second-latest proposal lies
    # within the honest ones when one rank of 3 or more lies; with 2 there is one honest rank: its own clock)
    finite = sorted(v for v in times.values() if math.isfinite(v))
    ref = finite[-2] if len(times) >= 3 and len(finite) >= 2 else now + (0 if auto else LEAD * r)
    bad = [k for k, v in times.items() if not (math.isfinite(v) and v <= ref + startup_timeout_s)]
    if bad:
        ahead = props[bad[0]][0] if auto else times[bad[0]]
        why = (f"node {bad[0]} proposed the clock start {values[bad[0]][:24]!r} ({ahead - now:+.1f}s from node "
               f"{t.rank}'s clock), not a time within swarm.startup_timeout_s of the other proposals: stopping "
               "before round 0 (check the ranks' clocks: swarm.protocol.schedule=clock needs one clock, or NTP)")
        t.chan.announce_stop(why)
        raise PeerFailure(why)
    t0 = clockauto.start(props, r, LEAD) if auto else max(times.values())  # (auto: max(times) + LEAD · r)
    _, a, b = windows(protocol_cfg, r)
    log.info("node %d: clocked rounds from T0=%.3f (%.2fs from now), round_s=%g, direct_s=%g, relay_s=%g",
             t.rank, t0, t0 - now, r, a, b)
    return Clock(t0, r, a, b, first=None)


def collect(t: "DistributedTransport", tag: str, peers, deadline: float, cap: int,
            skipped: bool = False) -> dict[int, bytes]:
    """Payloads of live ``peers`` in exchange ``tag`` read whole by ``deadline`` (monotonic): no extension, no hold.
    A peer missing then is named and accused (:func:`~dgrpo.transports.unserved.blame_unserved`), one over its cap
    named (a round payload's or relay's accused), and failed for the round under ``on_peer_failure``; unless this
    node entered the exchange late (past ``P_n`` + 0.5 s for ``r{n}``; past its direct reads' end + 1.5 s for
    ``eq{n}``; or past half of ``direct_s`` / ``relay_s`` if less: with less than half its window left it read too
    little to blame anyone, review h31r2) or ``skipped`` round ``n`` (its payload was not ready by ``P_n``: it serves none): it then names the
    peers it missed in a WARNING and accuses nobody (honest nodes late together, by a load spike, a clock, or the
    attacker's completions at the length cap that lengthen every honest node's compute alike, would otherwise make a
    quorum against on-time ones or, late by less than the margin, against each other: review h31r2). A peer that
    served its valid skip notice of round ``n`` (:func:`~dgrpo.transports.skips.read_notice`) is not accused of ``r{n}``
    nor ``eq{n}`` while :meth:`Skips.honoured <dgrpo.transports.skips.Skips.honoured>`; past ``max_skips`` it is a
    missing payload.

    Raises:
        PeerFailure: a peer failed and ``on_peer_failure`` is ``abort`` (names it), or a quorum expelled this node.
    """
    from dgrpo.transports.alone import stop_if_alone
    from dgrpo.transports.unserved import blame_unserved

    ex = t.exchanger
    kind, n = ("r", int(tag[1:])) if tag.startswith("r") else ("eq", int(tag[2:]))
    opened = t.clock.post_by(n) if kind == "r" else t.clock.direct_until(n)
    margin = min(_ENTRY_S[kind], (t.clock.direct_s if kind == "r" else t.clock.relay_s) / 2)
    entered_late = skipped or time.time() > opened + margin
    ex.ledger.live_at(tag)
    ex.first = ex.first or (tag if tag.startswith("r") else None)
    pending = sorted((set(peers) & t.alive) - {t.rank})
    live = sorted(t.alive - {t.rank})
    skips = getattr(t, "skips", None)  # (signed skip notices: transports/skips.py)
    unexcused: list[int] = []  # peers whose notice of round n is not honoured (past max_skips): missing
    got: dict[int, bytes] = {}
    bad: dict[int, str] = {}
    slow: dict[int, str] = {}
    reads, retry = {}, {}
    pool = ThreadPoolExecutor(max_workers=max(1, len(pending)), thread_name_prefix=f"dgrpo-clock-{t.rank}")
    try:
        while pending:
            now = time.monotonic()
            if now >= deadline and not reads or now >= deadline + _GRACE_S:
                break
            for p in pending:
                if p not in reads and now < deadline and now >= retry.get(p, 0.0):
                    reads[p] = pool.submit(t.chan.fetch, p, f"{tag}/data/{p}", cap, deadline, deadline - now)
            if reads:
                wait(list(reads.values()), timeout=_POLL_S, return_when=FIRST_COMPLETED)
            else:
                time.sleep(max(0.0, min(_POLL_S, deadline - now)))
            for p in [p for p in pending if p in reads and reads[p].done()]:
                data, problem = reads.pop(p).result()
                if data is not None and kind == "r" and skips is not None and read_notice(t, p, n, data):
                    pending.remove(p)  # (it skips round n, signed: no payload of it anywhere, accused only past
                    if not skips.hold(p, n, data):  # max_skips rounds out of the sets, alike at every honest node)
                        unexcused.append(p)
                    log.info("node %d: node %d skips round %d (signed notice; %s)", t.rank, p, n,
                             "honoured" if p not in unexcused else f"past swarm.protocol.max_skips={skips.max_skips}")
                    if p not in unexcused:  # (named, never a strike: peers.jsonl, task h31h; past it: accused)
                        t._refuse(p, f"skip: node {p} served its signed skip notice of round {n}, honoured "
                                     f"(swarm.protocol.max_skips={skips.max_skips})")
                elif data is not None:
                    got[p] = data
                    pending.remove(p)
                    slow.pop(p, None)
                elif problem is not None and problem.startswith("slow"):
                    slow[p] = problem
                    retry[p] = time.monotonic() + _POLL_S
                elif problem is not None:
                    bad[p] = problem
                    pending.remove(p)
                else:
                    retry[p] = time.monotonic() + _POLL_S
            ex.ledger.refresh()
            if ex.ledger.poll():
                ex._check_out()
                for p in list(pending):  # (one out already: a lone accuser in a swarm of 2, alone.lone_accuser)
                    if (out := ex.ledger.expelled(p) if p in t.alive else (tag, [])) is not None:
                        pending.remove(p)
                        ex._expel(p, *out)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    pending = sorted(pending + unexcused)
    if kind == "eq" and skips is not None and (excused := skips.excused(n) & set(pending)):
        log.info("node %d: exchange %r: nodes %s skipped round %d (signed notices): not accused of its relay", t.rank,
                 tag, sorted(excused), n)
        pending = [p for p in pending if p not in excused]
    if entered_late and pending:  # (outside the schedule's assumptions: its set may differ; it blames nobody)
        log.warning("node %d: %s exchange %r %.2fs past its opening: nodes %s not read by its deadline (this node is "
                    "late: not accused)", t.rank, "skipped" if skipped else "entered", tag, time.time() - opened, pending)
        pending = []
    for peer, problem in sorted(bad.items()):
        log.warning("node %d: exchange %r: node %d's server %s", t.rank, tag, peer, problem)
        t._refuse(peer, f"transport: exchange {tag!r}: {problem[:160]}")
    accused = blame_unserved(ex, tag, pending, bad, slow, set(), False)
    for peer in sorted(set(pending) | set(accused)):
        if (out := ex.ledger.expelled(peer)) is not None:
            ex._expel(peer, *out)
    if pending or accused:
        ex.ledger.forget()
        ex.ledger.refresh()
    stop_if_alone(ex, tag, live, pending, bool(got or bad))
    if pending or bad:
        ex._fail([p for p in pending if p not in slow], tag, "sent nothing", sorted(set(bad) | set(pending) & set(slow)))
    return got


def _exchange(t: "DistributedTransport", tag: str, payload: bytes | None, deadline: float,
              framed: bool = False) -> dict[int, bytes]:
    """Serve ``payload`` (None: nothing, a skipped round) and read every live peer's until ``deadline`` (monotonic),
    keeping this node's earlier keys served as :meth:`DistributedTransport.exchange` does."""
    stale, t._own_keys = t._own_keys, []
    if payload is not None:
        t.post(tag, payload, framed)
    t._own_keys = stale + t._own_keys
    got = collect(t, tag, range(t.world_size), deadline, cap_of(tag, t.caps, t.world_size), skipped=payload is None)
    if payload is not None:
        got = {t.rank: payload, **got}
    t._own_keys = t._own_keys[len(stale):]
    t._held.append(stale)
    lagging = any(p not in got for p in t.alive if p != t.rank)
    while len(t._held) > (t.HELD if lagging else 1):
        for key, _, _ in t._held.pop(0):
            t.chan.delete_key(key)
    return got


def start_at(t: "DistributedTransport", first: int) -> None:
    """Before the run's first round here (``first``: 0, or the round a resumed run resumes at, agreed by every rank):
    round ``first`` has the post deadline ``T0``, and this node's watcher serves its signed skip notice at ``T0`` if
    its payload is not served by then (:meth:`Skips.watch`). Before, the watcher started after the first round (task
    h31k), so a node still in its first compute at ``T0`` (its first evaluation, a first compile, a slower host)
    served nothing, every peer accused it at ``A_first`` and the quorum expelled it (task h31m). The notice is honoured
    as any other: rounds before ``first`` count as rounds its messages were in (:meth:`Skips.honoured`), so a node
    skipping from the start gets ``max_skips`` rounds, as later, counted alike at every honest node."""
    if t.clock.first is None:
        t.clock = replace(t.clock, first=first)
    if getattr(t, "skips", None) is None:
        t.skips = Skips(t)
    t.skips.watch(t.clock.first)


def gather_round(t: "DistributedTransport", mine: "list[Message]", round_idx: int) -> "list[Message]":
    """Round ``round_idx`` on the clock (module docstring): serve ``mine`` if ready by ``P_n`` (else skip it: its signed
    notice served instead, :class:`~dgrpo.transports.skips.Skips`, whose watcher serves the next round's at ``P_{n+1}``
    if this node is not ready by then), read
    the peers' payloads until ``A_n``, relay and read the relays until ``B_n``; return at ``B_n`` (not before) the
    round's messages."""
    from dgrpo.transports import crosscheck

    if t.clock.first is None or getattr(t, "skips", None) is None:  # (no starts_at: this is the first round here)
        start_at(t, round_idx)
    clock, n = t.clock, round_idx
    raw = t.encode(mine)
    late = time.time() - clock.post_by(n)
    if not t.skips.claim(n, late <= 0):  # (payload or signed notice, decided once: transports/skips.py)
        log.warning("node %d: round %d's payload was ready %.2fs past its post deadline (swarm.protocol.round_s=%g): "
                    "it skips the round, its signed skip notice served instead (no peer reads its payload, so every "
                    "node leaves it out alike)", t.rank, n, late, clock.round_s)
        raw = None
    blind = raw is None or time.time() > clock.post_by(n) + min(_ENTRY_S["r"], clock.direct_s / 2)  # (collect's late)
    got = _exchange(t, f"r{n}", raw, _mono(clock.direct_until(n)), framed=True)
    out: list = []
    for node in sorted(got):
        out += mine if node == t.rank else t.decode(node, got[node])
    if t.verifier is not None:
        out = crosscheck.cross_check(t, n, out, exchange=lambda tag, raw: _exchange(t, tag, raw,
                                                                                    _mono(clock.relay_until(n))))
    t.skips.settle(n, {m.node for m in out}, blind)  # (a round it entered late: no peer counted out of it)
    t.skips.watch(n + 1)  # (its notice at P_{n+1} if its payload is not served by then)
    t.ledger.report_lone_accusations(_mono(clock.relay_until(n)))
    time.sleep(max(0.0, clock.relay_until(n) - time.time()))  # (every node leaves the round at B_n: the records and
    return out  # `done` after it, whose waits count from each node's own post, find their peers in step)
