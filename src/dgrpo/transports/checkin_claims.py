"""Config claims of the start-up check-in (:mod:`~dgrpo.transports.checkin`; issue 31, must-have 5).

A rank of another config cannot sign a check-in mark this rank accepts (marks are signed for the config's
fingerprint). Each rank therefore also writes a *config claim* under ``dgrpo/join/config/{k}``: its fingerprint,
server address and launch nonce, signed with its roster key (``dgrpo/join-config|{k}|{fp}|{addr}|{nonce}``; put
back while it waits if deleted). When a rank's own key signed a claim of another fingerprint and its server answers
a challenge for that claim's launch (:func:`~dgrpo.transports.peeraddr.answers`), the check-in stops at once in one
line naming that rank (never a split swarm); a claim copied from an earlier run (its server gone) is named and
ignored.

The challenges are bounded (review r31j F9: a rank that wrote 64 claims naming a silent server held every honest
check-in 2 s per claim per pass, and the start-up ran 13 times past ``swarm.startup_timeout_s``): of each rank's
claims only the newest-dated (:func:`~dgrpo.transports.peeraddr.launch_time`: an honest rank's current launch is
its newest) is challenged, each claim once, at most :data:`ASKED_PER_RANK` per rank per check-in; the challenge
runs in a thread of its own (never in the check-in's loop) and ends by the check-in's own last deadline, 2 s after
it began at most. A claim not answered (a silent or busy server: None) counts for nothing and is not asked again;
the claims not challenged are ignored. None of this is counted against the signer while it checks in (anyone can
copy a rank's old claims into the store); a rank found absent is named with what its key signed
(:meth:`ConfigClaims.note`).
"""

from __future__ import annotations

import json
import threading
import time

from dgrpo.errors import PeerFailure

JOIN = "dgrpo/join"
ASKED_PER_RANK = 2  # most claims of one rank challenged in one check-in (each newer than the last asked)


def config_key(node: int) -> str:
    """The store key of ``node``'s config claim."""
    return f"{JOIN}/config/{node}"


def claim_text(node: int, fp: str, addr: str, nonce: str) -> bytes:
    """The bytes ``node`` signs for its claim: config fingerprint ``fp``, server ``addr``, launch ``nonce``."""
    return f"dgrpo/join-config|{node}|{fp}|{addr}|{nonce}".encode()


def dated(nonce: str) -> int:
    """A launch nonce's start time (ns since the epoch: :func:`~dgrpo.transports.peeraddr.launch_time`); -1 for an
    undated one (older than any dated one)."""
    from dgrpo.transports.peeraddr import launch_time

    when = launch_time(nonce)
    return -1 if when is None else when


class ConfigClaims:
    """One rank's config claims of a check-in: ``checkin`` is its :class:`~dgrpo.transports.checkin.CheckIn`
    (its store, keys, channel, ``_lines``, ``_call`` and ``_say`` are used). ``end``: when every challenge must
    have ended (``time.monotonic()``; the check-in sets its last deadline)."""

    def __init__(self, checkin, end: float = float("inf")):
        self.ci, self.end = checkin, end
        self._parsed: dict[int, dict[str, tuple | None]] = {}  # node → its lines last read → (fp, addr, nonce, roster)
        self._asked: dict[int, list[tuple[str, str, str]]] = {}  # node → the claims challenged, in order
        self._answers: dict[tuple[int, tuple[str, str, str]], bool | None] = {}  # (written by the challenge threads)
        self._seen: dict[int, int] = {}  # node → how many claims of other configs its key signed (last read)

    def _line(self) -> str:
        ci = self.ci
        fp, addr, nonce = ci.keys.bound, ci.chan.address, ci.chan.nonce
        pub = {"pub": ci.keys.roster.keys[ci.rank]} if ci.keys.world is not None else {}  # (unsafe)
        return json.dumps({"fp": fp, "addr": addr, "nonce": nonce, **pub,
                           "sig": ci.keys.key.sign(claim_text(ci.rank, fp, addr, nonce)).hex()})

    def write(self, again: bool = False) -> None:
        """This rank's own claim under :func:`config_key` (with a roster file or learned keys and a server);
        ``again``: only if it is not there (deleted, written over, or behind junk a reader does not reach)."""
        ci = self.ci
        if ci.keys is not None and ci.chan is not None:
            line = self._line()
            if not again or line not in ci._lines(config_key(ci.rank)):
                ci._call(ci.store.set, config_key(ci.rank), f"{line}\n".encode())

    def _parse(self, node: int, line: str) -> tuple | None:
        """(fp, addr, nonce, roster) of a claim of another config that ``node``'s key signed, else None."""
        from cryptography.exceptions import InvalidSignature

        from dgrpo.swarm.identity import SIGNATURE_HEX, canonical_hex

        try:
            rec = json.loads(line)
            fp, addr, nonce = str(rec["fp"])[:128], str(rec["addr"])[:300], str(rec["nonce"])[:64]
            raw = canonical_hex(rec["sig"], SIGNATURE_HEX)
            if raw is None or fp == self.ci.keys.bound:
                return None
            roster = self.ci.keys.trial(node, line).roster  # (unsafe: a key not learned yet is the claim's)
            pub = roster.public(node)
            if pub is None:
                return None
            pub.verify(raw, claim_text(node, fp, addr, nonce))
        except (ValueError, KeyError, TypeError, RecursionError, AttributeError, InvalidSignature):
            return None
        return fp, addr, nonce, roster

    def _claims(self, node: int) -> list[tuple]:
        """``node``'s verified claims of other configs in the store now (a line read before is not verified
        again with a roster file; learned keys can change what verifies, so without one each is)."""
        old = self._parsed.get(node, {}) if self.ci.keys.world is None else {}
        now = {}
        for line in self.ci._lines(config_key(node)):
            now[line] = old[line] if line in old else self._parse(node, line)
        self._parsed[node] = now
        return [c for c in now.values() if c is not None]

    def _ask(self, node: int, claim: tuple) -> None:
        from dgrpo.transports.peerserve import AddressKeys, answers

        fp, addr, nonce, roster = claim
        key = (node, (fp, addr, nonce))
        try:
            self._answers[key] = answers(AddressKeys(self.ci.rank, None, roster, fp), node, addr, nonce,
                                         self.ci.rank, self.end)
        except Exception:  # noqa: BLE001 (a challenge that fails proves nothing: counted as not answered)
            self._answers[key] = None

    def check(self, node: int) -> None:
        """Challenge ``node``'s newest claim of another config not asked yet (in a thread; returns at once), and
        act on the challenges that ended: stop when one was answered for (below), name and ignore the others.

        Raises:
            PeerFailure: ``node`` runs another config (names it, both fingerprints and its server)."""
        if self.ci.keys is None:
            return
        claims = self._claims(node)
        self._seen[node] = len(claims)
        asked = self._asked.setdefault(node, [])
        if claims and len(asked) < ASKED_PER_RANK and time.monotonic() < self.end:
            newest = max(claims, key=lambda c: dated(c[2]))
            if newest[:3] not in asked and (not asked or dated(newest[2]) > dated(asked[-1][2])):
                asked.append(newest[:3])
                threading.Thread(target=self._ask, args=(node, newest), daemon=True,
                                 name=f"dgrpo-claim-{node}").start()
        self.settle(node)

    def settle(self, node: int | None = None) -> None:
        """Act on the challenges that ended (of ``node``, or of every rank): a claim answered for stops the
        check-in; one refused or not answered is named once (never against its signer) and counts for nothing.

        Raises:
            PeerFailure: a rank runs another config (names it, both fingerprints and its server)."""
        ci = self.ci
        for (k, (fp, addr, nonce)), live in list(self._answers.items()):
            if node is not None and k != node:
                continue
            if live:
                raise PeerFailure(f"node {k} runs another config than node {ci.rank} (its signed check-in names "
                                  f"config fingerprint {fp[:16]}…, and its server at {addr} answers for it; this "
                                  f"rank's is {ci.keys.bound[:16]}…): start every rank with the same config file "
                                  "and overrides")
            why = ("does not answer for it (a claim of an earlier run copied into the store, or a dead server; "
                   if live is False else "did not answer a challenge for it within 2 s (a silent or busy server, or "
                   "a claim of an earlier run copied into the store; not asked again, ")
            ci._say(None, f"check-in: ignored a config claim of node {k} (fingerprint {fp[:16]}…): its server at "
                          f"{addr} {why}not counted against node {k})")

    def pending(self) -> int:
        """How many challenges begun have not ended yet."""
        return sum(len(v) for v in self._asked.values()) - len(self._answers)

    def note(self, node: int) -> str:
        """What the store holds of other configs under ``node``'s key, for the line naming it absent ("" if nothing):
        only what is proven (review r31k F7): a claim its server never answered for may be a copy of one of an earlier
        run, replayed by anyone, so the line says so instead of "node k signed N claims"."""
        seen, asked = self._seen.get(node, 0), len(self._asked.get(node, []))
        if not seen:
            return ""
        return (f"the store holds {seen} config claim(s) of other configs signed by node {node}'s key (possibly "
                f"copies replayed from an earlier run), {asked} challenged (the newest; at most {ASKED_PER_RANK} a "
                "rank) and none answered for by its server")
