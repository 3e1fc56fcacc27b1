"""The main rank reads again a round record its first read (record_s) missed (review r31o H7: a reporter whose relay
an attacker withheld posts its record ~E after the main moved on; it is still the round's metrics): a reporter keeps
its last two records served, the main's late read between rounds is one short read, and its reads of the run's last
records are read after the main's ``done``, until they come or their sender's ``done`` is served, at most timeout_s.
In-process ranks on one HashStore (``signed_ranks``)."""

import threading
import time

from dgrpo.transports.recordreads import LATE_READ_S
from dgrpo.transports.waits import extension_s, record_s

from signed_ranks import _ranks


def test_a_reporter_serves_its_last_two_records_and_the_main_reads_a_late_one_again():
    ts, _ = _ranks(n=3, timeout_s=4.0)  # record_s 0.6 s: at timeout_s=1 (0.15 s) a loaded run (-n 2) missed node 1's
    main, one, two = ts                   # record, posted before the read began
    one.collect_at_main("rec0", b"one0", [0, 1, 2])
    assert main.collect_at_main("rec0", b"", [0, 1, 2]) == {1: b"one0"}  # node 2 not in within record_s
    two.collect_at_main("rec0", b"two0", [0, 1, 2])  # (held: posted after the main's read ended)
    start = time.monotonic()
    assert main.late_records("rec0", [2]) == {2: b"two0"}
    assert time.monotonic() - start < LATE_READ_S + 0.25
    for r in (1, 2):
        two.collect_at_main(f"rec{r}", f"two{r}".encode(), [0, 1, 2])
    assert "rec0/data/2" not in two.chan.values  # (gone once two more were posted)
    assert two.chan.values["rec1/data/2"] == b"two1" and two.chan.values["rec2/data/2"] == b"two2"
    assert main.late_records("rec1", [2]) == {2: b"two1"}
    assert one.late_records("rec0", [2]) == {}  # (a reporter reads nothing)
    assert main.alive == {0, 1, 2} and main.failed == {} and main.rejected == []  # (a record blames nobody)


def test_a_record_that_never_comes_costs_one_short_read_between_rounds():
    ts, _ = _ranks(n=3, timeout_s=20.0)  # record_s 4.25 s: one short read (LATE_READ_S) is far below any wait for it
    start = time.monotonic()
    assert ts[0].late_records("rec0", [1, 2]) == {}
    assert time.monotonic() - start < min(2.0, record_s(20.0) / 2)  # (0.83 s seen for 0.25 s under -n 2 load)
    assert ts[0].alive == {0, 1, 2} and ts[0].failed == {}


def _later(delay, *steps):
    """Run ``steps`` (callables) in a thread after ``delay`` seconds; returns the thread."""
    def run():
        time.sleep(delay)
        for step in steps:
            step()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def test_the_last_records_are_read_after_the_mains_done_until_they_come():
    """The run's last two records of a reporter held to its round's end (review r31o H7, two victims: they came after
    the main's old budget, record_s + E = 2.6 s at timeout_s=4) are read after the main posted its ``done``, until they
    come: here 2.8 s after it (1.2 s before the bound, so a loaded machine does not cut them). The main's ``done`` is
    served before it reads (its peers wait for nothing)."""
    t = 4.0
    assert record_s(t) + extension_s(t) == 2.6  # (the old budget the records now come after)
    ts, _ = _ranks(n=3, timeout_s=t)
    main, one, two = ts
    seen = []
    start = time.monotonic()  # (before the thread starts its 2.8 s sleep: the records cannot come sooner than this)
    th = _later(2.8, lambda: seen.append(main.chan.values.get("done/data/0")),
                lambda: one.collect_at_main("rec1", b"one1", [0, 1, 2]),
                lambda: one.collect_at_main("rec2", b"one2", [0, 1, 2]), lambda: one.post("done", b"1"))
    two.post("done", b"1")  # (node 2's records were in: its done is read, acknowledged, meanwhile)
    assert main.last_records({"rec1": [1], "rec2": [1]}) == {"rec1": {1: b"one1"}, "rec2": {1: b"one2"}}
    assert time.monotonic() - start >= 2.8 and seen == [b"1"]
    th.join()
    assert main.done_got == {2: b"1"} and two.chan.read_by("done/data/2", {0})
    assert main.alive == {0, 1, 2} and main.failed == {} and main.rejected == []  # (a record blames nobody)


def test_a_reporter_whose_done_is_served_without_its_records_is_read_no_longer():
    """An honest reporter posts its records before its ``done``: once its ``done`` is served, a record still missing
    never comes (read once more, then given up). Its ``done`` is looked at without the main's acknowledgement, so it
    keeps serving its records meanwhile."""
    ts, _ = _ranks(n=3, timeout_s=5.0)
    main, _, two = ts
    two.post("done", b"1")
    start = time.monotonic()
    assert main.last_records({"rec2": [2]}) == {"rec2": {}}
    assert time.monotonic() - start < 2.0  # (not the done's budget, 5 s)
    assert not two.chan.read_by("done/data/2", {0})  # (looked at, not acknowledged)
    assert main.alive == {0, 1, 2} and main.failed == {}


def test_the_last_records_of_a_reporter_that_never_serves_them_nor_its_done_end_at_timeout_s_after_the_mains_done():
    """The bound: a reporter that serves neither its records nor its ``done`` (gone, or an attacker) holds the main's
    read until ``timeout_s`` after its ``done`` post, the ``done`` exchange's own budget, which close keeps: the other
    peers' ``done`` marks are read (acknowledged) meanwhile, so none waits for the main's read of them."""
    t = 1.0
    ts, _ = _ranks(n=3, timeout_s=t)
    main, _, two = ts
    two.post("done", b"1")
    assert main.last_records({"rec1": [1], "rec2": [1]}) == {"rec1": {}, "rec2": {}}
    assert time.monotonic() - main.done_at >= t - 0.06  # (its wait ends by done_at + t, one poll)
    assert main.done_got == {2: b"1"} and two.chan.read_by("done/data/2", {0})
    assert main.failed == {}  # (a record blames nobody: close's done exchange names a missing done)


def test_a_late_read_serves_no_wait_note_and_enters_no_record_exchange():
    ts, _ = _ranks(n=3, timeout_s=1.0)
    ts[0].late_records("rec0", [1, 2])
    ts[0].last_records({"rec1": [1, 2]})
    assert "wait/rec0" not in ts[0].chan.values and "wait/rec1" not in ts[0].chan.values
    assert {"rec0", "rec1"}.isdisjoint(ts[0].exchanger.schedule.history)
