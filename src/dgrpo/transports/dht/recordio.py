"""This node's signed records in a hivemind DHT: store, read, check against the roster, refuse
(:class:`SignedRecords`, one object the :class:`~dgrpo.transports.hivemind.HivemindTransport` holds as
``signed``; its record format and trust model: docs/hivemind.md "How a round moves", Records).

It loads light, as the transport does: hivemind is imported at the first record stored or read.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Callable

from dgrpo.registry import LazyModule

log = logging.getLogger("dgrpo.transports.hivemind")  # (the transport's log: its refusals are read there)
dht_records = LazyModule("dgrpo.transports.dht.records")
dht_time = LazyModule("hivemind.utils")


class SignedRecords:
    """Record I/O of one swarm node: its records signed with its key, its peers' checked against the roster.

    Args:
        dht: a started ``hivemind.DHT`` (the node's; stopped by its transport).
        rank: this node's id (the node id its records claim).
        signing_key: this node's Ed25519 private key (``cryptography``'s ``Ed25519PrivateKey``).
        namespace: the swarm's key space, ``dgrpo/{swarm.hivemind.run_id}`` (the start of every key).
        roster: node → Ed25519 public key (hex): the transport's roster, the same dict (its launch fills it in;
            read at each :meth:`read`, never changed here).
        refuse: called once per refusal as ``refuse(sender, reason)`` (sender -1: an unknown key); the transport
            lists it in its ``rejected``.

    Attributes:
        signing_key, rank, namespace, roster: as given.
        run_id: the launch id (set by the transport's ``enter_launch``; "" before): the second part of
            every :meth:`key`.
        stop: ``time.monotonic()`` past which no call waits (a message round's stop, within :meth:`until`;
            None: no such bound).
    """

    def __init__(self, dht, rank: int, signing_key, namespace: str, roster: dict[int, str],
                 refuse: Callable[[int, str], None]):
        self.dht, self.rank, self.signing_key, self.namespace, self.roster = dht, rank, signing_key, namespace, roster
        self.run_id, self.stop = "", None
        self._refuse = refuse
        self._seen: set[tuple[str, str]] = set()  # (key, what + reason) of every refusal so far: each is named once

    @contextmanager
    def until(self, stop: float):
        """Within the ``with`` block, no call waits past ``stop`` (``time.monotonic()``; a message round's stop:
        :func:`dgrpo.transports.dht.rounds.message_round`)."""
        before, self.stop = self.stop, stop
        try:
            yield
        finally:
            self.stop = before

    def _wait(self, wait_s: float) -> float:
        """``wait_s`` (seconds), cut at :attr:`stop` (0 once it passed)."""
        return wait_s if self.stop is None else max(0.0, min(wait_s, self.stop - time.monotonic()))

    def key(self, tag: str) -> str:
        """The DHT key of exchange ``tag`` in this launch: ``{namespace}/{run_id}/{tag}``."""
        return f"{self.namespace}/{self.run_id}/{tag}"

    def store(self, key: str, body: bytes, ttl_s: float, wait_s: float = 10.0) -> bytes:
        """Sign and store this node's record ``body`` under ``key``, kept ``ttl_s`` seconds (at most
        :data:`~dgrpo.transports.dht.records.MAX_TTL_S`; the expiry is signed), waiting up to ``wait_s``
        seconds for the DHT (the store and its read-back together; cut at :attr:`stop`): its signature (64 bytes) once at least one DHT node
        took it, else b"" (never raises: a failed or timed-out store is b"", retried by the caller).

        hivemind 1.1.12's ``store`` answers with the status of the replica that answered last, so one DHT node that
        refuses the record (a node holding another swarm's roster, or a malicious one answering late) made a store
        that other replicas took read as failed, and the transport's ``post`` retried it every 0.5 s until its
        deadline (the 1-5 s stalls of client-mode rounds in the tests). A store reported failed is therefore read
        back: the record is stored when a read returns it with this signature.
        """
        expiration = dht_time.get_dht_time() + min(ttl_s, dht_records.MAX_TTL_S)  # (signed: review r31i F2)
        subkey, value = dht_records.seal(self.signing_key, key, self.rank, body, expiration)
        sig, end = value[:dht_records.SIGNATURE_BYTES], time.monotonic() + self._wait(wait_s)
        try:
            future = self.dht.store(key, value, expiration, subkey=subkey, return_future=True)
            if future.result(timeout=max(0.0, end - time.monotonic())):
                return sig
        except Exception as err:  # noqa: BLE001 - a timed-out or failed store is retried by the caller
            log.debug("store of %s failed: %s", key, err)
            return b""
        rest = max(0.0, end - time.monotonic())
        return sig if any(got == sig for _, _, got in self.records(key, rest).get(self.rank, [])) else b""

    def records(self, key: str, wait_s: float = 10.0) -> dict[int, list[tuple[str, bytes, bytes]]]:
        """Every record under ``key`` whose signature verifies, by claimed node: [(public key hex, body, signature
        (64 bytes))], read within ``wait_s`` seconds (cut at :attr:`stop`).

        None, malformed, expired or unsigned entries are left out, and so is a copy whose DHT expiry is not the one its
        writer signed (re-stored by another node: review r31i F2) (each refused once: :meth:`reject`, naming nobody); a DHT that
        does not answer in time gives {} (never raises).
        """
        try:
            found = self.dht.get(key, latest=True, return_future=True).result(timeout=self._wait(wait_s))
        except Exception as err:  # noqa: BLE001 - a DHT that does not answer in time: nothing new yet
            log.debug("get of %s failed: %s", key, err)
            return {}
        if not (isinstance(found, dht_time.ValueWithExpiration) and isinstance(found.value, dict)):
            return {}  # (None: no record; a plain value is refused by every DHT node's validator)
        kid, out, now = dht_records.key_id(key), defaultdict(list), dht_time.get_dht_time()
        for subkey, item in found.value.items():
            timed = isinstance(item, dht_time.ValueWithExpiration)
            result = dht_records.verify(kid, subkey, item.value if timed else None, item.expiration_time if timed else None, now)
            if isinstance(result, str):
                self.reject(key, str(subkey), -1, result)
                continue
            node, pub, body = result
            out[node].append((pub, body, item.value[:dht_records.SIGNATURE_BYTES]))
        return out

    def read(self, key: str, expect: set[int], wait_s: float = 10.0) -> dict[int, tuple[str, bytes, bytes]]:
        """The records of nodes ``expect`` under ``key`` signed by the roster's key for each node: node → (public key
        hex, body, signature), read within ``wait_s`` seconds ({} when the DHT does not answer in time).

        A record signed with another node's key or an unknown one is refused and named. The roster is
        fixed at launch (joiners' keys too: a swarm with joiners has a roster file, see
        :func:`dgrpo.transports.dht.launch.node_keys`), so no key is learnt from a record.
        """
        owner_of = {pub: n for n, pub in self.roster.items()}
        out = {}
        for node, claims in self.records(key, wait_s).items():
            for pub, body, sig in claims:
                if pub == self.roster.get(node):
                    out[node] = (pub, body, sig)
                elif pub in owner_of:
                    self.reject(key, pub, owner_of[pub], f"identity: a record for node {node}'s slot signed by node "
                                                          f"{owner_of[pub]}'s key")
                else:
                    self.reject(key, pub, -1, f"identity: a record for node {node} signed by an unknown key {pub[:12]}…")
        return {n: r for n, r in out.items() if n in expect}

    def reject(self, key: str, what: str, sender: int, reason: str) -> None:
        """Refuse a record read under ``key`` (``what``: its subkey or key), once per reason: logged and
        passed to ``refuse(sender, reason)`` (the transport's ``rejected``); sender -1: an unknown key."""
        if (key, what + reason) in self._seen:
            return
        self._seen.add((key, what + reason))
        log.warning("rejected record from node %s under %s: %s", sender if sender >= 0 else "?", key.rsplit("/", 1)[-1], reason)
        self._refuse(sender, reason)
