"""The hivemind transport's protocol on real DHT nodes in this process (one thread per node): the launch, rounds,
signed records, a client-mode node and the roster against impostors. Start-up failures, config rules, keys and
joiners: test_hivemind_startup.py; multi-process swarms: test_hivemind.py."""

import hashlib
import itertools
import json
import threading
import time
from functools import partial

import pytest

pytest.importorskip("hivemind")

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from hivemind.utils import get_dht_time  # noqa: E402
from hivemind_helpers import in_threads, wait_for  # noqa: E402

from dgrpo.errors import ConfigError, PeerFailure  # noqa: E402
from dgrpo.transports.dht.launch import _allow, start_launch  # noqa: E402
from dgrpo.transports.dht.node import start_dht  # noqa: E402
from dgrpo.transports.dht.records import SignedRecordValidator, public_hex, seal  # noqa: E402
from dgrpo.transports.hivemind import HivemindTransport  # noqa: E402
from dgrpo.types import Message  # noqa: E402

_spaces = itertools.count()


@pytest.fixture(scope="module")
def dhts(tmp_path_factory):
    """Four DHT nodes on 127.0.0.1 (shared by this module's tests; each test uses its own key space)."""
    root = tmp_path_factory.mktemp("dht")
    first = start_dht(0, listen=["/ip4/127.0.0.1/tcp/0"], announce=[], initial_peers=[], identity_dir=root / "n0",
                      validator=SignedRecordValidator(), daemon_timeout_s=60, startup_timeout_s=60)
    peers = [str(a) for a in first.get_visible_maddrs()]
    nodes = [first] + [start_dht(k, listen=["/ip4/127.0.0.1/tcp/0"], announce=[], initial_peers=peers,
                                 identity_dir=root / f"n{k}", validator=SignedRecordValidator(), daemon_timeout_s=60,
                                 startup_timeout_s=60) for k in (1, 2, 3)]
    yield nodes
    for d in nodes:
        d.shutdown()


def transports(dhts, n=2, timeout_s=2.0, on_peer_failure="continue", launched=True):
    """``n`` transports on ``dhts`` with fresh keys in a fresh key space. A launch makes each DHT keep only its
    roster's records (issue 31); these DHTs serve every test of the module, so each takes any of the test's keys
    for any node id here (the transports' own checks are what these tests are about)."""
    space = f"dgrpo/test{next(_spaces)}-{time.time_ns()}"
    keys = [Ed25519PrivateKey.generate() for _ in range(n)]
    for d in dhts:
        for key in keys:
            d.run_coroutine(partial(_allow, roster={k: public_hex(key) for k in range(n)}))
    ts = [HivemindTransport(dhts[k], k, n, signing_key=keys[k], namespace=space, honest=range(n), timeout_s=timeout_s,
                            on_peer_failure=on_peer_failure, max_messages=4) for k in range(n)]
    for t in ts:
        t._closed = True  # the DHTs outlive the test (module fixture): no bye, no shutdown at exit
        if launched:
            t.enter_launch("run", "fp", {k: public_hex(keys[k]) for k in range(n)})
    return ts


def test_launch_agrees_on_launch_id_roster_and_values(dhts):
    ts = transports(dhts, 3, launched=False)
    out = in_threads([lambda t=t: start_launch(t, "fp", 30) or t.agree("name", f"name-of-{t.rank}") for t in ts])[0]
    assert out == ["name-of-0"] * 3
    assert len({t.run_id for t in ts}) == 1 and ts[0].run_id
    assert all(t.roster == {k: public_hex(ts[k].signed.signing_key) for k in range(3)} for t in ts)
    msgs = [Message(k, 0, "p", k, f"text {k}", (1, 2), 7, "tok") for k in range(3)]
    gathered = in_threads([lambda t=t: t.all_gather({t.rank: [msgs[t.rank]]}) for t in ts])[0]
    assert gathered == [msgs] * 3


def test_a_config_mismatch_names_the_odd_node(dhts):
    ts = transports(dhts, 2, launched=False)
    out = in_threads([lambda: start_launch(ts[0], "fp-a", 30), lambda: start_launch(ts[1], "fp-b", 30)])[0]
    assert all(isinstance(e, ConfigError) and "nodes [1] run another config than node 0" in str(e) for e in out), out


def test_two_processes_claiming_one_node_id_are_told(dhts):
    a, b = transports(dhts, 2, launched=False)
    b.rank, b.local_nodes, b.signed.rank = 0, [0], 0  # a second process started as node 0 with its own key
    out = in_threads([lambda: start_launch(a, "fp", 10), lambda: start_launch(b, "fp", 10)])[0]
    assert all(isinstance(e, ConfigError) and "node 0 is also claimed by key" in str(e) for e in out), out


def test_a_missing_peer_is_named_within_the_deadline(dhts):
    a, _ = transports(dhts, 2, timeout_s=1.5, on_peer_failure="abort")
    start = time.monotonic()
    with pytest.raises(PeerFailure, match=r"node 1 sent nothing for exchange 'r0' within swarm.timeout_s=1.5s"):
        a.exchange("r0", b"x")
    assert time.monotonic() - start < 10


def test_a_start_up_wait_names_the_start_up_limit(dhts):
    """A restarted node's launch barrier quotes swarm.startup_timeout_s, not swarm.timeout_s (issue 31)."""
    a, _ = transports(dhts, 2, timeout_s=60, on_peer_failure="abort")
    with pytest.raises(PeerFailure, match=r"node 1 sent nothing for exchange 'start' within swarm.startup_timeout_s=1.5s"):
        a.gather_values("start", "launch", timeout_s=1.5)
    assert a.timeout_s == 60 and a.limit_name == "swarm.timeout_s"


@pytest.mark.parametrize("size", [64 << 10, "max"])
def test_a_round_of_four_nodes_with_honest_payloads_of_64_kb_and_of_the_maximum(dhts, size):
    """hivemind's DHT process read big store commands torn (BlockingIOError, then EOFError: it died on
    28-200 kB values on a loaded machine); node.py reads them whole. Every node gets every payload,
    committed alike, and every DHT process lives on."""
    ts = transports(dhts, 4, timeout_s=60)
    size = ts[0].max_record_bytes if size == "max" else size
    assert ts[0].max_record_bytes > 900_000  # (4 MiB less headroom, over 4 nodes)
    payloads = {k: bytes([65 + k]) * (size - 1) + b"\n" for k in range(4)}
    out = in_threads([lambda t=t: t.commit(0, t.exchange("r0", payloads[t.rank])) for t in ts])[0]
    assert out == [payloads] * 4, [type(o).__name__ if not isinstance(o, dict) else sorted(o) for o in out]
    assert all(d.is_alive() for d in dhts)
    assert [len(v) for v in out[0].values()] == [size] * 4


def test_a_peer_that_said_bye_is_not_waited_for(dhts):
    a, b = transports(dhts, 2, timeout_s=60)
    b.signed.store(b.signed.key("bye"), b"bye", 60)  # what a node stopping on an error does on its way out
    start = time.monotonic()
    assert a.exchange("r0", b"x") == {0: b"x"}
    assert a.failed == {1: "r0"} and time.monotonic() - start < 10


def test_an_abort_is_said_in_the_aborting_node_s_bye_and_quoted_by_the_peer_that_finds_it_gone(dhts):
    """Task h31q3: node 0 aborts on node 2, silent in r0. Before, its bye said only "bye", and node 1, finding it gone
    in r1, named node 0 alone ("node 0 left the swarm during exchange 'r1' (stopped on an error)"), never node 2 nor
    why. Now node 0's bye carries its abort's line (signed by its key, as every record) and node 1's line quotes it."""
    from types import SimpleNamespace

    ts = transports(dhts, 3, timeout_s=3.0, on_peer_failure="abort")
    ts[1].post("r0", b"y")
    with pytest.raises(PeerFailure) as err:
        ts[0].exchange("r0", b"x")
    why = "node 2 sent nothing for exchange 'r0' within swarm.timeout_s=3s (dead or stalled)"
    assert str(err.value).startswith(why + "; aborted")
    ts[0].dht, ts[0]._closed = SimpleNamespace(shutdown=lambda: None), False  # (the shared DHT lives on)
    ts[0]._exit()  # (at interpreter exit after the error: its bye)
    with pytest.raises(PeerFailure) as err:
        ts[1].collect("r1", [0])
    assert str(err.value) == (f"node 0 left the swarm during exchange 'r1' (stopped on an error); node 0 stopped first, "
                              f"saying (signed): \"{why}\"; aborted (set swarm.on_peer_failure=continue to go on without it)")


# The commit step (a payload one peer missed, equivocation, lone views): test_hivemind_attacks.py.


def test_records_signed_by_another_node_or_an_unknown_key_are_refused_and_named(dhts, caplog):
    a, b = transports(dhts, 2, timeout_s=1.0)
    stranger = Ed25519PrivateKey.generate()
    mine = b.signed.signing_key
    for signer, node, body in ((mine, 0, b"b signs for 0"), (stranger, 1, b"stranger signs for 1"), (mine, 1, b"real")):
        subkey, value = seal(signer, b.signed.key("r0"), node, body, exp := get_dht_time() + 60)
        assert b.dht.store(b.signed.key("r0"), value, exp, subkey=subkey) == (signer is not stranger)
    assert {n: rec[:2] for n, rec in a.signed.read(a.signed.key("r0"), {0, 1}).items()} == {1: (b.roster[1], b"real")}
    assert sorted(a.rejected) == [(1, "identity: a record for node 0's slot signed by node 1's key")]
    # the stranger's key is in no roster these DHT nodes took: they refused to store it (issue 31); a reader
    # refuses a record under an unknown key too (test_no_key_is_learnt_from_a_record_...)



def test_a_client_mode_node_behind_nat_exchanges_through_the_servers(dhts, tmp_path):
    """client_mode: the node serves nothing (as behind NAT without relays) but stores and reads through its peers."""
    client = start_dht(1, listen=["/ip4/127.0.0.1/tcp/0"], announce=[], initial_peers=[str(a) for a in dhts[0].get_visible_maddrs()],
                       identity_dir=tmp_path, validator=SignedRecordValidator(), daemon_timeout_s=60, startup_timeout_s=60,
                       client_mode=True)
    try:
        assert client.client_mode
        a, b = transports([dhts[0], client], 2)
        assert in_threads([lambda: a.exchange("r0", b"from 0"), lambda: b.exchange("r0", b"from 1")])[0] == \
            [{0: b"from 0", 1: b"from 1"}] * 2
    finally:
        client.shutdown()



def test_no_key_is_learnt_from_a_record_a_joiner_missing_from_the_roster_is_refused(dhts):
    """Node 2 would join at round 1 but is not in node 0's roster: a record for its slot is refused
    whoever signed it (no trust on first use after the launch), and node 0 is not left waiting for it."""
    ts = transports(dhts, 3, timeout_s=1.0)
    a, joiner = ts[0], ts[2]
    a.join, a.alive = {2: 1}, {0, 1, 2}
    del a.roster[2]
    subkey, value = seal(joiner.signed.signing_key, joiner.signed.key("r1"), 2, b"joiner", exp := get_dht_time() + 60)
    assert joiner.dht.store(joiner.signed.key("r1"), value, exp, subkey=subkey)
    assert a.signed.read(a.signed.key("r1"), {1, 2}) == {}
    unknown = public_hex(joiner.signed.signing_key)[:12]
    assert a.rejected == [(-1, f"identity: a record for node 2 signed by an unknown key {unknown}…")]


def test_with_a_roster_file_an_impostor_cannot_stop_or_join_the_launch(dhts):
    """Trust on first use stops a launch when two keys claim one node id; a roster file just refuses the impostor.

    The impostor claims node 1 first (its hello is readable before the honest nodes start). Node 1 then
    sees its id taken; node 0 sees both claims, or only the impostor's and waits in vain for it at the
    start barrier: either way the launch stops, visibly."""
    def launch(with_roster: bool):
        ts = transports(dhts, 3, launched=False)
        honest, impostor = ts[:2], ts[2]
        roster = {0: public_hex(ts[0].signed.signing_key), 1: public_hex(ts[1].signed.signing_key)}
        for t in honest:
            t.world_size, t.alive = 2, {0, 1}
            if with_roster:
                t.roster.update(roster)  # (t.roster is empty before a launch; t.signed reads the same dict)
                t.fixed_roster = True
        impostor.signed.rank = 1  # its records claim node 1 with its own key, again and again while the others launch
        stop = threading.Event()

        def hellos():
            while not stop.is_set():
                hello = json.dumps({"nonce": "x", "config": "fp"}).encode()
                impostor.signed.store(f"{impostor.namespace}/hello", hello, 30)
                time.sleep(0.1)
        threading.Thread(target=hellos, daemon=True).start()
        wait_for(lambda: 1 in honest[0].signed.records(f"{impostor.namespace}/hello"), 30, "the impostor's hello")
        try:
            return honest, roster, in_threads([lambda t=t: start_launch(t, "fp", 6) for t in honest])[0]
        finally:
            stop.set()

    _, _, tofu = launch(with_roster=False)
    assert isinstance(tofu[1], ConfigError) and "node 1 is also claimed by key" in str(tofu[1])
    assert isinstance(tofu[0], PeerFailure) and ("nodes [1] are claimed by several keys" in str(tofu[0]) or
                                                 "the peers did not reach launch" in str(tofu[0])), tofu
    honest, roster, fixed = launch(with_roster=True)
    assert fixed == [None, None]
    assert honest[0].run_id == honest[1].run_id and honest[0].roster == roster
    assert any("a hello for node 1 signed by a key not in the roster" in r for _, r in honest[0].rejected)



def test_a_hello_of_an_earlier_launch_stored_again_names_nobody_and_the_launch_is_agreed(dhts):
    """Review r31g J6 follow-up, review r31i F7: an attacker stores node 1's signed hello of an earlier launch (dated
    120 s back, signed to expire 30 s after that) again, with a fresh expiry, every 0.1 s while nodes 0-2 launch. The
    expiry is signed: every DHT node refuses the copy (it never reaches a reader), the launch is agreed, and nobody
    is named."""
    ts = transports(dhts, 3, launched=False)
    key = f"{ts[0].namespace}/hello"
    then = round(get_dht_time() - 120, 3)
    old = json.dumps({"nonce": "0123456789abcdef", "config": "fp", "t": then}).encode()
    subkey, value = seal(ts[1].signed.signing_key, key, 1, old, then + 30)  # (recorded by the attacker in that launch)
    stop, stored = threading.Event(), []

    def replay():
        while not stop.is_set():
            stored.append(dhts[3].store(key, value, get_dht_time() + 30, subkey=subkey))
            time.sleep(0.1)
    threading.Thread(target=replay, daemon=True).start()
    try:
        out = in_threads([lambda t=t: start_launch(t, "fp", 20) for t in ts])[0]
        seen = [body for t in ts for _, body, _ in t.signed.records(key).get(1, [])]
    finally:
        stop.set()
    assert out == [None] * 3, out
    assert stored and not any(stored) and not any(b"0123456789abcdef" in body for body in seen)
    assert len({t.run_id for t in ts}) == 1 and all(t.rejected == [] for t in ts)


def test_a_record_stored_again_with_a_later_expiry_is_refused_and_the_owners_refresh_is_taken(dhts):
    """Review r31i F2/F4/F6: a record's DHT expiry was not signed and the DHT keeps, per subkey, the copy that expires
    last: node 2 stored node 1's signed record again with an expiry 1e5 s ahead, and node 1's every later record under
    the key was refused (its heard record never landed: the launch stopped naming node 1; a joiner read its stale
    launch record). Now the copy is refused by every DHT node, node 1's refresh (a later signed expiry) is stored and
    read, and nobody is named."""
    a, one, attacker = transports(dhts, 3)
    key = f"{a.namespace}/heard"
    assert one.signed.store(key, b"first", 60)
    (_, _, sig), = [r for r in attacker.signed.records(key)[1]]
    found = attacker.dht.get(key, latest=True).value[f"dgrpo:1:{one.roster[1]}"]
    assert found.value[:64] == sig
    assert not attacker.dht.store(key, found.value, get_dht_time() + 1e5, subkey=f"dgrpo:1:{one.roster[1]}")
    assert one.signed.store(key, b"second", 60)
    assert a.signed.read(key, {1})[1][1] == b"second"
    assert a.rejected == [] and one.rejected == []


def test_a_joiner_reading_two_launch_records_one_node_signed_for_one_launch_names_it_and_joins_the_quorums(dhts):
    """Review r31h F11 on real DHT nodes: node 2 stores its launch record, then another one of the same launch with
    another run name and the swarm at round 0. The joiner (node 3, round 1) read both: node 2's proof, named with both
    signatures; its records no longer count, and the joiner waits for nodes 0-1 (a quorum of 3) to reach round 0."""
    from dgrpo.transports.dht.joining import join_launch
    from dgrpo.transports.dht.launch import publish_launch

    ts = transports(dhts, 4)
    joiner = ts[3]
    joiner.join, joiner.first_round, joiner.fixed_roster, joiner.signed.run_id = {3: 1}, 1, True, ""
    for t in ts[:3]:
        t.agreed, t.alive = {"name": "run-a"}, {0, 1, 2}
    out = []
    thread = threading.Thread(target=lambda: out.append(join_launch(joiner, "fp", 30)))
    thread.start()
    for t in ts[:3]:
        publish_launch(t, -1)
    time.sleep(2.0)  # (the joiner polls every 0.5 s: it reads node 2's first record)
    ts[2].agreed = {"name": "evil"}
    publish_launch(ts[2], 0)
    time.sleep(2.0)
    assert thread.is_alive() and not out  # node 2 alone at round 0: not a quorum
    for t in ts[:2]:
        publish_launch(t, 0)
    thread.join(30)
    assert out == [None] and joiner.run_id == "run" and joiner.alive == {0, 1, 2, 3}
    assert joiner.agreed == {"name": "run-a"}
    assert [n for n, _ in joiner.rejected] == [2], joiner.rejected
    assert joiner.rejected[0][1].startswith("launch: it signed two launch records for launch run that differ in agreed "
                                            "'name' (signatures ")


def test_honest_hellos_of_the_previous_launch_relayed_by_a_node_name_nobody_and_the_launch_is_agreed(dhts, monkeypatch):
    """Review r31i F5: launches back to back. Node 3 runs the honest code, but its heard record also relays nodes
    0-2's signed hellos of their previous process (another process id and nonce, dated 8 s back: within PAIR_S).
    Before, each was a "proof" that its honest node signed two hellos: every node stopped naming nodes 0-2. Now
    hellos of two processes prove nothing: the launch is agreed on the current hellos and nobody is named."""
    from dgrpo.transports.dht import launch as dl

    ts = transports(dhts, 4, launched=False)
    key, then = f"{ts[0].namespace}/hello", round(get_dht_time() - 8, 3)
    old = {}
    for k in range(3):
        body = json.dumps({"process": f"{k}" * 16, "nonce": f"{k}" * 16, "config": "fp", "t": then}).encode()
        old[k] = (body, seal(ts[k].signed.signing_key, key, k, body, then + 30)[1][:64].hex())
    original, nonces = dl.hear, {}

    def hear(t, book, pubs, own, startup_timeout_s):
        nonces[t.rank] = own.says["nonce"]  # (this process's nonce: the launch id must be made of these)
        if t.rank == 3:  # (its heard record quotes what its book holds)
            for k, (body, sig) in old.items():
                book.add(k, pubs[k], body, sig, 3)
        return original(t, book, pubs, own, startup_timeout_s)
    monkeypatch.setattr(dl, "hear", hear)
    out = in_threads([lambda t=t: start_launch(t, "fp", 20) for t in ts])[0]
    assert out == [None] * 4, out
    current = sorted([k, public_hex(ts[k].signed.signing_key), nonces[k]] for k in range(4))
    launch = hashlib.sha256(json.dumps(current).encode()).hexdigest()[:16]
    assert [t.run_id for t in ts] == [launch] * 4 and all(t.rejected == [] for t in ts)
