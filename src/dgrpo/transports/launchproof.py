"""One launch per owner at start-up (issue 31, must-have 5; review r31r R2).

Every start-up value of the torch.distributed transport is signed for its rank's server launch nonce as each reader
proved it (:mod:`~dgrpo.transports.peerresolve`: the server answered a fresh challenge with that nonce, signed). A
rank can prove one launch to one reader and another to the rest (its key signs for whatever nonce it likes): then
every value it serves is the same, only bound to each reader's launch, and a reader that checks a value another rank
quotes (the config echo, the roles in the start-up records, the ready confirmations) could not tell that rank's doing
from a false quote, and named the honest quoter (R2).

So at the check-in each rank serves, under :data:`KEY`, every launch it proved (``launches``: ``str(owner)`` →
nonce, its own included) and, for each peer, that peer's server's signed answer to a challenge that is the
:func:`digest` of that very map (``proofs``). A proof names its challenge's map, and that map holds the *reader's*
own launch nonce (16 random bytes it drew at its start): so the peer's server answered for that launch after the
reader started, and a proof cannot be replayed from an earlier run or launch. A launch another rank proved fresh for
owner k, other than the one this rank proved, is then k's signed proof that it answered for two launches during this
start-up (two servers of one key: an equivocation, or k restarted during its start-up): every rank that sees it
stops in one line naming k with both nonces (:func:`line`), as for two signed views or roles. Each rank looks at
every live rank's map once the group is set up (:func:`settle`), and every later start-up check that meets a value of k quoted
for a launch it cannot verify looks at the quoter's map (:func:`other_launch`) before it names the quoter. Only an
owner's own signatures name it; a map (unsigned) with a proof that does not verify, or that does not hold this
rank's nonce, proves nothing and names nobody.
"""

from __future__ import annotations

import hashlib
import json
import time

from dgrpo.errors import PeerFailure

KEY = "join/launches"  # served by each rank: {"launches": {rank: nonce}, "proofs": {rank: hello signature}}
_CAP = 1 << 20  # bytes read of one rank's map


def digest(launches: dict[int, str]) -> str:
    """The challenge a rank sends every peer: 32 hex digits of the SHA-256 of its map of proved launches."""
    text = json.dumps({str(k): v for k, v in sorted(launches.items())}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _answered(keys, owner: int, nonce: str, challenge: str, sig) -> bool:
    """Whether ``sig`` is ``owner``'s server's signed answer to ``challenge`` for launch ``nonce``."""
    return isinstance(sig, str) and keys.signed_by(owner, f"hello|{owner}|{nonce}|{challenge}", sig) == owner


class Proofs:
    """This rank's map of proved launches and its peers' answers to its challenge, served under :data:`KEY`."""

    def __init__(self, chan):
        self.chan, self.launches, self.proofs, self.came = chan, {}, {}, {}

    def refresh(self, end: float) -> None:
        """Challenge every peer proved so far whose answer to this map's digest is missing (reads end by ``end``);
        a new launch proved makes a new map (its digest the new challenge). Serves the map and the answers."""
        from dgrpo.transports.accusations import fetch_all

        chan = self.chan
        now = dict(chan.launches)
        if now != self.launches:
            self.launches, self.proofs = now, {}
        want = [k for k in sorted(now) if k != chan.rank and k not in self.proofs]
        if want and end > time.monotonic():
            d = digest(now)
            for k, (raw, _) in fetch_all(chan, want, lambda k: f"hello/{d}", 256, end, budget=2.0).items():
                sig = (raw or b"").decode(errors="replace")
                if _answered(chan.keys, k, now[k], d, sig):
                    self.proofs[k] = sig
                    self.came.setdefault(k, time.monotonic())  # (when its first answer came: settle names it late)
        chan.set(KEY, json.dumps({"launches": {str(k): v for k, v in sorted(now.items())},
                                  "proofs": {str(k): v for k, v in sorted(self.proofs.items())}}))

    def missing(self, live) -> list[int]:
        """The ranks of ``live`` (other than this one) without an answer to this rank's challenge yet."""
        return sorted(k for k in live if k != self.chan.rank and k not in self.proofs)


def proved(chan, raw) -> dict[int, str]:
    """owner → launch nonce of each launch the served map ``raw`` proves fresh to this rank: the map holds this rank's
    own nonce and owner's key signed its server's answer to the map's digest for that nonce. {} for anything else."""
    try:
        rec = json.loads(raw)
        launches = {int(k): v for k, v in rec["launches"].items() if k.isdigit() and isinstance(v, str) and len(v) <= 64}
        proofs = {int(k): v for k, v in rec["proofs"].items() if k.isdigit()}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return {}
    if launches.get(chan.rank) != chan.nonce:  # (not bound to this rank's launch: could be a replay)
        return {}
    d = digest(launches)
    return {k: launches[k] for k, sig in sorted(proofs.items())
            if k in launches and k != chan.rank and _answered(chan.keys, k, launches[k], d, sig)}


def conflicts(chan, writer: int, raw) -> list[tuple[int, str, str, int]]:
    """(owner, its launch as this rank proved it, the other launch, ``writer``) for each launch ``writer``'s map
    ``raw`` proves fresh that is not the one this rank proved for its owner."""
    return [(k, chan.launches[k], b, writer) for k, b in proved(chan, raw).items()
            if chan.launches.get(k) not in (None, b)]


def line(found: list[tuple[int, str, str, int]], rank: int) -> str:
    """One line naming each owner of ``found`` (:func:`conflicts`) with both launches."""
    return "; ".join(f"node {k} answered for two launches at start-up ({a[:12]}… proved by node {rank}, {b[:12]}… "
                     f"proved by node {j}; both answered, under node {k}'s key, challenges made after this start-up "
                     "began: it showed its peers different launches)" for k, a, b, j in sorted(set(found)))


def other_launch(chan, writer: int, owner: int, cache: dict | None = None) -> tuple[int, str, str, int] | None:
    """The conflict (:func:`conflicts`) over ``owner``'s launch that ``writer``'s served map proves, or None
    (``cache``: writer → its map as read, so each map is read once per check)."""
    if chan.keys is None or writer == chan.rank:
        return None
    cache = {} if cache is None else cache
    if writer not in cache:
        cache[writer] = chan.fetch(writer, KEY, _CAP, time.monotonic() + 2.0)[0] or b"{}"
    return next((c for c in conflicts(chan, writer, cache[writer]) if c[0] == owner), None)


def settle(chan, live, timeout_s: float, wait_s: float | None = None) -> dict[int, float]:
    """After the check-in and the group's set-up (``live``: the peers the check-in kept; ``timeout_s``:
    ``swarm.startup_timeout_s``): every live peer's answer to this rank's challenge in its served map (waited for up to
    ``timeout_s / 2``: a rank that stops for a missing answer is quoted by its peers well within their own wait in the
    first start-up exchange, and a busy server has as long as any start-up value), then every live peer's map read once: a launch one proves fresh for an owner,
    other than this rank's, stops the start-up naming that owner. Here, not in the check-in: a rank that stops says
    why, signed, and its peers, already in the first start-up exchange, quote it (in the check-in they would wait for
    it in the group's set-up and fail there naming nobody).

    ``wait_s``: the wait for the answers instead of ``timeout_s / 2`` (the caller's start-up budget: review r31s S2).

    Returns:
        owner → seconds after this wait began that its answer came (every live peer's; its caller names one over
        ``startgather.LATE_S`` late: review r31s S1).

    Raises:
        PeerFailure: an owner answered for two launches (both nonces); a live peer's server did not answer this
            rank's challenge in time (names it: the start-up needs every live rank). Said to the peers first, signed.
    """
    if chan.keys is None:
        return {}
    proofs, wait_s = Proofs(chan), timeout_s / 2 if wait_s is None else wait_s
    start = time.monotonic()
    end = start + wait_s
    while True:
        for k in sorted(live):  # (each proved at the check-in already; else its server is challenged now)
            chan.address_of(k, min(end, time.monotonic() + 2.0))
        proofs.refresh(min(end, time.monotonic() + 2.0))
        if not proofs.missing(live) or time.monotonic() >= end:
            break
        time.sleep(0.2)
    from dgrpo.transports.accusations import fetch_all

    found = [c for k, (raw, _) in fetch_all(chan, sorted(live), lambda k: KEY, _CAP, time.monotonic() + 2.0).items()
             if raw is not None for c in conflicts(chan, k, raw)]
    late, why = proofs.missing(live), ""
    if found:
        why = f"{line(found, chan.rank)}: stopping before round 0 rather than splitting the swarm"
    elif late:
        why = (f"node{'s' if len(late) > 1 else ''} {', '.join(map(str, late))} did not answer node {chan.rank}'s "
               f"challenge for {'their' if len(late) > 1 else 'its'} launch within {wait_s:.3g}s (stalled or gone, or "
               f"its server withheld the answer from node {chan.rank}): stopping before round 0")
    if why:
        chan.announce_stop(why)
        raise PeerFailure(why)
    return {k: at - start for k, at in proofs.came.items() if k in live}
