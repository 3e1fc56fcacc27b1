"""The main rank reads again a round record its first read (record_s) missed (review r31o H7: a reporter whose relay
an attacker withheld posts its record ~E after the main moved on; it is still the round's metrics): a reporter keeps
its last two records served, the main's late read between rounds is one short read, and its reads of the run's last
records share one budget. In-process ranks on one HashStore (``signed_ranks``)."""

import time

import pytest

from dgrpo.transports.recordreads import LATE_READ_S
from dgrpo.transports.waits import extension_s, record_s

from signed_ranks import _ranks


def test_a_reporter_serves_its_last_two_records_and_the_main_reads_a_late_one_again():
    ts, _ = _ranks(n=3, timeout_s=1.0)
    main, one, two = ts
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
    ts, _ = _ranks(n=3, timeout_s=1.0)
    start = time.monotonic()
    assert ts[0].late_records("rec0", [1, 2]) == {}
    assert time.monotonic() - start < LATE_READ_S + 0.25
    assert ts[0].alive == {0, 1, 2} and ts[0].failed == {}


def test_the_reads_of_the_last_two_records_share_one_budget():
    """The record before the final one and the final one are read until record_s + E after the main entered the first
    of them, not E each, so a main whose reporter never posts them still enters ``done`` within its peers' wait
    (timeout_s=1: record_s=0.15 s, E=0.5 s)."""
    t = 1.0
    ts, _ = _ranks(n=3, timeout_s=t)
    start = time.monotonic()
    assert ts[0].collect_at_main("rec1", b"", [0, 1, 2]) == {}
    assert ts[0].late_records("rec1", [1], final=True) == {}
    assert record_s(t) + extension_s(t) - 0.02 < time.monotonic() - start < record_s(t) + extension_s(t) + 0.25
    ts[1].collect_at_main("rec2", b"late", [0, 1, 2])
    assert ts[0].late_records("rec2", [1], final=True) == {1: b"late"}  # (budget spent: still one short read)
    assert ts[0].late_records("rec2", [2], final=True) == {}  # (budget spent: one short read)
    assert time.monotonic() - start < record_s(t) + extension_s(t) + 2 * LATE_READ_S + 0.25


@pytest.mark.parametrize("final", [False, True])
def test_a_late_read_serves_no_wait_note_and_enters_no_exchange(final):
    ts, _ = _ranks(n=3, timeout_s=1.0)
    ts[0].late_records("rec0", [1, 2], final=final)
    assert "wait/rec0" not in ts[0].chan.values and "rec0" not in ts[0].exchanger.schedule.history
