"""An honest node's relay ``eq{n}`` stays within its readers' byte cap whatever its peers sent (task h31q2: the limit
review r31o H5's fix left; transports/relay.py). Before, the relay carried every message a peer served, re-encoded
(a 2-byte UTF-8 character served raw becomes a 6-byte escape), and refusals quoting peers' text: an attacker could
make an honest node's relay oversized, so its readers refused it whole (``oversize``, named ``transport``) and lost
what it carried.

The relay is built by the transport's own ``cross_check`` (its ``exchange`` replaced by one that keeps the bytes) from
payloads decoded by the transport's own ``decode``, as in a round; each size asserted is ``len`` of those bytes,
against :func:`~dgrpo.transports.framing.cap_of` (what the readers apply)."""

import json
from types import SimpleNamespace

import pytest

from dgrpo.swarm.validation import Limits
from dgrpo.transports.distributed import DistributedTransport
from dgrpo.transports.framing import KeyCaps, cap_of, frame, relay_refusals, relayed
from dgrpo.types import Message

ASTRAL = "\U0001d538"  # 4 bytes of UTF-8 served, 12 bytes escaped in a relay


class _Sent(Exception):
    pass


def _msg(node: int, index: int, text: str, tokens: int = 8) -> dict:
    return Message(node, 1, "p", index, text, tuple(range(tokens)), 7, "tok", "run|fp", "ab" * 64).to_dict()


def _payload(messages: list[dict]) -> bytes:
    """A round payload as an attacker serves it: one frame, its text raw UTF-8 (the fewest bytes)."""
    return frame(json.dumps({"messages": messages}, ensure_ascii=False).encode())


def _quoting(node: int, index: int) -> dict:
    """A message refused with the most quoted text: an unknown field named by 200 4-byte characters
    (``schema: unknown fields ['𝔸𝔸…']``, cut at 200 characters in a relay)."""
    return {**_msg(node, index, "x"), ASTRAL * 200: 0}


def _relay(world: int, caps: KeyCaps, payloads: dict[int, bytes], own: list[dict]) -> tuple[bytes, DistributedTransport]:
    """Node 0's relay of round 1: its ``own`` messages, each peer's payload decoded by the transport."""
    t = object.__new__(DistributedTransport)
    t.rank, t.world_size, t.caps, t.max_messages = 0, world, caps, 1 << 20
    t.labels, t.verifier, t.rejected, t.carriers, t.honest = {}, None, [], {}, [0]
    t.chan = SimpleNamespace(departed={})
    sent = {}

    def exchange(tag, raw, framed=False):
        sent[tag] = raw
        raise _Sent

    t.exchange = exchange
    messages = [Message(**{**m, "token_ids": tuple(m["token_ids"])}) for m in own]
    for node, data in sorted(payloads.items()):
        assert len(data) <= caps.bytes  # (within what a reader takes of one round payload: nothing cut on the way)
        messages += t.decode(node, data)
    with pytest.raises(_Sent):
        t.cross_check(1, messages)
    return sent["eq1"], t


def test_an_attackers_payload_at_its_cap_re_encoded_and_quoted_never_makes_an_honest_relay_oversized():
    """A swarm of 2 at the limits a run uses (8192 characters, 256 tokens; 1 slot): node 1 serves a round payload at
    its byte cap, 3 messages of 2-byte characters served raw (each 3 x its size once re-encoded) and one refused
    quoting 200 4-byte characters. Node 0's relay: at most the cap (before: 1.25 x it); its own message, the
    refusal's rule under node 1 and the count of what was left out are in it."""
    caps = KeyCaps.of(1, Limits.for_completions(8))
    cap = cap_of("eq1", caps, 2)
    n = (caps.bytes - 4000) // 6  # (3 texts of n 2-byte characters: the payload just under the byte cap)
    attack = _payload([_msg(1, i, "\u00e9" * n) for i in range(3)] + [_quoting(1, 3)])
    own = [_msg(0, 0, "y" * 8192, 256)]
    raw, t = _relay(2, caps, {1: attack}, own)
    assert 0.98 * caps.bytes < len(attack) <= caps.bytes
    assert len(raw) <= cap, (len(raw), cap)
    got = json.loads(raw)
    assert got["messages"][0] == own[0] and relayed(raw, 10)[0].node == 0
    assert [(n_, r.split(":")[0]) for n_, r in relay_refusals(raw)] == [(1, "schema")]
    assert ASTRAL in relay_refusals(raw)[0][1]
    # node 1's first message (6 n bytes re-encoded) fits its carrier's share of the relay (caps.bytes), two do not
    assert [m["node"] for m in got["messages"]] == [0, 1] and got["dropped"] == {"messages": 2}


def test_refusals_quoting_peers_at_length_never_make_an_honest_relay_oversized():
    """Nodes 1-3 of 4 each serve their cap of messages (4 x 18 slots), every one refused quoting 200 4-byte
    characters (2.4 kB a refusal as it was relayed). At small limits (32 characters, 8 tokens: 1.3 kB of cap a
    message) those refusals passed the relay's cap (before: 467 kB, cap 443 kB); at the limits a run uses (8192
    characters and more) a refusal stays within its message's share of the cap. Node 0's relay: at most the cap,
    node 0's messages whole, every refusal in order, each cut to a prefix of at most 200 characters and 400 bytes."""
    caps = KeyCaps.of(18, Limits(max_chars=32, max_tokens=8))
    cap = cap_of("eq1", caps, 4)
    payloads = {p: _payload([_quoting(p, i) for i in range(caps.messages)]) for p in (1, 2, 3)}
    own = [_msg(0, i, "z" * 32) for i in range(18)]
    raw, t = _relay(4, caps, payloads, own)
    assert len(raw) <= cap, (len(raw), cap)
    got = json.loads(raw)
    assert got["messages"] == own and got["labels"] == [None] * 18 and "dropped" not in got
    refused = relay_refusals(raw)
    assert len(refused) == len(t.rejected) == 3 * caps.messages
    for (node, text), (n_, r) in zip(refused, t.rejected):
        assert node == n_ and r.startswith(text) and len(text) <= 200 and len(json.dumps(text)) <= 400
        assert text.startswith("schema: unknown fields [") and ASTRAL in text


def test_refusals_past_what_the_cap_leaves_are_counted_not_relayed():
    """A share cap of 2 kB a node (a swarm of 2: the relay's cap 68 kB) and 300 refusals of this round quoting 200
    4-byte characters each (the transport's, whatever named them): the relay carries the first refusals that fit,
    in order, and counts the rest (``dropped``); it is at most the cap (before: 256 refusals of 2.4 kB, 617 kB)."""
    caps = KeyCaps(frames=1, messages=1, bytes=2048)
    cap = cap_of("eq1", caps, 2)
    t = object.__new__(DistributedTransport)
    quoted = [(1, "accusation: node 1 serves junk as its accusations: " + ASTRAL * 200) for _ in range(300)]
    t.rank, t.world_size, t.caps, t.labels, t.carriers, t.honest = 0, 2, caps, {}, {}, [0]
    t.rejected, t.chan = list(quoted), SimpleNamespace(departed={})
    sent = {}

    def exchange(tag, raw, framed=False):
        sent[tag] = raw
        raise _Sent

    t.exchange = exchange
    own = Message(0, 1, "p", 0, "w" * 100, (1, 2), 7, "tok", "run|fp", "ab" * 64)
    with pytest.raises(_Sent):
        t.cross_check(1, [own])
    raw = sent["eq1"]
    assert len(raw) <= cap, (len(raw), cap)
    got, refused = json.loads(raw), relay_refusals(raw)
    assert got["messages"] == [own.to_dict()]
    assert 100 < len(refused) < 256 and all(quoted[0][1].startswith(r) and n == 1 for n, r in refused)
    assert got["dropped"] == {"rejected": 300 - len(refused)}


def test_a_refusal_is_cut_to_its_longest_prefix_within_200_characters_and_400_bytes_of_json():
    """Against ``json.dumps`` itself, over every kind of character it escapes differently (ASCII, quote, backslash,
    control, DEL, 2-byte, 3-byte, 4-byte): the cut text is a prefix of at most 200 characters and 400 bytes, and one
    character more would pass one of the two (new in task h31q2: main has no cut)."""
    import random

    from dgrpo.transports.relay import cut

    rng = random.Random(7)
    kinds = ["a", '"', "\\", "\n", "\x01", "\x7f", "\u00e9", "\u4e2d", ASTRAL]
    for _ in range(300):
        text = "".join(rng.choice(kinds) for _ in range(rng.randint(0, 260)))
        got = cut(text)
        assert text.startswith(got) and len(got) <= 200 and len(json.dumps(got)) <= 400
        more = text[:len(got) + 1]
        assert more == got or len(more) > 200 or len(json.dumps(more)) > 400
