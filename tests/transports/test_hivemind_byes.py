"""A hivemind node's bye carries its stop reason, and a peer's failure line quotes it (transports/dht/byes.py;
task h31q3). No DHT: the record's value and the line; the DHT round trip is in test_hivemind_transport.py."""

from dgrpo.transports.dht import byes


def test_a_bye_carries_the_stop_reason_and_the_line_quotes_it_on_one_line():
    why = "node 3 sent nothing for exchange 'r2' within swarm.timeout_s=20s (dead or stalled)"
    assert byes.body(None) == b"bye" and byes.why_of(b"bye") is None  # (a bye that says nothing, as before)
    assert byes.why_of(byes.body(why)) == why
    line = byes.failed_line([1], "r3", {1: byes.why_of(byes.body(why))}, "", "swarm.timeout_s=20s")
    assert line == (f"node 1 left the swarm during exchange 'r3' (stopped on an error); node 1 stopped first, saying "
                    f"(signed): \"{why}\"")
    hostile = byes.why_of(b"bye\n" + b"a\nb\x1b[2J \"q\" " + b"x" * 5000)
    assert hostile.startswith("a b [2J 'q' x") and "\n" not in hostile and len(hostile) == byes.WHY_CHARS
    assert byes.why_of(b"junk") is None and byes.why_of(None) is None


def test_a_peer_that_said_nothing_is_named_as_before():
    limit = "swarm.timeout_s=20s"
    assert byes.failed_line([1, 2], "r0", {1: "x"}, "", limit) == (
        "nodes 1, 2 sent nothing for exchange 'r0' within swarm.timeout_s=20s (dead or stalled); node 1 stopped first, "
        "saying (signed): \"x\"")
    assert byes.failed_line([2], "r0", {}, "", limit) == ("node 2 sent nothing for exchange 'r0' within "
                                                          "swarm.timeout_s=20s (dead or stalled)")
    assert byes.failed_line([2], "eq0", {2: None}, "sent a malformed view", limit) == (
        "node 2 sent a malformed view in exchange 'eq0'")
