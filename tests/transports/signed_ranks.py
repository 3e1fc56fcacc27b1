"""In-process ranks on one HashStore as after the start-up check (shared by test_signed_store.py and
test_checkin_signed.py)."""


def _ranks(n=4, timeout_s=5.0, signed_addresses=True, keys=None):
    """n transports on one store, as after the start-up check: signers, verifier and each rank's launch
    nonce (fresh per call: a call with the ``keys`` of an earlier one is a relaunch of the same run)."""
    import secrets

    import torch.distributed as dist

    from dgrpo.swarm.identity import Roster, SignatureVerifier, Signer, generate_keys
    from dgrpo.transports.distributed import DistributedTransport
    from dgrpo.transports.peerserve import AddressKeys

    store, keys = dist.HashStore(), keys or generate_keys(n)
    roster, nonces = Roster.of(keys), {k: secrets.token_hex(16) for k in range(n)}
    verifier = SignatureVerifier(roster, "run|fp")
    ts = [DistributedTransport(store, k, n, honest=range(n), timeout_s=timeout_s, on_peer_failure="continue",
                               keys=AddressKeys(k, keys[k], roster, "fp") if signed_addresses else None)
          for k in range(n)]
    for t in ts:
        t._closed, t.ledger.ttl_s = True, 0.0
        t.signed_store.signer, t.signed_store.keys = Signer(t.rank, keys[t.rank], "run|fp"), verifier
        t.signed_store.nonce, t.signed_store.nonces = nonces[t.rank], dict(nonces)
    return ts, keys
