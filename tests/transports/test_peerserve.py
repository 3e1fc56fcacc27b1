"""A rank's own read-only server (transports/peerserve.py) under a peer that holds connections open."""

import socket
import time

from dgrpo.transports.peerserve import PeerChannel


def test_idle_connections_are_closed_and_reads_still_served():
    """A peer opens 50 connections to an honest rank's server and sends nothing (slowloris): a real read is
    still answered at once, and the server closes every idle connection within its 2 s handler timeout
    (each recv sees the end of the stream), so no thread is tied up for longer."""
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
