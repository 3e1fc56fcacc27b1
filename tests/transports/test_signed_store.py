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
    deadline saying so, never "node 0 sent nothing", and accuses nobody. Once node 0 reads node 1 (its request
    carries its own signed record), node 1 reads node 0's value though the store still holds the stale record
    (before, the run could only stop)."""
    old, keys = _ranks()
    kept = old[3].store.get("addr/0")
    for t in old:
        t.chan.close()
    ts, _ = _ranks(keys=keys)
    ts[0].chan.set("role/data/0", b"node 0")  # (served: node 0 has not read node 1, so it pushed it no record)
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
    ts[1].wait.timeout_s = 5.0
    ts[0].chan.fetch(1, "accuse", 1 << 10, time.monotonic() + 2)  # node 0 reads node 1: its request carries its record
    assert ts[3].store.get("addr/0") == kept and ts[1].collect("role", [0]) == {0: b"node 0"}


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
def _chan(store, k, keys, fp="fp"):
    """Rank k's server (up before its check-in: its signed address record, with its launch nonce, in the store)."""
    import torch.distributed as dist

    from dgrpo.swarm.identity import Roster
    from dgrpo.transports.peerserve import AddressKeys, PeerChannel

    return PeerChannel(k, dist.PrefixStore("dgrpo", store), host="127.0.0.1",
                       keys=AddressKeys(k, keys[k], Roster.of(keys), fp))


def _check_ins(n=4, timeout_s=1.0, go_on=True, ranks=None, store=None, keys=None, chans=None):
    """Run ``check_in`` for ``ranks`` (default all) in threads on one HashStore, each with its server (``chans``:
    rank → PeerChannel, made here for the others): rank → Joined or the exception."""
    import torch.distributed as dist

    from dgrpo.swarm.identity import generate_keys
    from dgrpo.transports.checkin import check_in

    store, keys = store or dist.HashStore(), keys or generate_keys(n)
    chans = dict(chans or {})
    out = {}

    def one(k):
        try:
            out[k] = check_in(store, k, n, timeout_s, go_on=go_on, keys=chans[k].keys, chan=chans[k])
        except Exception as err:  # noqa: BLE001 (returned to the test)
            out[k] = err

    ranks = range(n) if ranks is None else ranks
    for k in ranks:
        chans.setdefault(k, _chan(store, k, keys))
    threads = [threading.Thread(target=one, args=(k,)) for k in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out, store, keys


def _signed_view(keys, by: int, absent: list[int], nonce: str) -> bytes:
    sig = keys[by].sign(f"dgrpo/join/view|{by}|{','.join(map(str, absent))}|{nonce}|fp".encode()).hex()
    return ("\n" + json.dumps({"absent": absent, "nonce": nonce, "sig": sig}) + "\n").encode()


def _mark(keys, by: int, node: int, nonce: str) -> bytes:
    return ("\n" + json.dumps({"nonce": nonce, "sig": keys[by].sign(f"dgrpo/join|{node}|{nonce}|fp".encode()).hex()})
            + "\n").encode()


def test_a_lone_abandoned_list_written_first_makes_nobody_leave_and_names_its_writer(caplog):
    """Node 3 writes, before anyone checks in, the old unsigned list naming node 1 (``dgrpo/join/abandoned``),
    its own signed view that node 1 is absent, and a view in node 2's name signed with its key; its server is
    up (it checks in later). Node 1 stays (before: it left, "started after its peers stopped waiting"), every
    rank decides that all joined, and node 3 is named for the lone view and the forgery (peers.jsonl notes)."""
    import torch.distributed as dist

    from dgrpo.swarm.identity import generate_keys

    store, keys = dist.HashStore(), generate_keys(4)
    three = _chan(store, 3, keys)
    store.set("dgrpo/join/abandoned", b"1")
    store.append("dgrpo/join/vote/3", _signed_view(keys, 3, [1], three.nonce))
    forged = keys[3].sign(b"dgrpo/join/view|2|1||fp").hex()
    store.append("dgrpo/join/vote/2", json.dumps({"absent": [1], "nonce": "", "sig": forged}).encode())
    with caplog.at_level(logging.WARNING):
        out, _, _ = _check_ins(ranks=[0, 1, 2], store=store, keys=keys)
    assert {k: j.absent for k, j in out.items()} == {0: [], 1: [], 2: []}, out
    for k in (0, 1, 2):
        reasons = [r for w, r in out[k].named if w == 3]
        assert "check-in: refused a check-in view for node 2 in the store: signed by node 3, not node 2" in reasons
        assert ("check-in: node 3 alone found nodes [1] absent at start-up (1 of the 3 views needed); nobody is "
                "left out for it") in reasons
    assert "ignored an unsigned list of absent ranks in the store (dgrpo/join/abandoned" in caplog.text
    out3, _, _ = _check_ins(ranks=[3], store=store, keys=keys, chans={3: three})  # node 3 goes on too
    assert out3[3].absent == []


def test_a_forged_check_in_mark_is_ignored_and_its_signer_named(caplog):
    """Node 3 writes a check-in mark for node 2 signed with its own key, and an unsigned one for node 1; nodes 1
    and 2 never start. Nodes 0 and 3 do not take the forgeries: they wait out the timeout, and without a
    quorum (2 of the 3 views needed) both stop in one line instead of going on as if all had joined."""
    import torch.distributed as dist

    from dgrpo.swarm.identity import generate_keys

    store, keys = dist.HashStore(), generate_keys(4)
    store.append("dgrpo/join/2", _mark(keys, 3, 2, "ab" * 16))
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
                            "start every rank within it (nodes [0, 1, 2] found it absent; if it started in time, its "
                            "server address record addr/3 was kept from them: deleted or overwritten in the store)")


def test_views_deleted_from_the_store_are_still_read_from_their_signers_servers():
    """Issue 31 review (h31d item 4): nodes 0-2 give up on node 3, then another rank deletes every check-in key
    from the store. Their views are served by their own servers too, so the late node 3 still reads the
    quorum and leaves in one line (before: it found no view, waited out another timeout and stopped with "the
    ranks' views ... did not agree", its peers then waiting for it in the group set-up)."""
    out, store, keys = _check_ins(ranks=[0, 1, 2], timeout_s=0.5)
    assert {k: j.absent for k, j in out.items()} == {0: [3], 1: [3], 2: [3]}
    for k in range(4):
        for key in (f"dgrpo/join/{k}", f"dgrpo/join/vote/{k}"):
            store.delete_key(key)
    start = time.monotonic()
    late, _, _ = _check_ins(ranks=[3], timeout_s=3.0, store=store, keys=keys)
    assert time.monotonic() - start < 2.5
    assert str(late[3]).startswith("node 3 started after its peers stopped waiting for it")


def test_a_mark_whose_address_record_is_deleted_is_named_precisely_and_blames_nobody():
    """Node 3 wrote its signed mark, but its address record was deleted from the store (and node 3 does not put
    it back): nodes 0-2 cannot reach its server. Under abort each stops in one line saying what is missing and
    whose key it was (who deleted it cannot be known in a shared store); nobody is named as a writer."""
    import torch.distributed as dist

    from dgrpo.swarm.identity import generate_keys

    store, keys = dist.HashStore(), generate_keys(4)
    three = _chan(store, 3, keys)
    store.append("dgrpo/join/3", _mark(keys, 3, 3, three.nonce))
    store.delete_key("dgrpo/addr/3")
    out, _, _ = _check_ins(ranks=[0, 1, 2], timeout_s=0.5, store=store, keys=keys, go_on=False)
    for k in (0, 1, 2):
        assert str(out[k]) == ("nodes [3] did not join within swarm.startup_timeout_s=0.5s (not started, or started "
                               "too late; node 3's check-in mark is in the store but its server address record "
                               "(addr/3) never was (deleted by another rank? a shared store cannot say who)): start "
                               "every rank within it")


def test_a_check_in_of_an_earlier_run_does_not_check_in_an_absent_rank(caplog):
    """Issue 31 review (h31d item 3): in run A all four check in; node 3's mark, view and address record are
    kept and written into run B's store (same roster and config) by another rank, while node 3 does not start.
    They are node 3's genuine signatures, but for run A's launch, whose server is gone: nodes 0-2 find node 3
    absent and go on without it (before, the kept mark checked node 3 in, and the ranks waited for it in the
    group set-up), naming nobody."""
    import torch.distributed as dist

    from dgrpo.swarm.identity import generate_keys

    old, keys = dist.HashStore(), generate_keys(4)
    chans = {k: _chan(old, k, keys) for k in range(4)}
    out, _, _ = _check_ins(timeout_s=2.0, store=old, keys=keys, chans=chans)
    assert {k: j.absent for k, j in out.items()} == {k: [] for k in range(4)}
    kept = {key: old.get(key) for key in ("dgrpo/join/3", "dgrpo/join/vote/3", "dgrpo/addr/3")}
    for chan in chans.values():
        chan.close()  # (run A ended)
    store = dist.HashStore()
    for key, value in kept.items():
        store.set(key, value)
    with caplog.at_level(logging.WARNING):
        out, _, _ = _check_ins(ranks=[0, 1, 2], timeout_s=0.5, store=store, keys=keys)
    assert {k: (j.absent, j.named) for k, j in out.items()} == {k: ([3], []) for k in (0, 1, 2)}
    assert "ignored a check-in mark of node 3 signed for a launch its server does not answer for" in caplog.text


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


def test_a_rank_of_another_config_stops_the_check_in_at_once_naming_it(caplog):
    """Node 2 runs another config (fingerprint "other"): its marks cannot verify for the others, so before the
    config claim they waited out swarm.startup_timeout_s (30 s here) and then called it missing. Its signed
    claim, answered for by its server, names it within seconds, on every rank; a claim for node 2 that node 3
    signs with its own key is ignored, and so is node 2's own claim of an earlier run (its server gone: before,
    a copied claim stopped the start-up)."""
    import torch.distributed as dist

    from dgrpo.swarm.identity import Roster, generate_keys
    from dgrpo.transports.checkin import CheckIn, check_in, config_key
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

    def claim(by, chan, fp):
        text = f"dgrpo/join-config|2|{fp}|{chan.address}|{chan.nonce}".encode()
        return json.dumps({"fp": fp, "addr": chan.address, "nonce": chan.nonce, "sig": keys[by].sign(text).hex()}).encode()

    store = dist.HashStore()
    reader = CheckIn(store, 0, 4, 30.0, True, keys=AddressKeys(0, keys[0], Roster.of(keys), "fp"), chan=_chan(store, 0, keys))
    earlier = _chan(dist.HashStore(), 2, keys, fp="other")
    kept = claim(2, earlier, "other")
    earlier.close()
    now = _chan(dist.HashStore(), 2, keys, fp="other")
    with caplog.at_level(logging.WARNING):
        for value in (claim(3, now, "other"), claim(2, now, "fp"), kept):  # forged; this config; a kept copy
            store.set(config_key(2), value)
            reader._other_config(2)  # no stop
    assert f"ignored a config claim of node 2 (fingerprint other…): its server at {earlier.address} does not" in caplog.text
    store.set(config_key(2), claim(2, now, "other"))
    with pytest.raises(PeerFailure, match="node 2 runs another config than node 0"):
        reader._other_config(2)


def test_a_rank_that_stops_at_start_up_says_why_and_is_never_called_silent(caplog):
    """Review r31c F3 residue: node 3 keeps node 0's record of an earlier launch written over addr/0, and node 0
    never reads node 1 (so it cannot push its record there), so node 1 stops at its start-up deadline (an
    admitted power: the start-up stops). Node 1 says why in a notice signed for its launch (``stop/1``); node 2,
    waiting for node 1 in the next start-up exchange, stops at once naming node 1's reason, not "node 1 sent
    nothing", and accuses nobody (before, it waited out its deadline and called node 1 silent). Node 1's own
    notice of an earlier launch counts for nothing."""
    old, keys = _ranks()
    kept = old[3].store.get("addr/0")
    old[1].chan.announce_stop("an old reason")
    kept_stop = old[3].store.get("stop/1")
    for t in old:
        t.chan.close()
    ts, _ = _ranks(keys=keys)
    for t in ts:
        t.wait.limit_name = "swarm.startup_timeout_s"
    ts[1].chan.set("config/data/1", b"node 1")
    assert ts[2].collect("config", [1], time.monotonic() + 2) == {1: b"node 1"}  # (resolves node 1's server)
    ts[3].store.set("stop/1", kept_stop)
    assert ts[2].chan.stop_of(1) is None  # (node 1's genuine notice, of launch A)
    ts[3].store.set("addr/0", kept)
    with pytest.raises(PeerFailure) as err:
        ts[1].gather_values("role", "r1", timeout_s=1.0)
    assert str(err.value).startswith("node 1 refused the server address of node 0 in the store (addr/0): it is signed "
                                     "by node 0 but its server at")
    start = time.monotonic()
    with caplog.at_level(logging.WARNING), pytest.raises(PeerFailure) as stop:
        ts[2].collect("startup", [1], time.monotonic() + 20)  # (the exchange after: node 1 never posts it)
    assert time.monotonic() - start < 3
    assert str(stop.value) == f"node 1 stopped at start-up ({err.value}); node 2 stops too, before round 0"
    assert "sent nothing" not in caplog.text and ts[2].rejected == [] and 1 in ts[2].alive
