"""Every read of a peer's server ends by its deadline whatever that server sends or withholds (review r31h F1, F2:
``http.client``'s timeout is per recv, so a server sending its status line or headers one byte every 0.5 s held
``PeerChannel.fetch`` for as long as its process lived, and every honest rank hung in round 1)."""

import socket
import threading
import time

import pytest

from dgrpo.transports.accusations import fetch_all
from dgrpo.transports.peerserve import PeerChannel

SLACK = 0.25  # a read may end this long after its deadline (scheduling on a loaded machine)
HEAD = b"HTTP/1.1 200 OK\r\n"


class Trickler:
    """A local server that reads each request's head and answers ``prefix`` at once, then one byte of ``drip``
    every ``gap`` seconds, for ``seconds`` at most (then it closes: a reader that does not bound its read
    returns only then)."""

    def __init__(self, prefix: bytes, drip: bytes, gap: float, seconds: float = 12.0):
        self.prefix, self.drip, self.gap, self.seconds = prefix, drip, gap, seconds
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.stop, self.threads = threading.Event(), []
        self.accepter = threading.Thread(target=self._accept, daemon=True)
        self.accepter.start()

    def _accept(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket):
        end, buf = time.monotonic() + self.seconds, b""
        try:
            conn.settimeout(2)
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(4096) or b"\r\n\r\n"
            conn.sendall(self.prefix)
            i = 0
            while not self.stop.wait(self.gap) and time.monotonic() < end:
                conn.sendall(self.drip[i % len(self.drip):][:1])
                i += 1
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.accepter.join()
        self.sock.close()
        for t in self.threads:
            t.join()


def _reader(owner_address: str) -> PeerChannel:
    reader = PeerChannel(1, host="127.0.0.1")
    reader.addrs[0] = owner_address
    return reader


CASES = {  # what the peer's server answers: the prefix at once, then a byte every gap seconds, never finishing
    "status line": (b"HTTP/1.1 2", b"00 OK", 0.4),
    "headers": (HEAD, b"X-Pad: " + b"x" * 64, 0.4),
    "body": (HEAD + b"Content-Length: 1000\r\n\r\n", b"{", 0.9),  # (0.9 s: inside a 1 s per-recv timeout)
}


@pytest.mark.parametrize("part", list(CASES))
def test_a_trickled_answer_ends_by_the_deadline_and_is_named_slow(part):
    """The server sends its status line, its headers or its body one byte at a time, each within the reader's 1 s
    per-recv timeout, never finishing. Before: the status line and headers held the read until the server stopped
    (12 s here; for ever in a real swarm), the body until the first byte after the deadline (up to 0.9 s late).
    Now each read returns by min(deadline, now + budget) + 0.25 s, with the ``slow:`` problem that names the
    peer's server (as one serving too slowly), under both bounds."""
    prefix, drip, gap = CASES[part]
    server = Trickler(prefix, drip, gap)
    reader = _reader(server.address)
    try:
        for deadline_s, budget in ((1.5, 2.0), (5.0, 1.2)):  # (the deadline binds, then the budget)
            t0 = time.monotonic()
            value, problem = reader.fetch(0, "r1/data/0", cap=1 << 16, deadline=t0 + deadline_s, budget=budget)
            took = time.monotonic() - t0
            assert value is None and problem == f"slow: r1/data/0 not served within {budget:g} s", problem
            assert min(deadline_s, budget) - 0.05 <= took <= min(deadline_s, budget) + SLACK, (part, took)
    finally:
        reader.close()
        server.close()


def test_a_server_that_sends_nothing_is_not_served_by_the_deadline():
    """A server that reads the request and then withholds its answer (no byte): the read ends by its deadline
    (within the 1 s of silence a recv allows) as not served, (None, None), as before: nothing to name yet (its
    reader asks again until the exchange's deadline, then names it ``missing payload``)."""
    server = Trickler(b"", b"", 30.0)
    reader = _reader(server.address)
    try:
        for deadline_s in (0.6, 3.0):
            t0 = time.monotonic()
            assert reader.fetch(0, "r1/data/0", cap=1 << 16, deadline=t0 + deadline_s) == (None, None)
            assert time.monotonic() - t0 <= min(deadline_s, 1.0) + SLACK
    finally:
        reader.close()
        server.close()


def test_reads_of_several_servers_at_once_join_by_the_deadline():
    """``fetch_all`` (the accusations every node reads at each round's end) joins one read per peer in a thread
    pool: one server trickling its head held that join, and so the round, for ever. Now it returns by the
    deadline with the honest servers' values and the trickler named ``slow``."""
    honest = [PeerChannel(k, host="127.0.0.1") for k in (2, 3)]
    for h in honest:
        h.set("accuse", b"")
    server = Trickler(HEAD, b"X", 0.4)
    reader = PeerChannel(1, host="127.0.0.1")
    reader.addrs.update({0: server.address, 2: honest[0].address, 3: honest[1].address})
    try:
        t0 = time.monotonic()
        got = fetch_all(reader, [0, 2, 3], lambda o: "accuse", 1 << 12, t0 + 5.0, budget=1.0)
        assert time.monotonic() - t0 <= 1.0 + SLACK
        assert got == {0: (None, "slow: accuse not served within 1 s"), 2: (b"", None), 3: (b"", None)}
    finally:
        for c in (reader, *honest):
            c.close()
        server.close()


def test_a_trickled_challenge_answer_ends_within_its_2_s():
    """At start-up a reader challenges a peer's server for its launch (``answers``): a server trickling that
    answer's head held it for ever. Now the challenge ends within its 2 s, as "up but did not answer" (None:
    proves nothing either way)."""
    from dgrpo.swarm.identity import Roster, generate_keys
    from dgrpo.transports.peeraddr import AddressKeys, answers

    keys = generate_keys(2)
    server = Trickler(HEAD, b"X", 0.4)
    try:
        t0 = time.monotonic()
        assert answers(AddressKeys(1, keys[1], Roster.of(keys), "fp"), 0, server.address, "n0", 1) is None
        assert time.monotonic() - t0 <= 2.0 + SLACK
    finally:
        server.close()


def test_a_slow_resolver_holds_no_read_past_its_deadline(monkeypatch):
    """Review r31i F1: the connect called ``getaddrinfo`` (no timeout) before the deadline's clock applied, and a
    resolver taking 4 s held a 1 s read 3 s past it. Now a read resolves no name: with ``socket.getaddrinfo`` made
    to take 4 s, a read of a silent server still ends by its 1 s (+ slack), and the resolver is never asked."""
    asked = []

    def slow(*args, **kwargs):
        asked.append(args[0])
        time.sleep(4.0)
        raise socket.gaierror("slow resolver")

    server = Trickler(b"", b"", 30.0)
    reader = _reader(server.address)
    monkeypatch.setattr(socket, "getaddrinfo", slow)
    try:
        t0 = time.monotonic()
        assert reader.fetch(0, "r1/data/0", cap=1 << 16, deadline=t0 + 1.0) == (None, None)
        assert time.monotonic() - t0 <= 1.0 + SLACK and asked == []
    finally:
        reader.close()
        server.close()


def test_an_address_naming_a_host_is_refused_naming_its_signer():
    """Review r31i F1: a rank could sign a DNS name as its server's address, and its resolver then held every read
    of its keys. A record naming a host, even signed by its owner, is refused in one line naming the owner and the
    fix; IPv4 and IPv6 literals are taken as before."""
    from dgrpo.swarm.identity import Roster, generate_keys
    from dgrpo.transports.peeraddr import AddressKeys, read_address

    keys = generate_keys(2)
    owner, reader = (AddressKeys(k, keys[k], Roster.of(keys), "fp") for k in (0, 1))
    assert read_address(reader, 0, owner.record("peer.example.net:4000", "n0")) == (None, (
        "is signed by node 0 but names the host 'peer.example.net', not an IP address: node 0 must set "
        "DGRPO_SERVE_HOST to an IP"))
    assert read_address(None, 0, owner.record("localhost:4000", "n0"))[1].startswith("is from node 0 but names")
    for addr in ("10.0.0.7:4000", "::1:4000", "[fe80::1]:4000"):
        assert read_address(reader, 0, owner.record(addr, "n0")) == (f"{addr}|n0", None)


def test_a_serve_host_name_is_resolved_once_at_start_up(monkeypatch):
    """``DGRPO_SERVE_HOST`` may be a name (docs/distributed.md): it is resolved once, here, to the address this
    rank binds and signs; one that does not resolve stops the rank with one line naming the variable and the fix."""
    from dgrpo.errors import ConfigError
    from dgrpo.transports.peerserve import local_host

    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", 0))] if host == "node7.lan" else [])
    monkeypatch.setenv("DGRPO_SERVE_HOST", "node7.lan")
    assert local_host() == "10.1.2.3"
    monkeypatch.setenv("DGRPO_SERVE_HOST", "192.168.1.9")
    assert local_host() == "192.168.1.9"

    def fail(*a, **k):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    monkeypatch.setenv("DGRPO_SERVE_HOST", "nowhere.invalid")
    with pytest.raises(ConfigError, match=r"^DGRPO_SERVE_HOST='nowhere.invalid' does not resolve \(.*\): set it to "
                                          r"this machine's IP address, one its peers reach$"):
        local_host()
