"""Config claims of the start-up check-in (:mod:`~dgrpo.transports.checkin`; issue 31, must-have 5).

A rank of another config cannot sign a check-in mark this rank accepts (marks are signed for the config's
fingerprint). Each rank therefore also writes a *config claim* under ``dgrpo/join/config/{k}``: its fingerprint,
server address and launch nonce, signed with its roster key (``dgrpo/join-config|{k}|{fp}|{addr}|{nonce}``). When a
rank's own key signed a claim of another fingerprint and its server answers a challenge for that claim's launch
(:func:`~dgrpo.transports.peeraddr.answers`), the check-in stops at once in one line naming that rank (never a split
swarm); a claim copied from an earlier run (its server gone) is named and ignored.
"""

from __future__ import annotations

import json

from dgrpo.errors import PeerFailure

JOIN = "dgrpo/join"


def config_key(node: int) -> str:
    """The store key of ``node``'s config claim."""
    return f"{JOIN}/config/{node}"


def claim_text(node: int, fp: str, addr: str, nonce: str) -> bytes:
    """The bytes ``node`` signs for its claim: config fingerprint ``fp``, server ``addr``, launch ``nonce``."""
    return f"dgrpo/join-config|{node}|{fp}|{addr}|{nonce}".encode()


class ConfigClaims:
    """One rank's config claims of a check-in: ``checkin`` is its :class:`~dgrpo.transports.checkin.CheckIn`
    (its store, keys, channel, ``_lines``, ``_call`` and ``_say`` are used)."""

    def __init__(self, checkin):
        self.ci = checkin

    def write(self) -> None:
        """This rank's own claim under :func:`config_key` (with a roster file or learned keys and a server)."""
        ci = self.ci
        if ci.keys is not None and ci.chan is not None:
            fp, addr, nonce = ci.keys.bound, ci.chan.address, ci.chan.nonce
            pub = {"pub": ci.keys.roster.keys[ci.rank]} if ci.keys.world is not None else {}  # (unsafe)
            rec = json.dumps({"fp": fp, "addr": addr, "nonce": nonce, **pub,
                              "sig": ci.keys.key.sign(claim_text(ci.rank, fp, addr, nonce)).hex()})
            ci._call(ci.store.set, config_key(ci.rank), f"{rec}\n".encode())

    def check(self, node: int) -> None:
        """Stop at once when ``node``'s own key signed a config claim of another fingerprint and its server
        answers for that claim's launch (a claim of an earlier run, copied into the store, is named and ignored).

        Raises:
            PeerFailure: ``node`` runs another config (names it, both fingerprints and its server)."""
        ci = self.ci
        if ci.keys is None:
            return
        from cryptography.exceptions import InvalidSignature

        from dgrpo.swarm.identity import SIGNATURE_HEX, canonical_hex
        from dgrpo.transports.peerserve import AddressKeys, answers

        for line in ci._lines(config_key(node)):
            try:
                rec = json.loads(line)
                fp, addr, nonce = str(rec["fp"])[:128], str(rec["addr"])[:300], str(rec["nonce"])[:64]
                raw = canonical_hex(rec["sig"], SIGNATURE_HEX)
                if raw is None or fp == ci.keys.bound:
                    continue
                roster = ci.keys.trial(node, line).roster  # (unsafe: a key not learned yet is the claim's)
                pub = roster.public(node)
                if pub is None:
                    continue
                pub.verify(raw, claim_text(node, fp, addr, nonce))
            except (ValueError, KeyError, TypeError, RecursionError, AttributeError, InvalidSignature):
                continue
            live = answers(AddressKeys(ci.rank, None, roster, fp), node, addr, nonce, ci.rank)
            if live is False:
                ci._say(None, f"check-in: ignored a config claim of node {node} (fingerprint {fp[:16]}…): its server "
                              f"at {addr} does not answer for it (a claim of an earlier run copied into the store, "
                              f"or a dead server; not counted against node {node})")
            if not live:
                continue
            raise PeerFailure(f"node {node} runs another config than node {ci.rank} (its signed check-in names "
                              f"config fingerprint {fp[:16]}…, and its server at {addr} answers for it; this rank's is "
                              f"{ci.keys.bound[:16]}…): start every rank with the same config file and overrides")
