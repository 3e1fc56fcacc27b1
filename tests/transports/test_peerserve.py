"""A rank's own read-only server (transports/peerserve.py) under a peer that holds or floods connections."""

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from dgrpo.transports.peerserve import PeerChannel


def test_idle_connections_are_closed_and_reads_still_served():
    """A peer opens 50 connections to an honest rank's server and sends nothing (slowloris): a real read is
    still answered at once, and the server closes every idle connection within its 2 s request deadline
    (each recv sees the end of the stream)."""
    owner = PeerChannel(0, host="127.0.0.1")
    owner.set("r0/data", b"payload")
    reader = PeerChannel(1, host="127.0.0.1")
    reader.addrs[0] = owner.address
    host, port = owner.address.rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(50)]
    try:
        time.sleep(0.5)  # (the server has accepted them: under load a thread per connection takes a while)
        t0 = time.monotonic()
        value, problem = reader.fetch(0, "r0/data", cap=1 << 10, deadline=time.monotonic() + 5)
        assert (value, problem) == (b"payload", None) and time.monotonic() - t0 < 5
        time.sleep(2.5)
        closed = 0
        for s in idle:
            s.settimeout(3)
            closed += s.recv(1) == b""
        assert closed == 50
    finally:
        for s in idle:
            s.close()
        owner.server.shutdown()
        reader.server.shutdown()


# The honest rank's server, in its own process with a file-descriptor limit of 512 (many systems default to
# 1024): a thread-per-connection server holds a descriptor and a thread for each idle connection for 2 s.
SERVER = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    from dgrpo.transports.peerserve import PeerChannel
    chan = PeerChannel(0, host="127.0.0.1")
    chan.set("r0/data", b"payload" * 100)
    print(chan.address, flush=True)
    sys.stdin.read()  # until the test closes it
    print(getattr(chan.server, "evicted", -1), getattr(chan.server, "refused", -1), flush=True)
""")

# The attacker: opens connections to the server as fast as it can (non-blocking connects: it never waits for
# the server to accept), sending nothing, and holds the last 5000.
ATTACKER = textwrap.dedent("""
    import socket, sys, time
    host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    held, opened, end = [], 0, time.monotonic() + seconds
    while time.monotonic() < end:
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex((host, port))
        held.append(s)
        opened += 1
        if len(held) > 5000:
            held.pop(0).close()
    print(opened, flush=True)
""")


def _usage(pid: int) -> tuple[int, int]:
    """(threads, open file descriptors) of process ``pid`` (Linux /proc)."""
    threads = next(int(line.split()[1]) for line in open(f"/proc/{pid}/status") if line.startswith("Threads:"))
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def _read_rounds(readers, address: str, results: list) -> None:
    """Each reader (in its own thread) polls node 0's ``r0/data`` at ``address`` as ``collect`` does, in 4 rounds
    0.5 s apart, each within 5 s; appends (reader, round, seconds, value or None) to ``results``."""
    def read(reader):
        reader.addrs[0] = address
        for rnd in range(4):
            start = time.monotonic()
            deadline, value = start + 5, None
            while value is None and time.monotonic() < deadline:  # (collect's poll)
                value, _ = reader.fetch(0, "r0/data", cap=1 << 12, deadline=deadline)
                if value is None:
                    time.sleep(0.05)
            results.append((reader.rank, rnd, time.monotonic() - start, value))
            time.sleep(0.5)

    threads = [threading.Thread(target=read, args=(r,)) for r in readers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and epoll")
def test_a_connection_flood_does_not_starve_honest_reads():
    """A peer opens connections to an honest rank's server as fast as it can (tens of thousands in 8 s, the
    last 5000 held), sending nothing. The server (one event loop) keeps at most 256 open, evicting the
    oldest idle one: it never holds more than 40 threads or 400 descriptors (a thread-per-connection server
    reaches its 512-descriptor limit and hundreds of threads), and three honest readers (one connection per
    peer, polling as ``collect`` does) each read the payload in every one of 4 rounds within timeout_s=5."""
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = server.stdout.readline().strip()
        host, port = address.rsplit(":", 1)
        # (at nice 19: on loopback the attacker's connects take the honest server's CPU, which no remote
        # attacker gets; on a loaded 2-core CI machine, at nice 0 it out-ran the server's accepts and an
        # honest read missed its 5 s once. Its rate still comes only from CPU the server leaves idle.)
        attacker = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", ATTACKER, host, port, "8"],
                                    stdout=subprocess.PIPE, text=True)
        usage, done = [], threading.Event()

        def watch():
            while not done.is_set():
                usage.append(_usage(server.pid))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        time.sleep(1.5)  # the flood is on
        readers = [PeerChannel(k, host="127.0.0.1") for k in (1, 2, 3)]
        results: list[tuple[int, int, float, bytes | None]] = []

        _read_rounds(readers, address, results)
        opened = int(attacker.communicate(timeout=30)[0])
        done.set()
        watcher.join()
        for r in readers:
            r.close()
        server.stdin.close()
        evicted, refused = map(int, server.stdout.readline().split())
    finally:
        server.kill()
    assert opened > 5000  # the flood ran
    assert max(t for t, _ in usage) <= 40 and max(f for _, f in usage) <= 400, (max(usage), max(usage, key=lambda u: u[1]))
    assert len(results) == 12
    assert all(v == b"payload" * 100 for _, _, _, v in results), [(k, r, round(s, 2)) for k, r, s, v in results if v is None]
    assert max(s for _, _, s, _ in results) < 5
    assert evicted + refused > 1000  # (the server closed the flood's connections)


def test_trickled_requests_and_slow_reads_hold_nothing_honest_readers_need():
    """Review r31c F1: a peer opens 24 connections to an honest rank's server and trickles its requests one
    byte per connection every 0.5 s (reopening any the server closes), and 4 more that send a whole request
    for a 4 MiB value and read the answer one byte every 0.2 s. A worker pool with a per-recv timeout is held
    by these for ever (the trickle restarts the timeout), so honest reads time out and the honest rank is
    expelled. Here 3 honest readers each read the payload in every one of 4 rounds within 1.5 s, and the
    server closes each trickled request within its 2 s total deadline (not per byte)."""
    owner = PeerChannel(0, host="127.0.0.1")
    owner.set("r0/data", b"payload" * 100)
    owner.set("r0/big", b"x" * (4 << 20))
    host, port = owner.address.rsplit(":", 1)
    stop, lifetimes = threading.Event(), []

    def trickle():
        socks: dict[socket.socket, float] = {}
        while not stop.is_set():
            while len(socks) < 24:
                try:
                    socks[socket.create_connection((host, int(port)), timeout=1)] = time.monotonic()
                except OSError:
                    time.sleep(0.05)
            for s in list(socks):
                try:
                    s.sendall(b"G")
                except OSError:  # the server closed it
                    lifetimes.append(time.monotonic() - socks.pop(s))
                    s.close()
            stop.wait(0.5)
        for s in socks:
            s.close()

    def slow_read():
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((host, int(port)))
        s.sendall(b"GET /v/r0%2Fbig HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(1)
        try:
            while not stop.is_set() and s.recv(1):
                stop.wait(0.2)
        except OSError:
            pass
        s.close()

    attackers = [threading.Thread(target=trickle)] + [threading.Thread(target=slow_read) for _ in range(4)]
    for t in attackers:
        t.start()
    readers = [PeerChannel(k, host="127.0.0.1") for k in (1, 2, 3)]
    results: list[tuple[int, int, float, bytes | None]] = []
    try:
        time.sleep(2.5)  # (every trickled connection has sent bytes: a worker-pool server is held now)

        _read_rounds(readers, owner.address, results)
    finally:
        stop.set()
        for t in attackers:
            t.join()
        for r in [*readers, owner]:
            r.close()
    assert len(results) == 12
    assert all(v == b"payload" * 100 for *_, v in results), [(k, r, round(s, 2)) for k, r, s, v in results if v is None]
    assert max(s for _, _, s, _ in results) < 1.5, sorted(round(s, 2) for _, _, s, _ in results)
    assert len(lifetimes) >= 24 and max(lifetimes) < 3.5, (len(lifetimes), max(lifetimes, default=None))
