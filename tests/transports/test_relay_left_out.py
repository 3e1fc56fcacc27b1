"""A message an honest node leaves out of its relay is left out of its own set too (review h31r).

An honest relay is built within its readers' byte cap (transports/relay.py): each carrier's messages take at most its
share cap of relay bytes, re-encoded (a 2-byte character served raw is a 6-byte escape). The attacker (rank 3) serves
one honest node alone, in time, a round payload within its byte cap whose one message is 3 x that once re-encoded:
the node's relay leaves it out, so no other honest node can get it (the attacker's own relay does not count for its
own messages). Before, the node kept it in its own set (``merge_views`` counts a node's own view whole): the honest
sets differed, and the message (text past the size limit) was struck at that node alone, so with ``ban_after`` the
ban lists split too. Now the node takes it out of its own set as well, refused ``flood`` under its carrier: every
honest node ends the round with one set.

Built as a clocked round builds it: each honest transport's own ``decode`` and ``cross_check`` (its relay exchange
that of transports/clocked.py), the relays passed between
them as bytes, real Ed25519 signatures."""

import json
from types import SimpleNamespace

from dgrpo.swarm.identity import Roster, SignatureVerifier, Signer, generate_keys
from dgrpo.swarm.validation import Limits
from dgrpo.transports import crosscheck
from dgrpo.transports.distributed import DistributedTransport
from dgrpo.transports.framing import KeyCaps, frame
from dgrpo.types import Message

WORLD, ATTACKER, HONEST, CTX = 4, 3, (0, 1, 2), "run|fp"
KEYS = generate_keys(WORLD)
SIGNERS = {n: Signer(n, KEYS[n], CTX) for n in range(WORLD)}
CAPS = KeyCaps.of(1, Limits.for_completions(8))  # (a run's limits: 8192 characters, 256 tokens; 1 slot)


def _msg(node: int, index: int, text: str) -> Message:
    return SIGNERS[node].sign(Message(node, 1, "p", index, text, tuple(range(8)), 7, "tok", "", None))


def _payload(messages: list[Message]) -> bytes:
    """A round payload as an attacker serves it: one frame, its text raw UTF-8 (the fewest bytes)."""
    return frame(json.dumps({"messages": [m.to_dict() for m in messages]}, ensure_ascii=False).encode())


def _transport(rank: int, relays: dict[int, bytes] | None, sent: dict):
    t = object.__new__(DistributedTransport)
    t.rank, t.world_size, t.caps, t.max_messages, t.alive = rank, WORLD, CAPS, 4, set(range(WORLD))
    t.labels, t.rejected, t.carriers, t.honest, t.equivocators = {}, [], {}, list(HONEST), {}
    t.verifier = SignatureVerifier(Roster.of(KEYS), CTX)
    t.chan = SimpleNamespace(departed={})
    t.exchanger = SimpleNamespace(first=None, on_peer_failure="continue")

    def exchange(tag, raw):
        sent[rank] = raw
        return {rank: raw, **{n: r for n, r in (relays or {}).items() if n != rank}}

    return t, exchange


def _round(served_to: dict[int, bytes]) -> dict[int, list[tuple]]:
    """Each honest node's round-1 set (message keys, in order): every honest payload read by every honest node, the
    attacker's payload by the nodes in ``served_to`` (what each was served)."""
    own = {n: [_msg(n, 0, f"answer {n}")] for n in HONEST}

    def read(rank, t):
        out = list(own[rank])
        for n in HONEST:
            if n != rank:
                out += t.decode(n, _payload(own[n]))
        if rank in served_to:
            assert len(served_to[rank]) <= CAPS.bytes  # (within what a reader takes of one round payload)
            out += t.decode(ATTACKER, served_to[rank])
        return out

    sent: dict[int, bytes] = {}
    for rank in HONEST:  # (first pass: each honest node's relay as it serves it)
        t, exchange = _transport(rank, None, sent)
        crosscheck.cross_check(t, 1, read(rank, t), exchange=exchange)
    sets = {}
    for rank in HONEST:  # (second pass: each reads every honest relay, by B_n)
        t, exchange = _transport(rank, sent, {})
        sets[rank] = [m.key for m in crosscheck.cross_check(t, 1, read(rank, t), exchange=exchange)]
    return sets


def test_a_message_left_out_of_an_honest_relay_is_in_no_honest_set():
    big = _msg(ATTACKER, 0, "\u00e9" * ((CAPS.bytes - 4096) // 2))  # (raw: 2 bytes a character; relayed: 6)
    payload = _payload([big])
    sets = _round({0: payload})
    assert sets[0] == sets[1] == sets[2], sets
    assert (ATTACKER, 1, "p", 0) not in sets[0]


def test_the_attackers_message_that_fits_a_relay_is_still_in_every_honest_set():
    """The other side: a message of the attacker's read by node 0 alone, in time, that its relay carries."""
    sets = _round({0: _payload([_msg(ATTACKER, 0, "\u00e9" * 1000)])})
    assert sets[0] == sets[1] == sets[2] and (ATTACKER, 1, "p", 0) in sets[0], sets
