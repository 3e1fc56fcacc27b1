"""The hivemind DHT swarm in real processes on 127.0.0.1: same metrics as in-process, forgery, churn, faults."""

import json
import re
import shutil
import time
from datetime import datetime

import pytest

pytest.importorskip("hivemind")

from distributed_helpers import comparable  # noqa: E402
from hivemind_helpers import launch, wait_for  # noqa: E402

from dgrpo.cli import main  # noqa: E402
from dgrpo.metrics.logger import read_metrics  # noqa: E402
from dgrpo.swarm.identity import write_keys  # noqa: E402

# As in test_distributed: the attacker's full-reward poisoned completion makes every round update.
COMMON = ["threads=1", "swarm.group_size=4", "sampling.max_new_tokens=24", "eval.every=2", "eval.n_prompts=2",
          "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01", "swarm.startup_timeout_s=90"]
B2 = "swarm.prompts_per_round=2"
STAMP = "%Y-%m-%d %H:%M:%S,%f"  # (the CLI's log time)
ATTACK = ["attack.kind=injection", "attack.poisoned_per_group=1"]


def in_process(tmp_path, name, args):
    assert main(["run", *args, f"out_dir={tmp_path}", f"name={name}"]) == 0
    return comparable(read_metrics(tmp_path / name))


def hivemind(tmp_path, name, nprocs, args, **kw):
    results = launch(nprocs, ["run", *args, f"out_dir={tmp_path}", f"name={name}"], tmp_path, **kw)
    return results, tmp_path / name


def codes(results):
    return [r.returncode for r in results]


def roster(tmp_path, nodes):
    """A deployment's roster fixed before round 0, joiners included (`dgrpo keys`): every node's overrides."""
    keys = tmp_path / "keys"
    write_keys(keys, nodes)
    return [f"swarm.protocol.roster={keys / 'roster.json'}", f"swarm.protocol.key_dir={keys}"]


def test_four_nodes_heterogeneous_with_attacker_and_defense_match_in_process(tmp_path, tiny_model_dir, tiny_model_dir_b):
    models = f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}]"
    args = [models, "swarm.nodes=4", "swarm.mode=vertical", "swarm.prompts_per_round=4", "swarm.malicious=[3]",
            "attack.kind=injection", "attack.poisoned_per_group=2", "defenses=[{kind: reward_outlier}]", "rounds=2",
            "swarm.protocol.enforce_length=false", *COMMON]  # (the poisons must reach the defense across processes)
    want = in_process(tmp_path, "in", args)
    results, run_dir = hivemind(tmp_path, "h", 4, args)
    assert codes(results) == [0, 0, 0, 0], results[0].output[-3000:]
    got = comparable(read_metrics(run_dir))
    assert got == want
    assert got[0]["defense/poisoned_received"] == 2  # labels crossed processes
    assert {"train/loss/node0", "train/loss/node1", "train/loss/node2", "eval/accuracy/node2"} <= got[0].keys()
    for r in results:  # every node signed its records and found the same launch
        assert re.search(r"node \d: launch [0-9a-f]{16} with nodes \[0, 1, 2, 3\]", r.output), r.output[-2000:]


@pytest.mark.slow
def test_three_nodes_homogeneous_with_attacker_match_in_process(tmp_path, tiny_model_dir):
    """Homogeneous: each honest process holds a copy of the weights; the attacker's process mirrors them."""
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=3", "swarm.malicious=[1]", *ATTACK, *COMMON, B2,
            "swarm.group_size=3", "rounds=3"]
    want = in_process(tmp_path, "in", args)
    assert want[1]["train/grad_norm"] > 0
    results, run_dir = hivemind(tmp_path, "h", 3, args)
    assert codes(results) == [0, 0, 0], results[0].output[-3000:]
    assert comparable(read_metrics(run_dir)) == want
    assert {p.name for p in (run_dir / "checkpoint").iterdir()} == {"node0", "node1", "node2", "state.json"}


@pytest.mark.slow
def test_a_record_under_another_peers_slot_is_refused_by_every_receiver(tmp_path, tiny_model_dir):
    """Node 1 writes node 2's slot twice a round: under node 2's own subkey (its signature cannot match) and
    under its own key. Every honest node refuses both and uses node 2's real messages."""
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=3", *COMMON, B2, "swarm.group_size=3", "rounds=2",
            "swarm.malicious=[1]", *ATTACK]
    want = in_process(tmp_path, "in", args)
    results, run_dir = hivemind(tmp_path, "h", 3, args, scenario="forge:1:2")
    assert codes(results) == [0, 0, 0], results[0].output[-3000:]
    # (since issue 31 the DHT nodes keep only the roster's (node, key) pairs: the second is refused there too)
    assert "under node 2's subkey stored=False; under its own key for node 2's slot stored=False" in results[1].output
    for r in (results[0], results[2]):
        assert re.search(r"DHT refused a record for node 2: signature of node 2's record does not verify", r.output), r.rank
        assert re.search(r"DHT refused a record for node 2: node 2's record is signed by [0-9a-f]{12}…, not by its roster "
                         r"key", r.output), r.rank
    assert comparable(read_metrics(run_dir)) == want  # every key: the refusals are named in peers.jsonl only
    assert all(any(p.get("transport", {}).get("dht") for p in rec["peers"].values()) for rec in _peers(run_dir))


@pytest.mark.slow
def test_killed_peer_is_named_within_the_deadline_and_the_others_abort(tmp_path, tiny_model_dir):
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", "swarm.malicious=[1]", *ATTACK, *COMMON, B2, "rounds=4"]
    want = in_process(tmp_path, "in", args)
    results, run_dir = hivemind(tmp_path, "h", 4, [*args, "swarm.timeout_s=20"], scenario="die:3:2")
    assert results[3].returncode == 1
    for r in results[:3]:
        assert r.returncode == 3, r.output[-2000:]
        assert ("dgrpo: error: node 3 sent nothing for exchange 'r2' within 5s of the round (1/4 of swarm.timeout_s=20s)"
                in r.output)
        assert r.seconds < 100
    assert comparable(read_metrics(run_dir)) == want[:2]  # rounds 0-1 equal the in-process ones


@pytest.mark.slow
def test_killed_peer_is_dropped_and_the_swarm_finishes(tmp_path, tiny_model_dir):
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", "swarm.malicious=[1]", *ATTACK, *COMMON, B2, "rounds=4",
            "swarm.timeout_s=20", "swarm.on_peer_failure=continue"]
    results, run_dir = hivemind(tmp_path, "h", 4, args, scenario="die:3:2")
    assert codes(results) == [0, 0, 0, 1], results[0].output[-3000:]
    assert "node 3 sent nothing for exchange 'r2' within 5s of the round (1/4 of swarm.timeout_s=20s)" in results[2].output
    records = read_metrics(run_dir)
    assert [r["round"] for r in records] == [0, 1, 2, 3, 4]
    assert records[1]["swarm/messages"] == 8 and "swarm/nodes_alive" not in records[1]
    for rec in records[2:4]:  # groups hold the 3 completions received; node 3 is absent, not scored 0
        assert rec["swarm/messages"] == 6 and rec["swarm/nodes_alive"] == 3
        assert rec["train/reward/node3"] is None and rec["train/reward/node1"] is not None
    assert records[2]["time/exchange"] < 20 / 4 + 2  # round 2 waits for node 3 until its payload phase ends (issue 31)
    assert records[3]["time/exchange"] < 4  # round 3 no longer waits for node 3


@pytest.mark.slow
def test_stalled_peer_is_dropped_by_all_and_leaves_when_it_wakes(tmp_path, tiny_model_dir):
    """The commit step: the late node's messages arrive after the others' deadline; all drop them alike,
    and the late node finds itself missing from their views and leaves."""
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", "swarm.malicious=[1]", *ATTACK, *COMMON, B2, "rounds=4",
            "swarm.timeout_s=20", "swarm.on_peer_failure=continue"]  # (its payload phase: 5 s)
    results, run_dir = hivemind(tmp_path, "h", 4, args, scenario="stall:3:2:9")
    assert codes(results) == [0, 0, 0, 3], results[3].output[-3000:]
    assert "node 3 was declared failed by its peers in exchange 'r2'" in results[3].output
    records = read_metrics(run_dir)
    assert [r["swarm/messages"] for r in records[:4]] == [8, 8, 6, 6]
    assert records[2]["train/reward/node3"] is None
    assert _peers(run_dir)[2]["peers"]["3"]["transport"] == {"missing payload": 1}  # named in peers.jsonl (issue 31)


@pytest.mark.slow
def test_a_node_joining_at_round_2_of_a_heterogeneous_swarm_takes_part_from_round_2(tmp_path, tiny_model_dir,
                                                                                    tiny_model_dir_b):
    models = f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}]"
    args = [models, "swarm.nodes=4", *COMMON, B2, "rounds=4", "swarm.hivemind.join={3: 2}", "swarm.timeout_s=60",
            *roster(tmp_path, 4)]
    joiner_dir = tmp_path / "joiner"  # its own folder: the others' run directory already holds metrics
    results, run_dir = hivemind(tmp_path, "h", 4, args, per_node={3: [f"out_dir={joiner_dir}"]})
    assert codes(results) == [0, 0, 0, 0], results[3].output[-3000:]
    assert re.search(r"node 3: joins launch [0-9a-f]{16} at round 2 \(swarm at round 1", results[3].output)
    records = read_metrics(run_dir)
    assert [r["round"] for r in records] == [0, 1, 2, 3, 4]
    for rec in records[:2]:  # 3 nodes × 1 completion × 2 prompts; node 3 is not waited for
        assert rec["swarm/messages"] == 6 and rec["train/reward/node3"] is None and "train/loss/node3" not in rec
    for rec in records[2:4]:
        assert rec["swarm/messages"] == 8 and rec["train/reward/node3"] is not None and "train/loss/node3" in rec
    assert "eval/accuracy/node3" in records[2] and "eval/accuracy/node3" not in records[0]
    assert (joiner_dir / "h" / "checkpoint" / "node3").is_dir()


@pytest.mark.slow
@pytest.mark.parametrize("lie, named_as", [("round", "puts the swarm at round 1000000 where nodes 0, 1"),
                                           ("run", "names launch ffffffffffffffff where nodes 0, 1"),
                                           ("name", "gives name='/tmp/evil' where nodes 0, 1")])
def test_one_nodes_lying_launch_record_neither_stops_nor_splits_off_a_joiner_and_is_named(tmp_path, tiny_model_dir,
                                                                                         tiny_model_dir_b, lie, named_as):
    """Review r31h F11: node 2 signs launch records claiming round 10**6 (``round``), a launch id of its own at its
    round + 1 (``run``) or another run name (``name``). Before, joiner node 3 took the record with the highest round: it
    stopped (exit 3, "the swarm has exchanged round 1000000 already") or joined launch ffff… and trained alone
    ([0, 0, 0, 0] but node 3 named ``missing payload`` by nodes 0-2 and nodes 0-2 by it); node 2 was named nowhere.
    Now the joiner believes only what more than half of the initial nodes' records say: it joins the launch of nodes
    0-1 at round 2 and names node 2."""
    models = f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}]"
    args = [models, "swarm.nodes=4", *COMMON, B2, "rounds=3", "swarm.hivemind.join={3: 2}", "swarm.timeout_s=30",
            "swarm.on_peer_failure=continue", *roster(tmp_path, 4)]
    results, run_dir = hivemind(tmp_path, "h", 4, args, scenario=f"launchlie:2:{lie}",
                                per_node={3: [f"out_dir={tmp_path / 'joiner'}"]})
    assert codes(results) == [0, 0, 0, 0], results[3].output[-3000:]
    assert "launch liar 2: launch record of launch " in results[2].output
    launched = re.search(r"node 0: launch ([0-9a-f]{16}) with nodes \[0, 1, 2\]", results[0].output)
    assert launched and f"node 3: joins launch {launched[1]} at round 2 (swarm at round 1" in results[3].output, \
        results[3].output[-3000:]
    assert re.search(r"rejected record from node 2 under launch: launch: its signed launch record " + re.escape(named_as),
                     results[3].output), results[3].output[-3000:]
    assert not re.search(r"rejected record from node [013]|nodes? [0-9, ]*sent nothing", results[3].output)
    records = read_metrics(run_dir)
    assert [r["swarm/messages"] for r in records[:3]] == [6, 6, 8]  # node 3 takes part in round 2, with every node
    assert records[2]["train/reward/node3"] is not None and "swarm/nodes_alive" not in records[2]
    assert not [p for p in _peers(run_dir) if "missing payload" in json.dumps(p)]  # nobody missed (node 3 was, in r2)


@pytest.mark.slow
def test_a_node_pinning_its_peers_launch_records_neither_stops_a_joiner_nor_gets_anyone_honest_named(tmp_path,
                                                                                                 tiny_model_dir,
                                                                                                 tiny_model_dir_b):
    """Review r31i F2: node 2 stores nodes 0's and 1's own signed launch records (as read at round 0) again with a DHT
    expiry 1e5 s ahead at each of its publishes. The expiry was not signed and the DHT keeps a subkey's copy that
    expires last: nodes 0-1's later records were refused, joiner node 3 read them at round -1/0 and exited 3 after
    ``startup_timeout_s`` ([0, 0, 0, 3], node 3 named ``missing payload`` by its peers, node 2 nowhere). Now the expiry
    is signed: no DHT node takes the copies, and the joiner joins at round 2."""
    models = f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}]"
    args = [models, "swarm.nodes=4", *COMMON, B2, "rounds=3", "swarm.hivemind.join={3: 2}", "swarm.timeout_s=30",
            "swarm.on_peer_failure=continue", *roster(tmp_path, 4)]
    results, run_dir = hivemind(tmp_path, "h", 4, args, scenario="pinlaunch:2:0/1",
                                per_node={3: [f"out_dir={tmp_path / 'joiner'}"]})
    assert codes(results) == [0, 0, 0, 0], results[3].output[-3000:]
    pins = re.findall(r"pinner 2: node [01]'s launch record stored again with a far expiry: stored=(\w+)", results[2].output)
    assert pins and set(pins) == {"False"}, results[2].output[-3000:]
    launched = re.search(r"node 0: launch ([0-9a-f]{16}) with nodes \[0, 1, 2\]", results[0].output)
    assert launched and f"node 3: joins launch {launched[1]} at round 2 (swarm at round 1" in results[3].output, \
        results[3].output[-3000:]
    assert not re.search(r"rejected record from node [0-3] under launch|sent nothing", results[3].output)
    records = read_metrics(run_dir)
    assert [r["swarm/messages"] for r in records[:3]] == [6, 6, 8]  # node 3 takes part in round 2, with every node
    assert not [p for p in _peers(run_dir) if "missing payload" in json.dumps(p)]


@pytest.mark.slow
def test_an_earlier_launchs_records_stored_again_neither_split_nor_stop_a_launch_and_its_joiner(tmp_path, tiny_model_dir,
                                                                                               tiny_model_dir_b):
    """Issue 31 (review r31i F4/F6 within a record's signed lifetime): before the launch node 2 stores node 1's hello,
    heard record and launch record of an earlier launch (signed 20 s ago by node 1, their expiries ahead), the launch
    record at round 1 of launch eeee…, and then signs its own for that launch. Before, joiner node 3 took node 1's
    old record and node 2's as a quorum: it entered launch eeee… and trained alone, named ``missing payload`` by its
    peers. Now records signed before the joiner started are not read (and a heard record of another process than
    its node's hello is ignored): the launch goes on with every node, the joiner joins it at round 2, and only node 2
    is named (its lone launch record), node 1 nowhere."""
    models = f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}]"
    args = [models, "swarm.nodes=4", *COMMON, B2, "rounds=3", "swarm.hivemind.join={3: 2}", "swarm.timeout_s=30",
            "swarm.on_peer_failure=continue", *roster(tmp_path, 4)]
    results, run_dir = hivemind(tmp_path, "h", 4, args, scenario="stale:2:1", per_node={3: [f"out_dir={tmp_path / 'joiner'}"]})
    assert codes(results) == [0, 0, 0, 0], results[3].output[-3000:]
    stored = re.findall(r"stale 2: node 1's (\w+) record of launch e{16} stored again: stored=(\w+)", results[2].output)
    assert [tag for tag, ok in stored if ok == "True"][-2:] == ["heard", "launch"], results[2].output[-3000:]  # (the
    #   hello only if node 1 had not stored its own yet: a later expiry, which no copy outranks)
    launched = re.search(r"node 0: launch ([0-9a-f]{16}) with nodes \[0, 1, 2\]", results[0].output)
    assert launched and all(f"launch {launched[1]} with nodes [0, 1, 2]" in r.output for r in results[:3])
    assert f"node 3: joins launch {launched[1]} at round 2 (swarm at round 1" in results[3].output, results[3].output[-3000:]
    assert re.search(r"rejected record from node 2 under launch: launch: its signed launch record names launch e{16} "
                     r"where nodes 0, 1", results[3].output), results[3].output[-3000:]
    for r in results:  # node 1 named nowhere, nobody waited for
        assert not re.search(r"rejected record from node [013]|refused a record for node 1|sent nothing", r.output), r.rank
    records = read_metrics(run_dir)
    assert [r["swarm/messages"] for r in records[:3]] == [6, 6, 8]  # node 3 takes part in round 2, with every node
    assert records[2]["train/reward/node3"] is not None and "swarm/nodes_alive" not in records[2]
    assert not [p for p in _peers(run_dir) if "missing payload" in json.dumps(p)]


@pytest.mark.slow
def test_a_node_joins_a_homogeneous_swarm_from_a_peers_checkpoint_and_keeps_an_equal_copy(tmp_path, tiny_model_dir):
    """Nodes 0-1 save a checkpoint at round 2; node 2 resumes a copy of it as its start and joins at round 2.
    Its weights at the end equal node 0's bit for bit: it started from the same ones and applied the same updates."""
    from safetensors.torch import load_file

    args = [f"model.name={tiny_model_dir}", "swarm.nodes=3", "swarm.malicious=[1]", *ATTACK, *COMMON, B2,
            "swarm.group_size=3", "rounds=4", "checkpoint_every=2", "swarm.hivemind.join={2: 2}", "swarm.timeout_s=90",
            *roster(tmp_path, 3)]
    state = tmp_path / "h" / "checkpoint" / "state.json"

    def from_checkpoint():
        wait_for(lambda: state.exists() and json.loads(state.read_text())["next_round"] == 2, 120, "the round-2 checkpoint")
        time.sleep(0.5)  # node 1 saves its folder beside node 0's
        shutil.copytree(tmp_path / "h", tmp_path / "copy", ignore=shutil.ignore_patterns(".*"))
        return ["resume", str(tmp_path / "copy")]

    results, run_dir = hivemind(tmp_path, "h", 3, args, late={2: from_checkpoint})
    assert codes(results) == [0, 0, 0], results[2].output[-3000:]
    records = read_metrics(run_dir)
    assert [r["swarm/messages"] for r in records[:4]] == [4, 4, 6, 6]  # 2 prompts × 1 completion × live nodes
    assert records[1]["train/reward/node2"] is None and records[2]["train/reward/node2"] is not None
    final = [load_file(d / "checkpoint" / node / "model.safetensors") for d, node in ((run_dir, "node0"),
                                                                                     (tmp_path / "copy", "node2"))]
    assert final[0].keys() == final[1].keys() and all(final[0][k].equal(final[1][k]) for k in final[0])


def _peers(run_dir):
    return [json.loads(line) for line in (run_dir / "peers.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("of, rule", [("respelled", "malformed"), ("copies", "copy"), ("other_round", "round"),
                                     ("other_run", "run")])
def test_a_node_replaying_its_peers_signed_messages_gets_nobody_honest_struck(tmp_path, tiny_model_dir, of, rule):
    """Issue 31 over hivemind: node 3 adds to its own record its peers' signed messages of the round re-spelled (upper-case
    signatures) or three times each, last round's, or as signed for another run under the same roster keys;
    ban_after=2. Nobody honest is struck or banned, node 3 is named as the node that delivered them, and every key
    of the record but time/* equals the run whose attacker adds nothing."""
    keys = roster(tmp_path, 4) if of == "other_run" else []
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", "swarm.malicious=[3]", *ATTACK, *COMMON, B2, "rounds=2",
            "swarm.protocol.ban_after=2", "swarm.timeout_s=30", *keys]
    want = in_process(tmp_path, "in", args)
    results, run_dir = hivemind(tmp_path, "h", 4, args, scenario=f"replay:3:{of}")
    assert codes(results) == [0, 0, 0, 0], results[0].output[-3000:]
    assert f"replayer 3: r1: {18 if of == 'copies' else 6} {of} messages added" in results[3].output
    for p in _peers(run_dir):
        assert p["banned"] == {}, p
        for n in "012":
            assert p["peers"][n]["accepted"] == 2 and set(p["peers"][n]["rejected"]) <= {"round", "run"}, p  # no strike
        if p["round"] == 1 or of != "other_round":
            assert p["peers"]["3"]["transport"].get(rule, 0) >= 6, p  # named: it delivered them
    # every key: what node 3 replayed is named above, never counted in the record (before: swarm/messages and
    # swarm/invalid counted the re-spelled, other run's and other round's messages; copies since review L1)
    assert comparable(read_metrics(run_dir)) == want


@pytest.mark.slow
def test_a_lone_view_leaving_an_honest_node_out_changes_nothing_and_names_its_sender(tmp_path, tiny_model_dir):
    """Issue 31: node 3's commit views leave node 1 out every round. Before, every node dropped node 1's messages and
    node 1 left (exit 3). Now nobody is dropped, node 3 is named (``accusation``) and training equals the clean run."""
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", "swarm.malicious=[3]", *ATTACK, *COMMON, B2, "rounds=2",
            "swarm.timeout_s=30", "swarm.on_peer_failure=continue"]
    want = in_process(tmp_path, "in", args)
    results, run_dir = hivemind(tmp_path, "h", 4, args, scenario="omit:3:1")
    assert codes(results) == [0, 0, 0, 0], results[1].output[-3000:]
    assert "accuser 3: v1: node 1 left out of its view" in results[3].output
    for p in _peers(run_dir):
        assert p["peers"]["3"]["transport"] == {"accusation": 1}, p
        assert all(p["peers"][n]["transport"] == {} for n in "012"), p
    assert comparable(read_metrics(run_dir)) == want


@pytest.mark.slow
@pytest.mark.parametrize("on_peer_failure", ["continue", "abort"])
def test_a_node_storing_its_hello_again_with_fresh_nonces_is_named_at_once_by_every_node(tmp_path, tiny_model_dir,
                                                                                          on_peer_failure):
    """Review r31g J6: node 3 runs the honest code, but stores its signed hello again every 0.1 s with a fresh nonce
    while the launch runs. Before, the nodes that left their hello loop at different moments hashed different nonces of
    node 3 into the launch id; the ``start`` barrier then failed after ``startup_timeout_s`` (exit codes [3, 3, 3, 3],
    two launch ids, node 0 calling nodes 1-3 silent and nodes 1-2 calling honest node 0 silent). Now every node relays
    the hellos it read, and two hellos node 3 signed are the proof: every honest node stops at once, in one line
    naming node 3 and quoting both signatures, and names nobody else."""
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", *COMMON, B2, "rounds=2", "swarm.timeout_s=8",
            f"swarm.on_peer_failure={on_peer_failure}"]  # (COMMON: swarm.startup_timeout_s=90)
    results, _ = hivemind(tmp_path, "h", 4, args, scenario="rehello:3", timeout=120)
    assert "rehello 3: storing its hello again" in results[3].output, results[3].output[-2000:]
    for r in results[:3]:
        assert r.returncode == 3, (r.rank, r.output[-3000:])
        errors = [line for line in r.output.splitlines() if line.startswith("dgrpo: error:")]
        assert len(errors) == 1 and errors[0].startswith("dgrpo: error: node 3 signed two different hellos for this "
                                                         "launch"), (r.rank, r.output[-3000:])
        assert len(re.findall(r"signature [0-9a-f]{16}…", errors[0])) == 2 and "stopping before round 0" in errors[0]
        assert not re.search(r"node [012] signed two|nodes? [0-9, ]*sent nothing|launch [0-9a-f]{16} with", r.output)
        proof = re.search(r"^(\S+ \S+) WARN\S* \S+ node \d: proof that node 3 signed two hellos", r.output, re.M)
        up = re.search(r"^(\S+ \S+) INFO \S+ node \d listening on", r.output, re.M)
        assert proof and up, (r.rank, r.output[-3000:])  # (the proof logs both hellos in full)
        seconds = (datetime.strptime(proof[1], STAMP) - datetime.strptime(up[1], STAMP)).total_seconds()
        assert seconds < 30, (r.rank, seconds)  # at once, not after swarm.startup_timeout_s=90s


@pytest.mark.slow
def test_a_node_flooding_hellos_under_fresh_process_ids_is_named_at_once_by_every_node(tmp_path, tiny_model_dir):
    """Issue 31: node 3 runs the honest code, but stores its signed hello again every 0.1 s with a fresh nonce and a
    fresh process id, dated now. Two hellos of two processes prove nothing, so before, the flood filled the 64 hellos
    each honest node keeps of a key in about 6 s; the nodes kept different ones, chose different newest hellos, and
    every node stopped at the ``start`` barrier after ``startup_timeout_s`` naming nobody (or an honest node). Now
    hellos of more than 3 processes of one key within 33 s are a proof: every honest node stops at once (whatever
    ``on_peer_failure``; the docs' rule for a proved equivocator) in one line naming node 3, nobody else."""
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", *COMMON, B2, "rounds=2", "swarm.timeout_s=8",
            "swarm.on_peer_failure=continue"]  # (COMMON: swarm.startup_timeout_s=90)
    results, _ = hivemind(tmp_path, "h", 4, args, scenario="rehello:3:process", timeout=150)
    assert "rehello 3: storing its hello again every 0.1 s with a fresh nonce and process id" in results[3].output
    for r in results[:3]:
        assert r.returncode == 3, (r.rank, r.output[-3000:])
        errors = [line for line in r.output.splitlines() if line.startswith("dgrpo: error:")]
        assert len(errors) == 1 and re.match(r"dgrpo: error: node 3 signed hellos of 4 different processes within "
                                             r"[0-9.]+ s for this launch", errors[0]), (r.rank, r.output[-3000:])
        assert len(re.findall(r"signature [0-9a-f]{16}…", errors[0])) == 4 and "stopping before round 0" in errors[0]
        assert not re.search(r"node [012] signed|nodes? [0-9, ]*sent nothing|launch [0-9a-f]{16} with", r.output)
        proof = re.search(r"^(\S+ \S+) WARN\S* \S+ node \d: proof that node 3 signed hellos of too many processes",
                          r.output, re.M)
        up = re.search(r"^(\S+ \S+) INFO \S+ node \d listening on", r.output, re.M)
        assert proof and up, (r.rank, r.output[-3000:])
        seconds = (datetime.strptime(proof[1], STAMP) - datetime.strptime(up[1], STAMP)).total_seconds()
        assert seconds < 30, (r.rank, seconds)  # at once, not after swarm.startup_timeout_s=90s
