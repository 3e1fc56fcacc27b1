"""Blame for a peer whose payload of an exchange did not come whole (issue 31, review r31o H5): named, and accused
when it is its server's doing (:class:`~dgrpo.transports.storewait.StoreExchange`'s end of ``collect``).

* Not served by its deadline (``missing payload``), or its answer not whole by then (``transport``: ``slow``; a
  read runs until the peer's deadline, so one that keeps receiving is not slow and an honest payload slow under load
  is taken if whole by then, task h31q2; a read silent for 1 s ends and is begun again): accused (signed), unless it
  is a *fellow*, held with this node in ``eq{n-1}`` (late by the withholder's doing: named only,
  :meth:`~dgrpo.transports.waits.Schedule.owe`). A trickled answer is so the same as a withheld one, and costs the
  round the same (the read ends at the deadline): before, a server that answered every read a byte every 0.9 s (under
  the 1 s silence a recv allows) was named ``slow`` and left out of each round, never accused: it kept its vote and
  witness role while contributing nothing (review r31o H5).
* A round payload ``r{n}`` or a relay ``eq{n}`` served over its byte cap (``transport``: ``oversize``): accused at
  once. The cap is ``CAP_FACTOR`` times the node's share at the largest message size
  (:class:`~dgrpo.transports.framing.KeyCaps`; a relay's: :func:`~dgrpo.transports.framing.cap_of`): an honest
  node's own payload never reaches it, an honest relay is built within it whatever its peers sent
  (:mod:`dgrpo.transports.relay`), and the length is its server's own claim. (Before the relay was built within its
  cap, a relay over it was named only: refusals quoting a peer's text could make an honest one pass it.)
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger("dgrpo.transports.storewait")  # (one logger for the exchange and its blame)

_CAPPED = re.compile(r"(?:r|eq)\d+")  # (exchanges whose payload over its cap is its server's doing)


def blame_unserved(ex, tag: str, pending: list[int], bad: dict[int, str], slow: dict[int, str], fellows: set[int],
                   startup: bool) -> list[int]:
    """Name (``ex.refuse``) every peer still ``pending`` at the end of exchange ``tag`` (``slow``: peer → the problem
    of its last slow read) and accuse those its server made miss it; also accuse each peer of ``bad`` (peer → its read's
    problem, named already) whose round payload or relay was ``oversize`` (not at start-up: ``startup``). ``ex``: the
    :class:`~dgrpo.transports.storewait.StoreExchange`. Returns the peers accused now."""
    accused = []
    for peer in pending:
        if peer in slow:
            log.warning("node %d: exchange %r: node %d's server %s (read again until its deadline, never whole)",
                        ex.rank, tag, peer, slow[peer])
            ex.refuse(peer, f"transport: exchange {tag!r}: {slow[peer][:120]}; never whole by its deadline")
        else:
            ex.refuse(peer, f"missing payload: its server did not serve exchange {tag!r}")
        if peer not in fellows:
            accused.append(peer)
    if not startup and _CAPPED.fullmatch(tag):
        accused += [p for p, why in sorted(bad.items()) if why.startswith("oversize")]
    for peer in accused:
        ex.ledger.accuse(peer, tag)
    return accused
