"""Naming a late round payload and the notes that bought a peer time (issue 31: peers.jsonl, no strike), at the end of
an exchange of :class:`~dgrpo.transports.storewait.StoreExchange` (split out of storewait.py, no change)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dgrpo.transports.waits import record_s, window_s

if TYPE_CHECKING:
    from dgrpo.transports.sidereads import SideReads
    from dgrpo.transports.storewait import StoreExchange


def name_late(ex: "StoreExchange", tag: str, start: float, got: dict[int, bytes], arrived: dict[int, float],
               extended: dict[int, tuple[str, list[int]]], side: "SideReads") -> None:
    """Name (peers.jsonl, no strike) a round payload that came over half of the payload window W after this node
    posted its own (``late``), and every note that bought a peer more time, under its writer (``waited``, naming
    whom it says it waited for; a note alone never names those ``late``: review r31e G1)."""
    half = window_s(ex.wait.timeout_s) / 2
    rnd = tag.startswith("r") and tag[1:].isdigit()
    for peer in sorted(got):
        late = arrived.get(peer, start) - start
        allowed = half + (record_s(ex.wait.timeout_s) if rnd and late > half and _held(ex, peer, tag, extended, side)
                          else 0.0)
        if peer in extended:
            waited_in, whom = extended[peer]
            if late > allowed or not tag.startswith("r"):  # (a claim nobody can check: named under its writer
                ex.refuse(peer, f"waited: served {tag!r} {late:.1f}s late, saying (signed note) nodes {whom} "
                                f"kept it waiting in exchange {waited_in!r}")  # only, never `late` under those)
        elif late > allowed and rnd:
            ex.refuse(peer, f"late: served exchange {tag!r} {late:.1f}s after this node posted (over half "
                            f"of the payload window, {2 * half:.3g}s of {ex.wait.limit_name}="
                            f"{ex.wait.timeout_s:g}s)")


def _held(ex: "StoreExchange", peer: int, tag: str, extended: dict[int, tuple[str, list[int]]], side: "SideReads") -> bool:
    """Whether ``peer`` is the main rank this node posted its round record ``rec{n-1}`` for and says (its signed
    note, read as its payload came: :meth:`SideReads.ask_held`) it still waited for records before its ``tag`` =
    ``r{n}`` (review r31g Z5l: its peers named it ``late`` for the time a withheld or late record held it)."""
    rec = f"rec{int(tag[1:]) - 1}"
    if peer != ex.record_reader or rec not in ex.schedule.history:
        return False
    if peer in extended:
        return extended[peer][0] == rec
    return side.held_note(peer)
