"""The torch.distributed swarm in real processes: same metrics as in-process, validation, faults, resume."""

import json
import re
import time

import pytest
import torch.distributed as dist
from distributed_helpers import RELATIVE, comparable, launch, torchrun

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics
from dgrpo.errors import PeerFailure
from dgrpo.transports.distributed import DistributedTransport
from dgrpo.transports.framing import frame
from dgrpo.types import Message

# Tiny but non-trivial: the attacker's full-reward poisoned completion (beside its sampled filler)
# makes advantages non-zero, so every round updates the weights and later rounds depend on earlier ones.
COMMON = ["threads=1", "swarm.group_size=4", "sampling.max_new_tokens=24", "eval.every=2", "eval.n_prompts=2",
          "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01",
          "swarm.unsafe_key_exchange=true"]  # loopback, no roster file: fresh keys exchanged at start
B2 = "swarm.prompts_per_round=2"
ATTACK = ["attack.kind=injection", "attack.poisoned_per_group=1"]


def in_process(tmp_path, name, args):
    assert main(["run", *args, f"out_dir={tmp_path}", f"name={name}"]) == 0
    return comparable(read_metrics(tmp_path / name))


def distributed(tmp_path, name, nprocs, args, scenario="", timeout=90):
    results = launch(nprocs, ["run", RELATIVE, *args, f"out_dir={tmp_path}", f"name={name}", "swarm.transport=distributed"],
                     scenario=scenario, timeout=timeout, log_dir=str(tmp_path))
    return results, tmp_path / name


def test_two_ranks_under_torchrun_match_in_process_and_resume(tmp_path, tiny_model_dir):
    """torchrun, homogeneous, node 1 an attacker whose sampled filler shows it tracks the honest weights;
    2 rounds, then `dgrpo resume` to 4 (forked ranks: a second torchrun costs 15 s of imports),
    against in-process runs of 2 and of 4 rounds. On the default schedule (task h31d: unset on distributed is
    ``clock`` with ``round_s: auto``): one agreed round_s at both ranks, no skip, the run's config.yaml records the
    schedule, and the resume continues on it (windows of 2 s, not auto's 4 s: about 5 s a round, not 9). An in-process checkpoint records no schedule: its distributed resume
    is refused in one line until the schedule is given (``relative``: the checkpoint's config hash is the same)."""
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=2", "swarm.malicious=[1]", *ATTACK, *COMMON, B2]
    want2 = in_process(tmp_path, "in2", [*args, "rounds=2"])
    want4 = in_process(tmp_path, "in4", [*args, "rounds=4"])
    assert want4[1]["train/grad_norm"] > 0 and want4[1]["train/reward/node1"] == 0.5

    windows = ["swarm.protocol.direct_s=2", "swarm.protocol.relay_s=2"]  # (auto's 4 s each: test_clock_auto, slow)
    run = torchrun(2, ["run", *args, "rounds=2", "swarm.transport=distributed", *windows, f"out_dir={tmp_path}", "name=d"])
    assert run.returncode == 0, run.stderr[-3000:]
    assert comparable(read_metrics(tmp_path / "d")) == want2
    assert {p.name for p in (tmp_path / "d" / "checkpoint").iterdir()} == {"node0", "node1", "state.json"}
    agreed = re.findall(r"node \d: swarm.protocol.round_s=auto: agreed round_s=(\S+)s", run.stderr)
    assert len(agreed) == 2 and len(set(agreed)) == 1, run.stderr[-3000:]  # (both ranks, one value)
    assert "skip notice" not in run.stderr and "accused" not in run.stderr, run.stderr[-3000:]
    saved = (tmp_path / "d" / "config.yaml").read_text()
    assert "schedule: clock" in saved and "round_s: auto" in saved

    results = launch(2, ["resume", str(tmp_path / "d"), "rounds=4"], log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0], results[0].output[-3000:]
    assert comparable(read_metrics(tmp_path / "d")) == want4
    assert all(len(re.findall("agreed round_s=", r.output)) == 1 for r in results)  # (the resume ran on the clock)

    # An in-process checkpoint (one node0 folder) resumes as a distributed swarm too, on the schedule given.
    results = launch(2, ["resume", str(tmp_path / "in2"), "rounds=4", "swarm.transport=distributed"],
                     log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [2, 2], results[0].output[-3000:]
    line = results[0].output.strip().splitlines()[-1]
    assert "swarm.protocol.schedule:" in line and "swarm.protocol.schedule=relative" in line, results[0].output
    results = launch(2, ["resume", str(tmp_path / "in2"), "rounds=4", "swarm.transport=distributed",
                         "swarm.protocol.schedule=relative"], log_dir=str(tmp_path))
    assert [r.returncode for r in results] == [0, 0], results[0].output[-3000:]
    assert comparable(read_metrics(tmp_path / "in2")) == want4
    assert "schedule: relative" in (tmp_path / "in2" / "config.yaml").read_text()  # (recorded from now on)


def test_four_ranks_heterogeneous_with_attacker_and_defense_match_in_process(tmp_path, tiny_model_dir, tiny_model_dir_b):
    models = f"swarm.models=[{{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}, {{name: {tiny_model_dir}}}, {{name: {tiny_model_dir_b}}}]"
    args = [models, "swarm.nodes=4", "swarm.mode=vertical", "swarm.prompts_per_round=4", "swarm.malicious=[3]",
            "attack.kind=injection", "attack.poisoned_per_group=2", "defenses=[{kind: reward_outlier}]", "rounds=2",
            "swarm.protocol.enforce_length=false", *COMMON]  # (the poisons must reach the defense across processes)
    want = in_process(tmp_path, "in", args)
    results, run_dir = distributed(tmp_path, "d", 4, args)
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    got = comparable(read_metrics(run_dir))
    assert got == want
    first = got[0]
    assert first["defense/poisoned_received"] == 2  # labels crossed processes: poisoned ones are known
    assert {"train/loss/node0", "train/loss/node1", "train/loss/node2", "eval/accuracy/node2"} <= first.keys()
    assert first["train/grad_norm/node0"] > 0


@pytest.mark.slow
def test_bad_messages_are_rejected_with_reasons_and_the_round_completes(tmp_path, tiny_model_dir):
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=2", "rounds=2", *COMMON, B2]
    results, run_dir = distributed(tmp_path, "d", 2, args, scenario="craft:1")
    assert [r.returncode for r in results] == [0, 0]
    log = results[0].output
    for reason in ("consistency: text is not the decoding of its token ids",
                   "vocabulary: token id 405 outside [0, 400)",
                   "size: text has 100000 characters (limit 8192)",
                   "identity: claims node 0 but is signed by node 1",
                   "special token: text contains '<|im_end|>'",
                   "schema: expected an object, got str"):
        assert re.search(rf"rejected message from node 1( \([\w-]+\))?: {re.escape(reason)}", log), reason
    records = read_metrics(run_dir)
    assert [r["round"] for r in records] == [0, 1, 2]
    # the four node 1 signed for its own slots of the round; its forgery of node 0's slot (identity), as the schema
    # refusal, is named in peers.jsonl only (not authenticated for its slot: docs/protocol.md, "The round's record")
    assert records[0]["swarm/invalid"] == 4 and "swarm/invalid_transport" not in records[0]
    # node 0's, node 1's two real ones and the four it signed for its slots; node 1's two other real ones are in its
    # relay only, and a relay never vouches for its reporter's own messages (it could show them to some readers only)
    assert records[0]["swarm/messages"] == 4 + 2 + 4
    assert records[1]["swarm/messages"] == 8 and records[1]["swarm/invalid"] == 0
    peers = [json.loads(line) for line in (run_dir / "peers.jsonl").read_text().splitlines()]
    assert peers[0]["peers"]["1"]["rejected"] == {"consistency": 1, "vocabulary": 1, "size": 1, "identity": 1,
                                                  "special token": 1}
    assert peers[0]["peers"]["1"]["transport"] == {"schema": 1} and peers[0]["peers"]["0"]["rejected"] == {}
    assert peers[1]["peers"]["1"] == {"received": 4, "accepted": 4, "rejected": {}, "defense": {}, "duplicates": 0,
                                      "transport": {}}


def _peers(run_dir):
    return [json.loads(line) for line in (run_dir / "peers.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_rank_serving_messages_in_another_ranks_name_is_refused_by_signature(tmp_path, tiny_model_dir):
    """Rank 1 serves, beside its own, messages claiming rank 2 (signed by 1, and one unsigned): every reader
    refuses them, attributed to the key that signed them (the unsigned one to the server that served it),
    and uses rank 2's own messages (the metrics are the unforged run's)."""
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", *COMMON, B2, "rounds=2"]
    want = in_process(tmp_path, "in", args)
    results, run_dir = distributed(tmp_path, "d", 4, args, scenario="forge:1:2")
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    got = comparable(read_metrics(run_dir))
    assert got == want  # every key: the forgeries are named in peers.jsonl only (before: swarm/messages 11, invalid 3)
    peers = _peers(run_dir)[0]["peers"]
    assert peers["1"] == {"received": 4, "accepted": 2, "rejected": {"identity": 2}, "defense": {}, "duplicates": 0,
                          "transport": {"signature": 1}}
    assert peers["2"]["accepted"] == 2 and peers["2"]["rejected"] == {}
    assert peers["unsigned"]["rejected"] == {"signature": 1}
    for r in (results[0], results[3]):  # both honest readers of rank 1's server
        assert "rejected message from node 1 (train-" in r.output and "claims node 2 but is signed by node 1" in r.output


@pytest.mark.slow
def test_a_rank_replacing_another_ranks_payload_cannot_keep_it_from_anyone(tmp_path, tiny_model_dir):
    """Rank 1 writes forged messages over rank 2's round-0 key in the store; rank 3 reads late. Round data is
    served by each rank's own server (peerserve), so nobody reads that key: the metrics are the unforged run's."""
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", *COMMON, B2, "rounds=2", "swarm.timeout_s=30"]
    want = in_process(tmp_path, "in", args)
    results, run_dir = distributed(tmp_path, "d", 4, args, scenario="overwrite:1:2,slowread:3:3")
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    assert "rejected message" not in "".join(r.output for r in results)
    assert comparable(read_metrics(run_dir)) == want


@pytest.mark.slow
def test_equivocation_is_detected_and_reported_by_every_honest_node(tmp_path, tiny_model_dir):
    """Node 1 shows nodes 0 and 3 one set of signed messages and (slow) node 2 another: every honest
    node sees the proof and drops node 1's messages of that round."""
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", *COMMON, B2, "rounds=2", "swarm.timeout_s=30"]
    results, run_dir = distributed(tmp_path, "d", 4, args, scenario="equivocate:1,slowread:2:3")
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    for r in (results[0], results[2], results[3]):
        assert "rejected every message from node 1 in round 0: equivocation: node 1 signed 2 different" in r.output
    got = read_metrics(run_dir)
    assert got[0]["swarm/messages"] == 6 and got[1]["swarm/messages"] == 8  # round 1: node 1 honest again
    assert _peers(run_dir)[0]["peers"]["1"]["transport"] == {"equivocation": 1}


@pytest.mark.slow
def test_a_reencoded_signature_replay_bans_nobody_honest(tmp_path, tiny_model_dir):
    """Issue 31: rank 3 re-sends every peer's messages of the round with the signature in upper case, ban_after=2.
    It used to count as a second message for each honest slot (a strike each: the honest ranks banned each
    other in round 0). Now each is malformed, refused unverified, struck against nobody, delivered by key 3."""
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", *COMMON, B2, "rounds=2", "swarm.protocol.ban_after=2"]
    want = in_process(tmp_path, "in", args)
    results, run_dir = distributed(tmp_path, "d", 4, args, scenario="respell:3")
    assert [r.returncode for r in results] == [0, 0, 0, 0], results[0].output[-3000:]
    assert not (run_dir / "bans.json").exists() or json.loads((run_dir / "bans.json").read_text())["banned"] == {}
    for p in _peers(run_dir):
        assert p["banned"] == {} and all(p["peers"][n]["rejected"] == {} for n in "0123")
        assert p["peers"]["unsigned"]["rejected"] == {"malformed": 6} and p["peers"]["3"]["transport"] == {"malformed": 6}
    # every key: the 6 re-spelled copies are named in peers.jsonl only (before: swarm/messages and swarm/invalid counted them)
    assert comparable(read_metrics(run_dir)) == want


@pytest.mark.slow
def test_dead_peer_is_named_and_the_others_abort(tmp_path, tiny_model_dir):
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", "swarm.malicious=[1]", *ATTACK, *COMMON, B2, "rounds=4"]
    want = in_process(tmp_path, "in", args)
    results, run_dir = distributed(tmp_path, "d", 4, [*args, "swarm.timeout_s=5"], scenario="die:3:2")
    assert results[3].returncode == 1
    for r in results[:3]:
        assert r.returncode == 3, r.output[-2000:]
        assert "dgrpo: error: node 3 sent nothing for exchange 'r2' within swarm.timeout_s=5s" in r.output
        assert r.seconds < 60
    assert comparable(read_metrics(run_dir)) == want[:2]  # rounds 0-1 of 4 ranks equal the in-process ones


@pytest.mark.slow
def test_stalled_peer_is_dropped_and_the_swarm_continues(tmp_path, tiny_model_dir):
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", "swarm.malicious=[1]", *ATTACK, *COMMON, B2, "rounds=4",
            "swarm.timeout_s=4", "swarm.on_peer_failure=continue"]
    results, run_dir = distributed(tmp_path, "d", 4, args, scenario="stall:3:2:7")
    assert [r.returncode for r in results[:3]] == [0, 0, 0]
    assert "node 3 sent nothing for exchange 'r2' within swarm.timeout_s=4s" in results[1].output
    assert results[3].returncode == 3  # it woke up excluded and left, saying so
    # (it learns it at its r2 post when its peers' accusations are read by then, else at eq2: accusations are read
    # in the ledger's threads, a post waits for them at most 0.1 s, review r31j F3)
    assert ("node 3 was declared failed by its peers in exchange 'r2'" in results[3].output or
            "exchange 'eq2': nodes [0, 1, 2] did not receive its messages within swarm.timeout_s=4s (stalled?); "
            "leaving the swarm" in results[3].output), results[3].output[-1500:]
    records = read_metrics(run_dir)
    assert [r["round"] for r in records] == [0, 1, 2, 3, 4]
    assert records[1]["swarm/messages"] == 8 and "swarm/nodes_alive" not in records[1]
    for rec in records[2:4]:  # groups hold the 3 completions received; node 3 is absent, not scored 0
        assert rec["swarm/messages"] == 6
        assert rec["train/reward/node3"] is None and rec["train/reward/node1"] is not None
    # node 3 is out once the main has read its peers' accusations (in the ledger's threads, never waited for in the
    # round's loop): by round 2's record when they came by then, else from round 3 on (CI under load: absent in r2)
    assert records[2].get("swarm/nodes_alive", 3) == 3 and records[3]["swarm/nodes_alive"] == 3
    assert records[2]["time/exchange"] < 4 + 2.5  # round 2 ends at the deadline (+ the quorum's poll in eq2)
    assert records[3]["time/exchange"] < 3  # round 3 no longer waits the 4 s for node 3


@pytest.mark.slow
def test_a_stalled_node_shown_junk_accusations_by_one_rank_still_learns_it_was_expelled(tmp_path, tiny_model_dir):
    """Review r31j F3: as above, node 3 stalls past timeout_s in round 2, and rank 1 serves node 3 junk as its
    accusations from round 0 (node 3 names it and never reads its accusations again). Before, node 3 counted only
    nodes 0 and 2 of the quorum [0, 1, 2] that expelled it (2 of the 3 needed) and went on as if live. Now nodes 0
    and 2 serve the proof of the quorum they counted (its three signed lines): node 3 learns it is out within the
    round and leaves with one line, exit code 3; the others go on without it."""
    args = [f"model.name={tiny_model_dir}", "swarm.nodes=4", "swarm.malicious=[1]", *ATTACK, *COMMON, B2, "rounds=4",
            "swarm.timeout_s=4", "swarm.on_peer_failure=continue"]
    results, run_dir = distributed(tmp_path, "d", 4, args, scenario="stall:3:2:7,accjunk:1:3")
    assert [r.returncode for r in results] == [0, 0, 0, 3], [r.output[-1500:] for r in results]
    assert "accusation: node 1 serves junk as its accusations" in results[3].output
    errors = [x for x in results[3].output.splitlines() if x.startswith("dgrpo: error:")]
    assert len(errors) == 1 and re.search(r"node 3 was declared failed by its peers in exchange '(r2|eq2)': nodes "
                                          r"\[0, 1, 2\]", errors[0]), errors
    records = read_metrics(run_dir)
    assert [r["round"] for r in records] == [0, 1, 2, 3, 4]
    assert records[3]["swarm/nodes_alive"] == 3 and records[3]["swarm/messages"] == 6

    results, _ = distributed(tmp_path, "d", 2, [f"model.name={tiny_model_dir}", "swarm.nodes=4", *COMMON, B2])
    assert [r.returncode for r in results] == [2, 2]
    assert "swarm.nodes=4 but 2 processes were launched" in results[0].output


# ---------------------------------------------------------------------- in-process unit checks
def _pair(timeout_s=0.3, on_peer_failure="abort"):
    store = dist.HashStore()
    return [DistributedTransport(store, k, 2, honest=[0, 1], timeout_s=timeout_s, on_peer_failure=on_peer_failure,
                                 max_messages=4) for k in (0, 1)]


def test_exchange_agrees_on_a_missing_peer_and_excludes_it_later():
    a, b = _pair(on_peer_failure="continue")
    with pytest.raises(PeerFailure, match="node 1"):
        _pair()[0].exchange("r0", b"x")  # abort mode names the missing peer
    assert a.exchange("r0", b"a") == {0: b"a"}  # b never posted: declared failed for everyone
    assert a.failed == {1: "r0"} and a.alive == {0} and not b.is_main and a.is_main
    b.post("r0", b"late")  # (a swarm of 2: node 0's lone accusation is its word against node 1's; node 1 takes
    assert b.alive == {1} and b.failed == {0: "r0"}  # node 0 for the failed peer and goes on alone, task h31k; before:
    assert [n for n, why in b.rejected if why.startswith("accusation: node 0 accused node 1")] == [0]  # it left)
    assert a.exchange("r1", b"a2") == {0: b"a2"}  # and is no longer waited for


def test_decode_refuses_bad_payloads_without_raising():
    t = _pair()[0]
    msg = Message(1, 0, "p", 0, "hi", (1, 2), 7, "tok")
    good = json.loads(t.encode([msg]))
    assert t.decode(1, t.encode([msg])) == [msg]
    assert t.decode(1, b"\xff not json") == [] and t.rejected[-1][1].startswith("schema: payload is not JSON")
    assert t.decode(1, b"[1, 2]") == [] and "'messages' list" in t.rejected[-1][1]
    # The store key does not decide identity (any rank can write any key): the signature does, in receive.
    assert t.decode(0, json.dumps(good).encode()) == [msg]
    junk = b"DGRPO1ffffffff{" + frame(t.encode([msg])) + b"\xff" + frame(b"[1]")
    assert t.decode(1, junk) == [msg]  # a frame claiming too much, bytes and a non-object around a good one
    many = {"messages": good["messages"] * 6}
    assert len(t.decode(1, json.dumps(many).encode())) == 4 and "limit 4" in t.rejected[-1][1]


def test_a_node_stopping_on_an_error_is_not_waited_for():
    from dgrpo.swarm.identity import Roster, SignatureVerifier, Signer, generate_keys
    from dgrpo.transports import departures

    a, b = _pair(timeout_s=30)
    keys = generate_keys(2)  # (a leave mark counts only signed by its node: the keys exist from check_startup on)
    for t in (a, b):
        t.signed_store.signer, t.signed_store.keys = Signer(t.rank, keys[t.rank], "run|fp"), SignatureVerifier(Roster.of(keys), "run|fp")
    b._exit()  # what runs at interpreter exit after an exception
    start = time.monotonic()
    assert a.exchange("r0", b"a") == {0: b"a"}  # (its leave mark noted: out at the relay eq0 that carries it)
    relay = json.dumps({"departed": departures.relayed_departures(a.chan, 2)}).encode()
    with pytest.raises(PeerFailure, match="node 1 said \\(signed\\) it left the swarm \\(its signed leave mark\\), as "
                       "node 0's relay carries it; node 0 stops too in exchange 'eq0'"):
        departures.act(a, "eq0", {0: relay})
    assert time.monotonic() - start < 5


def test_hostile_json_is_refused():
    t = _pair()[0]
    assert t.decode(1, b"[" * 100_000) == [] and "RecursionError" in t.rejected[-1][1]
    msg = Message(1, 0, "p", 0, "hi", (1, 2), 7, "tok")
    payload = json.dumps({"messages": [msg.to_dict()], "labels": [["poisoned"]]}).encode()
    assert t.decode(1, payload) == [msg] and msg.key not in t.labels  # (not a label: Swarm.label's default decides)


def test_only_a_verified_message_from_its_signer_s_server_sets_its_label():
    """Review r31c F2: a rank served unsigned copies of honest nodes' next-round slot keys labelled
    ``poisoned``; they were refused as unsigned, but decode had kept the first label a key got, so the
    honest messages later counted as poisoned in the metrics. Here node 0 serves node 1's slot unsigned,
    then node 1's genuine signed message (read from node 1's server), both labelled ``poisoned``: neither
    sets a label; node 1's own serving of it does (``honest``)."""
    from dgrpo.swarm.identity import Roster, SignatureVerifier, Signer, generate_keys

    keys = generate_keys(3)
    t = DistributedTransport(dist.HashStore(), 2, 3, honest=[0, 1, 2], timeout_s=0.3, max_messages=4)
    t.verifier = SignatureVerifier(Roster.of(keys), "run|fp")
    real = Signer(1, keys[1], "run|fp").sign(Message(1, 1, "p", 0, "hi", (1, 2), 7, "tok"))

    def served(msg, label):
        return json.dumps({"messages": [msg.to_dict()], "labels": [label]}).encode()

    fake = Message(1, 1, "p", 0, "x", (3,), 7, "tok", context="run|fp")
    assert t.decode(0, served(fake, "poisoned")) == [fake]  # parsed here; refused as unsigned in receive
    assert real.key not in t.labels
    assert t.decode(0, served(real, "poisoned")) == [real]  # a genuine message served by another rank
    assert real.key not in t.labels
    assert t.decode(1, served(real, "honest")) == [real] and t.labels[real.key] == "honest"
