"""The torch.distributed transport's value exchanges (:meth:`DistributedTransport.gather_values
<dgrpo.transports.distributed.DistributedTransport.gather_values>`): a small string of every live rank, e.g. the run
name, or a start-up value (role, config fingerprint, resume round, start-up record) that every rank must serve within
``swarm.startup_timeout_s``.

A start-up exchange needs every rank that joined (named so in its errors); a ``config`` or ``resume`` value is signed
and compared (:mod:`dgrpo.transports.startagree`); a rank that stops in one says why, signed, so its peers quote it
instead of calling it silent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dgrpo.errors import PeerFailure
from dgrpo.transports.startagree import CHECKED, checked_values

if TYPE_CHECKING:
    from dgrpo.transports.distributed import DistributedTransport


def gather(t: "DistributedTransport", tag: str, value: str, timeout_s: float | None = None) -> dict[int, str]:
    """Every live node's ``value`` in exchange ``tag`` (node → text, this rank's included).

    ``timeout_s``: a start-up wait (``swarm.startup_timeout_s``, named so in errors; every rank is needed); default
    ``swarm.timeout_s``.

    Raises:
        PeerFailure: a peer missed the exchange (start-up: always; later: under ``abort``), or a start-up value is
            unsigned, two-faced or falsely echoed (:func:`~dgrpo.transports.startagree.checked_values`).
    """
    saved = t.wait.timeout_s, t.wait.limit_name
    if timeout_s is not None:
        t.wait.timeout_s, t.wait.limit_name = timeout_s, "swarm.startup_timeout_s"
    try:
        def plain(tg: str, text: str) -> dict[int, str]:
            return {n: b.decode(errors="replace") for n, b in t.exchange(tg, text.encode()).items()}
        return checked_values(t, tag, value, plain) if timeout_s is not None and tag in CHECKED else plain(tag, value)
    except PeerFailure as err:
        if timeout_s is not None:  # a start-up stop: its peers read why (signed) instead of "sent nothing"
            t.chan.announce_stop(str(err))
        raise
    finally:
        t.wait.timeout_s, t.wait.limit_name = saved
