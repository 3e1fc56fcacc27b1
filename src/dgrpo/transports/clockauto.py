"""``swarm.protocol.round_s: auto``: one round length for clocked rounds, measured and agreed (issue 31 (a), task h31p).

Why. A hand-set ``round_s`` must exceed the slowest honest node's round compute, sized for what an attacker can
force (its completions at the length cap lengthen every honest node's update), plus ``direct_s + relay_s``; a user
cannot size it, and a wrong value either wastes time or makes every honest node skip. With ``auto`` each rank times
its own worst-case round compute at start-up (:mod:`dgrpo.training.roundtime`) and proposes
``its estimate + direct_s + relay_s`` beside its start ``T0`` in the start-up exchange ``clock`` (signed, compared by
every rank: :mod:`dgrpo.transports.startagree`), as ``"{start:.3f} {round_s:.3f}"`` (:func:`proposal`): one form,
anything else stops the run in one line naming its proposer (:func:`parse`).

The rule (:func:`agree`, a function of the agreed proposals alone, so the same at every honest rank): the largest
proposal, at most ``bound`` (``swarm.timeout_s``: "every round ends within timeout_s"); its proposer (the lowest rank
among equal ones) is named in one log line at every rank, and a proposal above the bound in a WARNING. A proposal
that stands out (:func:`slow`: above the bound, or the agreed one more than :data:`SLOW_FACTOR` times every other
proposal) is also named in ``peers.jsonl`` under its proposer, as ``slow proposal`` (never a strike: an honest
slow machine can propose the largest; task h31h).

Why the largest and not a robust statistic (``f = 1``). The second-largest drops one extreme value, but it lets the
attacker shrink the round: with the attacker proposing a small value, the second-largest is below the slowest honest
node's need whenever that node's proposal is the largest; that node then misses every ``P_n``, skips, and is expelled
past ``swarm.protocol.max_skips`` (the attacker has turned a timing into a ban of an honest node). The largest can only
be stretched: the attacker makes every round last up to the bound, which costs time, not correctness (issue 31 allows
a round to last up to ``timeout_s``), and the log names it. Below the bound, every honest node's compute fits.

The start (:func:`start`): ``T0 = max_i (start_i + LEAD · max(0, R − round_i))``, so for every honest proposer ``i``
(``start_i = now_i + LEAD · min(round_i, bound)``) ``T0 ≥ now_i + LEAD · R``: round 0 has at least ``LEAD`` agreed rounds after it
proposed, whatever round length it proposed itself. Equally ``T0 = max_i now_i + LEAD · R`` with each proposer's
``now_i = start_i − LEAD · min(round_i, R)``, and :func:`~dgrpo.transports.clocked.agree_start` bounds that ``now_i``
(within ``startup_timeout_s`` of the second-latest), not ``start_i`` (review r31p: on the start, an honest rank whose
round_s exceeded another's by ``startup_timeout_s / 2`` was refused as a start far ahead, and an attacker's round_s of
0.001 s with its start at the bound put ``T0`` ``2 R`` past the documented delay of at most ``startup_timeout_s``).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

log = logging.getLogger("dgrpo.transports.distributed")

SLOW_FACTOR = 2.0  # the agreed proposal above this many times every other proposal: named (slow proposal)
_FORM = re.compile(r"(0|[1-9][0-9]{0,11})\.[0-9]{3} (0|[1-9][0-9]{0,8})\.[0-9]{3}")  # "{start:.3f} {round_s:.3f}"


def proposal(start: float, round_s: float) -> str:
    """A rank's proposal as served: its start (wall-clock seconds) and its round_s (seconds), 3 decimals each."""
    return f"{start:.3f} {round_s:.3f}"


def parse(values: dict[int, str]) -> tuple[dict[int, tuple[float, float]], list[int]]:
    """(node → (start, round_s) of every proposal in the one accepted form with round_s > 0, the nodes of the others
    in rank order). Another form (a start alone, an exponent, a sign, a hex digit, ``nan``, more or fewer decimals,
    a round_s of 0) is refused: one encoding of a signed value (issue 31, must have 1)."""
    ok, bad = {}, []
    for node, raw in sorted(values.items()):
        m = _FORM.fullmatch(raw) if isinstance(raw, str) else None
        if m is None or float(raw.split()[1]) <= 0:
            bad.append(node)
        else:
            ok[node] = (float(raw.split()[0]), float(raw.split()[1]))
    return ok, bad


@dataclass(frozen=True)
class Agreed:
    """The agreed round length: ``round_s`` (seconds), the ``proposer`` of the largest proposal (lowest rank among
    equal ones), and the ``above`` nodes whose proposal exceeded the bound (clamped to it)."""

    round_s: float
    proposer: int
    above: tuple[int, ...] = ()


def agree(proposals: dict[int, tuple[float, float]], bound: float) -> Agreed:
    """The largest proposed round_s, at most ``bound`` (module docstring: why the largest).

    Args:
        proposals: node → (start, round_s) as :func:`parse` returns them (non-empty).
        bound: seconds, ``swarm.timeout_s``.
    """
    rounds = {node: r for node, (_, r) in proposals.items()}
    top = max(rounds.values())
    proposer = min(node for node, r in rounds.items() if r == top)
    return Agreed(min(top, bound), proposer, tuple(sorted(node for node, r in rounds.items() if r > bound)))


def start(proposals: dict[int, tuple[float, float]], round_s: float, lead: float) -> float:
    """``T0`` (wall-clock seconds): ``max_i (start_i + lead · max(0, round_s − round_i))`` = ``max_i now_i + lead ·
    round_s`` with ``now_i = start_i − lead · min(round_i, round_s)`` (module docstring)."""
    return max(s + lead * max(0.0, round_s - r) for s, r in proposals.values())


def say(rank: int, agreed: Agreed, proposals: dict[int, tuple[float, float]], bound: float) -> None:
    """The log lines every rank writes alike: the agreed value and its proposer; a WARNING per proposal above the
    bound (an honest node whose need exceeds ``swarm.timeout_s`` skips every round: raise it)."""
    listed = ", ".join(f"{node}: {r:g}" for node, (_, r) in sorted(proposals.items()))
    log.info("node %d: swarm.protocol.round_s=auto: agreed round_s=%gs, node %d's proposal, the largest of {%s}%s",
             rank, agreed.round_s, agreed.proposer, listed,
             f" (clamped to swarm.timeout_s={bound:g}s)" if agreed.above else "")
    for node in agreed.above:
        log.warning("node %d: node %d proposed round_s=%gs, above swarm.timeout_s=%gs: every round lasts %gs (if node "
                    "%d is honest it cannot finish a round in time and skips: raise swarm.timeout_s)", rank, node,
                    proposals[node][1], bound, bound, node)


def slow(agreed: Agreed, proposals: dict[int, tuple[float, float]], bound: float,
         factor: float = SLOW_FACTOR) -> list[tuple[int, str]]:
    """(node, reason) to name in ``peers.jsonl`` (rule ``slow proposal``, never a strike), a function of the agreed
    proposals alone (the same at every rank): every node whose round_s exceeded ``bound`` (clamped to it), and the
    proposer of the agreed value where its round_s exceeds ``factor`` × the largest other proposal, with 3 ranks or
    more (2 ranks: nobody is named by the factor, one cannot tell which of two is slow). With 3 ranks or more and one attacker, an honest proposer is then named only if its
    round_s exceeds ``factor`` × every other honest proposal, whatever the attacker proposed: the attacker's value
    can only raise the reference (review r31h: against ``factor`` × the median of all, the attacker's tiny value
    lowered the median by one position, so with honest 10, 20 and 35 s the 35 s proposer was named though within
    the factor of the 20 s one). The price: an attacker whose proposal is the largest is named only above
    ``factor`` × the slowest honest proposal. Seconds throughout; ``proposals`` as :func:`parse` returns them
    (non-empty)."""
    rounds = {node: r for node, (_, r) in proposals.items()}
    others = [r for node, r in rounds.items() if node != agreed.proposer]
    ref = max(others, default=0.0)
    out = [(node, f"slow proposal: node {node} proposed round_s={rounds[node]:g}s, above swarm.timeout_s={bound:g}s: "
                  f"every round lasts {bound:g}s (named, never a strike)") for node in agreed.above]
    top = rounds[agreed.proposer]
    if len(rounds) >= 3 and agreed.proposer not in agreed.above and top > factor * ref:
        out.append((agreed.proposer, f"slow proposal: node {agreed.proposer} proposed round_s={top:g}s, more than "
                                     f"{factor:g} x every other proposal (the largest {ref:g}s): every round lasts "
                                     f"{top:g}s (named, never a strike)"))
    return out
