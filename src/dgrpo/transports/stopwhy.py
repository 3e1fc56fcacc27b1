"""A node's stop reason under ``on_peer_failure=abort``, said so that no other rank can hide it (issue 31, review
r31d F2, r31e G2, r31k F4, r31l F1, r31m F1/F3: :class:`StopReasons`, the base of
:class:`~dgrpo.transports.waits.WaitNotes`).

A node that stops on a peer failure says why (:meth:`StopReasons.say_stop`), one line signed for the run and its
launch (``why|{k}|{reason}``), so that its peers, which then find it missing, quote it (``node 1 stopped first,
saying (signed): "node 3 sent nothing …"``) instead of naming it alone while the rank that withheld goes unnamed.
It leaves three copies, read in this order (:meth:`StopReasons.stop_of`):

* **pushed** to each peer's own server (``X-Dgrpo-Why`` on one request each, within 2 s), which keeps it per owner
  once the owner's signature verifies (:meth:`PeerChannel.told_why
  <dgrpo.transports.peerserve.PeerChannel.told_why>`): no third rank can write, delete or bury it there (as start-up
  stop notices: :meth:`PeerChannel.announce_stop <dgrpo.transports.peerserve.PeerChannel.announce_stop>`; review
  r31m F1: over 32 KiB of junk on each side of the store's copy hid it, and the peers named the stopped node alone);
* **served** as ``why`` by its own server, until each peer's server holds the pushed copy (it serves it back as
  ``why/{k}``), or the peer read it (a signed acknowledgement) or stopped too, as long as a peer may wait for it
  (review r31e G2, r31f H5);
* **in the store**, appended to ``why/{k}``: the fallback, for a peer the stopping node could not reach. Any rank can
  delete it or bury it (junk over ``COPY_CAP`` / 2 bytes, or over ``_WHY_LINES`` / 2 lines with well-formed
  signatures, on each side of it); the store cannot say who. A peer that the stopping node reached neither by its push
  nor by its server (no route to it at all) and that finds that copy buried or deleted names it alone.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from dgrpo.errors import peer_text

if TYPE_CHECKING:
    from dgrpo.transports.peerserve import PeerChannel
    from dgrpo.transports.signedstore import SignedStore

_WHY_BYTES = 1 << 18  # a stop reason in the store: bytes read
_WHY_LINES = 64  # a stop reason in the store: most lines checked a read (StopReasons._why)
_CHECKED = 256  # why-lines whose check is remembered (StopReasons._checked)
_PUSH_S = 2.0  # the push of a stop reason to every peer's server: seconds in all


class StopReasons:
    """This node's stop reason and its peers' (module docstring).

    Args:
        rank: this node.
        chan: this rank's :class:`~dgrpo.transports.peerserve.PeerChannel` (serves and pushes its reason, reads
            its peers').
        store: the :class:`~dgrpo.transports.signedstore.SignedStore` (signs and checks the lines; the store's copy).
    """

    def __init__(self, rank: int, chan: "PeerChannel", store: "SignedStore"):
        self.rank, self.chan, self.store = rank, chan, store
        self._stops: dict[int, str] = {}  # peer → the signed stop reason read of it (its server may go once read)
        self._checked: dict[tuple[int, str, str], bool] = {}  # (peer, why, sig) → valid: why-lines checked (_why)

    def say_stop(self, why: str, readers=(), wait_s: float = 0.0) -> None:
        """Before this node stops on a peer failure (``on_peer_failure=abort``): say ``why``, signed for the run and its
        launch, so that peers that then find this node missing quote its reason instead of naming it alone (review
        r31d F2). Pushed to the server of each node of ``readers`` (``X-Dgrpo-Why`` on one request each, in threads,
        within ``_PUSH_S``; kept there per owner once its signature verifies, where no third rank can delete or bury it:
        :meth:`PeerChannel.told_why`; review r31m F1); served as ``why`` on its own server (review r31e G2); and
        appended to ``why/{rank}`` in the store (for a peer whose server it cannot reach). It keeps serving it until
        every node of ``readers`` holds it (its server answered the push with it), read it (a signed acknowledgement)
        or says it stopped too (it will not read), at most ``wait_s`` seconds (the longest a peer may still wait for
        this node)."""
        why = " ".join(str(why).split())[:600]
        line = (json.dumps({"why": why, "sig": self.store.sign(f"why|{self.rank}|{why}")}) + "\n").encode()
        self.chan.set("why", line)
        pushed, held = time.monotonic() + _PUSH_S, peer_text(why).encode()  # (held: what a server that kept it serves)
        pushes, answers = self.chan.push(sorted(readers), f"why/{self.rank}", {"X-Dgrpo-Why": line.decode().strip()},
                                         pushed)
        try:
            self.store.append(f"why/{self.rank}", line)
        except Exception:  # noqa: BLE001 - the store is gone: its peers find that out too
            pass
        end, waiting = time.monotonic() + wait_s, set(readers)
        while time.monotonic() < end and waiting:
            waiting = {p for p in waiting if answers.get(p) != held and not self.chan.read_by("why", [p])
                       and p not in self.chan.whys
                       and self._why(p, self.chan.fetch(p, "why", 4096, end, 1.0)[0] or b"") is None}
            time.sleep(0.05 if waiting else 0.0)
        for t in pushes:
            t.join(max(0.0, pushed - time.monotonic()))

    def stop_of(self, peer: int, deadline: float, budget: float = 1.0) -> str | None:
        """Why ``peer`` said it stopped (:meth:`say_stop`, signed by it for this run and launch): as read before (once
        read, its server may stop serving it), else as it pushed it to this node's server (:meth:`PeerChannel.told_why`:
        nobody else can put it there or take it away), else as its own server serves it (``budget`` seconds at most;
        the read is acknowledged, signed: :meth:`PeerChannel.acked`), else a valid line of ``why/{peer}`` in the store
        (:class:`~dgrpo.transports.sidereads.StoreCopies`: of a value over ``COPY_CAP`` bytes its first and last
        ``COPY_CAP / 2``; :meth:`_why`). The store's copy is the fallback only: any rank can bury it (over ``COPY_CAP``
        / 2 bytes, or ``_WHY_LINES`` / 2 well-formed lines, of junk on each side) or delete it, so a peer that
        ``peer`` could not reach at all (neither pushed to nor served) may name it alone. None: nothing found, junk, or
        another key's or launch's line (a claim nobody signed counts for nothing)."""
        if peer in self._stops:
            return self._stops[peer]
        why, end = self.chan.whys.get(peer), max(deadline, time.monotonic() + budget)
        if why is None:
            raw, _ = self.chan.fetch(peer, "why", 4096, end, budget)
            why = self._why(peer, raw or b"")
        if why is None:
            try:
                copies = self.chan.copies  # (bounded: transports/sidereads.py)
                raw = copies.read(peer, f"why/{peer}", end) if copies is not None else self.store.read(f"why/{peer}", end)
                why = self._why(peer, raw or b"")
            except Exception:  # noqa: BLE001 - the store is gone
                return None
        if why is not None:
            self._stops[peer] = why
        return why

    def _why(self, peer: int, raw: bytes) -> str | None:
        """The first valid reason among the lines of ``raw`` (at most ``_WHY_BYTES`` of it) that look like one (a
        ``why`` string and a signature spelled as 128 lower-case hex digits), checked alternately from the first and
        the last: junk on one side of the owner's line hides nothing (review r31k F4). At most ``_WHY_LINES`` (64)
        distinct lines are checked a read: an honest owner writes one line a launch, and what hides its line in the
        store's copy is cheap anyway (junk over ``COPY_CAP`` / 2 bytes on each side: review r31m F1), so checking
        every line (up to ~430 in what StoreCopies returns, 50 ms with real signatures of other text; review r31m F3)
        only bought the attacker a reader's CPU; the owner's pushed copy (:meth:`PeerChannel.told_why`) is what junk
        cannot bury. Signatures are checked out of the verifier's shared cache (junk made up at will must not empty
        it for the message path: review r31m F3), in a small one of this node's (``_checked``, ``_CHECKED`` lines)."""
        if self.store.keys is None:
            return None
        from dgrpo.swarm.identity import SIGNATURE_HEX, canonical_hex

        items, seen = [], set()
        for line in raw[:_WHY_BYTES].splitlines():
            try:
                item = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if (isinstance(item, dict) and isinstance(item.get("why"), str) and isinstance(item.get("sig"), str)
                    and canonical_hex(item["sig"], SIGNATURE_HEX) is not None and (item["why"], item["sig"]) not in seen):
                seen.add((item["why"], item["sig"]))
                items.append(item)
        order = [x for pair in zip(items, reversed(items)) for x in pair][: min(len(items), _WHY_LINES)]
        for item in order:  # (first, last, second, …)
            key = (peer, item["why"], item["sig"])
            if key not in self._checked:
                if len(self._checked) >= _CHECKED:
                    self._checked.clear()
                try:
                    self._checked[key] = self.store.valid(peer, f"why|{peer}|{item['why']}", item["sig"], cache=False)
                except (ValueError, TypeError):  # (a lone surrogate in it, …)
                    self._checked[key] = False
            if self._checked[key]:
                return peer_text(item["why"])  # (as shown: its signer may have signed anything)
        return None
