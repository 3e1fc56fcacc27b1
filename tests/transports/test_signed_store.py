"""Nothing a peer writes to the c10d store is trusted unsigned (issue 31, must-have 5): server addresses and
leave marks. In-process ranks on one HashStore; ``test_store_attacks.py`` plays the same in 4-rank runs."""

import json
import logging
import threading
import time

import pytest

from dgrpo.errors import PeerFailure


def _ranks(n=4, timeout_s=5.0, signed_addresses=True, keys=None):
    """n transports on one store, as after the start-up check: signers, verifier and each rank's launch
    nonce (fresh per call: a call with the ``keys`` of an earlier one is a relaunch of the same run)."""
    import secrets

    import torch.distributed as dist

    from dgrpo.swarm.identity import Roster, SignatureVerifier, Signer, generate_keys
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.peerserve import AddressKeys

    store, keys = dist.HashStore(), keys or generate_keys(n)
    roster, nonces = Roster.of(keys), {k: secrets.token_hex(16) for k in range(n)}
    verifier = SignatureVerifier(roster, "run|fp")
    ts = [DistributedTransport(store, k, n, honest=range(n), timeout_s=timeout_s, on_peer_failure="continue",
                               keys=AddressKeys(k, keys[k], roster, "fp") if signed_addresses else None)
          for k in range(n)]
    for t in ts:
        t._closed, t.ledger.ttl_s = True, 0.0
        t.signed_store.signer, t.signed_store.keys = Signer(t.rank, keys[t.rank], "run|fp"), verifier
        t.signed_store.nonce, t.signed_store.nonces = nonces[t.rank], dict(nonces)
    return ts, keys


def _forged(keys, signer: int, owner: int, addr: str) -> bytes:
    """An address record for ``owner`` signed with ``signer``'s key."""
    return json.dumps({"addr": addr, "sig": keys[signer].sign(f"dgrpo/addr|{owner}|{addr}||fp".encode()).hex()}).encode()


def test_an_address_not_signed_by_its_owner_is_refused_and_named(caplog):
    """Node 3 writes over node 0's address record in the store before node 1 reads it, pointing it at its own
    server: signed with its own key, signed by nobody, junk. Node 1 refuses each, naming node 3 for the
    signed one (``unsigned`` otherwise), and takes node 0's record once node 0 puts it back."""
    ts, keys = _ranks()
    store = ts[3].store
    store.set("addr/0", _forged(keys, 3, 0, ts[3].chan.address))
    with caplog.at_level(logging.WARNING):
        assert ts[1].chan.address_of(0) is None
    assert ts[1].chan.bad_addr[0] == "is signed by node 3, not node 0"
    assert ("node 1: refused the server address of node 0 in the store (addr/0): it is signed by node 3, not node 0"
            in caplog.text)
    store.set("addr/0", json.dumps({"addr": ts[3].chan.address, "sig": "ab" * 64}).encode())
    assert ts[1].chan.address_of(0) is None
    assert ts[1].chan.bad_addr[0] == "is not signed by node 0 (unsigned: its writer cannot be named)"
    store.set("addr/0", b"127.0.0.1:1")
    assert ts[1].chan.address_of(0) is None and ts[1].chan.bad_addr[0].startswith("is not a signed address record")
    store.set("addr/0", _forged(keys, 0, 0, ts[3].chan.address).replace(b'"sig": "', b'"sig": "0x'))  # re-spelled
    assert ts[1].chan.address_of(0) is None and ts[1].chan.bad_addr[0].startswith("is not signed by node 0")
    ts[0].chan.reassert()
    assert ts[1].chan.address_of(0) == ts[0].chan.address


def test_an_address_record_of_an_earlier_launch_is_refused_as_stale_and_never_blamed_on_its_owner(caplog):
    """Review r31c F3: node 3 keeps node 0's signed address record of launch A and writes it back in launch B
    (same roster and config). The signature is node 0's, but the server there (closed) cannot answer a
    challenge for that record's nonce: node 1 refuses it as stale in one line and stops at its start-up
    deadline saying so, never "node 0 sent nothing", and accuses nobody; once node 0 puts its own record
    back, node 1 reads node 0's value."""
    old, keys = _ranks()
    kept = old[3].store.get("addr/0")
    for t in old:
        t.chan.close()
    ts, _ = _ranks(keys=keys)
    ts[0].post("role", b"node 0")
    ts[3].store.set("addr/0", kept)
    ts[1].wait.limit_name, ts[1].wait.timeout_s = "swarm.startup_timeout_s", 1.0
    with caplog.at_level(logging.WARNING), pytest.raises(PeerFailure) as err:
        ts[1].collect("role", [0])
    stale = (f"is signed by node 0 but its server at {old[0].chan.address} does not answer for that record's "
             "launch (a record of an earlier run or launch, or a dead server; not counted against node 0)")
    assert str(err.value) == (f"node 1 refused the server address of node 0 in the store (addr/0): it {stale}; "
                              "another rank wrote over it (until swarm.startup_timeout_s=1s); stopping before round 0")
    assert [r.getMessage() for r in caplog.records if "server address" in r.getMessage()] == [
        f"node 1: refused the server address of node 0 in the store (addr/0): it {stale}"]
    assert ts[1].rejected == [] and "sent nothing" not in caplog.text  # nobody accused, node 0 not blamed
    ts[0].chan.reassert()
    ts[1].wait.timeout_s = 5.0
    assert ts[1].collect("role", [0]) == {0: b"node 0"}


def test_an_address_overwritten_once_at_start_up_is_put_back_and_the_exchange_goes_on():
    """Node 0's record is overwritten (signed by node 3) before node 1 reads it: node 0, polling its own
    start-up exchange, puts its record back, and node 1 reads node 0's value, not node 3's."""
    ts, keys = _ranks()
    ts[3].chan.set("role/data/0", b"attacker")  # what node 3's server would serve as node 0's value
    ts[0].post("role", b"node 0")
    ts[3].store.set("addr/0", _forged(keys, 3, 0, ts[3].chan.address))
    got = {}
    owner = threading.Thread(target=lambda: got.update(zero=ts[0].collect("role", [1])))
    ts[1].post("role", b"node 1")
    owner.start()
    got["one"] = ts[1].collect("role", [0])
    owner.join()
    assert got == {"one": {0: b"node 0"}, "zero": {1: b"node 1"}}
    assert ts[1].chan.addrs[0] == ts[0].chan.address


def test_an_address_kept_overwritten_stops_the_start_up_in_one_line_naming_the_signer():
    """Node 3 keeps node 0's record overwritten (node 0 is not there to put it back): node 1 stops at its
    start-up deadline with one line naming node 3, not with node 0 "sent nothing"."""
    ts, keys = _ranks()
    ts[3].store.set("addr/0", _forged(keys, 3, 0, ts[3].chan.address))
    ts[1].wait.limit_name, ts[1].wait.timeout_s = "swarm.startup_timeout_s", 1.0
    start = time.monotonic()
    with pytest.raises(PeerFailure) as err:
        ts[1].collect("role", [0])
    assert time.monotonic() - start < 3
    assert str(err.value) == ("node 1 refused the server address of node 0 in the store (addr/0): it is signed by "
                              "node 3, not node 0; another rank wrote over it (until swarm.startup_timeout_s=1s); "
                              "stopping before round 0")


def test_without_a_roster_file_the_records_are_taken_unsigned():
    ts, _ = _ranks(signed_addresses=False)
    assert ts[1].chan.address_of(0) == ts[0].chan.address


def test_junk_written_first_does_not_keep_a_leave_mark_out():
    """Node 2 writes junk under node 1's round-0 status key before node 1 stops on an error; node 1's signed
    leave mark is appended behind it, so node 0 stops waiting at once (the old compare_set left the junk
    in place and node 0 waited its whole timeout_s=30)."""
    ts, _ = _ranks(n=3, timeout_s=30)
    ts[2].store.set("r0/status/1", b"failed")
    ts[1].signed_store.leave(["r0"])
    start = time.monotonic()
    assert ts[0].collect("r0", [1]) == {} and time.monotonic() - start < 3
    assert ts[0].failed == {1: "r0"}


def test_a_leave_mark_not_signed_by_its_node_is_refused_and_named_once(caplog):
    ts, _ = _ranks(n=3)
    far = time.monotonic() + 5
    ts[2].store.append("r5/status/1", f"left:{ts[2].signed_store.sign('left|r5|1')}\n".encode())  # node 2 signs node 1's
    ts[2].store.append("r6/status/1", b"left:\n")
    with caplog.at_level(logging.WARNING):
        assert ts[0].signed_store.status("r5", 1, far) is None and ts[0].signed_store.status("r5", 1, far) is None
        assert ts[0].signed_store.status("r6", 1, far) is None
    lines = [r.getMessage() for r in caplog.records if "leave mark" in r.getMessage()]
    assert lines == ["node 0: refused a leave mark for node 1 in the store (r5/status/1): signed by node 2, not node 1",
                     "node 0: refused a leave mark for node 1 in the store (r6/status/1): not signed by node 1 "
                     "for this launch (unsigned, or a mark of an earlier run or launch: its writer cannot be named)"]
    ts[1].signed_store.leave(["r5"])
    assert ts[0].signed_store.status("r5", 1, far) == "left"


def test_a_leave_mark_of_an_earlier_launch_of_the_same_run_does_not_drop_its_node(caplog):
    """Review r31c F4: in launch A node 1 stops on an error and signs its leave mark for r1; node 3 keeps
    it and writes it back in launch B (same roster, name and config: a rerun or a resume). Node 1's
    signature is genuine but for launch A's nonce: node 0 waits for node 1 to its deadline (before, it
    dropped node 1 at once, with no accusation and no quorum), names the mark once, and node 1 stays in."""
    ts, keys = _ranks(n=4, timeout_s=0.6)
    ts[1].signed_store.leave(["r1"])
    kept = ts[3].store.get("r1/status/1")
    again, _ = _ranks(n=4, timeout_s=0.6, keys=keys)
    again[3].store.set("r1/status/1", kept)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert again[0].collect("r1", [1]) == {}
    assert time.monotonic() - start >= 0.55  # waited to the deadline: the old mark ended nothing
    assert 1 in again[0].alive and 1 not in again[0].failed  # one accusation (node 0's) expels nobody
    lines = [r.getMessage() for r in caplog.records if "leave mark" in r.getMessage()]
    assert lines == ["node 0: refused a leave mark for node 1 in the store (r1/status/1): not signed by node 1 "
                     "for this launch (unsigned, or a mark of an earlier run or launch: its writer cannot be named)"]
    again[1].signed_store.leave(["r2"])  # the same node's mark of this launch ends the wait at once
    assert again[0].signed_store.status("r2", 1, time.monotonic() + 5) == "left"


# ---------------------------------------------------------------------- the check-in (transports/checkin.py)
def _check_ins(n=4, timeout_s=1.0, go_on=True, ranks=None, store=None, keys=None):
    """Run ``check_in`` for ``ranks`` (default all) in threads on one HashStore: rank → Joined or the exception."""
    import torch.distributed as dist

    from dgrpo.swarm.identity import Roster, generate_keys
    from dgrpo.transports.checkin import check_in
    from dgrpo.transports.peerserve import AddressKeys

    store, keys = store or dist.HashStore(), keys or generate_keys(n)
    out = {}

    def one(k):
        try:
            out[k] = check_in(store, k, n, timeout_s, go_on=go_on, keys=AddressKeys(k, keys[k], Roster.of(keys), "fp"))
        except Exception as err:  # noqa: BLE001 (returned to the test)
            out[k] = err

    threads = [threading.Thread(target=one, args=(k,)) for k in (range(n) if ranks is None else ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out, store, keys


def _signed_view(keys, by: int, absent: list[int]) -> bytes:
    sig = keys[by].sign(f"dgrpo/join/view|{by}|{','.join(map(str, absent))}|fp".encode()).hex()
    return ("\n" + json.dumps({"absent": absent, "sig": sig}) + "\n").encode()


def test_a_lone_abandoned_list_written_first_makes_nobody_leave_and_names_its_writer(caplog):
    """Node 3 writes, before anyone checks in, the old unsigned list naming node 1 (``dgrpo/join/abandoned``),
    its own signed view that node 1 is absent, and a view in node 2's name signed with its key; then it checks
    in like the others. Node 1 stays (before: it left, "started after its peers stopped waiting"), every rank
    decides that all joined, and node 3 is named for the lone view and the forgery (peers.jsonl notes)."""
    import torch.distributed as dist

    from dgrpo.swarm.identity import generate_keys

    store, keys = dist.HashStore(), generate_keys(4)
    store.set("dgrpo/join/abandoned", b"1")
    store.append("dgrpo/join/vote/3", _signed_view(keys, 3, [1]))
    store.append("dgrpo/join/3", ("\n" + keys[3].sign(b"dgrpo/join|3|fp").hex() + "\n").encode())  # (its own mark)
    forged = keys[3].sign(b"dgrpo/join/view|2|1|fp").hex()
    store.append("dgrpo/join/vote/2", json.dumps({"absent": [1], "sig": forged}).encode())
    with caplog.at_level(logging.WARNING):
        out, _, _ = _check_ins(ranks=[0, 1, 2], store=store, keys=keys)
    assert {k: j.absent for k, j in out.items()} == {0: [], 1: [], 2: []}, out
    for k in (0, 1, 2):
        reasons = [r for w, r in out[k].named if w == 3]
        assert "check-in: refused a check-in view for node 2 in the store: signed by node 3, not node 2" in reasons
        assert ("check-in: node 3 alone found nodes [1] absent at start-up (1 of the 3 views needed); nobody is "
                "left out for it") in reasons
    assert "ignored an unsigned list of absent ranks in the store (dgrpo/join/abandoned" in caplog.text
    out3, _, _ = _check_ins(ranks=[3], store=store, keys=keys)  # node 3 itself goes on too (a quorum saw all)
    assert out3[3].absent == []


def test_a_forged_check_in_mark_is_ignored_and_its_signer_named(caplog):
    """Node 3 writes a check-in mark for node 2 signed with its own key, and an unsigned one for node 1; nodes 1
    and 2 never start. Nodes 0 and 3 do not take the forgeries: they wait out the timeout, and without a
    quorum (2 of the 3 views needed) both stop in one line instead of going on as if all had joined."""
    import torch.distributed as dist

    from dgrpo.swarm.identity import generate_keys

    store, keys = dist.HashStore(), generate_keys(4)
    store.append("dgrpo/join/2", ("\n" + keys[3].sign(b"dgrpo/join|2|fp").hex() + "\n").encode())
    store.append("dgrpo/join/1", b"\n1\n")
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        out, _, _ = _check_ins(ranks=[0, 3], timeout_s=0.5, store=store, keys=keys)
    assert "node 0: check-in: refused a check-in mark for node 2 in the store: signed by node 3, not node 2" in caplog.text
    assert ("node 0: check-in: refused a check-in mark for node 1 in the store: not signed by node 1 for this config "
            "(a rank of another config, or unsigned: its writer cannot be named)") in caplog.text
    assert 0.9 < time.monotonic() - start < 10
    for k in (0, 3):
        assert isinstance(out[k], PeerFailure), out
        assert "the ranks' views of who is absent (node 0: [1, 2], node 3: [1, 2]) did not agree within" in str(out[k])
    out, _, _ = _check_ins(ranks=[0], timeout_s=0.5, store=dist.HashStore(), keys=keys, go_on=False)
    assert str(out[0]) == ("nodes [1, 2, 3] did not join within swarm.startup_timeout_s=0.5s (not started, or started "
                           "too late): start every rank within it")


def test_a_rank_started_after_a_quorum_gave_up_leaves_and_the_others_go_on():
    """Nodes 0-2 time out on node 3 (a quorum of 3 views); node 3 starts afterwards and leaves in one line."""
    out, store, keys = _check_ins(ranks=[0, 1, 2], timeout_s=0.5)
    assert {k: j.absent for k, j in out.items()} == {0: [3], 1: [3], 2: [3]}
    late, _, _ = _check_ins(ranks=[3], timeout_s=0.5, store=store, keys=keys)
    assert str(late[3]) == ("node 3 started after its peers stopped waiting for it (swarm.startup_timeout_s=0.5s): "
                            "start every rank within it")


def test_every_rank_checks_in_at_once_even_behind_junk_written_first():
    """Another process wrote 100 junk lines under node 1's mark and view keys first (more than a reader takes):
    node 1 writes its own over them, and all four decide at once that every rank joined."""
    import torch.distributed as dist

    store = dist.HashStore()
    for key in ("dgrpo/join/1", "dgrpo/join/vote/1"):
        store.set(key, b"junk\n" * 100)
    start = time.monotonic()
    out, _, _ = _check_ins(ranks=[0, 1, 2, 3], timeout_s=5, store=store)
    assert time.monotonic() - start < 4
    assert {k: (j.absent, j.named) for k, j in out.items()} == {k: ([], []) for k in range(4)}


def test_a_rank_of_another_config_stops_the_check_in_at_once_naming_it():
    """Node 2 runs another config (fingerprint "other"): its marks cannot verify for the others, so before the
    config claim they waited out swarm.startup_timeout_s (30 s here) and then called it missing. Its signed
    claim names it within seconds, on every rank; a claim for node 2 that node 3 signs with its own key for
    another fingerprint is ignored (node 2 is let in)."""
    import torch.distributed as dist

    from dgrpo.swarm.identity import Roster, generate_keys
    from dgrpo.transports.checkin import check_in
    from dgrpo.transports.peerserve import AddressKeys

    def run(fps, store, keys):
        out = {}

        def one(k):
            try:
                out[k] = check_in(store, k, 4, 30.0, go_on=True, keys=AddressKeys(k, keys[k], Roster.of(keys), fps[k]))
            except Exception as err:  # noqa: BLE001 (returned to the test)
                out[k] = err
        threads = [threading.Thread(target=one, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return out

    keys = generate_keys(4)
    start = time.monotonic()
    out = run(["fp", "fp", "other", "fp"], dist.HashStore(), keys)
    assert time.monotonic() - start < 15
    for k in (0, 1, 3):
        assert isinstance(out[k], PeerFailure) and str(out[k]).startswith(f"node 2 runs another config than node {k}"), out
    assert isinstance(out[2], PeerFailure) and "runs another config than node 2" in str(out[2])

    from dgrpo.transports.checkin import CheckIn

    store = dist.HashStore()
    reader = CheckIn(store, 0, 4, 30.0, True, keys=AddressKeys(0, keys[0], Roster.of(keys), "fp"))
    for by, fp in [(3, "other"), (2, "fp")]:  # forged by node 3; node 2's own claim of this config
        store.set("dgrpo/join/config/2", json.dumps({"fp": fp, "sig": keys[by].sign(f"dgrpo/join-config|2|{fp}".encode()).hex()}).encode())
        reader._other_config(2)  # no stop
    store.set("dgrpo/join/config/2", json.dumps({"fp": "other", "sig": keys[2].sign(b"dgrpo/join-config|2|other").hex()}).encode())
    with pytest.raises(PeerFailure, match="node 2 runs another config than node 0"):
        reader._other_config(2)
