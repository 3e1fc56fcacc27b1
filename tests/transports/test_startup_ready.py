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


def _confirmation_with(store, extra: dict) -> str:
    """``store``'s rank's ready confirmation, signed the way :func:`ready_record` signs, quoting ``extra`` records
    beside every rank's genuine one (keys as served: strings)."""
    kept = store.records
    store.records = {**{str(n): r for n, r in kept.items()}, **extra}
    try:
        return ready_record(store)
    finally:
        store.records = kept


@pytest.mark.parametrize("extra, why", [
    ({"x": ["a", "b", "c"]}, "its record 'x' is not a rank"),
    ({"-1": ["a", "b", "c"]}, "its record '-1' is not a rank"),
    ({"9": ["a", "b"]}, "its record '9' is not a rank → [nonce, server nonce, signature]"),
    ({"9": [1, 2, 3]}, "its record '9' is not a rank"),
])
def test_a_malformed_confirmation_signed_by_its_sender_names_the_sender_and_raises_nothing_else(extra, why):
    """Review r31g J2: node 3 served one reader a confirmation its own key signed whose records hold a key ``"x"``;
    check_ready raised ValueError (int('x')) outside its try and the reader crashed at start-up while the others
    (the attacker included) trained on. Now it is the PeerFailure every rank stops on, naming node 3 alone."""
    ts, _ = _checked()
    readies = {**_readies(ts), 3: _confirmation_with(ts[3].signed_store, extra)}
    for t in ts[:3]:
        with pytest.raises(PeerFailure) as err:
            check_ready(t.signed_store, VALUES, readies, None)
        assert str(err.value).startswith(f"node 3's ready confirmation is malformed: {why}")
        assert f"(checked by node {t.rank})" in str(err.value) and "\n" not in str(err.value)
    assert not _signed(ts[0].signed_store, 3, readies[3])  # (never taken from a relay either)


@pytest.mark.parametrize("raw", ["[]", "null", "{", '{"launch": 1}', json.dumps({"launch": "0" * 32, "records": [],
                                                                                   "sig": ""})])
def test_a_junk_confirmation_names_its_rank(raw):
    ts, _ = _checked()
    with pytest.raises(PeerFailure, match=r"^node 2's ready confirmation is malformed: "):
        check_ready(ts[0].signed_store, VALUES, {**_readies(ts), 2: raw}, None)


def test_a_confirmation_of_an_earlier_launch_is_dropped_and_blames_nobody():
    """Review r31g J3: node 3 relayed node 0's confirmation of an earlier launch of the same run and roster as its
    ``ready/all``; it verified (signed unbound) and every rank stopped naming honest node 0 ("quotes a start-up
    record of node 3 that node 3 never signed"). A confirmation is now bound to its signer's launch nonce: the old
    one verifies for nobody, so a relay of it is dropped (the barrier waits for node 0's own) and never named."""
    first, keys = _ranks(4)
    records = {t.rank: t.signed_store.startup_record(VALUES, f"srv{t.rank}") for t in first}
    for t in first:
        t.signed_store.check_records(VALUES, records)
    stale = ready_record(first[0].signed_store)
    assert _signed(first[1].signed_store, 0, stale)  # (in its own launch it is node 0's)
    ts, _ = _ranks(4, keys=keys)  # the relaunch: same keys, fresh nonces
    records = {t.rank: t.signed_store.startup_record(VALUES, f"srv{t.rank}") for t in ts}
    for t in ts:
        t.signed_store.check_records(VALUES, records)
    assert not any(_signed(t.signed_store, 0, stale) for t in ts)
    readies = _readies(ts)
    assert _signed(ts[1].signed_store, 0, readies[0])
    for t in ts:
        check_ready(t.signed_store, VALUES, readies, None)  # (node 0's own: every rank passes)
