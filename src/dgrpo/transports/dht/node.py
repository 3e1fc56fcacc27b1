"""Start this process's hivemind DHT node, or say in one line why it could not start.

hivemind runs the DHT in a forked child process that drives a libp2p daemon (``p2pd``, shipped in
hivemind's wheel). What goes wrong, and what :func:`start_dht` reports for each (users of
hivemind-based swarms meet these most):

* the daemon does not start within hivemind's 15 s on a loaded machine: the limit is
  ``swarm.hivemind.daemon_timeout_s``, and the error names it;
* no bootstrap peer answers (not started yet, wrong address or peer id, a firewall): retried until
  ``swarm.startup_timeout_s``, then the error names the addresses;
* a malformed address: named, with its field and index, before anything starts;
* the identity is already used by a running peer (two processes with one identity folder).

A bug of hivemind 1.1.12 is worked around here (issue 31): the DHT child reads its commands from a
pipe that uvloop's ``add_reader`` has made non-blocking, so a command larger than what the parent
has written into the pipe so far (a ``store`` of tens of kB on a loaded machine: a write above 4 kB
is not atomic) fails with ``BlockingIOError`` half read, and the next read of the torn stream with
``EOFError``: the DHT process dies. :class:`_BlockingReader` reads each command whole.

The child is forked before any model is loaded (the transport is built first). hivemind leaves the
child and its daemon running when the parent is killed (SIGKILL, OOM), and the daemon's unix
sockets in /tmp after a failed start (one per bootstrap retry) or a death by signal; so the child
watches its parent and ends itself and the daemon once it is gone, and the sockets live in a
private folder that is removed in every case.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

import hivemind
from hivemind.p2p.p2p_daemon_bindings.utils import P2PDaemonError
from hivemind.utils.multiaddr import Multiaddr

from dgrpo.errors import ConfigError, PeerFailure

log = logging.getLogger(__name__)


class _BlockingReader:
    """The DHT child's end of its command pipe, read in blocking mode (see the module docstring).

    The child's loop polls the pipe before each read, so a blocking read only waits for the rest of
    a command the parent is writing at that moment.
    """

    def __init__(self, conn):
        self._conn = conn

    def recv(self):
        fd = self._conn.fileno()
        was = os.get_blocking(fd)
        os.set_blocking(fd, True)
        try:
            return self._conn.recv()
        finally:
            os.set_blocking(fd, was)

    def __getattr__(self, name):  # fileno, poll, close: the connection's own (what hivemind 1.1.12's DHT.run calls)
        return getattr(self._conn, name)


class _WatchedDHT(hivemind.DHT):
    """A hivemind DHT whose child process exits when the process that started it is gone, and whose
    daemon sockets live in a private folder (hivemind leaves them in /tmp when a start fails or the
    process ends on a signal; the folder is removed whatever happened). ``validator``: its one record validator
    (in the DHT process, the copy the DHT node uses: the process is forked after it is built)."""

    def __init__(self, *args, socket_dir: str, validator, **kwargs):
        self.socket_dir, self.validator = socket_dir, validator
        super().__init__(*args, record_validators=[validator], **kwargs)

    def run(self) -> None:
        from hivemind.p2p import P2P

        P2P._UNIX_SOCKET_PREFIX = f"/unix{self.socket_dir}/"  # (hivemind 1.1.12 private; this process only: the DHT's own)
        self._inner_pipe = _BlockingReader(self._inner_pipe)  # (the child's copy; the parent only sends)
        parent = os.getppid()

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            # hivemind 1.1.12 keeps the p2pd process in DHT._node.p2p._child, private and unset until the start is
            # over (each link may be missing when the parent dies during a start): the only way to the daemon's pid
            child = getattr(getattr(getattr(self, "_node", None), "p2p", None), "_child", None)
            if child is not None and child.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGTERM)  # the p2pd daemon
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, daemon=True, name="dgrpo-parent-watch").start()
        super().run()

    def shutdown(self) -> None:
        super().shutdown()
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def check_multiaddrs(field: str, addrs: Sequence[str], need_peer_id: bool = False) -> None:
    """Raise a one-line ConfigError naming ``field[i]`` if an address does not parse (or lacks /p2p/)."""
    for i, addr in enumerate(addrs):
        try:
            parsed = Multiaddr(addr)
        except Exception as err:  # noqa: BLE001 - multiaddr raises several types
            raise ConfigError(f"{field}[{i}]={addr!r} is not a multiaddr ({err}); expected e.g. "
                              "/ip4/203.0.113.5/tcp/31337" + ("/p2p/12D3KooW…" if need_peer_id else "")) from None
        if need_peer_id and "/p2p/" not in str(parsed):
            raise ConfigError(f"{field}[{i}]={addr!r} has no /p2p/PEER_ID part: copy the full address the peer logs "
                              "at start ('listening on …')")


def start_dht(node: int, *, listen: Sequence[str], announce: Sequence[str], initial_peers: Sequence[str],
              identity_dir: Path, validator, daemon_timeout_s: float, startup_timeout_s: float,
              use_relay: bool = True, use_auto_relay: bool = False, client_mode: bool = False) -> hivemind.DHT:
    """This node's running DHT (the libp2p identity kept in ``identity_dir/p2p.key``), whose only record validator is
    ``validator`` (its attribute ``validator``: coroutines run in the DHT process reach the DHT node's copy there).

    Raises:
        ConfigError: a malformed address, or the identity is in use by another running peer.
        PeerFailure: the daemon did not start in ``daemon_timeout_s``, or no initial peer answered
            within ``startup_timeout_s`` (names them).
    """
    check_multiaddrs("swarm.hivemind.listen", listen)
    check_multiaddrs("swarm.hivemind.announce", announce)
    check_multiaddrs("swarm.hivemind.initial_peers", initial_peers, need_peer_id=True)
    identity_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + startup_timeout_s
    attempt = 0
    while True:
        attempt += 1
        start = time.monotonic()
        dht = _WatchedDHT(initial_peers=list(initial_peers) or None, host_maddrs=list(listen),
                          announce_maddrs=list(announce) or None, identity_path=str(identity_dir / "p2p.key"),
                          startup_timeout=daemon_timeout_s, use_relay=use_relay, use_auto_relay=use_auto_relay,
                          client_mode=client_mode, validator=validator, start=True, await_ready=False,
                          daemon=True, socket_dir=tempfile.mkdtemp(prefix="dgrpo-p2p-"))
        try:
            # The daemon's own limit is daemon_timeout_s; bootstrapping and the identity check come on top.
            dht.wait_until_ready(timeout=2 * daemon_timeout_s + 30)
            log.info("node %d: DHT up in %.2f s (attempt %d)", node, time.monotonic() - start, attempt)
            return dht
        except concurrent.futures.TimeoutError:
            _stop(dht)
            raise PeerFailure(f"node {node}: the DHT did not start within {2 * daemon_timeout_s + 30:g} s (p2p daemon "
                              f"limit swarm.hivemind.daemon_timeout_s={daemon_timeout_s:g}); is the machine overloaded?") from None
        except (P2PDaemonError, RuntimeError, OSError) as err:
            _stop(dht)
            text = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            if "already taken" in text:
                raise ConfigError(f"node {node}: the identity in {identity_dir} is used by a running peer: give each "
                                  "process its own swarm.hivemind.identity_dir") from None
            if "failed to start in" in text:
                raise PeerFailure(f"node {node}: the p2p daemon did not start within swarm.hivemind.daemon_timeout_s="
                                  f"{daemon_timeout_s:g}s (a loaded machine: raise it)") from None
            bootstrap = bool(initial_peers) and ("bootstrap" in text or "initial_peers" in text or "ping" in text)
            if not bootstrap:
                raise PeerFailure(f"node {node}: the p2p daemon failed to start: {text}") from None
            if time.monotonic() + 1.0 >= deadline:
                raise PeerFailure(f"node {node} could not reach any bootstrap peer within swarm.startup_timeout_s="
                                  f"{startup_timeout_s:g}s ({attempt} attempts): {', '.join(initial_peers)} "
                                  "(is a peer running there, reachable through firewalls/NAT, with that peer id?)") from None
            if attempt == 1:
                log.info("node %d: no bootstrap peer answers yet (%s); retrying until swarm.startup_timeout_s", node, text)
            time.sleep(1.0)


def _stop(dht: hivemind.DHT) -> None:
    try:
        dht.shutdown()
    except Exception:  # noqa: BLE001 - a child that failed to start may already be gone
        pass
    if dht.is_alive():
        dht.terminate()
    shutil.rmtree(dht.socket_dir, ignore_errors=True)
