"""The hivemind transport's start-up failures and config rules, node keys against the roster file, and joiners
(no shared DHT; a node's own DHT where a case needs one). Rounds on real DHT nodes: test_hivemind_transport.py."""

import json
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("hivemind")

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from distributed_helpers import free_port  # noqa: E402
from hivemind.utils.timed_storage import ValueWithExpiration  # noqa: E402

from dgrpo.config import load_config  # noqa: E402
from dgrpo.errors import ConfigError, PeerFailure  # noqa: E402
from dgrpo.transports.dht.launch import config_fingerprint  # noqa: E402
from dgrpo.transports.dht.node import start_dht  # noqa: E402
from dgrpo.transports.dht.records import SignedRecordValidator, public_hex  # noqa: E402
from dgrpo.transports.hivemind import HivemindTransport  # noqa: E402
from dgrpo.types import Message  # noqa: E402


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
    t._closed = True
    t.enter_launch("run", "fp", {0: public_hex(k), 1: "f" * 64})
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
    cfg = SimpleNamespace(rounds=4, swarm=SimpleNamespace(nodes=4))
    run = SimpleNamespace(transport=_Joiner(2), run_dir=tmp_path, start_round=0, cfg=cfg)
    own = tmp_path / "peers.node2.jsonl"  # (its own record, review r31j F5: the rounds that run again are dropped)
    own.write_text("".join(json.dumps({"round": r}) + "\n" for r in range(4)))
    if error is None:
        resume.restore(run, rewrite_config=False)
        assert run.start_round == 2
        assert [json.loads(line)["round"] for line in own.read_text().splitlines()] == [0, 1]
    else:
        with pytest.raises(ConfigError, match=error):
            resume.restore(run, rewrite_config=False)
