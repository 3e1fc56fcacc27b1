"""The ready confirmations of the torch.distributed start-up (transports/startready.py; review r31f H4), in-process:
who a mismatch names. Four ranks on one HashStore after their start-up records were read (signed_ranks)."""

import json
import secrets

import pytest
from signed_ranks import _ranks

from dgrpo.errors import PeerFailure
from dgrpo.transports.startready import _signed, check_ready, ready_record

VALUES = {"context": "run|fp", "honest": [0, 1, 2, 3], "roster": "r", "servers": {}}


def _checked(alt_for: int | None = None):
    """Four ranks that each read every rank's start-up record (rank 3's server showed ``alt_for`` a second record,
    signed by rank 3 with another launch nonce); returns (ranks, rank 3's second record)."""
    ts, _ = _ranks(4)
    records = {t.rank: t.signed_store.startup_record(VALUES, f"srv{t.rank}") for t in ts}
    store3 = ts[3].signed_store
    kept, store3.nonce = store3.nonce, secrets.token_hex(16)
    alt = store3.startup_record(VALUES, "srv3")
    store3.nonce = kept
    for t in ts:
        t.signed_store.check_records(VALUES, {**records, 3: alt} if t.rank == alt_for else records)
    return ts, json.loads(alt)


def _readies(ts):
    return {t.rank: ready_record(t.signed_store) for t in ts}


def test_equal_confirmations_pass_and_every_rank_holds_one_launch_id():
    ts, _ = _checked()
    readies = _readies(ts)
    for t in ts:
        check_ready(t.signed_store, VALUES, readies, None)
    assert len({json.loads(r)["launch"] for r in readies.values()}) == 1


def test_a_second_record_shown_to_one_rank_names_its_signer_at_every_rank():
    ts, alt = _checked(alt_for=0)
    readies = _readies(ts)
    assert json.loads(readies[0])["launch"] != json.loads(readies[1])["launch"]  # (the split of H4)
    for t in ts:
        with pytest.raises(PeerFailure, match=r"^node 3 signed two different start-up records for this launch"):
            check_ready(t.signed_store, VALUES, readies, None)
    with pytest.raises(PeerFailure) as err:
        check_ready(ts[1].signed_store, VALUES, readies, None)
    assert f"{alt['nonce'][:12]}… read by node 0" in str(err.value)


def test_a_false_or_unsigned_confirmation_names_its_signer_not_the_rank_it_quotes():
    ts, _ = _checked()
    ts[2].signed_store.records[3] = [secrets.token_hex(16), "srv3", "00" * 64]  # (a record node 3 never signed)
    readies = _readies(ts)
    with pytest.raises(PeerFailure) as err:
        check_ready(ts[0].signed_store, VALUES, readies, None)
    assert str(err.value).startswith("node 2's ready confirmation quotes a start-up record of node 3 that node 3 "
                                     "never signed (checked by node 0)")
    ts, _ = _checked()
    readies = _readies(ts)
    junk = {**json.loads(readies[1]), "sig": "00" * 64}
    with pytest.raises(PeerFailure, match=r"^node 1's ready confirmation is not signed by it"):
        check_ready(ts[0].signed_store, VALUES, {**readies, 1: json.dumps(junk)}, None)
    assert _signed(ts[0].signed_store, 1, readies[1]) and not _signed(ts[0].signed_store, 1, json.dumps(junk))
    assert not _signed(ts[0].signed_store, 2, readies[1])  # (a confirmation relayed under another rank's name)
