"""Start-up values every rank must share, signed by each rank and compared as every rank read them (review r31q Q2).

The config fingerprint (``config``, :func:`~dgrpo.transports.rendezvous.agree_at_start`) and the round a resumed run
starts from (``resume``, :func:`dgrpo.training.resume.restore`) are gathered with
:meth:`DistributedTransport.gather_values <dgrpo.transports.distributed.DistributedTransport.gather_values>`: each
rank serves its value from its own server, so a rank can serve each reader another. Before, such a value was plain
text and a reader that saw a different one raised alone (no signed stop notice): rank 3 serving its fingerprint as
``deadbeef`` to node 2 only stopped node 2 (``nodes [3] run another config``), and nodes 0 and 1 waited the whole
``swarm.startup_timeout_s`` for node 2 and then named it, the honest one, silent.

So with the rank's keys (a roster file, or the unsafe key exchange) :func:`checked_values`:

1. serves ``VALUE|SIG``: ``SIG`` is the rank's key's signature of ``{tag}|{rank}|{VALUE}|{its server's launch}``
   (bound to its config, as every address-key signature is); a value whose signature does not verify for its rank's
   server launch was served by that rank's own server: the reader stops naming it;
2. then serves what it read from every rank (``{tag}_seen``: ``str(node)`` → [value, signature]) and reads every
   rank's: a value of rank k quoted by any reader with another value that k's key signed is k's signed proof of
   equivocation, and every rank that reads it (every honest rank reads every honest rank's) stops in one line naming k;
   a quoted value that k never signed, or a malformed echo, names the echo's server, unless the echo's server proved
   another launch of k at the check-in (:func:`~dgrpo.transports.launchproof.other_launch`: k answered for two
   launches, k's doing; review r31r R2: the honest quoter was named).

A rank that stops says why, signed (its peers still waiting for it quote it, :meth:`PeerChannel.announce_stop
<dgrpo.transports.peerserve.PeerChannel.announce_stop>`, through ``gather_values``), after serving its echo for
:data:`LINGER_S` more (before the start-up check no read is acknowledged, signed), so that a peer still collecting the
echoes reads the proof itself. Without keys nothing is signed: the values are returned
as read, and the caller's comparison says what differs.
"""

from __future__ import annotations

import json
import time

from dgrpo.errors import PeerFailure
from dgrpo.transports.launchproof import line, other_launch

CHECKED = ("config", "resume", "clock")  # start-up tags whose values are signed and compared here (clock: T0, clocked.py)
LINGER_S = 1.0  # how long a rank that found a proof keeps serving its echo before it stops (its reads unsigned then)


def _text(tag: str, node: int, value: str, launch) -> str:
    return f"{tag}|{node}|{value}|{launch}"


def _ok(chan, tag: str, node: int, value, sig) -> bool:
    """Whether ``sig`` is ``node``'s signature of ``value`` for ``tag`` and node's server launch, as this rank proved it."""
    return (isinstance(value, str) and isinstance(sig, str)
            and chan.keys.signed_by(node, _text(tag, node, value, chan.launches.get(node)), sig) == node)


def _echo(raw: str) -> dict[int, list[str]]:
    """node → [value, signature] of an echo as served; ValueError if malformed."""
    try:
        rec = json.loads(raw)
    except (ValueError, RecursionError):
        raise ValueError("not JSON") from None
    if not isinstance(rec, dict) or not all(
            isinstance(k, str) and k.isdigit() and isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)
            for k, v in rec.items()):
        raise ValueError("not an object of rank → [value, signature]")
    return {int(k): v for k, v in rec.items()}


def checked_values(t, tag: str, value: str, gather) -> dict[int, str]:
    """Every live rank's ``value`` of start-up exchange ``tag`` (``t``: this rank's transport; ``gather(tag, text)``:
    the plain exchange, node → text), checked as the module docstring says.

    Raises:
        PeerFailure: one line naming the rank whose value is unsigned, two-faced (both values), or whose echo is false.
    """
    chan, rank = t.chan, t.rank
    if chan.keys is None:
        return {n: v.partition("|")[0] for n, v in gather(tag, f"{value}|").items()}
    sig = chan.keys.sign(_text(tag, rank, value, chan.nonce))
    read = {n: list(v.partition("|")[::2]) for n, v in gather(tag, f"{value}|{sig}").items()}
    read[rank] = [value, sig]
    bad = sorted(n for n, (v, s) in read.items() if n != rank and not _ok(chan, tag, n, v, s))
    if bad:  # (served by its own server: its doing)
        raise PeerFailure(f"node{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} served a start-up value of "
                          f"exchange {tag!r} that {'their keys' if len(bad) > 1 else 'its key'} did not sign for "
                          f"{'their' if len(bad) > 1 else 'its'} server's launch ({read[bad[0]][0][:20]!r} read by node "
                          f"{rank}): stopping before round 0")
    seen = gather(f"{tag}_seen", json.dumps({str(n): v for n, v in sorted(read.items())}))
    proofs, false, launches, maps = {}, {}, [], {}
    for j, raw in sorted(seen.items()):
        if j == rank:
            continue
        try:
            echo = _echo(raw)
        except ValueError as err:
            false[j] = f"is malformed ({err})"
            continue
        for k, (v, s) in sorted(echo.items()):
            if k not in read or [v, s] == read[k] or v == read[k][0] and _ok(chan, tag, k, v, s):
                continue
            if _ok(chan, tag, k, v, s):  # k signed both: its proof, whoever shows it
                proofs.setdefault(k, (read[k][0], v, j))
            elif (two := other_launch(chan, j, k, maps)) is not None:  # (j proved k another launch: k's doing, R2)
                launches.append(two)
            else:
                false.setdefault(j, f"quotes a value of node {k} that node {k} never signed ({v[:20]!r})")
    if proofs or false or launches:
        why = "; ".join([*([line(launches, rank)] if launches else []),
                         *(f"node {k} signed two different start-up values of exchange {tag!r} ({a[:20]!r} read by "
                           f"node {rank}, {b[:20]!r} read by node {j}; both verify under node {k}'s key for its "
                           "server's launch: it showed its peers different values)" for k, (a, b, j) in sorted(proofs.items())),
                         *(f"node {j}'s echo of exchange {tag!r} {w}" for j, w in sorted(false.items()))])
        time.sleep(LINGER_S)  # (its echo still served: a peer still collecting reads the proof itself)
        raise PeerFailure(f"{why} (checked by node {rank}): stopping before round 0 rather than splitting the swarm")
    return {n: v for n, (v, _) in read.items()}
