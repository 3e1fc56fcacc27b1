"""Issue 31, must-have 2, over torch.distributed: the launch id messages are signed for is one value every rank
holds, that no single rank chooses, and that a relaunch of the same run (same keys, name and config) changes."""

import hashlib

from signed_ranks import _ranks


def test_every_rank_holds_one_launch_id_and_a_relaunch_or_one_rank_s_nonce_changes_it():
    ts, keys = _ranks(3)
    ids = {t.signed_store.launch_id() for t in ts}
    nonces = ts[0].signed_store.nonces
    expected = hashlib.sha256("|".join(f"{n}:{nonces[n]}" for n in range(3)).encode()).hexdigest()[:32]
    assert ids == {expected}  # every rank: the same id, from every rank's nonce
    again, _ = _ranks(3, keys=keys)  # the same run launched again: fresh nonces
    assert again[0].signed_store.launch_id() != expected
    store = ts[1].signed_store
    store.nonces = {**nonces, 2: "0" * 32}  # rank 2 alone picks another nonce: another id
    assert store.launch_id() != expected
