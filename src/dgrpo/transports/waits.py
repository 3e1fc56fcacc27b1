"""Signed wait notes and the round's deadline schedule of the distributed transport (issue 31, review r31d
F1/F3: :class:`WaitNotes`, :class:`Schedule`).

A node that a peer keeps waiting loses that time, so it posts its next exchange late; with deadlines
counted from each node's own post, its peers would then accuse it, and the peer that withheld its
payload from it (a relay ``eq{r}``, or a round payload ``r{r}``) adds its own accusation: a quorum that
expels an honest node that only waited (review r31d F1). Two rules close it:

* **Wait notes.** A node still waiting for a peer ``note_s`` seconds into an exchange serves, from its
  own server, ``wait/{tag}``: one JSON line ``{"by": j, "peer": k, "tag": t, "sig": …}`` per peer it waits
  for, signed for the run (``wait|{tag}|{peer}``). Early (long before it posts its next exchange late), so
  its peers know in time; a note is a claim, never an accusation: it expels nobody.
* **One extension per waiter and exchange.** A peer missing at this node's deadline in a round exchange whose note
  (read afresh then) says it waited in one of the two exchanges before this one gets ``extension_s`` more, once
  in that exchange: whoever made it wait made it late, and nobody gives up on a peer that only waited (as on
  hivemind: docs/hivemind.md). A note naming this node buys nothing from it when the wait was the writer's own
  doing (:func:`~dgrpo.transports.sidereads.own_doing`): this node had noted waiting for the writer just before and
  for nobody else there, and the writer served no note of the exchange before that one (review r31e G1; r31n G2:
  without the last two, a rank that made the writer late and then held this node until the writer's note named it
  got an honest writer's extension refused and it expelled). A false note in every exchange passes it: it buys the
  writer what a note naming a third node always did, ``E`` once an exchange within the round's end, cut past
  :meth:`Schedule.safe` unless others are held, the writer named ``waited``. Nor a relay's extension when it names
  this node alone (its round payload was served since its post), nor anything from a peer that serves a signed stop reason (it
  stopped); only the note's writer is named for it (``waited``; review r31e G1). A peer may get an extension in
  both ``r{n}`` and ``eq{n}``: each ends by the round's end, so two never reach past it (review r31f H3: with one a
  round, a node late into ``r{n}`` for a withheld relay, then kept waiting for a round payload, had none left for
  its relay and was expelled).
* **A relay extension only while others wait too** (:class:`~dgrpo.transports.witnesses.Witnesses`). A node held in
  ``eq{n}`` past its relay post + ``E`` posts ``r{n+1}`` later than peers that left ``eq{n}`` early will wait for it
  (their window plus its extension). So past that point it keeps waiting for a noted relay only while at least ``n - quorum(n)`` of the
  other live peers (the awaited one apart) are still in ``eq{n}`` (none serves ``end/eq{n}``, which each node serves
  as it leaves an exchange): the rest, the awaited peer included, cannot make a quorum against it. A rank that
  serves a note naming other nodes and withholds its relay from one victim no longer holds it to the round's end.
* **A round payload likewise** (h31s). In ``r{n}``, past this node's ``eq{n-1}`` post + ``timeout_s`` - ``S``
  (:meth:`Schedule.safe`: a peer left ``eq{n-1}`` no earlier than it read that relay, so its round ``n`` ends no
  earlier than ``timeout_s`` after it; ``S`` is left for this node's relay), a peer, noted or not, is waited for only
  while enough other peers are still in ``r{n}``; a peer that held this node in ``eq{n-1}`` past its post + ``E`` (still
  in it, waiting too) is late by the same withholder's doing and is never accused by it in ``r{n}``
  (:meth:`Schedule.fellows_of`; review r31l F2: two victims of one withheld relay cut each other), only once its
  round payload has not come by the end of ``eq{n}`` (late, not missing, it posts ``r{n}`` before its relay, and an
  honest node serves it until it has finished ``r{n+1}``: :meth:`Schedule.owed_in`; review r31n G1: a rank that never
  served ``end/eq{n-1}`` posed as the fellow of every held node and hid ``r{n}`` from everyone, never expelled), or,
  where no note of its bought it this node's extension, once no other node's relay of ``eq{n}`` carries it
  (:meth:`Schedule.unnoted_in`; review r31o H1: served to this node after its cut, it was used by nobody). A
  peer whose relay this node had not received (the withholder it waits for) is no fellow. A node does not
  compensate a lateness it shared: one late into ``r{n}`` for a withheld relay, whose withholder hid ``r{n}`` from it too behind a true note (the main rank late into
  ``r{n-1}``: every node, this one too, noted waiting for it), gave it ``E`` and posted ``eq{n}`` after its peers'
  round end (expelled, 2 of 2 runs); without the note, its window ``W`` counted from its own late post left its relay
  only ``S`` less two polls and the compute spread before its peers' round end. A false note fares no better. (In a
  swarm of 2, with no other peer to say, only an extension is cut there, never the window ``W``.)

**The round's budget is ``timeout_s``** (issue 31: every wait of round r ends by this node's ``r{r}`` post +
``timeout_s``, plus at most one poll; ``timeout_s`` + E where two peers held together in ``eq{r-1}`` are waited for to
:meth:`Schedule.held_bound`, review r31q Q3: cut at W + E, each trained on a message set of its own). It is carved (:class:`Schedule`) into a payload window ``W``
(:func:`window_s`), one extension ``E = W + S`` (:func:`extension_s`) and a relay slack ``S``
(:func:`slack_s`), ``W + E + S = timeout_s``: a round payload ``r{r}`` is waited for until ``W`` after this
node's post (a noted waiter: ``W + E``); every honest node posts its relay as soon as it holds every round
payload, so a relay ``eq{r}`` is waited for until ``S`` after the later of the payload window's end and this
node's relay post (review r31d F3: not ``timeout_s`` after the relay post), a peer that noted waiting in
``r{r}`` until its round payload's arrival + ``W + E + S``, and never past the round's end (``r{r}`` post +
``timeout_s``). ``E = W + S`` is what a node loses when a relay is withheld from it (it waits ``W + S``), so its
peers still read its next payload in their window plus its extension while honest compute differs by less
than ``W``. The main rank reads its peers' round records ``rec{r}`` (the final record included) for at most
``W / 2`` after it entered ``rec{r}`` (:func:`record_s`; review r31g J5, J7): a record not in by then is read again
later (:mod:`dgrpo.transports.recordreads`: the run's last ones after the main's ``done`` post, within that
exchange's ``timeout_s``) and named ``missing record`` only if it never comes, never a failed peer. A reporting
node posts its record and begins its next round at once, so a main held for a withheld record posts ``r{r+1}`` (or enters ``done``) up to ``W / 2`` later than it would have:
while the honest compute spread stays under ``W / 2`` its peers still read it within their window ``W``, and an
honest record (its sender at most that spread behind the main) is in within ``W / 2``. A main still waiting for
records after ``note_s`` serves a signed note of ``rec{r}``: a reporter then allows its ``r{r+1}`` ``record_s`` more
before naming it ``late`` (review r31g Z5l), and a note's extension if it misses the window. ``done`` (after the final
evaluation and checkpoint) is waited for until ``timeout_s`` after entering it; none of these is extended. A round payload that arrives more than half of
``W`` after this node posted its own, without a note covering it, is named ``late`` (peers.jsonl; no strike).
"""


from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

from dgrpo.transports.stopwhy import StopReasons

if TYPE_CHECKING:
    from dgrpo.transports.peerserve import PeerChannel
    from dgrpo.transports.signedstore import SignedStore

log = logging.getLogger("dgrpo.transports.storewait")

_NOTE_LINES = 64  # most lines read from one note
_POLL_S = 0.25  # a relay exchange entered at its round's end still reads once (one poll)
_KEEP = 6  # this node's notes kept served (its peers read those of the last two exchanges)


def note_s(timeout_s: float) -> float:
    """Seconds a node waits for a peer before it serves its wait note: a tenth of ``timeout_s``, at most 0.5 s."""
    return min(0.5, timeout_s / 10)


def slack_s(timeout_s: float) -> float:
    """``S``: seconds past the payload window a relay is waited for: a note's delay plus 1 s for a read (a
    flooded receiver's decoding included: issue 31 bounds it by 1 s), at most a fifth of ``timeout_s``."""
    return min(timeout_s / 5, note_s(timeout_s) + 1.0)


def window_s(timeout_s: float) -> float:
    """``W``: seconds after its own post a node waits for a peer's round payload (the honest compute spread the
    round tolerates): ``(timeout_s - 2 S) / 2``, at least 0.3 × ``timeout_s`` (1.5 s at 5 s, 448.5 s at 900 s)."""
    return (timeout_s - 2 * slack_s(timeout_s)) / 2


def record_s(timeout_s: float) -> float:
    """Seconds the main rank reads its peers' round records ``rec{r}`` after entering it: ``W / 2`` (0.75 s at
    5 s, 224 s at 900 s; module docstring: it keeps the main within its peers' payload window ``W`` while the honest
    compute spread stays under ``W / 2``)."""
    return window_s(timeout_s) / 2


def extension_s(timeout_s: float) -> float:
    """``E``: the one extension a noted waiter gets in a round, ``W + S`` (a node whose relay was withheld waits
    ``W + S``), so ``W + E + S`` = ``timeout_s``."""
    return window_s(timeout_s) + slack_s(timeout_s)


class WaitNotes(StopReasons):
    """This node's signed wait notes (served as ``wait/{tag}``) and its reading of its peers'; its stop reason and its
    peers' (:class:`~dgrpo.transports.stopwhy.StopReasons`).

    Args:
        rank: this node.
        chan: this rank's :class:`~dgrpo.transports.peerserve.PeerChannel` (serves its notes, fetches peers').
        store: the :class:`~dgrpo.transports.signedstore.SignedStore` (signs and checks note lines; before the
            keys exist every line is taken, as leave marks are).
    """

    def __init__(self, rank: int, chan: "PeerChannel", store: "SignedStore"):
        super().__init__(rank, chan, store)
        self._served: list[str] = []  # this node's note keys, oldest first
        self._ends: list[str] = []  # this node's `end/{tag}` keys, oldest first
        self._seen: dict[tuple[int, str], list[int]] = {}  # (peer, tag) → nodes it noted waiting for (positive only)
        self.mine: dict[str, set[int]] = {}  # exchange → the peers this node noted waiting for there

    def note(self, tag: str, peers: list[int]) -> None:
        """Serve (replace) this node's note of exchange ``tag``: it is still waiting for ``peers``."""
        lines = [json.dumps({"by": self.rank, "peer": p, "tag": tag, "sig": self.store.sign(f"wait|{tag}|{p}")})
                 for p in sorted(peers)]
        key = f"wait/{tag}"
        self.mine[tag] = set(peers)
        self.chan.set(key, ("\n".join(lines) + "\n").encode())
        if key not in self._served:
            self._served.append(key)
        while len(self._served) > _KEEP:
            old = self._served.pop(0)
            self.chan.delete_key(old)
            self.mine.pop(old[5:], None)

    def ended(self, tag: str) -> None:
        """Serve ``end/{tag}``: this node left round exchange ``tag`` (its peers' :class:`~dgrpo.transports.witnesses.Witnesses` read it)."""
        self.chan.set(f"end/{tag}", b"1")
        self._ends.append(f"end/{tag}")
        while len(self._ends) > _KEEP:
            self.chan.delete_key(self._ends.pop(0))

    def waited(self, peer: int, tags: list[str], deadline: float, budget: float = 1.0) -> tuple[str, list[int]] | None:
        """(exchange, the nodes ``peer`` noted waiting for there) for the first of ``tags`` where ``peer``
        serves a valid note, read now (at most ``budget`` s a read, none past ``deadline``); None if none (the wait
        loop reads notes in its pool: :class:`~dgrpo.transports.sidereads.SideReads`)."""
        for tag in tags:
            hit = self._seen.get((peer, tag))
            if hit is None:
                raw, _ = self.chan.fetch(peer, f"wait/{tag}", _NOTE_LINES * 256, deadline, budget)
                hit = self._parse(peer, tag, raw or b"")
                if hit:
                    if len(self._seen) > 256:  # (only the last exchanges are ever asked again)
                        self._seen.clear()
                    self._seen[(peer, tag)] = hit
            if hit:
                return tag, hit
        return None

    def _parse(self, peer: int, tag: str, raw: bytes) -> list[int]:
        out = []
        for line in raw[: _NOTE_LINES * 256].splitlines()[:_NOTE_LINES]:
            try:
                item = json.loads(line)
                ok = (isinstance(item, dict) and item.get("by") == peer and item.get("tag") == tag
                      and isinstance(item.get("peer"), int) and item["peer"] != peer
                      and self.store.valid(peer, f"wait|{tag}|{item['peer']}", item.get("sig")))
            except (ValueError, RecursionError, TypeError):
                ok = False
            if ok:
                out.append(item["peer"])
        return sorted(set(out))


class Schedule:
    """When this node stops waiting for each peer in an exchange (module docstring).

    Args:
        timeout_s: ``swarm.timeout_s``.

    Attributes:
        history: the exchanges this node entered, oldest first (the last few).
        posted: exchange → ``time.monotonic()`` when this node posted its payload there.
        arrived: exchange → peer → ``time.monotonic()`` when its payload reached this node (the last few).
    """

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.history: list[str] = []
        self.posted: dict[str, float] = {}
        self.arrived: dict[str, dict[int, float]] = {}
        self.fellows: dict[str, set[int]] = {}
        self.owed: dict[str, set[int]] = {}  # r{n} → fellows missed there, not accused (yet: owed_in)
        self.unnoted: dict[str, set[int]] = {}  # r{n} → those of them no note bought time (yet: unnoted_in)
        self.left: dict[str, float] = {}  # exchange → when this node left it
        self.stretch: dict[str, float] = {}  # r{n} → its round's end, past r{n} post + timeout_s (held_bound)
        self.absent: dict[str, dict[int, float]] = {}  # exchange → peer → when a read last found it not served

    def enter(self, tag: str) -> None:
        """Record that this node entered exchange ``tag`` (its post or its first collect)."""
        if tag not in self.history:
            self.history = (self.history + [tag])[-8:]
            for old in [t for t in self.posted if t not in self.history]:
                self.posted.pop(old, None)
            for book in (self.arrived, self.fellows, self.owed, self.unnoted, self.left, self.stretch, self.absent):
                for old in [t for t in book if t not in self.history]:
                    book.pop(old, None)

    def before(self, tag: str, n: int = 2) -> list[str]:
        """The (at most ``n``) round exchanges (``r{n}``, ``eq{n}``) this node entered just before ``tag``, latest
        first: a ``rec{n}`` this node entered (the main rank of a homogeneous swarm, every node of a heterogeneous
        one) is not one, since a peer that reports nothing never enters or notes it (review r31o H4: the main rank
        looked for a writer's note of ``rec{n-1}``, never found one, and the wait-note rule's second clause was void
        there; the same slip as r31n G3's in :meth:`noted_in`)."""
        i = self.history.index(tag) if tag in self.history else len(self.history)
        return [t for t in self.history[:i] if not t.startswith("rec")][-n:][::-1] if n > 0 else []

    def noted_in(self, tag: str) -> list[str]:
        """The exchanges where a peer missing in round exchange ``tag`` may have noted waiting, latest first: for a
        relay ``eq{n}`` its round ``r{n}``; else the two round exchanges entered just before ``tag`` (``eq{n-1}``,
        ``r{n-1}``): the main rank's ``rec{n-1}``, which its peers never enter, is not one (review r31n G3: the main
        looked at ``rec{n-1}`` and ``eq{n-1}`` only, so a peer's note of ``r{n-1}`` bought nothing there, the main
        cut two peers held in ``r{n-1}`` at ``W`` and was expelled by them and the withholder)."""
        if tag.startswith("eq"):
            return [f"r{tag[2:]}"]
        return self.before(tag)

    def start(self, tag: str, deadline: float) -> float:
        """When round ``n`` of round exchange ``tag`` began here: this node's ``r{n}`` post, else ``deadline`` (its
        entry + timeout_s) - timeout_s."""
        _, n = _parts(tag)
        return self.posted.get(f"r{n}", deadline - self.timeout_s)

    def cap(self, tag: str, deadline: float) -> float | None:
        """The round's end for round exchange ``tag`` (``r{n}`` post + timeout_s: no wait of it, extensions and
        slack included, ends later); None outside a round (``deadline`` then bounds it)."""
        kind, n = _parts(tag)
        end = self.start(tag, deadline) + self.timeout_s
        return max(end, self.stretch.get(f"r{n}", end)) if kind in ("r", "eq") else None

    def base(self, tag: str, deadline: float) -> float:
        """This node's deadline for every peer of exchange ``tag`` (``deadline``: its entry + timeout_s): ``r{n}``: its
        post + W; ``eq{n}``: S past the later of that and now (its relay post), within the round's end (at least one
        poll); else ``deadline`` (round records are read apart: :func:`record_s`)."""
        kind, n = _parts(tag)
        w, s, now = window_s(self.timeout_s), slack_s(self.timeout_s), time.monotonic()
        if kind == "r":
            return self.start(tag, deadline) + w
        if kind == "eq" and f"r{n}" in self.posted:
            p = self.posted[f"r{n}"]
            return max(min(max(p + w, now) + s, self.cap(tag, deadline)), now + _POLL_S)
        return deadline

    def safe(self, tag: str) -> float | None:
        """The latest this node may stop waiting in round exchange ``tag`` with no other peer held as long (past it, a
        peer is waited for only while others are: :class:`~dgrpo.transports.witnesses.Witnesses`); None where no wait may reach past it.

        * ``eq{n}`` this node posted: its post + E (a peer that left ``eq{n}`` then posts ``r{n+1}`` no earlier than it
          had this node's relay and waits W + E for this node's, which the honest compute spread, under W, then meets).
        * ``r{n}`` (n > 0), this node having posted ``eq{n-1}``: that post + timeout_s - S. A peer left ``eq{n-1}`` no
          earlier than it read this node's relay, so its round n began after that post and ends (its last wait for
          this node's relay ``eq{n}``) no earlier than timeout_s later; stopping S before leaves S for the relay,
          whatever the compute spread. Without it, a node late into ``r{n}`` (a relay withheld from it) gave a peer
          that hid ``r{n}`` from it the note's E for a wait it had shared (the main rank late into ``r{n-1}``: every
          node truly noted it), posted ``eq{n}`` after its peers' round end and was expelled."""
        kind, n = _parts(tag)
        if kind == "eq" and tag in self.posted:
            return self.posted[tag] + extension_s(self.timeout_s)
        if kind == "r" and f"eq{n - 1}" in self.posted:
            return self.posted[f"eq{n - 1}"] + self.timeout_s - slack_s(self.timeout_s)
        return None

    def held_with(self, tag: str, peers) -> None:
        """Record that in relay exchange ``tag`` this node waited past :meth:`safe` while ``peers`` were still in it
        (they held it there: :class:`~dgrpo.transports.witnesses.Witnesses`; the caller leaves out the peers whose
        relay this node has not received: the withholder it waits for is no fellow)."""
        self.fellows.setdefault(tag, set()).update(peers)

    def owe(self, tag: str, peers, noted) -> None:
        """Record the fellows this node missed in round payload ``tag`` and did not accuse (:meth:`fellows_of`):
        those whose signed note bought them this node's extension there (``noted``) owe their round payload as served
        (:meth:`owed_in`), the others as carried by another node's relay (:meth:`unnoted_in`)."""
        peers = set(peers)
        if peers & set(noted):
            self.owed.setdefault(tag, set()).update(peers & set(noted))
        if peers - set(noted):
            self.unnoted.setdefault(tag, set()).update(peers - set(noted))

    def owed_in(self, tag: str) -> set[int]:
        """For a relay ``eq{n}``: the fellows this node missed in ``r{n}`` unaccused though their note bought them its
        extension (:meth:`owe`). Each is accused of ``r{n}`` once its round payload has not come by the end of
        ``eq{n}`` (review r31n G1: a rank that never said it left ``eq{n-1}`` posed as a fellow and hid ``r{n}`` from
        everyone, unaccused by its "fellows"): a fellow late by the withholder's doing posts ``r{n}`` before its relay,
        and an honest node serves its round payload until it has finished ``r{n+1}``
        (:meth:`DistributedTransport.exchange <dgrpo.transports.distributed.DistributedTransport.exchange>`). Empty
        elsewhere."""
        kind, n = _parts(tag)
        return set(self.owed.get(f"r{n}", ())) if kind == "eq" else set()

    def unnoted_in(self, tag: str) -> set[int]:
        """For a relay ``eq{n}``: the fellows this node missed in ``r{n}`` unaccused whose note bought them no time
        here (none read, or one refused: :meth:`SideReads.note <dgrpo.transports.sidereads.SideReads.note>`). Each is
        accused of ``r{n}`` unless another node's relay of ``eq{n}`` carries its round payload's messages (some node
        had them in time: late for this node only), as :func:`~dgrpo.swarm.protocol.merge_views` counts them
        (review r31o H1: a rank posing as a fellow served its notes to one node and ``r{n}`` to the others only after
        their cut, served yet used by nobody, and was never expelled). An honest fellow held in ``eq{n-1}`` past this
        node's relay post + E has served its note of that wait from its own server long before, and every node signs
        at least one message a round (B·G/m). Not so for a fellow with a note (:meth:`owed_in`): the victim a
        withholder released last is cut by every honest node (review r31m F2), so no relay carries it. Empty
        elsewhere."""
        kind, n = _parts(tag)
        return set(self.unnoted.get(f"r{n}", ())) if kind == "eq" else set()

    def fellows_of(self, tag: str) -> set[int]:
        """For a round payload ``r{n}``: the peers still in ``eq{n-1}`` while this node was held there past
        :meth:`safe` (:meth:`held_with`). Held by the same withholder, they are late into ``r{n}`` by its doing, as
        this node is: this node waits for them as for any peer, but never accuses one it misses there (only at the
        end of ``eq{n}`` if its ``r{n}`` never came, :meth:`owed_in`, review r31n G1, or, unvouched by a note, if no
        other node's relay carries it, :meth:`unnoted_in`, review r31o H1; review r31l F2: two
        nodes held to the round's end by one relay withheld behind a false note; the later one, cut by the other
        at :meth:`safe`, was expelled by it, the on-time node and the withholder). Not a longer wait: the withholder
        chooses when each victim leaves ``eq{n-1}`` (review r31m F2: capping a fellow at ``W`` cut one that left
        ``eq{n-1}`` more than ``W`` after this node, and it was expelled). Empty elsewhere."""
        kind, n = _parts(tag)
        return set(self.fellows.get(f"eq{n - 1}", ())) if kind == "r" else set()

    def held_bound(self, tag: str, peer: int) -> float | None:
        """For a round payload ``r{n}``: the latest an honest ``peer`` held in ``eq{n-1}`` to its round's end posts
        it: its round n-1 ends by its ``r{n-1}`` arrival here + timeout_s, and it then computes as this node did from
        leaving ``eq{n-1}`` to its ``r{n}`` post, within the honest spread W; at most this node's ``r{n}`` post +
        timeout_s + W (it left ``eq{n-1}`` after that arrival). None where this node lacks those times."""
        kind, n = _parts(tag)
        a = self.arrived.get(f"r{(n or 0) - 1}", {}).get(peer)
        p, gone, t = self.posted.get(tag), self.left.get(f"eq{(n or 0) - 1}"), self.timeout_s
        if kind != "r" or a is None or p is None or gone is None:
            return None
        return min(a + t + max(0.0, p - gone) + window_s(t), p + t + window_s(t))

    def extended(self, tag: str, peer: int, base: float, waited_in: str, deadline: float, held: bool = False) -> float:
        """The deadline of ``peer``, which noted waiting in exchange ``waited_in``: for a relay, its round payload's
        arrival + W + E + S (it posts its relay once it stopped waiting there, and it may have given a waiter there its
        extension); else ``base`` + E. Never past the round's end (:meth:`cap`; review r31e G1: extensions chained
        to ~4 × timeout_s). A round payload ``r{n}`` of a peer that noted waiting in ``eq{n-1}`` and was ``held`` there
        with another (both still in it at this node's window: :class:`~dgrpo.transports.witnesses.Witnesses`) is
        waited for to :meth:`held_bound` if later, and the round's end moves to that + S (review r31q Q3: two victims
        held to their round's end posted ``r{n}`` ~S past this node's W + E; cut, they trained on sets of their own)."""
        t = self.timeout_s
        if tag.startswith("eq") and waited_in == f"r{tag[2:]}" and peer in self.arrived.get(waited_in, {}):
            out = max(base, self.arrived[waited_in][peer] + t)  # (W + E + S = timeout_s)
        else:
            out = base + extension_s(t)
            kind, n = _parts(tag)
            far = self.held_bound(tag, peer) if held and kind == "r" and waited_in == f"eq{n - 1}" else None
            if far is not None and far > out:
                out = far
                self.stretch[tag] = max(self.stretch.get(tag, 0.0), far + slack_s(t))
        return max(base, min(out, self.cap(tag, deadline)))


def _parts(tag: str) -> tuple[str | None, int | None]:
    """(``r``, n), (``eq``, n) or (``rec``, n) for ``r{n}``, ``eq{n}``, ``rec{n}``; else (None, None)."""
    for head in ("rec", "eq", "r"):
        if tag.startswith(head) and tag[len(head):].isdigit():
            return head, int(tag[len(head):])
    return None, None

