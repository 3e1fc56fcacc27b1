"""The ready barrier that ends the torch.distributed start-up (issue 31, must-have 5; review r31f H4, H10).

The start-up check (:meth:`DistributedTransport.check_startup`) has every rank read every rank's signed start-up
record from that rank's own server and compare the values. A server can show different readers different
records that it signed itself (same values, another launch nonce): every check passes, but the ranks compute
different launch ids and refuse each other's messages as ``run`` while they all train on (H4). Or it can withhold
its record from one reader, which stops while the others start round 0 (H10).

So after the check every rank serves a *ready* confirmation (``ready/data/{k}``), signed with its roster key for the
run and its launch nonce (review r31g J3: signed unbound, one of an earlier launch, relayed, blamed its honest
signer; now it verifies for nobody and is dropped): its launch id and the start-up record (launch nonce, server nonce, signature) it read from every rank. Nobody starts
round 0 before it holds a valid confirmation of every live rank within ``swarm.startup_timeout_s``
(:meth:`DistributedTransport.gather_values`: a rank that stopped first is named with its signed reason), and every
rank compares each confirmation with what it read itself:

* a rank k quoted with another record that k's key signed (for k's server launch, with the same values) signed two
  start-up records for this launch: that pair is a signed proof of equivocation, and every rank that sees it stops
  in one line naming k and both nonces;
* a confirmation that is malformed (:func:`parse`; review r31g J2), not signed by its rank, quotes a record its rank
  never signed, another set of ranks, or a launch id that is not that of its records names its signer (it signed a
  false statement, or its server served junk).

A rank whose check fails says why, signed (:meth:`PeerChannel.announce_stop`); a peer that already passed meets that
notice in its first round, relays it, and once the round's relays are in every node stops too unless a node read a
message the signer sent that round (:mod:`dgrpo.transports.startstops`), so the ranks either all start or all stop,
and the line names the rank that made them stop.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from typing import TYPE_CHECKING

from dgrpo.errors import PeerFailure
from dgrpo.transports.accusations import fetch_all
from dgrpo.transports.launchproof import line, other_launch

if TYPE_CHECKING:
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.signedstore import SignedStore

log = logging.getLogger("dgrpo.transports.storewait")
_CAP = 1 << 20  # bytes read from one server's confirmation, or its relay of every rank's
GRACE_S = 3.0  # past the deadline, how long a missing rank's signed stop notice is still looked for
_HEX32 = re.compile(r"[0-9a-f]{32}")  # a launch id (SignedStore.launch_id)
_RANK = re.compile(r"0|[1-9][0-9]{0,5}")  # a rank, as str(node)
_MAX_RANKS = 1 << 12  # records one confirmation may quote (every rank's; far above any swarm's size)


def _launch(records: dict) -> str:
    """The launch id of ``records`` (node → [nonce, …]): :meth:`SignedStore.launch_id`'s formula."""
    text = "|".join(f"{n}:{records[n][0]}" for n in sorted(records, key=int))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _text(rank: int, launch: str, records: dict) -> str:
    return f"ready|{rank}|{launch}|{json.dumps(records, sort_keys=True)}"


def parse(raw) -> tuple[str, dict[str, list[str]], str]:
    """(launch id, records, signature) of a ready confirmation ``raw`` (JSON text or bytes, as a server served it),
    checked for shape only: ``launch`` 32 hex digits, ``records`` ``str(node)`` (a decimal rank) → [launch nonce,
    server nonce, signature] (three strings), ``sig`` a string; nothing else is read.

    Raises:
        ValueError: one line saying what is malformed (review r31g J2: a record keyed ``"x"``, signed by its sender,
            raised ValueError out of :func:`check_ready` and crashed the reader at start-up).
    """
    try:
        rec = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"not JSON ({str(err)[:60]})") from None
    if not isinstance(rec, dict):
        raise ValueError(f"a JSON {type(rec).__name__}, not an object")
    launch, records, sig = rec.get("launch"), rec.get("records"), rec.get("sig")
    if not (isinstance(launch, str) and _HEX32.fullmatch(launch)):
        raise ValueError("its launch is not 32 hex digits")
    if not isinstance(sig, str):
        raise ValueError("its signature is not a string")
    if not isinstance(records, dict) or len(records) > _MAX_RANKS:
        raise ValueError(f"its records are not an object of at most {_MAX_RANKS} ranks")
    for k, v in records.items():
        if not (_RANK.fullmatch(k) and isinstance(v, list) and len(v) == 3 and all(isinstance(x, str) for x in v)):
            raise ValueError(f"its record {k[:16]!r} is not a rank → [nonce, server nonce, signature]")
    return launch, records, sig


def _signed(store: "SignedStore", node: int, raw) -> bool:
    """Whether ``raw`` is a well-formed ready confirmation signed by ``node`` for this run and node's launch nonce
    (bound: one of an earlier launch, relayed by anyone, is dropped, never counted against its signer; review r31g
    J3). Its content is checked by :func:`check_ready`."""
    try:
        launch, records, sig = parse(raw)
    except ValueError:
        return False
    return store.valid(node, _text(node, launch, records), sig)


def barrier(transport: "DistributedTransport", own: str, timeout_s: float, until: float | None = None,
            came: dict[int, float] | None = None) -> dict[int, str]:
    """Serve this rank's confirmation ``own`` and wait, up to ``timeout_s`` (``swarm.startup_timeout_s``; at most till
    ``until``, monotonic: the start-up's one budget, :mod:`dgrpo.transports.startgather`), for every
    live rank's: from its own server, or relayed by any rank that holds them all (a confirmation another rank
    relays counts only signed by its rank), so a rank whose server withholds its confirmation from one reader
    cannot keep that reader out alone. Once it holds them all this rank relays them (``ready/all``) and returns
    node → confirmation; ``came`` (if given) gets node → when (monotonic) its confirmation first reached this rank,
    this rank's own: when it served it (:func:`name_late_readies`).

    Raises:
        PeerFailure: a rank stopped at start-up (names it and its signed reason), or a confirmation is missing at the
            deadline (names its rank, once no signed stop notice came within :data:`GRACE_S`); this rank then says
            why, signed (:meth:`PeerChannel.announce_stop`).
    """
    chan, rank, store = transport.chan, transport.rank, transport.signed_store
    chan.set(f"ready/data/{rank}", own)  # (served to the end: a slower peer still reads it)
    got, deadline = {rank: own}, min(time.monotonic() + timeout_s, until if until is not None else float("inf"))
    came = {} if came is None else came
    came[rank] = time.monotonic()
    live = sorted(transport.alive - {rank})
    pending, delay = list(live), 0.01
    while pending:
        for peer, (raw, _) in fetch_all(chan, pending, lambda p: f"ready/data/{p}", _CAP, deadline).items():
            if raw is not None:
                got[peer], came[peer] = raw.decode(errors="replace"), time.monotonic()
        relays = fetch_all(chan, [p for p in live if p in got], lambda p: "ready/all", _CAP, deadline)
        for raw, _ in relays.values():
            try:
                relayed = {int(k): str(v) for k, v in json.loads(raw or b"{}").items()}
            except (ValueError, RecursionError, TypeError, AttributeError):
                continue
            fresh = {k: v for k, v in relayed.items() if k not in got and k in live and _signed(store, k, v)}
            got.update(fresh)
            came.update(dict.fromkeys(fresh, time.monotonic()))
        pending = [p for p in live if p not in got]
        stopped = {p: why for p in pending if (why := chan.stop_of(p)) is not None}
        if stopped:
            said = "; ".join(f"node {p} stopped at start-up ({why})" for p, why in sorted(stopped.items()))
            _stop(chan, f"{said}; node {rank} stops too, before round 0", "")
        if pending and time.monotonic() >= deadline + GRACE_S:  # (past the deadline only stop notices count:
            break  # a fetch reads nothing then)
        if pending:
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)
    if pending:
        _stop(chan, f"node{'s' if len(pending) > 1 else ''} {', '.join(map(str, pending))} sent nothing for exchange "
                    f"'ready' within swarm.startup_timeout_s={timeout_s:g}s (dead or stalled, or its server withheld "
                    "it from this rank)")
    chan.set("ready/all", json.dumps({str(k): v for k, v in sorted(got.items())}))
    return got


def _stop(chan, why: str, hint: str = "; aborted (start every rank within it)") -> None:
    log.error("%s; aborting", why)
    chan.announce_stop(why)
    raise PeerFailure(f"{why}{hint}")


def ready_record(store: "SignedStore", held: tuple[str, float, list[int]] | None = None) -> str:
    """This rank's signed ready confirmation (JSON): its launch id and every rank's start-up record as it read
    it (``str(node)`` → [nonce, server nonce, signature]; :attr:`SignedStore.records`), signed bound to the run
    context and this rank's launch nonce (:meth:`SignedStore.sign`), so it verifies in this launch only; with
    ``held`` (its start-up budget's last hold: :attr:`StartBudget.held <dgrpo.transports.startgather.StartBudget>`)
    under ``"held"``, unsigned and unchecked like every start-up value's ``@held`` note (:func:`name_late_readies`)."""
    records = {str(n): list(r) for n, r in sorted(store.records.items())}
    launch = store.launch_id()
    rec = {"launch": launch, "records": records, "sig": store.sign(_text(store.rank, launch, records))}
    return json.dumps(rec if held is None else {**rec, "held": [held[0], round(held[1], 1), held[2]]})


def name_late_readies(t: "DistributedTransport", readies: dict[int, str], came: dict[int, float]) -> None:
    """Name each rank whose ready confirmation reached this rank over ``LATE_S`` after this rank served its own
    (``came``: :func:`barrier`'s), as in every start-up exchange (:func:`~dgrpo.transports.startgather.name_late`:
    ``late``, or ``waited`` when its confirmation's ``"held"`` says it was held itself; a WARNING line and round 0's
    ``peers.jsonl``). Its own server serves it, and any rank that holds them all relays it, so a late one is its
    rank's doing: it came to the barrier late, or withheld it from this rank and from every relayer."""
    from dgrpo.transports.startgather import HELD, name_late, report

    notes = {}
    for node, raw in readies.items():
        try:
            held = json.loads(raw).get("held")
        except (ValueError, RecursionError, AttributeError):
            held = None
        notes[node] = "" if held is None else HELD + json.dumps(held)[:4096]
    report(t, name_late(t.rank, "ready", notes, came.get(t.rank, 0.0), came, t.start_budget)[1])


def check_ready(store: "SignedStore", values: dict, readies: dict[int, str], servers: dict[int, str] | None,
                chan=None) -> None:
    """Compare every rank's ready confirmation (node → :func:`ready_record` as its server served it) with the
    start-up records this rank read (``values``: this rank's start-up values; ``servers``: node → its server's
    launch nonce as this rank proved it, or None without a roster file; ``chan``: this rank's PeerChannel, whose
    peers' maps of proved launches tell a record quoted for another launch of its rank from a false quote:
    :mod:`~dgrpo.transports.launchproof`).

    Raises:
        PeerFailure: one line naming the rank that signed two start-up records (both nonces: the proof), or that
            answered for two launches, else the ranks whose confirmation is unsigned or false.
    """
    body = json.dumps(values, sort_keys=True)
    mine = {str(n): list(r) for n, r in store.records.items()}
    proofs: dict[int, tuple[str, str, int]] = {}
    false: dict[int, str] = {}
    launches, maps = [], {}
    for node, raw in sorted(readies.items()):
        if node == store.rank:
            continue
        try:
            launch, records, sig = parse(raw)
        except ValueError as err:
            false[node] = f"is malformed: {err}"
            continue
        if not store.valid(node, _text(node, launch, records), sig):
            false[node] = "is not signed by it for this launch"
            continue
        if set(records) != set(mine):
            false[node] = f"names the records of nodes {sorted(map(int, records))}, not {sorted(map(int, mine))}"
            continue
        for k in sorted(mine, key=int):
            theirs = records[k]
            if theirs == mine[k]:
                continue
            nonce, server, quoted = theirs  # (three strings: parse)
            ok = store._record_ok(int(k), body, nonce, server, quoted, servers)
            if ok:  # node k signed both: a proof, whoever shows it
                proofs.setdefault(int(k), (mine[k][0], nonce, node))
            elif chan is not None and (two := other_launch(chan, node, int(k), maps)) is not None:  # (k's doing, R2)
                launches.append(two)
            else:
                false[node] = f"quotes a start-up record of node {k} that node {k} never signed"
        if node not in false and launch != _launch(records):
            false[node] = f"names launch {launch[:12]}…, not that of the records it quotes"
    if launches:
        raise PeerFailure(f"{line(launches, store.rank)}; stopping before round 0 rather than splitting the swarm")
    if proofs:
        raise PeerFailure("; ".join(
            f"node {k} signed two different start-up records for this launch (launch nonce {a[:12]}… read by node "
            f"{store.rank}, {b[:12]}… read by node {j}; both verify under node {k}'s roster key: it showed its peers "
            "different start-up records)" for k, (a, b, j) in sorted(proofs.items()))
            + "; stopping before round 0 rather than splitting the swarm")
    if false:
        raise PeerFailure("; ".join(f"node {j}'s ready confirmation {why}" for j, why in sorted(false.items()))
                          + f" (checked by node {store.rank}): stopping before round 0 rather than splitting the swarm")


def two_faced_roles(store: "SignedStore", values: dict, records: dict[int, str], chan) -> str | None:
    """Why the start-up check failed when a rank declared different roles to different readers (review r31f H9): the
    line naming it, or None. Each rank's valid start-up record (:attr:`SignedStore.nonces`) quotes the roles it read
    (``values["roles"]``: ``str(node)`` → [role, signature]). With a roster file a role that differs from this
    rank's read and is signed by its rank (for its server's launch) is that rank's proof of equivocation; without
    one (nothing is signed at that point) the line says it cannot tell who."""
    mine, seen, maps = values.get("roles") or {}, {}, {}
    for node in sorted(store.nonces):
        try:
            theirs = json.loads(records[node])["values"]["roles"]
            seen.update({(int(k), node): v for k, v in theirs.items() if k in mine and v != mine[k]
                         and isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)})
        except (ValueError, RecursionError, KeyError, TypeError, AttributeError):
            continue
    keys = chan.keys
    for (k, node), (role, sig) in sorted(seen.items()):
        if keys is None:
            return (f"node {k}'s start-up role reached node {store.rank} as {mine[str(k)][0]!r} and node {node} as "
                    f"{role!r} (unsigned without a roster file: node {k} served its peers different roles, or node "
                    f"{node}'s record is false; this rank cannot tell which); stopping before round 0")
        if keys.signed_by(k, f"role|{k}|{role}|{chan.launches.get(k)}", sig) == k:
            return (f"node {k} declared two different start-up roles, both signed by its key for its server's launch "
                    f"({mine[str(k)][0]!r} read by node {store.rank}, {role!r} read by node {node}: it showed its peers "
                    "different roles); stopping before round 0 rather than splitting the swarm")
        if (two := other_launch(chan, node, k, maps)) is not None:  # (node proved k another launch: k's doing, R2)
            return f"{line([two], store.rank)}; stopping before round 0 rather than splitting the swarm"
    return None
