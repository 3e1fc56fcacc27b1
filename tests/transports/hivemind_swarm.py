"""A 4-node hivemind swarm in this process for the issue 31 cases (test_hivemind_attacks.py, test_hivemind_deadlines.py):
real DHT nodes on 127.0.0.1, one transport per swarm node (each run in its own thread by ``in_threads``), node 3 the
attacker, fresh keys and key space per case."""

import hashlib
import itertools
import json
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from dgrpo.swarm.validation import Limits
from dgrpo.transports.dht.launch import allow_roster
from dgrpo.transports.dht.node import start_dht
from dgrpo.transports.dht.records import HEADER_BYTES, SignedRecordValidator, public_hex, record_limit, seal
from dgrpo.transports.dht.rounds import message_round
from dgrpo.transports.framing import KeyCaps
from dgrpo.transports.hivemind import HivemindTransport

_spaces = itertools.count()


def dht_nodes(root):
    """Four DHT nodes on 127.0.0.1 whose validators hold the record size limit of a 4-node swarm, and a fifth in
    client mode (it stores nothing, so every read it makes is answered by another node, as for most readers of a
    key in a larger swarm: in a DHT of 4 every node holds every key and reads its own copy); shut down after the
    ``yield`` (a module fixture's body)."""
    def node(k, peers, client_mode=False):
        return start_dht(k, listen=["/ip4/127.0.0.1/tcp/0"], announce=[], initial_peers=peers, identity_dir=root / f"n{k}",
                         validator=SignedRecordValidator(max_value_bytes=record_limit(4) + HEADER_BYTES), daemon_timeout_s=60,
                         startup_timeout_s=60, client_mode=client_mode)
    first = node(0, [])
    peers = [str(a) for a in first.get_visible_maddrs()]
    nodes = [first] + [node(k, peers) for k in (1, 2, 3)] + [node(4, peers, client_mode=True)]
    yield nodes
    for d in nodes:
        d.shutdown()


TIMEOUT_S = 6.0
POLL_S = 0.25  # a round's overrun past timeout_s: no DHT wait passes it (dht/rounds.py), but a poll returns a few ms
#               late and the node decodes after its last wait, on a loaded machine
SLACK_S = 1.0  # a phase's overrun past its end (before timeout_s): a DHT call's 0.2 s after it, retried stores, CPU work


def swarm(dhts, on_peer_failure="continue", launched=True, client_2=False, timeout_s=TIMEOUT_S):
    """Four transports with fresh keys in a fresh key space (launched: as after the launch); each DHT takes their
    roster (a module's DHTs serve every case: each keeps the records of every case's roster)."""
    space = f"dgrpo/attack{next(_spaces)}-{time.time_ns()}"
    keys = [Ed25519PrivateKey.generate() for _ in range(4)]
    roster = {k: public_hex(keys[k]) for k in range(4)}
    ts = [HivemindTransport(dhts[4 if client_2 and k == 2 else k], k, 4, signing_key=keys[k], namespace=space,
                            honest=range(3), timeout_s=timeout_s, on_peer_failure=on_peer_failure, max_messages=8, roster=roster) for k in range(4)]
    for t in ts:
        t._closed = True  # (the DHTs outlive the test: no bye, no shutdown)
        t.caps = KeyCaps.of(2, Limits.for_completions(24))  # what from_config sets: 8 messages a round per sender
        allow_roster(t)
        if launched:
            t.enter_launch("run", "fp", {})  # (the roster holds every node's key already)
        else:
            t.roster.clear()  # (the same dict as t.signed.roster)
    return ts


PAYLOADS = {k: json.dumps({"messages": [], "node": k}).encode() for k in range(4)}


def honest_round(t):
    """Node ``t``'s round 0 with its payload of :data:`PAYLOADS`: what it keeps (node → payload), or what it raised."""
    return message_round(t, 0, PAYLOADS[t.rank])


def assert_honest_round_unharmed(ts, out, seconds, expected_from_3=True):
    """Every honest node kept every honest payload (and node 3's, when it sent one in the open), the same set at
    each, nobody honest failed, within the round's deadline (timeout_s + POLL_S)."""
    want = {k: PAYLOADS[k] for k in (0, 1, 2, 3) if k < 3 or expected_from_3}
    for t, got in zip(ts[:3], out[:3]):
        assert got == want, (t.rank, got if not isinstance(got, dict) else sorted(got))
        assert {0, 1, 2} <= t.alive and not {0, 1, 2} & t.failed.keys(), (t.rank, t.alive, t.failed)
    assert seconds < TIMEOUT_S + POLL_S


def named(t, sender, prefix):
    """The refusals ``t`` attributed to ``sender`` that start with ``prefix``."""
    return [r for s, r in t.rejected if s == sender and r.startswith(prefix)]


def view_of(t, drop=(), forge=()):
    """The view node ``t`` would publish for r0, without ``drop`` and with a made-up digest for ``forge``."""
    view = {str(n): [hashlib.sha256(PAYLOADS[n]).hexdigest(), t.seals["r0"][n].hex()] for n in range(4)}
    for n in drop:
        view.pop(str(n))
    for n in forge:
        view[str(n)] = ["0" * 64, "1" * 128]
    return view


def seen_by(t, node, tag, other=None):
    """From now on ``t``'s reads of exchange ``tag`` miss ``node``'s record (it reached ``t`` after its deadline), or,
    with ``other`` = (signing key, body), find ``node``'s record of that body instead (replaced between reads)."""
    read = t.signed.read

    def late_read(key, expect, wait_s=10.0):
        out = read(key, expect, wait_s)
        if key == t.signed.key(tag) and node in out:
            if other is None:
                del out[node]
            else:
                out[node] = (out[node][0], other[1], seal(other[0], key, node, other[1], 0.0)[1][:64])
        return out
    t.signed.read = late_read


def viewing(t, body: bytes):
    """``t`` publishes ``body`` as its view of r0 (and otherwise runs the commit as it is)."""
    exchange = t.exchange
    t.exchange = lambda tag, payload, *a, **k: exchange(tag, body if tag == "v0" else payload, *a, **k)
