"""A joining node's reading of the swarm's launch records: which launch it enters, at which round (review r31h F11).

Every node of a launch republishes its launch record under ``{namespace}/launch`` each round (launch id, roster,
config hash, live nodes, last round exchanged, agreed values; :func:`dgrpo.transports.dht.launch.publish_launch`),
signed by its own roster key. A signature proves who said it, not that it is true: before, a joiner took the record
with the highest round of any one node, so one malicious node's record claiming round 10**6 made an honest joiner stop
(exit 3, "the swarm has exchanged round 1000000 already"), and one naming a launch id of its own put the joiner in a
launch nobody else was in, where it trained alone (a split swarm that trains), while its peers named the joiner
``missing payload`` and the liar was named nowhere.

So a joiner believes no single node (:class:`LaunchBook`); ``expected`` are the nodes live before its round if none
failed (the initial nodes and earlier joiners), and a *quorum* more than half of them, as for an expulsion (issue 31,
must-have 5) and the commit's drop rule (more than half of the views):

* **the launch** (launch id, config hash, roster) is the one named by the latest records of a quorum of distinct
  nodes; a node whose record names another launch while the quorum counts it live is named (``launch:``); the roster
  must also be the joiner's own roster file (a joiner always has one), which it checks itself;
* **the round** is the highest round that a quorum of those records reach (the quorum-th highest): a lone record can
  neither push it up nor hold it back; a record more than one round above it is named (live honest nodes publish
  their record of a round before they post the next one, so theirs are at most one round apart);
* **live nodes**: a node is live unless a quorum of those records leave it out (a lone record cannot expel a node;
  a stale record of a dead node may keep it, and the joiner then names it ``missing payload`` in its first round);
* **agreed values** (the run name): each tag's value that a quorum of those records give; a value that a quorum of
  records of round 0 or later (made after the values were agreed) do not give is named;
* two records one key signed for the same launch id that differ in config, roster or an agreed value are a proof
  that their node equivocated (an honest node's are fixed for its launch): named with both quoted, and its records
  no longer count. Two records naming different launch ids prove nothing (anyone may store a node's record of an
  earlier launch in this namespace again, until the expiry its node signed): the one signed last (its ``t``) is the
  node's vote;
* **a record signed before the joiner started** (its ``t``, DHT time, more than :data:`CLOCK_S` before the
  joiner's start) is not read at all: it is of an earlier launch (its node's process ended before this launch's
  began, and this launch's nodes sign theirs again, below), stored again by anyone within its signed lifetime
  (issue 31: node 1's record of an earlier launch and node 2's own made a quorum for it, and the joiner entered it
  and trained alone, or stopped). It names nobody. So that a joiner started while the swarm already waits in its
  join round still reads a fresh record, every node signs its record of the round before again every
  :data:`BEACON_S` while it waits for a joiner's first payload (:func:`dgrpo.transports.dht.rounds.message_round`).

With at most one malicious node and a quorum of honest live nodes, the joiner enters the honest launch at its round
and names the liar. Limits: if more than half of the expected nodes are dead or lie, no quorum forms and the joiner
stops after ``swarm.startup_timeout_s``, quoting what each node's record said; a joiner started less than
:data:`CLOCK_S` after an earlier launch's nodes stopped may still read their last records (start it later).
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from dgrpo.errors import ConfigError, PeerFailure

if TYPE_CHECKING:
    from dgrpo.transports.hivemind import HivemindTransport

log = logging.getLogger(__name__)
MAX_RUNS = 16  # launch ids remembered per node (each with its first record: the proof's other half)
CLOCK_S = 3.0  # hivemind.utils.timed_storage.MAX_DHT_TIME_DISCREPANCY_SECONDS: peers' clocks differ by at most this
BEACON_S = 1.0  # a node waiting for a joiner's first payload signs its launch record again this often (seconds)
_ID = re.compile(r"[0-9A-Za-z_.-]{1,64}")  # a launch id, a config hash (sha256 hex, 16 digits; so logged as they are)
_TAG = re.compile(r"[a-z_]{1,32}")  # an agreed value's name (``agree``'s tags: "name")


@dataclass(frozen=True)
class Claim:
    """What one signed launch record says. ``roster``, ``agreed``: sorted (key, value) pairs; ``sig``: its record
    signature (hex), quoted in a proof; ``body``: the record's bytes; ``t``: when its node signed it (DHT time,
    seconds; -inf for a record without one: an older version's, read as of an earlier launch)."""

    run: str
    config: str
    roster: tuple[tuple[int, str], ...]
    alive: frozenset[int]
    round: int
    agreed: tuple[tuple[str, str], ...]
    sig: str = ""
    body: bytes = b""
    t: float = float("-inf")

    @property
    def launch(self) -> tuple:
        """The launch it names: (launch id, config hash, roster)."""
        return self.run, self.config, self.roster

    def short(self) -> str:
        return f"launch {self.run[:16]} round {self.round}"


def parse_claim(body: bytes, nodes: int, sig: str = "") -> Claim | str:
    """A launch record ``body`` of a swarm of ``nodes`` as a :class:`Claim`, or why it is malformed (one line)."""
    try:
        rec = json.loads(body)
    except (ValueError, RecursionError):
        return "not JSON"
    if not isinstance(rec, dict):
        return "not a JSON object"
    run, config, roster, alive, rnd, agreed = (rec.get(k) for k in ("run", "config", "roster", "alive", "round", "agreed"))
    if not (isinstance(run, str) and isinstance(config, str) and isinstance(roster, dict) and isinstance(agreed, dict)):
        return "run, config, roster or agreed missing or of another type"
    if not (_ID.fullmatch(run) and _ID.fullmatch(config)):
        return "run or config is not 1 to 64 letters, digits, '_', '.' or '-'"
    if not (isinstance(rnd, int) and not isinstance(rnd, bool) and rnd >= -1):
        return f"round {str(rnd)[:20]} is not an integer >= -1"
    if not (isinstance(alive, list) and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < nodes for n in alive)):
        return f"alive is not a list of node ids in 0..{nodes - 1}"
    if not all(isinstance(k, str) and k.isascii() and k.isdigit() and isinstance(p, str) for k, p in roster.items()):
        return "roster is not node id → key"
    if not all(_TAG.fullmatch(k) and isinstance(v, str) for k, v in agreed.items()):
        return "an agreed value is not text under a lower-case name"
    t = rec.get("t", float("-inf"))
    if not (isinstance(t, (int, float)) and not isinstance(t, bool) and (t == float("-inf") or math.isfinite(t))):
        return f"t {str(t)[:20]} is not a number of seconds"
    return Claim(run, config, tuple(sorted((int(k), p) for k, p in roster.items())), frozenset(alive), rnd,
                 tuple(sorted(agreed.items())), sig, body, float(t))


def _differs(a: Claim, b: Claim) -> str:
    """What two claims of one launch id say differently that an honest node never changes within a launch, or ""."""
    if a.config != b.config:
        return "config"
    if a.roster != b.roster:
        return "roster"
    one, two = dict(a.agreed), dict(b.agreed)
    return next((f"agreed {k!r}" for k in sorted(one.keys() & two.keys()) if one[k] != two[k]), "")


@dataclass
class Joining:
    """The launch a joiner enters (:meth:`LaunchBook.decide`). ``backers``: the nodes whose latest records name it;
    ``at_round``: those whose records put the swarm at ``round`` or one more (the others are too far ahead: named);
    ``need``: the quorum (more than half of the expected nodes)."""

    run: str
    config: str
    roster: dict[int, str]
    alive: list[int]
    round: int
    agreed: dict[str, str]
    backers: list[int]
    at_round: list[int]
    need: int


class LaunchBook:
    """The launch records a joiner read, and what it believes of them (module docstring: the rule).

    Args:
        expected: the nodes live before the joiner's round if none failed (initial nodes and earlier joiners, not
            the joiner itself); the quorum is more than half of them.
        nodes: ``swarm.nodes`` (node ids are 0..nodes-1).
        since: DHT time (seconds): a record signed before it is of an earlier launch and ignored (module docstring);
            the joiner's start less :data:`CLOCK_S`.
    """

    def __init__(self, expected: Iterable[int], nodes: int, since: float = float("-inf")):
        self.expected, self.nodes, self.since = sorted(set(expected)), nodes, since
        self.need = len(self.expected) // 2 + 1
        self.latest: dict[int, Claim] = {}  # node → its record signed last
        self.stale: dict[int, Claim] = {}  # node → a record of it signed before ``since`` (ignored; for the summary)
        self.runs: dict[int, dict[str, Claim]] = defaultdict(dict)  # node → launch id → its first claim of it
        self.proofs: dict[int, tuple[Claim, Claim, str]] = {}  # node → two claims of one launch id, what differs
        self.malformed: dict[int, str] = {}

    def add(self, node: int, body: bytes, sig: str = "") -> None:
        """Take node ``node``'s launch record ``body`` (its signature verified under the roster's key by the caller)."""
        if node not in self.expected:
            return
        claim = parse_claim(body, self.nodes, sig)
        if isinstance(claim, str):
            self.malformed[node] = claim
            return
        if claim.t < self.since:
            self.stale[node] = claim  # (of an earlier launch: anyone may store it again; names nobody)
            return
        first = self.runs[node].get(claim.run)
        if first is None and len(self.runs[node]) < MAX_RUNS:
            self.runs[node][claim.run] = claim
        elif first is not None and node not in self.proofs and _differs(first, claim):
            self.proofs[node] = (first, claim, _differs(first, claim))
        if node not in self.latest or claim.t >= self.latest[node].t:
            self.latest[node] = claim  # (a copy of an earlier record read later does not replace a newer one)

    def decide(self) -> Joining | None:
        """The launch a quorum of the latest records name, its round, live nodes and agreed values; None without one."""
        votes = {n: c for n, c in self.latest.items() if n not in self.proofs}
        groups: dict[tuple, list[int]] = defaultdict(list)
        for n, c in sorted(votes.items()):
            groups[c.launch].append(n)
        backers = next((b for b in groups.values() if len(b) >= self.need), None)
        if backers is None:
            return None  # (at most one launch has a quorum: more than half of the expected nodes each)
        claims = [votes[n] for n in backers]
        rnd = sorted((c.round for c in claims), reverse=True)[self.need - 1]
        out = [n for n in range(self.nodes) if sum(n not in c.alive for c in claims) >= self.need]
        agreed = {}
        for tag in sorted({k for c in claims for k, _ in c.agreed}):
            top = Counter(dict(c.agreed)[tag] for c in claims if tag in dict(c.agreed)).most_common(1)[0]
            if top[1] >= self.need:
                agreed[tag] = top[0]
        first = claims[0]
        return Joining(first.run, first.config, dict(first.roster), [n for n in range(self.nodes) if n not in out], rnd,
                       agreed, backers, [n for n in backers if rnd <= votes[n].round <= rnd + 1], self.need)

    def named(self, j: Joining | None) -> list[tuple[int, str]]:
        """(node, reason) of every record this book refuses, given the decision ``j``: proofs, malformed records, and
        (with a decision) records naming another launch from a node the quorum counts live, a round more than one
        above the quorum's, or another agreed value. Each reason starts with ``launch:``."""
        out = [(n, f"launch: it signed two launch records for launch {a.run[:16]} that differ in {what} (signatures "
                   f"{a.sig[:16]}… and {b.sig[:16]}…, both verify under its key: an honest node's are fixed for its "
                   "launch); its records are ignored") for n, (a, b, what) in sorted(self.proofs.items())]
        out += [(n, f"launch: its launch record is malformed ({why})") for n, why in sorted(self.malformed.items())]
        if j is None:
            return out
        quorum = f"nodes {', '.join(map(str, j.backers))} (more than half of the {len(self.expected)} nodes {self.expected})"
        for n, c in sorted(self.latest.items()):
            if n in self.proofs:
                continue
            if c.launch != (j.run, j.config, tuple(sorted(j.roster.items()))):
                if n in j.alive:
                    what = "config" if c.run == j.run and c.config != j.config else "roster" if c.run == j.run else "launch"
                    out.append((n, f"launch: its signed launch record names {what} {_show(c, what)} where {quorum} agree "
                                   f"on launch {j.run}: a lone claim, ignored"))
                continue
            if c.round > j.round + 1:
                out.append((n, f"launch: its signed launch record puts the swarm at round {c.round} where nodes "
                               f"{', '.join(map(str, j.at_round))} put it at round {j.round}: a lone claim, ignored"))
            for tag, value in c.agreed:  # (a record of round >= 0 holds every agreed value: agree() runs before round 0)
                against = [m for m in j.backers if m != n and self.latest[m].round >= 0
                           and dict(self.latest[m].agreed).get(tag) != value]
                if len(against) >= self.need:
                    theirs = f"agree on {j.agreed[tag][:40]!r}" if tag in j.agreed else "give none"
                    out.append((n, f"launch: its signed launch record gives {tag}={value[:40]!r} where nodes "
                                   f"{', '.join(map(str, against))} (more than half of the {len(self.expected)} nodes "
                                   f"{self.expected}) {theirs}: a lone claim, ignored"))
        return out

    def summary(self) -> str:
        """What each expected node's latest record said (for a stop without a quorum)."""
        said = [f"node {n}: {self.latest[n].short()}" for n in self.expected if n in self.latest]
        old = sorted(set(self.stale) - set(self.latest))
        said += [f"node{'s' if len(old) > 1 else ''} {', '.join(map(str, old))}: only records signed before this node "
                 "started (an earlier launch's), ignored"] if old else []
        return "; ".join(said) if said else "no launch record of the swarm was found"


def _show(c: Claim, what: str) -> str:
    return {"config": c.config[:16], "roster": "(another roster)"}.get(what, c.run[:16])


def join_launch(t: "HivemindTransport", fingerprint: str, startup_timeout_s: float) -> None:
    """A joiner: read the swarm's launch records until a quorum of them put the swarm at the round before its own
    (:class:`LaunchBook`), then enter that launch. Every record the book refuses is named under its signer (the log
    and :attr:`~dgrpo.transports.hivemind.HivemindTransport.rejected`, ``launch``).

    Raises:
        ConfigError: the quorum's launch runs another config, or another roster than this node's roster file.
        PeerFailure: no quorum reaches the round before this node's within ``startup_timeout_s`` (quotes what each
            node said), or a quorum has exchanged this node's round already.
    """
    from hivemind.utils import get_dht_time

    first, key = t.first_round, f"{t.namespace}/launch"
    expected = [n for n in range(t.world_size) if n != t.rank and t.join.get(n, 0) < first]
    book = LaunchBook(expected, t.world_size, since=get_dht_time() - CLOCK_S)
    deadline = time.monotonic() + startup_timeout_s
    while True:
        for node, (_, body, sig) in t.signed.read(key, set(expected), wait_s=5.0).items():
            book.add(node, body, sig.hex())  # (read: signed by the roster's key for its node, else refused and named)
        j = book.decide()
        if (j is not None and j.round >= first - 1) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    for node, reason in book.named(j):
        t.signed.reject(key, f"{node}:{reason}", node, reason)
    for node, (a, b, _) in sorted(book.proofs.items()):
        log.warning("node %d: proof that node %d signed two launch records: %s (signature %s) and %s (signature %s)",
                    t.rank, node, a.body.decode(errors="replace"), a.sig, b.body.decode(errors="replace"), b.sig)
    by = f"nodes {', '.join(map(str, j.at_round))} of {expected}" if j else ""
    if j is None or j.round < first - 1:
        seen = f"the swarm is at round {j.round} ({by})" if j else (
            f"no launch is named by more than half of the nodes {expected} ({book.summary()})")
        raise PeerFailure(f"node {t.rank} joins at round {first}, but {seen} after swarm.startup_timeout_s="
                          f"{startup_timeout_s:g}s (are its initial_peers in the swarm?)")
    if j.round >= first:
        raise PeerFailure(f"node {t.rank} joins at round {first}, but the swarm has exchanged round {j.round} already "
                          f"({by}): start a joining node before its round")
    if j.config != fingerprint:
        raise ConfigError(f"node {t.rank} runs another config than the swarm it joins: every node needs the same config "
                          "and overrides (the per-node swarm.hivemind fields may differ)")
    if j.roster.get(t.rank) != t.public_key:
        raise ConfigError(f"node {t.rank} is already in the swarm's roster with another key")
    if j.roster != t.roster:
        raise ConfigError(f"the swarm node {t.rank} joins has another roster than its roster file: give every node the "
                          "same roster")
    t.enter_launch(j.run, fingerprint, j.roster, alive=j.alive, agreed=j.agreed)
    log.info("node %d: joins launch %s at round %d (swarm at round %d, by %s; live nodes %s)", t.rank, t.run_id, first,
             j.round, by, sorted(t.alive))
