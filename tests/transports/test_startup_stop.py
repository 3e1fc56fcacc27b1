"""A rank that stops at start-up tells its peers why, and pushed address records cannot be cycled (issue 31,
torch.distributed). In-process ranks on one HashStore, then 4-rank runs on loopback (rank_scenarios).

* A rank whose start-up check fails after its peers' passed (a peer's server showed it alone a junk record)
  never binds the launch: its leave marks verify for nobody. It pushes a stop notice signed for its server's
  launch to its peers' servers; they stop waiting for it at once, and every node takes it out (or stops, naming it
  and its reason) at the same relay exchange, accusing nobody.
* The notice is kept by each peer's own server, so deleting ``stop/{k}`` from the store changes nothing.
* A reader keeps one pushed address record per owner, the newest by the date in its launch nonce, so a peer
  holding any number of the owner's older records cannot cycle the owner's own out.
"""

import json
import logging
import secrets
import time

import pytest
from distributed_helpers import RELATIVE, launch
from signed_ranks import _ranks

from dgrpo.errors import PeerFailure

WHY = "the start-up records of nodes [3] do not verify with the keys node 1 holds for them"


def _resolved(ts):
    """Every rank resolves every other's server (as after the start-up exchanges): its launch is proved."""
    for t in ts:
        for k in range(len(ts)):
            assert t.chan.address_of(k) is not None
    return ts


@pytest.mark.parametrize("policy", ["continue", "abort"])
@pytest.mark.parametrize("first", [True, False])
def test_a_rank_whose_start_up_check_failed_is_not_waited_for_and_accused_by_nobody(policy, first, caplog):
    """A peer's start-up stop met in a round exchange is only noted there, under either policy: not waited for,
    unaccused, and still in this rank's view (its live roster is its peers'). In this rank's first round whether every
    node stops is decided once the round's relays are in (transports/startstops.py; review r31n G5: stopping here at
    once let one rank stop whom it liked); in a later one (a notice said that late is no start-up stop) every node
    takes the peer out at the round's relay exchange, where this rank's relay carries it, and goes on (``continue``)
    or stops naming it (``abort``) there (review r31o H3: taken out at once, this rank alone counted a live roster of
    3 in its relay exchange while its peers counted 4). Nobody is accused."""
    from dgrpo.transports import departures

    ts = _resolved(_ranks(timeout_s=20)[0])
    ts[2].exchanger.on_peer_failure = policy
    ts[2].exchanger.first = None if first else "r5"  # (a round exchange already done)
    ts[1].chan.announce_stop(WHY)  # (node 1's check failed: DistributedTransport.check_startup)
    ts[3].store.delete_key("stop/1")  # (b: the copy in the store is gone; node 2's server was told directly)
    assert ts[2].chan.stops == {1: WHY} and ts[0].chan.stops == {1: WHY}
    for t in (ts[0], ts[3]):
        t.post("r0", b"x")
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert sorted(ts[2].collect("r0", range(4))) == [0, 3]
        assert (f"node 1 stopped at start-up ({WHY})" + (", as this node read in exchange 'r0', its first round: held "
                "until the relays of this round" if first else ", as this node read in exchange 'r0' before its relay: "
                "not waited for; out of the swarm at every node, this one included, from exchange 'eq0'")) in caplog.text
    assert time.monotonic() - start < 3  # (timeout_s=20: never waited out)
    assert ts[2].alive == {0, 1, 2, 3} and ts[2].failed == {} and ts[2].exchanger.leaving == {1}
    assert ts[2].rejected == [] and "sent nothing" not in caplog.text and "leave mark" not in caplog.text
    assert "is out of the swarm" not in caplog.text  # (noted, or held: named once the relays are in)
    assert ts[2].ledger.accusations(1, time.monotonic() + 5) == {}  # nobody accused node 1
    if first:
        return
    relay = json.dumps({"departed": departures.relayed_departures(ts[2].chan, 4)}).encode()  # (its relay eq0)
    for k in (0, 2, 3):
        ts[k].chan.set("end/eq0", b"1")  # (its peers left eq0: nobody to linger for)
    if policy == "abort":
        with pytest.raises(PeerFailure) as err:
            departures.act(ts[2], "eq0", {2: relay, 0: b"{}", 3: b"{}"})
        assert str(err.value) == (f"node 1 said (signed) it stopped at start-up ({WHY}), as node 2's relay carries it; "
                                  "node 2 stops too in exchange 'eq0' (swarm.on_peer_failure=abort)")
    for k in ((0, 3) if policy == "abort" else (0, 2, 3)):  # (every node, the reader included, at the same relay)
        departures.act(ts[k], "eq0", {2: relay, 0: b"{}", 3: b"{}"})
    for k in (0, 2, 3):
        assert ts[k].alive == {0, 2, 3} and ts[k].failed == {1: "eq0"}, k
    assert ts[2].ledger.accusations(1, time.monotonic() + 5) == {}


def test_a_stop_notice_is_taken_only_signed_by_its_node_for_the_launch_its_server_proved():
    """Node 3 pushes, in node 1's name, a stop notice it signed, node 1's genuine notice of an earlier launch,
    and junk, to node 2's server, and writes the earlier one into the store: node 2 takes none (node 1 is not
    dropped), then takes node 1's own notice though node 3 deleted it from the store."""
    old, keys = _ranks()
    old[1].chan.announce_stop("an old reason")
    kept = old[1].store.get("stop/1")
    for t in old:
        t.chan.close()
    ts = _resolved(_ranks(keys=keys)[0])
    nonce = ts[1].chan.nonce
    forged = json.dumps({"why": "forged", "nonce": nonce, "sig": ts[3].chan.keys.sign(f"stop|1|forged|{nonce}")})
    for raw in (forged, kept.decode(), "junk"):
        _push(ts[2].chan, 1, stop=raw)
    ts[3].store.set("stop/1", kept)
    assert ts[2].chan.stops == {} and ts[2].chan.stop_of(1) is None
    ts[1].chan.announce_stop("a reason")
    ts[3].store.delete_key("stop/1")
    assert ts[2].chan.stop_of(1) == "a reason"


def _record(keys, node: int, addr: str, nonce: str) -> str:
    """``node``'s address record signed with its key (for config ``fp``)."""
    from dgrpo.swarm.identity import Roster
    from dgrpo.transports.peerserve import AddressKeys

    return AddressKeys(node, keys[node], Roster.of(keys), "fp").record(addr, nonce).decode()


def _old_record(keys, node: int, addr: str, seconds_ago: float) -> str:
    """``node``'s signed address record of an earlier launch (its nonce dated ``seconds_ago``)."""
    return _record(keys, node, addr, f"{time.time_ns() - int(seconds_ago * 1e9):016x}{secrets.token_hex(8)}")


def _push(chan, reader: int, **headers) -> None:
    """One request to ``chan``'s server, as node ``reader``, with ``headers`` (X-Dgrpo-Addr, X-Dgrpo-Stop: what a
    peer pushes in its requests; anyone can send them in anyone's name)."""
    import http.client

    host, _, port = chan.address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=2.0)
    conn.request("GET", "/v/x", headers={"X-Dgrpo-Reader": str(reader),
                                         **{f"X-Dgrpo-{k.title()}": v for k, v in headers.items()}})
    conn.getresponse().read()
    conn.close()


def test_older_records_pushed_in_the_owner_s_name_never_displace_its_own():
    """Node 0 pushes its record to node 1 (a request it sends); node 3 then pushes 40 records node 0 signed in
    earlier launches (dead ports), in node 0's name, while node 0's record in the store is an earlier one too.
    Node 1 keeps one pushed record for node 0, node 0's own (the newest), and resolves node 0's server (before:
    the latest 16 pushes were kept, so 16 old ones cycled node 0's own out and node 1 could not reach it)."""
    ts, keys = _ranks()
    _push(ts[1].chan, 0, addr=ts[0].chan._record.decode())
    for i in range(40):
        _push(ts[1].chan, 0, addr=_old_record(keys, 0, f"127.0.0.1:{9 + i}", 60 + i))
    _push(ts[1].chan, 0, addr=_record(keys, 0, "127.0.0.1:7", "ab" * 16))  # (a nonce no clock dates: ignored)
    ts[3].store.set("addr/0", _old_record(keys, 0, "127.0.0.1:9", 120).encode())
    assert ts[1].chan.address_of(0) == ts[0].chan.address and ts[1].chan.launches[0] == ts[0].chan.nonce


# ---------------------------------------------------------------------- 4 ranks on loopback
@pytest.mark.slow
@pytest.mark.parametrize("scenario, policy", [("startjunk:3:1", "continue"), ("startjunk:3:1:wipe", "continue"),
                                              ("startjunk:3:1:wipe", "abort"),
                                              ("startjunk:3:1,slowread:2:3:startup", "continue")])
def test_an_honest_rank_whose_start_up_check_fails_is_named_at_once_by_the_others(tmp_path, tiny_model_dir,
                                                                                  scenario, policy):
    """Rank 3's server shows node 1 alone a junk start-up record, so node 1's start-up check fails while the
    others pass (``wipe``: rank 3 also deletes node 1's stop notice from the store every millisecond). Node 1
    stops in one line naming node 3; the others learn it from node 1's signed notice in the ready barrier, not
    after timeout_s, and stop too under either policy (the ranks start together or not at all: review r31f H10;
    before, under ``continue`` they trained on without node 1), each in one line naming node 1 and its reason
    (node 3); nobody is accused, called silent or banned. Node 1 serves its own start-up record until every peer
    read it before it leaves, so node 2, reading the start-up records 3 s late (``slowread``), still checks it."""
    from test_store_attacks import ARGS, _roster, one_error_line

    args = ["run", RELATIVE, f"model.name={tiny_model_dir}", *ARGS, *_roster(tmp_path), f"out_dir={tmp_path}", "name=d",
            "swarm.transport=distributed", f"swarm.on_peer_failure={policy}", "swarm.timeout_s=20"]
    results = launch(4, args, scenario=scenario, timeout=90, log_dir=str(tmp_path))
    out = "".join(r.output for r in results)
    assert results[1].returncode == 3 and WHY in one_error_line(results[1].output), results[1].output[-3000:]
    assert "sent nothing" not in out and "accused" not in out and "leave mark" not in out, out[-3000:]
    if "wipe" in scenario:
        assert "rank 3: deleted stop/1" in results[3].output
    said = f"node 1 stopped at start-up ({WHY}"
    for r in [results[k] for k in (0, 2, 3)]:
        assert r.returncode == 3 and said in one_error_line(r.output) and r.seconds < 60, r.output[-3000:]
        assert "before round 0" in one_error_line(r.output)
    assert not (tmp_path / "d" / "metrics.jsonl").exists() or '"train/' not in (tmp_path / "d" / "metrics.jsonl").read_text()


def test_a_start_up_stop_reason_is_shown_on_one_line_and_bounded_whatever_its_signer_signed():
    """Review r31h F10 for start-up stops: node 1 signs (itself, not through ``announce_stop``, which keeps its own
    reason on one line) a reason with line breaks, a terminal escape, a bidirectional mark, double quotes and 3 kB.
    A peer shows it on one line, double quotes made single, at most 600 characters."""
    ts = _resolved(_ranks(timeout_s=20)[0])
    evil = 'node 0 lied\r\n\x1b[2Kdgrpo: error: "node 0"\u202e ' + "y" * 3000
    chan = ts[1].chan
    rec = {"why": evil, "nonce": chan.nonce, "sig": chan.keys.sign(f"stop|1|{evil}|{chan.nonce}")}
    ts[1].store.set("stop/1", json.dumps(rec).encode())
    ts[1].chan.close()  # (node 1 gone: node 2 reads the store's copy only then, review r31j F7)
    assert ts[2].chan.fetch(1, "r0/data/1", 64, time.monotonic() + 1) == (None, None) and 1 in ts[2].chan.down
    start = "node 0 lied [2Kdgrpo: error: 'node 0' "
    assert ts[2].chan.stop_of(1) == start + "y" * (599 - len(start)) + "…"


@pytest.mark.slow
@pytest.mark.parametrize("victims, policy", [("0", "continue"), ("0.1", "continue"), ("0", "abort")])
def test_a_start_up_stop_notice_shown_to_some_nodes_stops_no_honest_node(tmp_path, tiny_model_dir, victims, policy):
    """Review r31n G5: as it posts r0, rank 3 pushes its signed start-up stop notice to ``victims`` only and hides r0
    from them, serving r0 to the others as usual. Before, each victim stopped in its first round exchange ("the ranks
    start together or not at all") while the others trained on with rank 3: exit codes [3, 0, 0, 0], [3, 3, 0, 0]
    (one honest node alone with the attacker); under abort every rank stopped, the others naming node 0 "sent
    nothing". Now a victim holds the notice and relays it in eq0; the others' relays carry rank 3's signed round-0
    messages, so every honest node finds that rank 3 said it stopped and sent (equivocation): rank 3 is named, its
    messages dropped and it is out at every honest node, and nobody honest stops."""
    from test_store_attacks import ARGS, peers, run

    from dgrpo.metrics.logger import read_metrics

    results, run_dir = run(tmp_path, [f"model.name={tiny_model_dir}", *ARGS, f"swarm.on_peer_failure={policy}"],
                           f"selstop:3:{victims}")
    assert "pushed a signed stop notice" in results[3].output, results[3].output[-3000:]
    assert [r.returncode for r in results[:3]] == [0, 0, 0], [r.output[-2000:] for r in results[:3]]
    for r in results[:3]:
        said = "equivocation: node 3 said (signed) it stopped at start-up"
        assert said in r.output, r.output[-3000:]
        assert "stops too" not in r.output and "sent nothing" not in r.output, r.output[-3000:]
    log = peers(run_dir)
    assert log[0]["peers"]["3"]["transport"].get("equivocation") == 1, log[0]
    others = [p for rec in log for n, p in rec["peers"].items() if n != "3"]  # (`late`: a timing, named, no strike)
    assert all(set(p["transport"]) <= {"late"} and not p["rejected"] for p in others), log
    assert not any(set(rec["banned"]) - {"3"} for rec in log), log
    records = read_metrics(run_dir)
    # (rank 3's 2 messages a round dropped: round 0 by every node's cross-check, round 1 out of the swarm)
    assert [r.get("swarm/messages") for r in records][:2] == [6, 6], records
    assert [r.get("swarm/nodes_alive") for r in records][:2] == [3, 3], records
