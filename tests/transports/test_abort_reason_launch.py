"""Review r31e G2 in a real 4-rank torch.distributed launch on loopback (test_wait_notes.py plays it in-process):
under ``swarm.on_peer_failure=abort`` rank 3 never serves its round payload to reader 1 (``hide:3:1``), so node 1
stops first, naming node 3, serves its signed reason from its own server and appends it to ``why/1`` in the store;
rank 3 also spoils that store copy. Every honest rank must stop in one line, and ranks 0 and 2, which find node 1
missing next, must quote node 1's signed reason (naming node 3), never name node 1 alone nor take a reason rank 3
wrote. Node 1's served reason outlasts the store's copy only if node 1 serves it as long as its peers may wait for
it: before, it served ``timeout_s`` (at most 10 s) while ranks 0 and 2 found it missing 6.7 s after it stopped
(``timeout_s=5``: eq0's deadline and the one extension of a node that noted waiting), so with ``why/1`` deleted
they named node 1 alone ("deleted" failed). Now a stopping rank serves its reason until each honest peer read it or
serves a stop reason of its own, at most a round's cap + a read (2 × ``timeout_s`` + ``slack_s`` + 1 s); a read counts
as a peer's only with its acknowledgement signed by that peer (review r31f H5: rank 3 "read" it in the others' names).
"""

import threading
import time

import pytest
from distributed_helpers import RELATIVE, launch
from signed_ranks import _ranks
from test_round_deadlines import COMMON

ATTACKS = {
    # (a) 16 junk lines, 8 bad signatures and a reason naming node 0 signed by rank 3, before node 1's line
    "junk before it": ("hide:3:1,whyjunk:3:1", "rank 3: pre-filled why/1 with 25 lines"),
    # (b) deleted within milliseconds of node 1 writing it
    "deleted": ("hide:3:1,whydel:3:1", "rank 3: deleted why/1"),
    # (a) again, with node 1's server not serving its reason (as if its process had gone): the store copy alone
    "junk before it, unserved": ("hide:3:1,whyjunk:3:1,whyunserved:1", "rank 3: pre-filled why/1 with 25 lines"),
    # (c) review r31f H5: rank 3 also keeps reading node 1's served reason in the names of nodes 0 and 2 (a spoofed
    # X-Dgrpo-Reader header), so that node 1 stopped serving it at once, and deletes the store's copy
    "read in its peers' names, deleted": ("hide:3:1,whydel:3:1,whyread:3",
                                          "rank 3: reading every rank's stop reason in its peers' names"),
}


@pytest.mark.slow
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_under_abort_every_honest_rank_quotes_the_first_stoppers_signed_reason_naming_the_attacker(
        tmp_path, tiny_model_dir, attack):
    scenario, played = ATTACKS[attack]
    args = [f"model.name={tiny_model_dir}", *COMMON, "rounds=2", "eval.every=10", "swarm.on_peer_failure=abort"]
    results = launch(4, ["run", RELATIVE, *args, f"out_dir={tmp_path}", "name=d", "swarm.transport=distributed"],
                     scenario=scenario, timeout=150, log_dir=str(tmp_path))
    assert played in results[3].output, results[3].output[-3000:]  # (the attack took place)
    assert [r.returncode for r in results[:3]] == [3, 3, 3], [r.output[-2000:] for r in results]
    errors = {r.rank: [x for x in r.output.splitlines() if x.startswith("dgrpo: error:")] for r in results[:3]}
    assert len(errors[1]) == 1 and "node 3 sent nothing for exchange 'r0'" in errors[1][0], errors[1]
    for rank in (0, 2):
        print(f"{attack}: rank {rank}: {errors[rank]}")
        assert len(errors[rank]) == 1, results[rank].output[-3000:]
        assert "node 1 stopped first, saying (signed): \"node 3 sent nothing for exchange 'r0'" in errors[rank][0]
        assert "node 0 sent nothing" not in errors[rank][0] and 'saying (signed): "x' not in errors[rank][0]


def test_a_stopping_rank_serves_its_reason_until_each_peer_read_it_or_stopped_too():
    """In-process ranks: node 0 stops, its readers nodes 1 and 2. Node 1 has stopped already (it serves its own
    signed reason: it will not read node 0's), node 2 reads node 0's 0.5 s later: node 0 stops serving then, not
    after ``wait_s``. A reason node 1 did not sign (another rank's key) does not count as its stop: node 0 waits it
    out (``wait_s``). (Here the servers of nodes 1 and 2 keep no pushed reason, as if the push never reached them:
    the served copy is all they get; test_a_stopping_rank_stops_serving_once_each_peers_server_holds_its_reason.)"""
    ts, _ = _ranks(n=3, timeout_s=0.3)
    for k in (1, 2):
        ts[k].chan.told_why = lambda reader, raw: None
    notes = [t.exchanger.notes for t in ts]
    notes[1].say_stop("node 2 sent nothing", readers=[], wait_s=0.0)
    threading.Timer(0.5, lambda: notes[2].stop_of(0, time.monotonic() + 1)).start()
    start = time.monotonic()
    notes[0].say_stop("node 2 sent nothing", readers=[1, 2], wait_s=8.0)
    took = time.monotonic() - start
    assert 0.45 < took < 2.0, took
    assert notes[2].stop_of(0, time.monotonic() + 1) == "node 2 sent nothing"
    ts[1].chan.set("why", ts[0].chan.values["why"])  # (node 0's signed line, served by node 1: not node 1's stop)
    start = time.monotonic()
    notes[2].say_stop("node 0 sent nothing", readers=[1], wait_s=1.0)
    assert 0.95 < time.monotonic() - start < 2.5


def test_a_stopping_rank_stops_serving_once_each_peers_server_holds_its_reason():
    """Review r31m F1: node 0 stops, its readers nodes 1 and 2; it pushes its signed reason to their servers, which
    keep it and serve it back (why/0): node 0 is done at once, not after ``wait_s`` (8 s), and both quote it with
    node 0's served copy and the store's gone. A server that keeps no push (node 2's, as if the push never reached
    it) leaves node 0 serving until node 2 reads it (0.5 s later)."""
    ts, _ = _ranks(n=3, timeout_s=0.3)
    notes = [t.exchanger.notes for t in ts]
    start = time.monotonic()
    notes[0].say_stop("node 2 sent nothing", readers=[1, 2], wait_s=8.0)
    assert time.monotonic() - start < 4.0  # (not wait_s: the pushes are answered in milliseconds here)
    assert ts[1].chan.whys == ts[2].chan.whys == {0: "node 2 sent nothing"}
    ts[0].chan.delete_key("why")
    ts[0].store.delete_key("why/0")
    assert [notes[k].stop_of(0, time.monotonic() + 1) for k in (1, 2)] == ["node 2 sent nothing"] * 2
    ts, _ = _ranks(n=3, timeout_s=0.3)
    ts[2].chan.told_why = lambda reader, raw: None
    notes = [t.exchanger.notes for t in ts]
    threading.Timer(0.5, lambda: notes[2].stop_of(0, time.monotonic() + 1)).start()
    start = time.monotonic()
    notes[0].say_stop("node 2 sent nothing", readers=[1, 2], wait_s=8.0)
    assert 0.45 < time.monotonic() - start < 4.0
    assert ts[1].chan.whys == {0: "node 2 sent nothing"} and ts[2].chan.whys == {}


def test_a_read_of_the_stop_reason_counts_only_with_the_readers_signed_acknowledgement():
    """Review r31f H5: node 2 GETs node 0's served reason every 20 ms in the names of nodes 1 and 2 (the
    X-Dgrpo-Reader header; without an acknowledgement, with junk, with one node 2 signed naming node 1 as reader,
    and with node 1's acknowledgement of another owner's reason). Before, node 0 took those for its peers' reads
    and stopped serving its reason at once, so the others (the store's copy deleted) named node 0 alone. Now none
    counts: node 0 serves it for its whole ``wait_s`` (1.5 s), unless nodes 1 and 2 read it themselves (at 0.5 s)."""
    import http.client

    ts, _ = _ranks(n=3, timeout_s=0.3)
    for k in (1, 2):  # (no pushed copy kept: the served copy and its acknowledgements are all there is)
        ts[k].chan.told_why = lambda reader, raw: None
    host, port = ts[0].chan.address.rsplit(":", 1)
    acks = ["", "00" * 64, ts[2].signed_store.sign("read|0|why"), ts[1].signed_store.sign("read|2|why")]
    stop = threading.Event()

    def spoof():
        while not stop.is_set():
            for reader, ack in ((r, a) for r in ("1", "2") for a in acks):
                conn = http.client.HTTPConnection(host, int(port), timeout=0.5)
                conn.request("GET", "/v/why", headers={"X-Dgrpo-Reader": reader, "X-Dgrpo-Ack": ack})
                conn.getresponse().read()
                conn.close()
            time.sleep(0.02)

    threading.Thread(target=spoof, daemon=True).start()
    try:
        for honest_reads in (False, True):
            if honest_reads:
                for k in (1, 2):
                    threading.Timer(0.5, lambda k=k: ts[k].exchanger.notes.stop_of(0, time.monotonic() + 1)).start()
            start = time.monotonic()
            ts[0].exchanger.notes.say_stop("node 2 sent nothing", readers=[1, 2], wait_s=1.5)
            took = time.monotonic() - start
            assert (0.45 < took < 1.2) if honest_reads else (1.45 < took < 2.0), (honest_reads, took)
            ts[0].chan.delete_key("why")  # (served afresh by the next say_stop; its readers with it)
    finally:
        stop.set()
