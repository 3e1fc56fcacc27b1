"""What a request's pushed headers cost a rank's server loop (review h31r2): the loop that serves every round payload
(`transports/peerhttp.py`, one thread) also checks the stop notices pushed to it (``X-Dgrpo-Stop``, anyone can push one
in anyone's name). A junk notice claiming a peer with that peer's (public) launch nonce was tried against every
roster key (``AddressKeys.signed_by``), although only the claimed node's key can make it count: ``world``
verifications (about 0.16 ms each here) of the serving loop's time per request, on a flood of such requests."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest


class _Counting:
    """A roster whose public keys count their verifications."""

    def __init__(self, roster):
        self.roster, self.keys, self.calls = roster, roster.keys, 0

    def public(self, node):
        pub, outer = self.roster.public(node), self

        class _Pub:
            def verify(self, sig, data):
                outer.calls += 1
                return pub.verify(sig, data)

        return None if pub is None else _Pub()


@pytest.mark.parametrize("world", [4, 8])
def test_a_junk_stop_notice_pushed_in_a_peers_name_costs_the_server_one_verification(world):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from dgrpo.swarm.identity import Roster
    from dgrpo.transports.peeraddr import AddressKeys
    from dgrpo.transports.peerserve import PeerChannel

    private = {n: Ed25519PrivateKey.generate() for n in range(world)}
    keys = AddressKeys(0, private[0], Roster.of(private), "fp")
    keys.roster = counting = _Counting(keys.roster)
    nonce = "ab" * 16
    server = SimpleNamespace(rank=0, keys=keys, launches={1: nonce})
    attacker = AddressKeys(world - 1, private[world - 1], Roster.of(private), "fp")
    junk = json.dumps({"why": "x", "nonce": nonce, "sig": attacker.sign(f"stop|1|x|{nonce}")})  # (well formed)
    assert PeerChannel._stop_text(server, 1, junk) is None
    assert counting.calls == 1  # (before: world, one per roster key)
    honest = AddressKeys(1, private[1], Roster.of(private), "fp")
    good = json.dumps({"why": "a reason", "nonce": nonce, "sig": honest.sign(f"stop|1|a reason|{nonce}")})
    assert PeerChannel._stop_text(server, 1, good) == "a reason"
