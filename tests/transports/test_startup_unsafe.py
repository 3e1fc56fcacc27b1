"""Without a roster file (``swarm.unsafe_key_exchange=true``, the mode of every other 4-rank launch test) the start-up
rules hold as with one once the keys are exchanged at the check-in (review r31h F6). 4 ranks on loopback.

Before, ``PeerChannel.announce_stop`` did nothing without a roster file, so a rank that stopped at start-up was
silent: its peers, already past the ready barrier, expelled it as ``missing payload`` and trained on (a split
swarm), or called it "sent nothing"; a rank stopping before the key gather left the others with a false "roster
lacks nodes". Now each rank's fresh public key travels in its signed address record (``AddressKeys.fresh``), so
its stop notice is signed and every rank stops in one line naming the rank that made it stop.
"""

import json

import pytest
from distributed_helpers import RELATIVE, launch
from test_startup_split import _trained
from test_store_attacks import ARGS, one_error_line

from dgrpo.swarm.identity import Roster, public_hex
from dgrpo.transports.peerserve import AddressKeys, PeerChannel


def _chans(n: int = 3):
    """``n`` ranks' servers on one HashStore (under ``dgrpo/``), each with a fresh key and no roster file."""
    import torch.distributed as dist

    store = dist.PrefixStore("dgrpo", dist.HashStore())
    return store, [PeerChannel(k, store, keys=AddressKeys.fresh(k, "fp", n)) for k in range(n)]


def test_each_rank_learns_its_peers_keys_from_their_address_records_and_keeps_the_first():
    """Without a roster file a reader learns node k's key from k's signed address record once k's server answers
    a challenge for it; a record written later in k's name with another key changes nothing, and a signature by a
    key not learned yet is nobody's (never an error)."""
    store, chans = _chans()
    assert chans[0].keys.roster.keys == {0: public_hex(chans[0].keys.key)}
    assert chans[0].address_of(1) == chans[1].address and chans[0].launches[1] == chans[1].nonce
    assert chans[0].keys.roster.keys[1] == public_hex(chans[1].keys.key)
    assert chans[0].keys.signed_by(2, "x", chans[2].keys.sign("x")) is None  # (node 2 not learned yet)
    impostor = AddressKeys.fresh(2, "fp", 3)  # (another process writing node 2's record with its own key)
    rec = json.loads(impostor.record(chans[2].address, chans[2].nonce))
    store.set("addr/2", json.dumps(rec).encode())
    assert chans[0].address_of(2) is None  # (node 2's server does not answer for the impostor's key)
    chans[2].reassert()
    assert chans[0].address_of(2) == chans[2].address
    assert chans[0].keys.signed_by(2, "x", chans[2].keys.sign("x")) == 2
    other = AddressKeys(0, None, Roster({2: public_hex(impostor.key)}), "fp", 3)  # (the impostor's key for node 2)
    assert chans[0].keys.learn(2, other) is False  # (the first key learned is kept)
    assert chans[0].keys.roster.keys[2] == public_hex(chans[2].keys.key)


def test_a_rank_that_stops_at_start_up_without_a_roster_file_says_why_signed():
    """Review r31h F6: ``announce_stop`` returned at once without a roster file, so a rank stopping at start-up was
    silent and its peers called it "sent nothing" or expelled it. Now its notice is signed with its exchanged key and
    every peer that resolved it reads it; one pushed in its name with another key is dropped."""
    store, chans = _chans()
    for c in chans:
        for k in range(3):
            assert c.address_of(k) is not None
    why = "node 3's ready confirmation names launch 0123…"
    chans[1].announce_stop(why)
    assert chans[0].stop_of(1) == why and chans[2].stops == {1: why}
    other = AddressKeys.fresh(2, "fp", 3)  # (a stop notice for node 2 signed by another key)
    forged = json.dumps({"why": "x", "nonce": chans[2].nonce,
                         "sig": other.sign(f"stop|2|x|{chans[2].nonce}")})
    store.set("stop/2", forged.encode())
    assert chans[0].stop_of(2) is None


def _run(tmp_path, model, scenario, *extra, name="d", timeout=120):
    named = [f"name={name}"] if name else []
    args = ["run", RELATIVE, f"model.name={model}", *ARGS, f"out_dir={tmp_path}", *named, "swarm.transport=distributed", *extra]
    assert "swarm.unsafe_key_exchange=true" in args and not any("roster" in a for a in args)
    return launch(4, args, scenario=scenario, timeout=timeout, log_dir=str(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("policy, victim, mode, why", [
    ("continue", 1, "launch", "node 3's ready confirmation names launch "),
    ("abort", 2, "drop", "node 3's ready confirmation names the records of nodes [1, 2, 3], not [0, 1, 2, 3]"),
])
def test_a_ready_confirmation_shown_to_one_rank_stops_every_rank_naming_its_signer(tmp_path, tiny_model_dir, policy,
                                                                                  victim, mode, why):
    """Review r31h F6: rank 3 serves node ``victim`` alone another ready confirmation, signed by its own key for this
    launch. Before: under continue [0, 3, 0, 0], node 1 expelled as ``missing payload`` and the other three trained
    on; under abort every line but node 2's named honest node 2 "sent nothing". Now every rank stops before round
    0: the victim names node 3, the others quote its signed reason."""
    results = _run(tmp_path, tiny_model_dir, f"tworeadies:3:{victim}:{mode}", f"swarm.on_peer_failure={policy}")
    assert [r.returncode for r in results][:3] == [3, 3, 3], [r.output[-2000:] for r in results]
    for r in results[:3]:
        line = one_error_line(r.output)
        said = f"{why}" if r.rank == victim else f"node {victim} stopped at start-up ({why}"
        assert said in line and f"(checked by node {victim})" in line, (r.rank, line)
        assert "sent nothing" not in r.output and "is out of the swarm" not in r.output, (r.rank, r.output[-2000:])
    assert not _trained(tmp_path)


@pytest.mark.slow
def test_a_proposed_name_that_holds_a_run_on_one_machine_names_the_proposer_without_a_roster(tmp_path,
                                                                                          tiny_model_dir):
    """Review r31h F6 (the J4 case without a roster file): node 0 proposes ``prev_run``, which holds a run only in
    node 1's out_dir. Before: [3, 2, 2, 2], nodes 2 and 3 stopped on a false "the roster lacks nodes [1]" (node 1
    never served its key) and node 0 called nodes 2, 3 silent. Now node 1 stops with its signed notice naming node 0
    as the proposer and every other rank quotes it, as with a roster file (test_agreed_run_name)."""
    disk1 = tmp_path / "node1_disk"
    (disk1 / "prev_run").mkdir(parents=True)
    (disk1 / "prev_run" / "metrics.jsonl").write_text('{"round": 0}\n')
    results = _run(tmp_path, tiny_model_dir, f"propose:0:prev_run,outdir:1:{disk1}", "swarm.startup_timeout_s=30",
                   name=None, timeout=150)
    assert [r.returncode for r in results] == [3, 2, 3, 3], [r.output[-2000:] for r in results]
    why = (f"{disk1 / 'prev_run'} already holds a run; pick another name or use `dgrpo resume` (on this machine; the "
           "run name 'prev_run' was proposed by node 0, the lowest live node, whose value every node takes")
    for r in results:
        line = one_error_line(r.output)
        assert why in line and "sent nothing" not in line and "roster lacks" not in line, (r.rank, line)
        assert r.rank == 1 or "node 1 stopped at start-up" in line, (r.rank, line)
        assert r.seconds < 30, (r.rank, r.seconds)  # (stopped on node 1's notice, not at the start-up limit)
    assert (disk1 / "prev_run" / "metrics.jsonl").read_text() == '{"round": 0}\n'
