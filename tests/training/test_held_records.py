"""A heterogeneous swarm's round record waits for a reporter's record that came late (review r31o H7): the main holds
the round (``share_record``), reads the missing record again at its next record or at the end (``flush_held``) and
logs the round then, in round order; only a record still missing is named ``missing record`` (peers.jsonl). Here the
main's transport is a fake that hands out the reporters' records when the test says they came."""

import json
from types import SimpleNamespace

from dgrpo.training.records import flush_held, merge_records, share_record


class FakeTransport:
    """Node 0 is the main; ``first[tag]`` is what its first read of ``tag`` finds, ``later[tag]`` what a later one does;
    ``reads`` lists (tag, senders, final) of every late read."""

    def __init__(self):
        self.local_nodes, self.alive, self.failed, self.is_main = [0], {0, 1, 2}, {}, True
        self.first, self.later, self.reads = {}, {}, []

    def collect_at_main(self, tag, payload, senders):
        return dict(self.first.get(tag, {}))

    def late_records(self, tag, senders):
        self.reads.append((tag, sorted(senders), False))
        return {n: b for n, b in self.later.get(tag, {}).items() if n in senders}

    def last_records(self, wanted):  # (one call for the run's last records: "final")
        self.reads += [(tag, sorted(senders), True) for tag, senders in wanted.items()]
        return {tag: {n: b for n, b in self.later.get(tag, {}).items() if n in senders} for tag, senders in wanted.items()}


def _run(tmp_path, rounds=3):
    cfg = SimpleNamespace(swarm=SimpleNamespace(nodes=3, malicious=[], models=[{}, {}, {}]),
                          sampling=SimpleNamespace(max_new_tokens=24), rounds=rounds)
    return SimpleNamespace(cfg=cfg, transport=FakeTransport(), run_dir=tmp_path, owns_dir=True, held_records=[])


def rec(rnd, loss):
    return {"round": rnd, "swarm/messages": 8, "swarm/invalid": 0, "train/loss": loss, "train/grad_norm": 1.0,
            "train/used": 8}


def body(rnd, loss):
    return json.dumps(rec(rnd, loss)).encode()


def named(tmp_path):
    path = tmp_path / "peers.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return {line["round"]: line["records"] for line in lines}


def test_a_record_late_in_its_round_is_merged_when_it_comes_before_the_next_record(tmp_path):
    run = _run(tmp_path)
    t = run.transport
    t.first = {"rec0": {1: body(0, 0.1)}, "rec1": {1: body(1, 0.3), 2: body(1, 0.4)}}
    t.later = {"rec0": {2: body(0, 0.2)}}  # node 2 (held in eq0) posted rec0 after the main's short read
    assert share_record(run, rec(0, 0.0)) == []  # round 0 held: node 2's record not in
    assert len(run.held_records) == 1 and not named(tmp_path)
    got = share_record(run, rec(1, 0.5))  # round 0 first (node 2's record read again), then round 1 (complete)
    want0 = merge_records({0: rec(0, 0.0), 1: rec(0, 0.1), 2: rec(0, 0.2)})
    assert [r["round"] for r in got] == [0, 1] and got[0] == want0
    assert got[0]["train/loss/node2"] == 0.2 and got[1]["train/loss/node2"] == 0.4
    assert t.reads == [("rec0", [2], False)]  # only the missing record, a short read
    assert run.held_records == [] and not named(tmp_path)  # nobody named: every record came


def test_a_record_still_missing_at_the_next_record_is_named_then_under_its_round(tmp_path):
    run = _run(tmp_path)
    t = run.transport
    t.first = {"rec0": {1: body(0, 0.1)}, "rec1": {1: body(1, 0.3), 2: body(1, 0.4)}}
    assert share_record(run, rec(0, 0.0)) == []
    got = share_record(run, rec(1, 0.5))
    assert got[0] == merge_records({0: rec(0, 0.0), 1: rec(0, 0.1)}) and "train/loss/node2" not in got[0]
    assert named(tmp_path) == {0: {"2": "missing record: none came for exchange 'rec0' in time"}}


def test_the_last_two_records_are_read_together_at_the_end_and_a_refused_one_is_named_with_its_round(tmp_path):
    """The final record (round == rounds) reads the held round before it no more: both stay held, and the end's
    flush reads both missing sets in one ``last_records`` (after the main's ``done``: docs/distributed.md), logging
    them in round order."""
    run = _run(tmp_path, rounds=1)
    t = run.transport
    t.first = {"rec0": {1: b"[]"}}  # node 1's record refused (named with round 0), node 2's late
    t.later = {"rec0": {2: body(0, 0.2)}, "rec1": {1: body(1, 0.3), 2: body(1, 0.4)}}
    assert share_record(run, rec(0, 0.0)) == []
    assert share_record(run, rec(1, 0.5)) == []  # the final record: round 0 not read again, both held
    assert t.reads == [] and [h["rec"]["round"] for h in run.held_records] == [0, 1]
    got = flush_held(run, final=True)
    assert got == [merge_records({0: rec(0, 0.0), 2: rec(0, 0.2)}),
                   merge_records({0: rec(1, 0.5), 1: rec(1, 0.3), 2: rec(1, 0.4)})]
    assert t.reads == [("rec0", [2], True), ("rec1", [1, 2], True)]
    assert named(tmp_path) == {0: {"1": "record: not a JSON object but a JSON array"}}
    assert flush_held(run, final=True) == [] and t.reads[2:] == []  # (nothing held, nothing read)


def test_a_final_record_complete_with_nothing_held_is_logged_at_once(tmp_path):
    run = _run(tmp_path, rounds=1)
    t = run.transport
    t.first = {"rec0": {1: body(0, 0.1), 2: body(0, 0.2)}, "rec1": {1: body(1, 0.3), 2: body(1, 0.4)}}
    assert [r["round"] for r in share_record(run, rec(0, 0.0))] == [0]
    assert share_record(run, rec(1, 0.5)) == [merge_records({0: rec(1, 0.5), 1: rec(1, 0.3), 2: rec(1, 0.4)})]
    assert flush_held(run, final=True) == [] and t.reads == []  # (no last read: the main's done is not posted early)


def test_a_process_that_only_reports_logs_nothing(tmp_path):
    run = _run(tmp_path)
    run.transport.is_main = False
    run.transport.collect_at_main = lambda tag, payload, senders: None
    assert share_record(run, rec(0, 0.0)) == [] and run.held_records == [] and flush_held(run) == []
