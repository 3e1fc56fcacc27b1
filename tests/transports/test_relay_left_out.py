"""A message an honest node leaves out of its relay is left out of its own set too (review h31r).

An honest relay is built within its readers' byte cap (transports/relay.py): each carrier's messages take at most its
share cap of relay bytes, re-encoded (a 2-byte character served raw is a 6-byte escape). The attacker (rank 3) serves
one honest node alone, in time, a round payload within its byte cap whose one message is 3 x that once re-encoded:
the node's relay leaves it out, so no other honest node can get it (the attacker's own relay does not count for its
own messages). Before, the node kept it in its own set (``merge_views`` counts a node's own view whole): the honest
sets differed, and the message (text past the size limit) was struck at that node alone, so with ``ban_after`` the
ban lists split too. Now the node takes it out of its own set as well, refused ``relay`` under its carrier (never a
strike: an honest carrier's relay can leave out what an attacker served it): every honest node ends the round with
one set.

Built as a clocked round builds it: each honest transport's own ``decode`` and ``cross_check`` (its relay exchange
that of transports/clocked.py), the relays passed between
them as bytes, real Ed25519 signatures."""

import json
from types import SimpleNamespace

import pytest

from dgrpo.swarm.protocol import DROPPED, REFUSED, STRIKES
from dgrpo.swarm.identity import Roster, SignatureVerifier, Signer, generate_keys
from dgrpo.swarm.validation import Limits
from dgrpo.transports import crosscheck
from dgrpo.transports.distributed import DistributedTransport
from dgrpo.transports.framing import KeyCaps, frame
from dgrpo.types import Message

CTX = "run|fp"
KEYS = generate_keys(5)
SIGNERS = {n: Signer(n, KEYS[n], CTX) for n in range(5)}
CAPS = KeyCaps.of(1, Limits.for_completions(8))  # (a run's limits: 8192 characters, 256 tokens; 1 slot)


def _msg(node: int, index: int, text: str) -> Message:
    return SIGNERS[node].sign(Message(node, 1, "p", index, text, tuple(range(8)), 7, "tok", "", None))


def _payload(messages: list[Message]) -> bytes:
    """A round payload as an attacker serves it: one frame, its text raw UTF-8 (the fewest bytes)."""
    return frame(json.dumps({"messages": [m.to_dict() for m in messages]}, ensure_ascii=False).encode())


def _transport(world: int, rank: int, relays: dict[int, bytes] | None, sent: dict):
    t = object.__new__(DistributedTransport)
    t.rank, t.world_size, t.caps, t.max_messages, t.alive = rank, world, CAPS, world, set(range(world))
    t.labels, t.rejected, t.carriers, t.honest, t.equivocators = {}, [], {}, list(range(world - 1)), {}
    t.verifier = SignatureVerifier(Roster.of({n: KEYS[n] for n in range(world)}), CTX)
    t.chan = SimpleNamespace(departed={})
    t.exchanger = SimpleNamespace(first=None, on_peer_failure="continue")

    def exchange(tag, raw):
        sent[rank] = raw
        return {rank: raw, **{n: r for n, r in (relays or {}).items() if n != rank}}

    return t, exchange


def _round(world: int, served_to: dict[int, bytes]) -> dict[int, list[tuple]]:
    """Each honest node's round-1 set (message keys, in order) in a swarm of ``world``, the last rank the attacker:
    every honest payload read by every honest node, the attacker's by the nodes in ``served_to`` (what each was
    served)."""
    honest, attacker = range(world - 1), world - 1
    own = {n: [_msg(n, 0, f"answer {n}")] for n in honest}

    def read(rank, t):
        out = list(own[rank])
        for n in honest:
            if n != rank:
                out += t.decode(n, _payload(own[n]))
        if rank in served_to:
            assert len(served_to[rank]) <= CAPS.bytes  # (within what a reader takes of one round payload)
            out += t.decode(attacker, served_to[rank])
        return out

    sent: dict[int, bytes] = {}
    for rank in honest:  # (first pass: each honest node's relay as it serves it)
        t, exchange = _transport(world, rank, None, sent)
        crosscheck.cross_check(t, 1, read(rank, t), exchange=exchange)
    sets = {}
    for rank in honest:  # (second pass: each reads every honest relay, by B_n)
        t, exchange = _transport(world, rank, sent, {})
        sets[rank] = [m.key for m in crosscheck.cross_check(t, 1, read(rank, t), exchange=exchange)]
    return sets


def _one(sets: dict[int, list]) -> list:
    first = next(iter(sets.values()))
    assert all(s == first for s in sets.values()), sets
    return first


@pytest.mark.parametrize("world", [3, 4, 5])
def test_a_message_left_out_of_an_honest_relay_is_in_no_honest_set(world):
    attacker = world - 1
    big = _msg(attacker, 0, "\u00e9" * ((CAPS.bytes - 4096) // 2))  # (raw: 2 bytes a character; relayed: 6)
    assert (attacker, 1, "p", 0) not in _one(_round(world, {0: _payload([big])}))


@pytest.mark.parametrize("world", [3, 4, 5])
def test_a_second_text_no_honest_relay_carries_makes_nobody_drop_the_senders_round(world):
    """The launch's equivocation (test_clocked_launch.py, ``bigequiv``): node 0 alone is shown the big second text
    for the attacker's slot 0, every other honest node its usual one. Before, node 0 caught an equivocator and dropped
    the sender's messages while the others kept them."""
    attacker, usual = world - 1, _msg(world - 1, 0, "answer")
    big = _msg(attacker, 0, "\u00e9" * ((CAPS.bytes - 4096) // 2))
    served = {0: _payload([big]), **{h: _payload([usual]) for h in range(1, world - 1)}}
    assert (attacker, 1, "p", 0) in _one(_round(world, served))


@pytest.mark.parametrize("world", [3, 4, 5])
def test_the_attackers_message_that_fits_a_relay_is_still_in_every_honest_set(world):
    """The other side: a message of the attacker's read by node 0 alone, in time, that its relay carries."""
    attacker = world - 1
    assert (attacker, 1, "p", 0) in _one(_round(world, {0: _payload([_msg(attacker, 0, "\u00e9" * 1000)])}))


def test_what_a_relay_leaves_out_is_refused_under_its_carrier_by_a_rule_that_is_never_a_strike():
    """The carrier of the left-out message may be honest (a peer's relay that carried the attacker's text): the
    refusal names it with the rule ``relay``, which is no strike (nor a drop or refusal rule the blame table counts)."""
    attacker, world = 3, 4
    big = _msg(attacker, 0, "\u00e9" * ((CAPS.bytes - 4096) // 2))
    t, exchange = _transport(world, 0, None, {})
    kept = crosscheck.cross_check(t, 1, [_msg(0, 0, "answer 0"), *t.decode(attacker, _payload([big]))], exchange=exchange)
    assert [m.key for m in kept] == [(0, 1, "p", 0)]
    relay_refusals = [(carrier, why) for carrier, why in t.rejected if why.startswith("relay:")]
    assert [carrier for carrier, _ in relay_refusals] == [attacker]
    assert "relay" not in STRIKES | DROPPED | REFUSED
