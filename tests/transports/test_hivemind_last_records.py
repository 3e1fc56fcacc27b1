"""The main node's read of the run's last round records over hivemind (transports/dht/roundrecords.py, task h31t3):
the rule of torch.distributed (h31q1, docs/distributed.md "The record and the end of the run"). The main posts its
``done`` first, then reads each reporter's last records until they come or the reporter's own ``done`` is in, at most
``timeout_s`` after its post. Before, a fixed ``timeout_s`` / 8: a reporter held late (a withheld payload, two victims
held together) posted its last records after it, and the main named it ``missing record``.

Real DHT nodes in this process (:func:`hivemind_swarm.dht_nodes`); node 0 is the main, nodes 1 and 2 report."""

import threading
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("hivemind")

from hivemind_swarm import dht_nodes, swarm  # noqa: E402

from dgrpo.transports.dht.roundrecords import RECORD_SHARE  # noqa: E402


@pytest.fixture(scope="module")
def dhts(tmp_path_factory):
    yield from dht_nodes(tmp_path_factory.mktemp("dht"))


def later(seconds, *steps):
    """Run ``steps`` (callables) in order in a thread, ``seconds`` from now (a reporter's posts)."""
    def body():
        time.sleep(seconds)
        for step in steps:
            step()
    th = threading.Thread(target=body)
    th.start()
    return th


def test_a_reporters_last_records_posted_after_a_eighth_of_the_timeout_are_still_read(dhts):
    """Nodes 1 and 2 post their last two records T/8 + 1 s after the main entered its read (held late), then their
    done: the main reads all four (before: none, after T/8)."""
    T = 8.0
    ts = swarm(dhts, timeout_s=T)
    recs = {(tag, n): f"{tag} of node {n}".encode() for tag in ("rec2", "rec3") for n in (1, 2)}
    posts = [later(T / RECORD_SHARE + 1.0, *[lambda t=ts[n], tag=tag, n=n: t.post(tag, recs[tag, n]) for tag in ("rec2", "rec3")],
                   lambda t=ts[n]: t.post("done", b"1")) for n in (1, 2)]
    got = ts[0].last_records({"rec2": [1, 2], "rec3": [1, 2]})
    for th in posts:
        th.join()
    assert got == {tag: {n: recs[tag, n] for n in (1, 2)} for tag in ("rec2", "rec3")}
    assert ts[1].collect("done", [0], time.monotonic() + 5) == {0: b"1"}  # (the main posted its done first)


def test_a_reporter_whose_done_is_in_without_its_record_is_read_no_longer(dhts):
    """Node 1 posts its done and never its record; node 2 posts its record 1 s past T/8. The read ends once node 2's
    record is in (node 1's done said none comes), not at the bound, T after the main's done."""
    T = 30.0
    ts = swarm(dhts, timeout_s=T)
    posts = [later(0.2, lambda: ts[1].post("done", b"1")),
             later(T / RECORD_SHARE + 1.0, lambda: ts[2].post("rec5", b"late"), lambda: ts[2].post("done", b"1"))]
    start = time.monotonic()
    got = ts[0].last_records({"rec5": [1, 2]})
    seconds = time.monotonic() - start
    for th in posts:
        th.join()
    assert got == {"rec5": {2: b"late"}}
    assert seconds < T / 2, seconds  # (node 2's record at T/8 + 1 s = 4.75 s; the bound would be 30 s)


def test_a_reporter_serving_neither_its_record_nor_its_done_holds_the_read_to_timeout_s_after_the_mains_done(dhts):
    """Node 1 sends nothing: the read ends T after the main posted its done (before: T/8), and the main's close then
    waits for no second T (its done wait ends at the same deadline)."""
    T = 4.0
    ts = swarm(dhts, timeout_s=T)
    start = time.monotonic()
    assert ts[0].last_records({"rec1": [1]}) == {"rec1": {}}
    assert time.monotonic() - start >= T
    assert ts[0].done_at is not None and ts[0].done_at - start < T / RECORD_SHARE
    ts[0].dht, ts[0]._closed = SimpleNamespace(shutdown=lambda: None), False  # (the shared DHT lives on)
    start = time.monotonic()
    ts[0].close()
    assert time.monotonic() - start < T  # (its done deadline had passed: one read of its peers' done, then it stops)
    assert not {1, 2} & ts[0].alive  # (nodes 1, 2 sent no done: failed at its close, continue)
