"""The hellos of a hivemind launch (review r31g J6): two hellos one key signed are a proof naming their signer, a
replayed or relayed hello names nobody honest, and every honest node decides alike on the hellos relayed.
Real nodes: test_hivemind.py::test_a_node_storing_its_hello_again_with_fresh_nonces_is_named_at_once_by_every_node."""

import hashlib
import json
import re

import pytest

pytest.importorskip("hivemind")

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from dgrpo.transports.dht.hellos import (MAX_IDS, MAX_PROCESSES, PAIR_S, HelloBook, identity, parse_hello,  # noqa: E402
                                         proof_line, proof_record)
from dgrpo.transports.dht.records import public_hex, seal, signed_digest  # noqa: E402

KEY = "dgrpo/test-hellos/hello"
KEYS = [Ed25519PrivateKey.generate() for _ in range(4)]
PUBS = {n: public_hex(k) for n, k in enumerate(KEYS)}


def hello(node: int, nonce: str, t: float, config: str = "fp", key: str = KEY,
          process: str = "p" * 16) -> tuple[str, bytes, str]:
    """(public key, body, record signature hex) of node ``node``'s hello, signed as its launch stores it."""
    body = json.dumps({"process": process, "nonce": nonce, "config": config, "t": t}).encode()
    _, value = seal(KEYS[node], key, node, body, t + 30)
    return PUBS[node], body, value[:64].hex()


def read(book: HelloBook, node: int, nonce: str, t: float, by: int, **kw) -> bool:
    pub, body, sig = hello(node, nonce, t, **kw)
    return book.add(node, pub, body, sig, by)


def heard(book: HelloBook, process: str = "p" * 16) -> bytes:
    """The heard record of a relayer whose own hello (as its readers hold it) is of ``process``."""
    return book.quote(PUBS, process)


def test_two_hellos_of_one_key_with_different_nonces_are_a_proof_that_names_and_quotes_their_signer():
    book = HelloBook(KEY)
    assert read(book, 3, "a" * 16, 100.0, by=0) and read(book, 3, "b" * 16, 100.1, by=0)
    proofs = book.proofs(PUBS)
    assert list(proofs) == [3]
    a, b = proofs[3]
    assert (a.hello["nonce"], b.hello["nonce"]) == ("a" * 16, "b" * 16)
    line = proof_line(3, PUBS[3], a, b, reader=0)
    assert line.startswith("node 3 signed two different hellos for this launch (process pppppppppppp, nonce aaaaaaaaaaaa")
    assert re.findall(r"signature ([0-9a-f]{16})…", line) == [a.sig[:16], b.sig[:16]] and "dated 0.1 s apart" in line
    full = json.loads(proof_record(3, PUBS[3], a, b))  # anyone can check the proof: both verify under node 3's key
    assert full["node"] == 3 and full["key"] == PUBS[3]
    assert all(signed_digest(KEY, 3, PUBS[3], hashlib.sha256(body.encode("latin-1")).hexdigest(), sig)
               for body, sig in full["hellos"])
    assert not signed_digest(KEY, 2, PUBS[2], hashlib.sha256(full["hellos"][0][0].encode()).hexdigest(),
                             full["hellos"][0][1])  # (not under another node's key)
    # a third is kept too (what a node holds never depends on the order it read in: review r31k F2), still a proof
    assert read(book, 3, "c" * 16, 100.05, by=0)
    c = book.seen[3][PUBS[3]][identity(parse_hello(hello(3, "c" * 16, 100.05)[1]))]
    assert book.proofs(PUBS)[3] == (a, c)  # (the closest pair)
    assert [e[2] for e in json.loads(heard(book))["hellos"] if e[0] == 3] == [v.body.decode() for v in (a, b, c)]


def test_a_hello_that_says_another_config_is_a_second_hello_too():
    book = HelloBook(KEY)
    read(book, 1, "n" * 16, 50.0, by=0)
    read(book, 1, "n" * 16, 51.0, by=0, config="other")
    assert [v.hello["config"] for v in book.proofs(PUBS)[1]] == ["fp", "other"]


def test_a_refreshed_hello_is_one_hello_and_the_newest_version_is_kept():
    book = HelloBook(KEY)
    assert read(book, 0, "n" * 16, 10.0, by=0)
    assert not read(book, 0, "n" * 16, 20.0, by=0) and not read(book, 0, "n" * 16, 15.0, by=1)  # (says nothing new)
    assert book.proofs(PUBS) == {} and book.nonces(0, PUBS[0]) == ["n" * 16]
    assert book.chosen(0, PUBS[0]) == {"process": "p" * 16, "nonce": "n" * 16, "config": "fp", "t": 20.0}


def test_a_hello_of_an_earlier_launch_proves_nothing_and_the_newest_hello_is_taken():
    """Anyone can store a node's old hello again: dated over PAIR_S before its current one, it names nobody."""
    book = HelloBook(KEY)
    read(book, 2, "old" * 4, 1000.0, by=1)
    read(book, 2, "new" * 4, 1000.0 + PAIR_S + 0.5, by=0)
    assert book.proofs(PUBS) == {} and book.chosen(2, PUBS[2])["nonce"] == "new" * 4
    read(book, 2, "mid" * 4, 1000.0 + PAIR_S, by=0)  # (within PAIR_S of both: a proof, the closest pair)
    assert [v.hello["nonce"] for v in book.proofs(PUBS)[2]] == ["mid" * 4, "new" * 4]


def _body(**fields) -> bytes:
    """A well-formed hello's bytes with ``fields`` changed (a field given as None is left out)."""
    hello = {"process": "p", "nonce": "n", "config": "fp", "t": 1, **fields}
    return json.dumps({k: v for k, v in hello.items() if v is not None}).encode()


@pytest.mark.parametrize("body", [b"", b"[]", b"not json", _body(t=None), _body(process=None), _body(process=""),
                                  _body(process=5), _body(process="p" * 65),
                                  _body(t=True), _body(t=float("nan")), _body(nonce=""), _body(nonce=5),
                                  _body(nonce="n" * 65), _body(config="x" * 600)])
def test_a_malformed_hello_is_not_kept(body):
    assert parse_hello(_body()) == {"process": "p", "nonce": "n", "config": "fp", "t": 1}  # (the well-formed one)
    assert parse_hello(body) is None
    book = HelloBook(KEY)
    assert not book.add(0, PUBS[0], body, "0" * 128, 0) and book.chosen(0, PUBS[0]) is None


def test_identity_is_everything_but_the_date():
    assert identity({"t": 1, "nonce": "a", "config": "c"}) == identity({"config": "c", "nonce": "a", "t": 2})
    assert identity({"t": 1, "nonce": "a", "config": "c", "x": 1}) != identity({"t": 1, "nonce": "a", "config": "c"})


def test_a_relay_takes_only_hellos_their_node_signed_and_never_the_relayer_s_own():
    relayer = HelloBook(KEY)
    read(relayer, 3, "b" * 16, 100.1, by=1)
    read(relayer, 1, "z" * 16, 99.2, by=1)  # a hello of the relayer itself: taken by nobody from its relay
    record = json.loads(heard(relayer))
    pub, body, _ = hello(0, "d" * 16, 99.5)
    record["hellos"] += [[0, pub, body.decode("latin-1"), "ab" * 64],  # forged: node 0 never signed it
                         [2, PUBS[3], hello(3, "e" * 16, 100.2)[1].decode(), hello(3, "e" * 16, 100.2)[2]],  # wrong key
                         ["0", PUBS[0], "x", "y"]]
    book = HelloBook(KEY)
    read(book, 3, "a" * 16, 100.0, by=0)
    read(book, 1, "c" * 16, 99.0, by=0)  # the relayer's hello as this node read it
    bad = book.take(1, json.dumps(record).encode(), PUBS)
    assert bad == ["a hello of node 0 that node 0 did not sign", "an entry that is not [node, key, body, signature]"]
    assert book.nonces(1, PUBS[1]) == ["c" * 16] and book.chosen(0, PUBS[0]) is None and book.chosen(2, PUBS[2]) is None
    assert [(v.hello["nonce"], v.by) for v in book.proofs(PUBS)[3]] == [("a" * 16, 0), ("b" * 16, 1)]
    assert book.take(1, b"[1, 2]", PUBS) == ['its heard record is not {"hellos": [...]}']


def _decide(direct: dict[int, list[tuple]], attacker_shows: dict[int, list] | None = None):
    """Each honest node (0-2) reads node 3's hellos ``direct[node]`` (nonce, t) and every honest node's hello, relays
    them, and takes every relay: node 3's heard record as it shows it to that node (``attacker_shows[node]``: entries).
    Returns each honest node's (proofs: node → nonces, chosen nonce of every node)."""
    books = {n: HelloBook(KEY) for n in range(3)}
    for n, book in books.items():
        for k in range(3):
            read(book, k, f"honest{k}".ljust(16, "0"), 10.0, by=n)
        for nonce, t, *process in direct[n]:  # ((nonce, t) or (nonce, t, process))
            read(book, 3, nonce, t, by=n, process=process[0] if process else "p" * 16)
    relays = {n: heard(book) for n, book in books.items()}
    out = []
    for n, book in books.items():
        for j in range(3):
            if j != n:
                book.take(j, relays[j], PUBS)
        shown = {"process": book.chosen(3, PUBS[3])["process"], "hellos": (attacker_shows or {}).get(n, [])}
        book.take(3, json.dumps(shown).encode(), PUBS)  # (of the process of node 3's hello as this node holds it)
        out.append(({k: [v.hello["nonce"] for v in p] for k, p in book.proofs(PUBS).items()},
                    [book.chosen(k, PUBS[k])["nonce"] for k in range(4)]))
    return out


def _entry(node, nonce, t, process="p" * 16):
    pub, body, sig = hello(node, nonce, t, process=process)
    return [node, pub, body.decode("latin-1"), sig]


def test_every_honest_node_decides_alike_whatever_node_3_shows_each():
    x, y = "x" * 16, "y" * 16
    # the J6 attack: the honest nodes read different hellos of node 3: a proof at every one of them
    split = _decide({0: [(x, 100.0)], 1: [(y, 100.1)], 2: [(y, 100.1)]})
    assert split[0] == split[1] == split[2] and split[0][0] == {3: [x, y]}
    # all read one hello; node 3 relays another of its own, and an old hello of honest node 1, to node 0 only
    alike = _decide({n: [(x, 100.0)] for n in range(3)},
                    {0: [_entry(3, y, 100.1), _entry(1, "old1".ljust(16, "0"), 10.0 - PAIR_S - 1)]})
    assert alike[0] == alike[1] == alike[2] == ({}, ["honest0".ljust(16, "0"), "honest1".ljust(16, "0"),
                                                     "honest2".ljust(16, "0"), x])
    # two hellos dated far apart, read by different honest nodes: no proof, the newest at every node
    apart = _decide({0: [(x, 100.0)], 1: [(y, 100.0 + PAIR_S + 1)], 2: [(x, 100.0)]})
    assert apart[0] == apart[1] == apart[2] and apart[0][0] == {} and apart[0][1][3] == y


HONEST = ["honest0".ljust(16, "0"), "honest1".ljust(16, "0"), "honest2".ljust(16, "0")]


@pytest.mark.parametrize("shown_to", [[0], [0, 1, 2]])
def test_an_honest_nodes_hello_of_its_previous_process_relayed_next_to_its_current_one_proves_nothing(shown_to):
    """Review r31i F5: launches back to back; node 3 relays honest node 1's hello of its previous process (another
    nonce, dated 8 s before its current one: within PAIR_S) to some or all honest nodes. Before, the two were a
    "proof" that node 1 signed two hellos, and every honest node stopped naming it. Now the previous process's hello
    (another ``process``) proves nothing: nobody is named and every node takes node 1's current hello."""
    old = _entry(1, "old1".ljust(16, "0"), 10.0 - 8.0, process="q" * 16)
    out = _decide({n: [("x" * 16, 10.0)] for n in range(3)}, {n: [old] for n in shown_to})
    assert out[0] == out[1] == out[2] == ({}, HONEST + ["x" * 16])
    book = HelloBook(KEY)  # (the same two hellos of one process would be a proof: the window is not what saves it)
    read(book, 1, HONEST[1], 10.0, by=0)
    read(book, 1, "old1".ljust(16, "0"), 10.0 - 8.0, by=0)
    assert [v.hello["nonce"] for v in book.proofs(PUBS)[1]] == ["old1".ljust(16, "0"), HONEST[1]]


def test_two_hellos_of_one_process_are_still_a_proof_wherever_the_attacker_shows_them():
    """A node that signs two different hellos in one process is named by every honest node alike when only node 0
    read the second (its relay carries it to all); the second shown in node 3's own relay alone is taken by nobody
    (no proof, no split); hellos of fresh processes prove nothing and every node takes the newest alike."""
    x, y = "x" * 16, "y" * 16
    relayed = _decide({n: [(x, 100.0)] for n in range(3)}, {0: [_entry(3, y, 100.2)]})
    assert relayed[0] == ({}, HONEST + [x])  # (a node's own relay of its hellos is never taken: no proof, no split)
    assert relayed[0] == relayed[1] == relayed[2]
    read_by_one = _decide({0: [(x, 100.0), (y, 100.2)], 1: [(x, 100.0)], 2: [(x, 100.0)]})
    assert read_by_one[0] == read_by_one[1] == read_by_one[2] and read_by_one[0][0] == {3: [x, y]}
    # with a fresh process for each hello nothing proves it, and every node takes its newest hello alike
    fresh = _decide({0: [(x, 100.0, "r" * 16)], 1: [(y, 100.2, "s" * 16)], 2: [(x, 100.0, "r" * 16)]})
    assert fresh[0] == fresh[1] == fresh[2] == ({}, HONEST + [y])


def test_a_heard_record_of_the_relayers_earlier_process_is_ignored_and_names_nobody():
    """Issue 31 (review r31i F4 within a record's signed lifetime): node 1's heard record of its earlier process
    (another launch), stored again by anyone, relays what that process read: before, a reader took it in place of
    node 1's current one and missed what node 1 read now (a split hello set, a stop at the start barrier). Now a
    reader takes a heard record only of the process whose hello it holds for its relayer: the earlier one (and one
    without a process) is ignored, nothing of it is taken and nothing named; the current one is taken."""
    old_reader = HelloBook(KEY)  # node 1's earlier process read node 3's hello "o" (dated 500 s back)
    read(old_reader, 3, "o" * 16, 10.0 - 500, by=1, process="q" * 16)
    stale = heard(old_reader, process="old1".ljust(16, "0"))
    now_reader = HelloBook(KEY)  # node 1's current process read node 3's hello "y" alone
    read(now_reader, 3, "y" * 16, 10.5, by=1, process="s" * 16)
    current = heard(now_reader, process="p" * 16)
    book = HelloBook(KEY)  # node 0: holds node 1's current hello (process p…) and node 3's "x"
    read(book, 1, HONEST[1], 10.0, by=0)
    read(book, 3, "x" * 16, 10.0, by=0, process="r" * 16)
    assert book.take(1, stale, PUBS) is None  # (another process of node 1: ignored)
    no_process = json.dumps({"hellos": json.loads(current)["hellos"]}).encode()
    assert book.take(1, no_process, PUBS) is None
    assert book.nonces(3, PUBS[3]) == ["x" * 16]  # nothing of either was taken
    assert book.take(1, current, PUBS) == []  # the current one is taken: node 3's hello "y" of node 1's reads
    assert book.nonces(3, PUBS[3]) == ["x" * 16, "y" * 16] and book.chosen(3, PUBS[3])["nonce"] == "y" * 16
    assert book.proofs(PUBS) == {}
    assert book.take(2, current, PUBS) is None  # (node 2's hello is not held: no process to match yet)


def test_hellos_of_more_than_max_processes_processes_within_pair_s_are_a_proof_naming_their_signer():
    """Issue 31 (a flood of hellos under fresh process ids): 4 processes of node 3 dated within 0.3 s prove it;
    every signature of the proof verifies under node 3's key. 3 processes, or 4 spread over more than PAIR_S, prove
    nothing (an honest node restarted: its previous and current processes)."""
    assert MAX_PROCESSES == 3
    book = HelloBook(KEY)
    for k in range(3):
        read(book, 3, f"n{k}".ljust(16, "0"), 100.0 + 0.1 * k, by=0, process=f"p{k}".ljust(16, "0"))
    assert book.proofs(PUBS) == {}  # (three processes within PAIR_S: no proof)
    assert read(book, 3, "n3".ljust(16, "0"), 100.3, by=0, process="p3".ljust(16, "0"))
    proof = book.proofs(PUBS)[3]
    assert [v.hello["process"][:2] for v in proof] == ["p0", "p1", "p2", "p3"]
    line = proof_line(3, PUBS[3], *proof, reader=0)
    assert line.startswith("node 3 signed hellos of 4 different processes within 0.3 s for this launch (process p0")
    assert len(re.findall(r"signature [0-9a-f]{16}…", line)) == 4 and "a flood of hellos" in line
    full = json.loads(proof_record(3, PUBS[3], *proof))
    assert len(full["hellos"]) == 4 and all(signed_digest(KEY, 3, PUBS[3], hashlib.sha256(body.encode("latin-1"))
                                                          .hexdigest(), sig) for body, sig in full["hellos"])
    assert read(book, 3, "n4".ljust(16, "0"), 100.4, by=0, process="p4".ljust(16, "0"))  # (kept: still the proof)
    assert book.proofs(PUBS)[3] == proof
    spread = HelloBook(KEY)  # four processes, but no PAIR_S holds more than three
    for k, t in enumerate((0.0, 12.0, 24.0, 36.0)):
        read(spread, 3, f"n{k}".ljust(16, "0"), 100.0 + t, by=0, process=f"p{k}".ljust(16, "0"))
    assert spread.proofs(PUBS) == {} and spread.chosen(3, PUBS[3])["nonce"] == "n3".ljust(16, "0")


def test_a_flood_of_fresh_process_hellos_read_in_different_parts_is_a_proof_at_every_honest_node():
    """The flood: node 3 signs a hello under a fresh process id every 0.1 s; node 0 read the first 64, node 1 the next
    64, node 2 the last one. Before, node 0 and node 1 kept only 64 each (their own), refused the relayed ones, and
    chose different newest hellos (the launch ids differed: a stop at the start barrier naming nobody, after
    startup_timeout_s). Now each holds a proof from its own reads (or from the relays) and names node 3 alike."""
    flood = [(f"f{k}".ljust(16, "0"), 100.0 + 0.1 * k, f"q{k}".ljust(16, "0")) for k in range(129)]
    out = _decide({0: flood[:64], 1: flood[64:128], 2: flood[128:]})
    assert [set(proofs) for proofs, _ in out] == [{3}, {3}, {3}]
    assert all(len(proofs[3]) == MAX_PROCESSES + 1 for proofs, _ in out)


@pytest.mark.parametrize("relay_first", [True, False])
def test_hellos_of_64_earlier_processes_relayed_do_not_keep_a_nodes_current_hello_out(relay_first):
    """Review r31j F8: node 3 relays node 1's signed hellos of 64 earlier processes (hourly launches, another config),
    read by node 0 before (or after) node 1's current hello. Before, a book kept the first 64 hellos of a key and
    refused every later one: node 0 refused the current hello and chose the newest old one (another nonce and
    config: two launch ids, a stop at the start barrier). Now the 64 newest are kept: the oldest makes room, the
    current hello is node 1's choice and the same 64 are kept in either order, and nothing is a proof."""
    assert MAX_IDS == 64
    book = HelloBook(KEY)
    read(book, 3, "r" * 16, 1e6 - 5, by=0, process="3" * 16)  # (node 3's hello: its heard record counts for it)
    relayer = HelloBook(KEY)
    for k in range(64):
        read(relayer, 1, f"{k:016x}", 1000.0 + 3600 * k, by=3, process=f"{k:016x}", config="old")
    relay = relayer.quote({1: PUBS[1], 3: PUBS[3]}, "3" * 16)
    if relay_first:
        assert book.take(3, relay, PUBS) == []
    assert read(book, 1, "c" * 16, 1e6, by=0, process="e" * 16)
    if not relay_first:
        assert book.take(3, relay, PUBS) == []
    assert book.chosen(1, PUBS[1]) == {"process": "e" * 16, "nonce": "c" * 16, "config": "fp", "t": 1e6}
    kept = sorted(book.seen[1][PUBS[1]].values(), key=lambda v: v.t)
    assert len(kept) == 64 and kept[0].hello["nonce"] == f"{1:016x}"  # (the oldest, process 0, made room)
    assert book.proofs(PUBS) == {}
    assert not read(book, 1, "z" * 16, 999.0, by=0, process="z" * 16)  # (older than all 64 kept: dropped)


DAY = 86400.0
CRASH_LOOP = [("old1".ljust(16, f"{k}"), 10.0 - 3 * DAY + 8.0 * k, f"crash{k}".ljust(16, "0")) for k in range(4)]


@pytest.mark.parametrize("shown_to", [[0], [0, 1, 2]])
def test_an_honest_nodes_old_crash_loop_relayed_in_a_later_launch_proves_nothing(shown_to):
    """Review r31k F2: honest node 1 once ran 4 processes within 24 s (a crash loop, 3 days before this launch); node
    3 kept their signed hellos and relays them in its heard record of this launch, to some or all honest nodes.
    Before, 4 processes dated within PAIR_S anywhere were a proof: every honest node stopped at start-up naming honest
    node 1 (real nodes: exit codes [3, 3, 3, 3]). Now only hellos within PAIR_S of the key's newest hello (node 1's
    current process) count: nobody is named and every node takes node 1's current hello; a flood of node 3's in this
    launch, next to the replay, is still a proof naming node 3 alone at every honest node."""
    old = [_entry(1, nonce, t, process) for nonce, t, process in CRASH_LOOP]
    out = _decide({n: [("x" * 16, 10.0)] for n in range(3)}, {n: old for n in shown_to})
    assert out[0] == out[1] == out[2] == ({}, HONEST + ["x" * 16])
    flood = [(f"f{k}".ljust(16, "0"), 10.0 + 0.1 * k, f"q{k}".ljust(16, "0")) for k in range(4)]
    flooded = _decide({n: flood for n in range(3)}, {n: old for n in shown_to})
    assert flooded[0] == flooded[1] == flooded[2] and flooded[0][0] == {3: [f[0] for f in flood]}


def test_processes_count_only_within_pair_s_of_the_keys_newest_hello():
    """The window of the flood rule ends at the key's newest hello: 3 earlier processes dated 34-58 s before the
    current one (a crash loop before this launch) prove nothing; 3 within PAIR_S before it (the current process the
    4th: a crash loop now) are a proof, as before."""
    book = HelloBook(KEY)
    for k in range(3):
        read(book, 1, f"e{k}".ljust(16, "0"), 100.0 - PAIR_S - 1 - 12.0 * k, by=0, process=f"e{k}".ljust(16, "0"))
    read(book, 1, HONEST[1], 100.0, by=0, process="c" * 16)
    assert book.proofs(PUBS) == {} and book.chosen(1, PUBS[1])["nonce"] == HONEST[1]
    for k in range(3):
        read(book, 1, f"l{k}".ljust(16, "0"), 100.0 - 5.0 - 8.0 * k, by=0, process=f"l{k}".ljust(16, "0"))
    assert [v.hello["process"][0] for v in book.proofs(PUBS)[1]] == ["l", "l", "l", "c"]


@pytest.mark.parametrize("order", ["newest_first", "newest_last"])
def test_a_node_that_floods_then_signs_a_newer_hello_is_decided_alike_in_any_order(order):
    """Every honest node holds what the honest nodes read, whatever the order (a proof no longer stops a book taking
    newer hellos, review r31k F2): node 3 floods 4 processes at t=100, then signs a hello dated PAIR_S + 1 s later,
    read by node 0 alone (before or after the flood). The flood is then outside the window of node 3's newest hello:
    no proof at any node, and every node takes the newest hello (one launch id)."""
    flood = [(f"f{k}".ljust(16, "0"), 100.0 + 0.1 * k, f"q{k}".ljust(16, "0")) for k in range(4)]
    late = ("z" * 16, 100.3 + PAIR_S + 1, "z" * 16)
    out = _decide({0: [late] + flood if order == "newest_first" else flood + [late], 1: flood, 2: flood})
    assert out[0] == out[1] == out[2] == ({}, HONEST + ["z" * 16])
