"""The hivemind transport's protocol on real DHT nodes in this process (one thread per node), its
start-up failures and its config rules. Multi-process swarms are in test_hivemind.py."""

import itertools
import json
import threading
import time
from functools import partial
from types import SimpleNamespace

import pytest

pytest.importorskip("hivemind")

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from distributed_helpers import free_port  # noqa: E402
from hivemind_helpers import wait_for  # noqa: E402
from hivemind.utils.timed_storage import ValueWithExpiration  # noqa: E402

from dgrpo.config import load_config  # noqa: E402
from dgrpo.errors import ConfigError, PeerFailure  # noqa: E402
from dgrpo.transports.dht.launch import _allow, config_fingerprint, start_launch  # noqa: E402
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
            t.run_id, t.fingerprint = "run", "fp"
            t.roster = {k: public_hex(keys[k]) for k in range(n)}
    return ts


def in_threads(fns):
    """Run each callable in its own thread; return results (or the exception each raised)."""
    out = [None] * len(fns)

    def body(i, fn):
        try:
            out[i] = fn()
        except Exception as err:  # noqa: BLE001 - the test inspects it
            out[i] = err
    threads = [threading.Thread(target=body, args=(i, fn)) for i, fn in enumerate(fns)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    return out


def test_launch_agrees_on_launch_id_roster_and_values(dhts):
    ts = transports(dhts, 3, launched=False)
    out = in_threads([lambda t=t: start_launch(t, "fp", 30) or t.agree("name", f"name-of-{t.rank}") for t in ts])
    assert out == ["name-of-0"] * 3
    assert len({t.run_id for t in ts}) == 1 and ts[0].run_id
    assert all(t.roster == {k: public_hex(ts[k]._key) for k in range(3)} for t in ts)
    msgs = [Message(k, 0, "p", k, f"text {k}", (1, 2), 7, "tok") for k in range(3)]
    gathered = in_threads([lambda t=t: t.all_gather({t.rank: [msgs[t.rank]]}) for t in ts])
    assert gathered == [msgs] * 3


def test_a_config_mismatch_names_the_odd_node(dhts):
    ts = transports(dhts, 2, launched=False)
    out = in_threads([lambda: start_launch(ts[0], "fp-a", 30), lambda: start_launch(ts[1], "fp-b", 30)])
    assert all(isinstance(e, ConfigError) and "nodes [1] run another config than node 0" in str(e) for e in out), out


def test_two_processes_claiming_one_node_id_are_told(dhts):
    a, b = transports(dhts, 2, launched=False)
    b.rank, b.local_nodes = 0, [0]  # a second process started as node 0 with its own key
    out = in_threads([lambda: start_launch(a, "fp", 10), lambda: start_launch(b, "fp", 10)])
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
    out = in_threads([lambda t=t: t.commit(0, t.exchange("r0", payloads[t.rank])) for t in ts])
    assert out == [payloads] * 4, [type(o).__name__ if not isinstance(o, dict) else sorted(o) for o in out]
    assert all(d.is_alive() for d in dhts)
    assert [len(v) for v in out[0].values()] == [size] * 4


def test_a_peer_that_said_bye_is_not_waited_for(dhts):
    a, b = transports(dhts, 2, timeout_s=60)
    b.store(b.key("bye"), b"bye", 60)  # what a node stopping on an error does on its way out
    start = time.monotonic()
    assert a.exchange("r0", b"x") == {0: b"x"}
    assert a.failed == {1: "r0"} and time.monotonic() - start < 10


# The commit step (a payload one peer missed, equivocation, lone views): test_hivemind_attacks.py.


def test_records_signed_by_another_node_or_an_unknown_key_are_refused_and_named(dhts, caplog):
    a, b = transports(dhts, 2, timeout_s=1.0)
    stranger = Ed25519PrivateKey.generate()
    for signer, node, body in ((b._key, 0, b"b signs for 0"), (stranger, 1, b"stranger signs for 1"), (b._key, 1, b"real")):
        subkey, value = seal(signer, b.key("r0"), node, body)
        assert b.dht.store(b.key("r0"), value, time.time() + 60, subkey=subkey) == (signer is not stranger)
    assert {n: rec[:2] for n, rec in a.read(a.key("r0"), {0, 1}).items()} == {1: (b.roster[1], b"real")}
    assert sorted(a.rejected) == [(1, "identity: a record for node 0's slot signed by node 1's key")]
    # the stranger's key is in no roster these DHT nodes took: they refused to store it (issue 31); a reader
    # refuses a record under an unknown key too (test_no_key_is_learnt_from_a_record_...)


class _JunkDHT:
    """A DHT whose reads return whatever a broken or hostile peer could make hivemind return."""

    def __init__(self, results):
        self.results = iter(results)

    def get(self, key, latest=True, return_future=True):
        value = next(self.results, None)
        if isinstance(value, Exception):
            raise value
        return SimpleNamespace(result=lambda timeout: value)

    def store(self, *args, **kwargs):
        return SimpleNamespace(result=lambda timeout: True)


def test_none_and_malformed_reads_are_a_missing_peer_never_an_exception():
    k = Ed25519PrivateKey.generate()
    junk = [None, 5, SimpleNamespace(value={"dgrpo:1:" + public_hex(k): ValueWithExpiration(b"\x00" * 64, 0.0)}),
            ValueWithExpiration(5, 0.0), ValueWithExpiration({"dgrpo:1:" + "0" * 64: object()}, 0.0),
            ValueWithExpiration({None: ValueWithExpiration(b"x", 0.0), 7: ValueWithExpiration(None, 0.0)}, 0.0),
            ValueWithExpiration({"dgrpo:1:" + public_hex(k): ValueWithExpiration(b"\x00" * 64 + b"{}", 0.0)}, 0.0),
            TimeoutError("slow DHT"), RuntimeError("DHT process died")]
    t = HivemindTransport(_JunkDHT(junk), 0, 2, signing_key=k, namespace="dgrpo/x", honest=[0, 1], timeout_s=0.5,
                          on_peer_failure="continue")
    t._closed, t.run_id, t.roster = True, "run", {0: public_hex(k), 1: "f" * 64}
    assert t.exchange("r0", b"mine") == {0: b"mine"} and t.failed == {1: "r0"}
    assert t.rejected and all("does not verify" in r or "is not" in r for _, r in t.rejected)


def test_unreachable_bootstrap_peers_are_named(tmp_path):
    addr = f"/ip4/127.0.0.1/tcp/{free_port()}/p2p/QmYMYN5MCZvcfrDGGRrS8aaJ92v38uQD6schkFQ8gLdTqv"
    start = time.monotonic()
    with pytest.raises(PeerFailure, match=r"node 1 could not reach any bootstrap peer within swarm.startup_timeout_s=3s"
                                          rf".*{addr}"):
        start_dht(1, listen=["/ip4/127.0.0.1/tcp/0"], announce=[], initial_peers=[addr], identity_dir=tmp_path,
                  validator=SignedRecordValidator(), daemon_timeout_s=60, startup_timeout_s=3)
    assert time.monotonic() - start < 60


def test_a_daemon_that_does_not_start_in_time_is_reported_in_one_line(tmp_path):
    with pytest.raises(PeerFailure, match=r"^node 0: the p2p daemon did not start within "
                                          r"swarm.hivemind.daemon_timeout_s=0.001s \(a loaded machine: raise it\)$"):
        start_dht(0, listen=["/ip4/127.0.0.1/tcp/0"], announce=[], initial_peers=[], identity_dir=tmp_path,
                  validator=SignedRecordValidator(), daemon_timeout_s=0.001, startup_timeout_s=10)


@pytest.mark.parametrize("field, value, message", [
    ("listen", "[nonsense]", r"swarm.hivemind.listen\[0\]='nonsense' is not a multiaddr"),
    ("initial_peers", "[/ip4/10.0.0.1/tcp/31337]", r"initial_peers\[0\]='/ip4/10.0.0.1/tcp/31337' has no /p2p/PEER_ID"),
])
def test_malformed_addresses_are_named_before_anything_starts(tmp_path, field, value, message):
    with pytest.raises(ConfigError, match=message):
        HivemindTransport.from_config(load_config(None, ["swarm.transport=hivemind", "swarm.hivemind.node=0",
                                                         f"swarm.hivemind.{field}={value}", f"out_dir={tmp_path}"]))


@pytest.mark.parametrize("overrides, message", [
    (["swarm.transport=hivemind"], "needs swarm.hivemind.node=K"),
    (["swarm.transport=hivemind", "swarm.hivemind.node=4"], r"swarm.hivemind.node=4 is not in 0..3"),
    (["swarm.hivemind.join={3: 2}"], "needs swarm.transport=hivemind"),
    (["swarm.transport=hivemind", "swarm.hivemind.node=1", "swarm.hivemind.join={0: 2}",
      "swarm.models=[{name: a}, {name: b}, {name: c}, {name: d}]"], "node 0, the lowest honest node"),
])
def test_config_rules(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_the_config_check_ignores_per_node_fields_only():
    base = ["swarm.transport=hivemind", "swarm.hivemind.node=0"]
    fp = config_fingerprint(load_config(None, base))
    same = ["swarm.hivemind.node=2", "swarm.hivemind.listen=[/ip4/0.0.0.0/tcp/31337]", "out_dir=elsewhere", "threads=3",
            "swarm.hivemind.initial_peers=[/ip4/10.0.0.1/tcp/1/p2p/Qm]", "swarm.hivemind.identity_dir=/keys",
            "swarm.protocol.key_dir=/my/keys", "tracking.project=mine", "tensorboard=true"]  # (docs/hivemind.md: per node)
    for override in same:
        assert config_fingerprint(load_config(None, [*base, override])) == fp, override
    for override in ("seed=1", "swarm.timeout_s=5", "swarm.hivemind.run_id=other", "grpo.lr=0.5"):
        assert config_fingerprint(load_config(None, [*base, override])) != fp, override
    assert json.loads(json.dumps(fp)) == fp
    # one fingerprint for every transport: the distributed start-up check and every run's signing context too
    from dgrpo.transports import distributed, rendezvous

    assert distributed.config_fingerprint is rendezvous.config_fingerprint is config_fingerprint


def test_a_fresh_node_joining_a_homogeneous_swarm_is_refused_before_it_starts(tmp_path, capsys):
    from dgrpo.cli import main

    start = time.monotonic()
    assert main(["run", "swarm.transport=hivemind", "swarm.hivemind.node=3", "swarm.hivemind.join={3: 2}",
                 f"out_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "node 3 joins a homogeneous swarm at round 2" in err and "start it from a peer's checkpoint of round 2" in err
    assert time.monotonic() - start < 5 and not list(tmp_path.iterdir())  # no DHT, no model, no run folder


def test_a_client_mode_node_behind_nat_exchanges_through_the_servers(dhts, tmp_path):
    """client_mode: the node serves nothing (as behind NAT without relays) but stores and reads through its peers."""
    client = start_dht(1, listen=["/ip4/127.0.0.1/tcp/0"], announce=[], initial_peers=[str(a) for a in dhts[0].get_visible_maddrs()],
                       identity_dir=tmp_path, validator=SignedRecordValidator(), daemon_timeout_s=60, startup_timeout_s=60,
                       client_mode=True)
    try:
        assert client.client_mode
        a, b = transports([dhts[0], client], 2)
        assert in_threads([lambda: a.exchange("r0", b"from 0"), lambda: b.exchange("r0", b"from 1")]) == \
            [{0: b"from 0", 1: b"from 1"}] * 2
    finally:
        client.shutdown()


def test_node_keys_are_checked_against_the_roster_file(tmp_path):
    from dgrpo.transports.dht.launch import node_keys

    base = ["swarm.transport=hivemind", "swarm.hivemind.node=1", "swarm.nodes=2", f"out_dir={tmp_path}"]
    identity, key, roster = node_keys(load_config(None, base))
    assert identity == tmp_path / ".hivemind" / "node1" and roster is None
    path = tmp_path / "roster.json"
    path.write_text(json.dumps({"0": "a" * 64, "1": public_hex(key)}))
    assert node_keys(load_config(None, [*base, f"swarm.hivemind.roster={path}"]))[2] == {0: "a" * 64, 1: public_hex(key)}
    for content, message in (({"0": "a" * 64}, r"roster lacks nodes \[1\]"),
                             ({"0": "a" * 64, "1": "b" * 64}, "gives node 1 another key")):
        path.write_text(json.dumps(content))
        with pytest.raises(ConfigError, match=message):
            node_keys(load_config(None, [*base, f"swarm.hivemind.roster={path}"]))
    with pytest.raises(ConfigError, match=r"nodes \[1\] would join at or after round 2"):
        node_keys(load_config(None, [*base, "rounds=2", "swarm.hivemind.join={1: 2}", "swarm.models=[{name: a}, {name: b}]"]))


def test_joiners_need_a_roster_fixed_before_round_0_whose_keys_also_sign_the_records(tmp_path):
    """Without a roster a joiner's key would be whoever claims its id first: refused before anything starts.
    With a `dgrpo keys` roster each node's DHT records are signed by its message key, against that roster."""
    from dgrpo.swarm.identity import public_hex as message_key_hex
    from dgrpo.swarm.identity import load_private_key, write_keys
    from dgrpo.transports.dht.launch import node_keys

    base = ["swarm.transport=hivemind", "swarm.hivemind.node=1", "swarm.nodes=3", "swarm.group_size=3", "rounds=4",
            f"out_dir={tmp_path}", "swarm.models=[{name: a}, {name: b}, {name: c}]", "swarm.hivemind.join={2: 2}"]
    with pytest.raises(ConfigError, match=r"swarm.hivemind.join: the keys of joining nodes \[2\] must be fixed before "
                                          r"round 0 .* `dgrpo keys 3 --out DIR` .* swarm.protocol.roster=DIR/roster.json"):
        node_keys(load_config(None, base))
    assert not (tmp_path / ".hivemind").exists()  # no key was made
    roster = write_keys(tmp_path / "keys", 3)
    keys = [f"swarm.protocol.roster={tmp_path / 'keys' / 'roster.json'}", f"swarm.protocol.key_dir={tmp_path / 'keys'}"]
    _, key, got = node_keys(load_config(None, [*base, *keys]))
    assert got == dict(roster.keys) and 2 in got
    assert public_hex(key) == message_key_hex(load_private_key(tmp_path / "keys" / "node1.key")) == roster.keys[1]
    write_keys(tmp_path / "other", 3)  # a key folder of another deployment
    with pytest.raises(ConfigError, match="swarm.protocol.roster gives node 1 another key than .*other/node1.key"):
        node_keys(load_config(None, [*base, keys[0], f"swarm.protocol.key_dir={tmp_path / 'other'}"]))
    # unsigned messages: the transport's own roster file is enough to fix the joiner's key
    hm = tmp_path / "hivemind_roster.json"
    own = node_keys(load_config(None, ["swarm.transport=hivemind", "swarm.hivemind.node=1", f"out_dir={tmp_path}"]))[1]
    hm.write_text(json.dumps({"0": "a" * 64, "1": public_hex(own), "2": "b" * 64}))
    with pytest.raises(ConfigError, match="must be fixed before round 0"):  # messages signed: their roster is needed
        node_keys(load_config(None, [*base, f"swarm.hivemind.roster={hm}"]))
    assert 2 in node_keys(load_config(None, [*base, f"swarm.hivemind.roster={hm}", "swarm.protocol.sign=false"]))[2]


def test_a_joiner_resuming_a_copied_run_folder_signs_for_the_run_name_agreed_at_launch(tmp_path):
    """Node 2 joins at round 2 from a copy of node 0's folder (another folder name, no `name` in the config):
    its messages must verify at node 0, and its schedule has no slots for it before round 2."""
    from dgrpo.swarm.identity import write_keys
    from dgrpo.training.build import build_protocol, build_task

    write_keys(tmp_path / "keys", 3)
    cfg = load_config(None, ["swarm.transport=hivemind", "swarm.hivemind.node=0", "swarm.nodes=3", "swarm.group_size=3",
                             "rounds=4", "swarm.hivemind.join={2: 2}", "task.n_train=8", "task.n_val=2",
                             "swarm.models=[{name: a}, {name: b}, {name: c}]",
                             f"swarm.protocol.roster={tmp_path / 'keys' / 'roster.json'}"])
    agreed = []

    def node(k, first_round, folder):
        def agree(tag, value):
            agreed.append((k, tag, value))
            return "run-agreed-at-launch"
        transport = SimpleNamespace(local_nodes=[k], failed={}, is_main=False, first_round=first_round, agree=agree)
        (tmp_path / folder).mkdir()
        return build_protocol(cfg, build_task(cfg), transport, tmp_path / folder)

    initial, joiner = node(0, 0, "run-agreed-at-launch"), node(2, 2, "copy")
    assert agreed == [(2, "name", "copy")]  # only the joiner asks; the others' folder has the agreed name
    msg = joiner.signers[2].sign(Message(node=2, round=2, prompt_id="p", index=2, text="t", token_ids=(1,), seed=0,
                                         tokenizer="x"))
    assert initial.verifier.identify(msg) == (2, None)
    assert [initial.schedule.first_round(n) for n in range(3)] == [0, 0, 2]


def test_no_key_is_learnt_from_a_record_a_joiner_missing_from_the_roster_is_refused(dhts):
    """Node 2 would join at round 1 but is not in node 0's roster: a record for its slot is refused
    whoever signed it (no trust on first use after the launch), and node 0 is not left waiting for it."""
    ts = transports(dhts, 3, timeout_s=1.0)
    a, joiner = ts[0], ts[2]
    a.join, a.alive = {2: 1}, {0, 1, 2}
    del a.roster[2]
    subkey, value = seal(joiner._key, joiner.key("r1"), 2, b"joiner")
    assert joiner.dht.store(joiner.key("r1"), value, time.time() + 60, subkey=subkey)
    assert a.read(a.key("r1"), {1, 2}) == {}
    assert a.rejected == [(-1, f"identity: a record for node 2 signed by an unknown key {public_hex(joiner._key)[:12]}…")]


def test_with_a_roster_file_an_impostor_cannot_stop_or_join_the_launch(dhts):
    """Trust on first use stops a launch when two keys claim one node id; a roster file just refuses the impostor.

    The impostor claims node 1 first (its hello is readable before the honest nodes start). Node 1 then
    sees its id taken; node 0 sees both claims, or only the impostor's and waits in vain for it at the
    start barrier: either way the launch stops, visibly."""
    def launch(with_roster: bool):
        ts = transports(dhts, 3, launched=False)
        honest, impostor = ts[:2], ts[2]
        roster = {0: public_hex(ts[0]._key), 1: public_hex(ts[1]._key)}
        for t in honest:
            t.world_size, t.alive = 2, {0, 1}
            if with_roster:
                t.roster, t.fixed_roster = dict(roster), True
        impostor.rank = 1  # claims node 1 with its own key, again and again while the others launch
        stop = threading.Event()

        def hellos():
            while not stop.is_set():
                impostor.store(f"{impostor.namespace}/hello", json.dumps({"nonce": "x", "config": "fp"}).encode(), 30)
                time.sleep(0.1)
        threading.Thread(target=hellos, daemon=True).start()
        wait_for(lambda: 1 in honest[0].records(f"{impostor.namespace}/hello"), 30, "the impostor's hello")
        try:
            return honest, roster, in_threads([lambda t=t: start_launch(t, "fp", 6) for t in honest])
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


def _dht_then_sleep(conn, root):
    from hivemind import DHT

    d = start_dht(0, listen=["/ip4/127.0.0.1/tcp/0"], announce=[], initial_peers=[], identity_dir=root,
                  validator=SignedRecordValidator(), daemon_timeout_s=60, startup_timeout_s=60)
    conn.send((d.pid, d.run_coroutine(DHT._get_p2p_daemon_listen_maddr)["unix"]))
    time.sleep(120)


def test_a_killed_node_takes_its_dht_process_daemon_and_sockets_along(tmp_path):
    """hivemind alone leaves the DHT process and p2pd running (and its sockets in /tmp) when its parent is SIGKILLed."""
    import multiprocessing
    import os
    import signal

    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    node = ctx.Process(target=_dht_then_sleep, args=(theirs, tmp_path))
    node.start()
    assert ours.poll(60)
    dht_pid, socket_path = ours.recv()
    assert os.path.exists(socket_path)
    os.kill(node.pid, signal.SIGKILL)
    node.join()

    def gone(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not (gone(dht_pid) and not os.path.exists(socket_path)):
        time.sleep(0.2)
    assert gone(dht_pid) and not os.path.exists(socket_path)


def test_without_hivemind_installed_the_transport_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    import importlib.util

    from dgrpo.cli import main

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "hivemind" else find_spec(name, *a))
    assert main(["run", "swarm.transport=hivemind", "swarm.hivemind.node=0", "swarm.startup_timeout_s=5",
                 f"out_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "swarm.transport=hivemind needs the hivemind package: pip install 'dgrpo[hivemind]'" in err
    assert "Traceback" not in err and not list(tmp_path.iterdir())


class _Joiner:
    """What restore reads of a joining node's transport; the resume barrier must not be reached."""

    local_nodes, is_main = [2], False

    def __init__(self, first_round):
        self.first_round = first_round

    def gather_values(self, *args, **kwargs):
        raise AssertionError("a joiner does not wait at the resume barrier: the swarm is running")


@pytest.mark.parametrize("checkpoint_round, error", [(2, None), (4, "holds round 4, but node 2 joins at round 2")])
def test_a_joiner_resumes_only_a_checkpoint_of_its_join_round_and_skips_the_barrier(tmp_path, monkeypatch,
                                                                                    checkpoint_round, error):
    from dgrpo.training import checkpoint, resume

    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda run: checkpoint_round)
    run = SimpleNamespace(transport=_Joiner(2), run_dir=tmp_path, start_round=0, cfg=None)
    if error is None:
        resume.restore(run, rewrite_config=False)
        assert run.start_round == 2
    else:
        with pytest.raises(ConfigError, match=error):
            resume.restore(run, rewrite_config=False)
