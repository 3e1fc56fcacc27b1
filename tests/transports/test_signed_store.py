"""Nothing a peer writes to the c10d store is trusted unsigned (issue 31, must-have 5): server addresses and
leave marks. In-process ranks on one HashStore; ``test_store_attacks.py`` plays the same in 4-rank runs."""

import json
import logging
import threading
import time

import pytest

from dgrpo.errors import PeerFailure
from dgrpo.transports.waits import window_s

from signed_ranks import _ranks


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
    in place and node 0 waited its whole timeout_s=30), and notes the mark for its relay eq0 (departures.py)."""
    ts, _ = _ranks(n=3, timeout_s=30)
    ts[2].store.set("r0/status/1", b"failed")
    ts[1].signed_store.leave(["r0"])
    start = time.monotonic()
    assert ts[0].collect("r0", [1]) == {} and time.monotonic() - start < 3
    assert ts[0].exchanger.leaving == {1} and ts[0].chan.departed[1]["tag"] == "r0"


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
    assert again[0].chan.address_of(1) is not None
    again[1].chan.close()  # (node 1's server then gone: node 0 reads the store's copy, review r31j F7)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert again[0].collect("r1", [1]) == {}
    assert time.monotonic() - start >= window_s(0.6) - 0.05  # waited to the deadline (the payload window): the old
    # mark ended nothing
    assert 1 in again[0].alive and 1 not in again[0].failed  # one accusation (node 0's) expels nobody
    lines = [r.getMessage() for r in caplog.records if "leave mark" in r.getMessage()]
    assert lines == ["node 0: refused a leave mark for node 1 in the store (r1/status/1): not signed by node 1 "
                     "for this launch (unsigned, or a mark of an earlier run or launch: its writer cannot be named)"]
    again[1].signed_store.leave(["r2"])  # the same node's mark of this launch ends the wait at once
    assert again[0].signed_store.status("r2", 1, time.monotonic() + 5) == "left"
