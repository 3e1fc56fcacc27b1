"""A hivemind node's signed ``bye`` and the stop reason it carries (task h31q3; light: no hivemind import).

A node that leaves on an error says ``bye`` on its way out (:meth:`HivemindTransport._exit
<dgrpo.transports.hivemind.HivemindTransport._exit>`): a record under ``bye`` of its launch, signed by its roster key
like every record (:class:`~dgrpo.transports.dht.recordio.SignedRecords`), so its peers stop waiting for it at once.
A node that stops on a peer failure (``on_peer_failure=abort``: its one line names the peer and the cause) or at
start-up (:meth:`HivemindTransport.announce_stop <dgrpo.transports.hivemind.HivemindTransport.announce_stop>`) puts
that line in its ``bye`` (:func:`body`), and a peer that then finds it gone quotes it (:func:`quoted`: ``node 1 left
the swarm during exchange 'r2' (stopped on an error); node 1 stopped first, saying (signed): "node 3 sent nothing
…"``) instead of naming it alone while the peer that made it stop goes unnamed, as the distributed transport does
(:mod:`dgrpo.transports.stopwhy`). Only its own key can write the record for its slot, so nobody else can put words
in its mouth; what it says is shown through :func:`~dgrpo.errors.peer_text` (one line, at most ``WHY_CHARS``).
"""

from __future__ import annotations

from typing import Mapping

from dgrpo.errors import peer_text

WHY_CHARS = 1000  # a stop reason in a bye: characters kept (an abort's line is a few hundred)
_HEAD = b"bye\n"  # a bye with a reason; a plain ``bye`` says none (a node that stopped on an error it never named)


def body(why: str | None) -> bytes:
    """The value of this node's ``bye`` record: ``bye``, then its stop reason ``why`` if it has one."""
    return b"bye" if not why else _HEAD + peer_text(why, WHY_CHARS).encode()


def why_of(raw: bytes) -> str | None:
    """The stop reason a peer's ``bye`` value ``raw`` carries (shown safe to quote), or None."""
    if not isinstance(raw, bytes) or not raw.startswith(_HEAD):
        return None
    return peer_text(raw[len(_HEAD):len(_HEAD) + 4 * WHY_CHARS].decode("utf-8", "replace"), WHY_CHARS) or None


def failed_line(peers: list[int], tag: str, left: Mapping[int, str | None], why: str, limit: str) -> str:
    """The line naming ``peers`` failed in exchange ``tag`` (:meth:`HivemindTransport.declare_failed
    <dgrpo.transports.hivemind.HivemindTransport.declare_failed>`): what they did (``why``), or that they left (all
    said bye: ``left``, node → the reason its bye carries), or sent nothing within ``limit``; then, for each that said
    why it stopped, its signed reason (:func:`quoted`)."""
    what = f"node{'s' if len(peers) > 1 else ''} {', '.join(map(str, peers))}"
    if why:
        text = f"{what} {why} in exchange {tag!r}"
    elif set(peers) <= set(left):
        text = f"{what} left the swarm during exchange {tag!r} (stopped on an error)"
    else:
        text = f"{what} sent nothing for exchange {tag!r} within {limit} (dead or stalled)"
    return text + quoted(peers, left)


def quoted(peers, whys: Mapping[int, str | None]) -> str:
    """What the failure line of ``peers`` adds for each one whose ``bye`` said why it stopped ('' if none did)."""
    return "".join(f'; node {p} stopped first, saying (signed): "{w}"' for p in sorted(peers) if (w := whys.get(p)))
