"""A joiner's rule for the swarm's launch records (``dgrpo.transports.dht.joining.LaunchBook``, review r31h F11): no
single node's signed record decides the launch, the round, the live nodes or an agreed value; a lone lie is named
under its signer; two records one key signed for one launch that differ are a proof. Pure: no DHT (the whole runs:
test_hivemind.py::test_one_nodes_lying_launch_record_neither_stops_nor_splits_off_a_joiner_and_is_named)."""

import json

import pytest

from dgrpo.transports.dht.joining import LaunchBook, parse_claim

ROSTER = {str(n): f"{n}" * 64 for n in range(4)}
RUN = "0123456789abcdef"
FP = "fedcba9876543210"


def record(round_idx, run=RUN, alive=(0, 1, 2), agreed=None, config=FP, roster=None, **extra) -> bytes:
    """A launch record as ``publish_launch`` writes it (initial nodes 0-2 of 4; node 3 joins)."""
    return json.dumps({"run": run, "roster": ROSTER if roster is None else roster, "config": config, "alive": list(alive),
                       "round": round_idx, "agreed": {"name": "run-a"} if agreed is None else agreed, **extra}).encode()


def book_of(*bodies, expected=(0, 1, 2)) -> LaunchBook:
    """A joiner's book after reading ``bodies[k]`` from node k (None: nothing from it)."""
    book = LaunchBook(expected, 4)
    for node, body in enumerate(bodies):
        if body is not None:
            book.add(node, body, f"{node:x}" * 128)
    return book


def reasons(book, j):
    return {n: r for n, r in book.named(j)}


def test_a_round_one_node_claims_neither_stops_the_joiner_nor_is_believed_and_names_that_node():
    """The r31h repro's first lie: node 2 at round 10**6. Before, the joiner took the highest round and stopped."""
    book = book_of(record(1), record(1), record(10**6))
    j = book.decide()
    assert (j.run, j.round, j.at_round, j.backers, j.need) == (RUN, 1, [0, 1], [0, 1, 2], 2)
    assert reasons(book, j) == {2: "launch: its signed launch record puts the swarm at round 1000000 where nodes 0, 1 "
                                   "put it at round 1: a lone claim, ignored"}


def test_a_launch_one_node_names_is_not_entered_and_names_that_node():
    """The r31h repro's second lie: node 2 names launch ffff… at a higher round. Before, the joiner entered it alone."""
    book = book_of(record(1), record(1), record(2, run="f" * 16))
    j = book.decide()
    assert (j.run, j.round, j.backers) == (RUN, 1, [0, 1])
    assert reasons(book, j) == {2: "launch: its signed launch record names launch ffffffffffffffff where nodes 0, 1 (more "
                                   "than half of the 3 nodes [0, 1, 2]) agree on launch 0123456789abcdef: a lone claim, "
                                   "ignored"}


@pytest.mark.parametrize("bodies, want", [
    ((record(3), record(3), record(-1)), 3),  # a lone low round cannot hold the joiner back
    ((record(3), record(2), record(10**6)), 3),  # the 2nd highest of three
    ((record(2), record(1), record(1)), 1),  # honest nodes one round apart: the quorum's is the lower
    ((record(4), None, record(4)), 4),  # node 1 silent: nodes 0 and 2 are a quorum of 3
])
def test_the_round_is_the_highest_that_more_than_half_of_the_expected_nodes_reach(bodies, want):
    book = book_of(*bodies)
    assert book.decide().round == want
    if want != 3 or bodies[1] != record(2):  # (the 10**6 case names node 2, above)
        assert book.named(book.decide()) == []  # an honest node one round ahead is not named


@pytest.mark.parametrize("bodies", [(None, None, record(5)), (record(5), None, None), (record(1), record(1, run="e" * 16),
                                                                                     record(1, run="f" * 16))])
def test_without_more_than_half_of_the_expected_nodes_naming_one_launch_nothing_is_decided(bodies):
    book = book_of(*bodies)
    assert book.decide() is None and book.named(None) == []
    assert "node" in book.summary()


def test_a_lone_record_cannot_take_a_live_node_out_but_a_quorum_can():
    j = book_of(record(1), record(1), record(1, alive=[2])).decide()
    assert j.alive == [0, 1, 2]  # node 2 alone leaves nodes 0 and 1 out: they stay
    j = book_of(record(1, alive=[0, 1]), record(1, alive=[0, 1]), record(1, alive=[0, 1, 2])).decide()
    assert j.alive == [0, 1]  # nodes 0-1 dropped node 2 (it still lists itself)
    j = book_of(record(1, alive=[0, 1]), record(0, alive=[0, 1, 2]), record(1)).decide()
    assert j.alive == [0, 1, 2]  # one record left node 2 out: kept (a dead node costs the joiner one payload phase)


def test_an_agreed_value_is_the_quorums_and_another_one_is_named():
    """The run name messages are signed for: node 2 gives another (the reviewer's ``launchname``)."""
    book = book_of(record(1), record(1), record(1, agreed={"name": "/tmp/evil"}))
    j = book.decide()
    assert j.agreed == {"name": "run-a"} and j.backers == [0, 1, 2]
    assert reasons(book, j) == {2: "launch: its signed launch record gives name='/tmp/evil' where nodes 0, 1 (more than "
                                   "half of the 3 nodes [0, 1, 2]) agree on 'run-a': a lone claim, ignored"}
    book = book_of(record(1, agreed={}), record(1, agreed={}), record(1, agreed={"name": "/tmp/evil"}))
    j = book.decide()  # (a config with `name` set agrees none)
    assert j.agreed == {} and reasons(book, j)[2].endswith("[0, 1, 2]) give none: a lone claim, ignored")
    book = book_of(record(1), record(-1, agreed={}), record(1, agreed={"name": "other"}))
    j = book.decide()  # node 1's record is of before the name was agreed: nobody can tell who lies, nobody is named
    assert j.agreed == {} and j.backers == [0, 1, 2] and book.named(j) == []


def test_two_records_one_key_signed_for_one_launch_that_differ_are_a_proof_and_void_its_votes():
    book = book_of(record(1), record(1))
    book.add(2, record(0), "a" * 128)
    book.add(2, record(1, agreed={"name": "other"}), "b" * 128)
    j = book.decide()
    assert j.backers == [0, 1] and 2 in book.proofs
    assert reasons(book, j) == {2: f"launch: it signed two launch records for launch {RUN} that differ in agreed 'name' "
                                   f"(signatures {'a' * 16}… and {'b' * 16}…, both verify under its key: an honest node's "
                                   "are fixed for its launch); its records are ignored"}
    for what, other in (("config", record(1, config="0" * 16)), ("roster", record(1, roster={**ROSTER, "3": "f" * 64}))):
        book = book_of(record(1), record(1), record(1))
        book.add(1, other, "c" * 128)
        assert book.proofs[1][2] == what and book.decide().backers == [0, 2]


def test_records_of_two_launch_ids_from_one_key_prove_nothing():
    """Anyone may store a node's record of an earlier launch in this namespace again: the latest one read is its vote."""
    book = book_of(record(1), record(1), record(1))
    book.add(2, record(7, run="e" * 16), "d" * 128)
    j = book.decide()
    assert not book.proofs and j.backers == [0, 1] and [n for n, _ in book.named(j)] == [2]
    book.add(2, record(2), "e" * 128)
    assert book.decide().backers == [0, 1, 2] and book.named(book.decide()) == []


def test_a_record_of_another_launch_from_a_node_outside_the_launch_is_not_named():
    """Node 2 was left out at launch (it lists in nobody's live nodes): its record of an earlier launch is stale."""
    book = book_of(record(1, alive=[0, 1]), record(1, alive=[0, 1]), record(9, run="e" * 16))
    j = book.decide()
    assert j.alive == [0, 1] and book.named(j) == []


@pytest.mark.parametrize("body, why", [
    (b"[1", "not JSON"), (b"[]", "not a JSON object"), (record(True), "round True is not an integer >= -1"),
    (record(-5), "round -5 is not an integer >= -1"), (record(1, alive=[7]), "alive is not a list of node ids in 0..3"),
    (record(1, agreed={"name": 1}), "an agreed value is not text"), (record(1, agreed={"Name\n": "x"}), "an agreed value"),
    (record(1, roster={"x": "y"}), "roster is not node id"), (record(1, run="launch\nX"), "run or config is not 1 to 64"),
    (record(1, config="f" * 65), "run or config is not 1 to 64 letters"),
    (json.dumps({"run": RUN}).encode(), "run, config, roster or agreed missing"),
    (record(1, t="soon"), "t soon is not a number"), (record(1, t=True), "t True is not a number"),
])
def test_a_malformed_record_is_named_with_what_is_wrong(body, why):
    assert isinstance(parse_claim(body, 4), str) and parse_claim(body, 4).startswith(why)
    book = book_of(record(1), record(1), body)
    assert book.decide().backers == [0, 1] and reasons(book, book.decide())[2].startswith(f"launch: its launch record is "
                                                                                          f"malformed ({why}")


def test_records_of_nodes_not_expected_before_the_joiners_round_do_not_count():
    """Node 3 is the joiner (or joins later): its records never vote; an earlier joiner counts."""
    book = book_of(record(1), None, None, record(1))
    assert book.decide() is None and 3 not in book.latest
    book = book_of(record(1), None, None, record(1), expected=(0, 1, 3))
    assert book.decide().backers == [0, 3]


def since_book(*bodies, since=1000.0):
    """A joiner's book (started at DHT time ``since`` + CLOCK_S) after reading ``bodies[k]`` from node k in order
    (each a body or a list of bodies, read in that order)."""
    book = LaunchBook((0, 1, 2), 4, since=since)
    for node, read in enumerate(bodies):
        for body in read if isinstance(read, list) else [read]:
            book.add(node, body, f"{node:x}" * 128)
    return book


def test_records_signed_before_the_joiner_started_are_of_an_earlier_launch_ignored_and_name_nobody():
    """Issue 31 (review r31i F6 within a record's signed lifetime): node 1's record of an earlier launch E (signed
    before the joiner started, stored again by node 2) and node 2's own fresh record of E made a quorum for E: the
    joiner entered E and trained alone (or stopped: E had reached its round). Now node 1's old record is not read:
    E has node 2 alone, the launch of nodes 0-1 has the quorum once node 1's current record is read, and only the
    liar is named."""
    old_e = record(1, run="e" * 16, t=990.0)  # node 1's record of launch E, signed before the joiner started
    book = since_book(record(0, t=1001.0), old_e, record(1, run="e" * 16, t=1002.0))
    assert book.decide() is None and 1 not in book.latest and book.named(None) == []
    assert book.summary() == ("node 0: launch 0123456789abcdef round 0; node 2: launch eeeeeeeeeeeeeeee round 1; node 1: "
                              "only records signed before this node started (an earlier launch's), ignored")
    book.add(1, record(0, t=1001.5), "1" * 128)  # node 1's current record
    j = book.decide()
    assert (j.run, j.round, j.backers) == (RUN, 0, [0, 1])
    assert list(reasons(book, j)) == [2] and "names launch eeeeeeeeeeeeeeee where nodes 0, 1" in reasons(book, j)[2]
    # with the joiner's start unknown (since = -inf) the old record still counts: what the rule changes
    assert since_book(record(0, t=1001.0), old_e, record(1, run="e" * 16, t=1002.0), since=float("-inf")).decide().run \
        == "e" * 16


def test_of_each_node_the_record_signed_last_counts_whatever_the_order_read():
    """A copy of a node's earlier record (this launch's, from a DHT node that missed its refresh) read after its
    newer one does not replace it: the round stays the newer one's."""
    book = since_book(record(1, t=1005.0), [record(1, t=1005.0), record(-1, t=1001.0)], record(1, t=1005.0))
    assert book.decide().round == 1 and book.latest[1].round == 1
    book = since_book(record(1, t=1005.0), [record(-1, t=1001.0), record(1, t=1005.0)], record(-1, t=1001.0))
    assert book.decide().round == 1  # (the quorum-th highest of 1, 1, -1)
    assert since_book(record(1), record(1), record(1)).decide() is None  # records without t: of an older version
