"""Signed DHT records: what every DHT node's validator and every receiver accept and refuse."""

import json
import os
import stat

import pytest

pytest.importorskip("hivemind")

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from hivemind.dht.validation import DHTRecord  # noqa: E402
from hivemind.utils.serializer import MSGPackSerializer  # noqa: E402

from dgrpo.transports.dht.records import (  # noqa: E402
    SignedRecordValidator, _signed_bytes, key_id, load_or_create_key, load_roster, parse_subkey, public_hex, seal,
    subkey_for, verify)

KEY = "dgrpo/swarm/abc/r0"


def as_stored(key: str, subkey, value) -> DHTRecord:
    """The record a validator sees: the key's DHT id, msgpack subkey and value (hivemind's layout)."""
    return DHTRecord(key_id(key), MSGPackSerializer.dumps(subkey), MSGPackSerializer.dumps(value), 1e12)


def test_a_sealed_record_verifies_and_names_its_node_and_key():
    k = Ed25519PrivateKey.generate()
    subkey, value = seal(k, KEY, 3, b"payload")
    assert subkey == f"dgrpo:3:{public_hex(k)}" and parse_subkey(subkey) == (3, public_hex(k))
    assert verify(key_id(KEY), subkey, value) == (3, public_hex(k), b"payload")
    v = SignedRecordValidator()
    assert v.validate(as_stored(KEY, subkey, value)) and not v.rejections


def test_forged_moved_and_malformed_records_are_refused_with_their_reason():
    victim, forger = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    subkey, value = seal(victim, KEY, 2, b"real")
    theirs = subkey_for(2, public_hex(victim))
    forged = forger.sign(_signed_bytes(key_id(KEY), MSGPackSerializer.dumps(theirs), b"fake")) + b"fake"
    cases = {
        "victim's subkey, forger's signature": (KEY, theirs, forged, "does not verify with the key of its subkey"),
        "body changed": (KEY, subkey, value[:64] + b"REAL", "does not verify"),
        "moved to round 1": ("dgrpo/swarm/abc/r1", subkey, value, "does not verify"),
        "moved to another subkey": (KEY, subkey_for(1, public_hex(victim)), value, "does not verify"),
        "plain value (no subkey)": (KEY, None, value, "is not dgrpo:NODE:PUBLIC_KEY"),
        "foreign subkey": (KEY, "peer-12D3Koo", value, "is not dgrpo:NODE:PUBLIC_KEY"),
        "value not bytes": (KEY, subkey, {"messages": []}, "is not signature + body bytes"),
        "value too short": (KEY, subkey, b"x" * 10, "is not signature + body bytes"),
        "key not hex": (KEY, "dgrpo:2:" + "g" * 64, value, "is not dgrpo:NODE:PUBLIC_KEY"),
    }
    v = SignedRecordValidator()
    for name, (key, sk, val, reason) in cases.items():
        got = verify(key_id(key), sk, val)
        assert isinstance(got, str) and reason in got, (name, got)
        assert not v.validate(as_stored(key, sk, val)), name
    junk = DHTRecord(key_id(KEY), b"\xc1", b"\xc1", 1e12)  # 0xc1 is never valid msgpack
    assert not v.validate(junk)
    assert len(v.rejections) == len(cases) + 1
    assert v.rejections[0] == (2, "signature of node 2's record does not verify with the key of its subkey "
                                   f"({public_hex(victim)[:12]}…)")
    assert not v.validate(as_stored(KEY, theirs, forged))  # the same forgery again: refused, counted once
    assert len(v.rejections) == len(cases) + 1


def test_keys_persist_with_owner_only_permissions(tmp_path):
    path = tmp_path / "node1" / "signing.key"
    k = load_or_create_key(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert public_hex(load_or_create_key(path)) == public_hex(k)  # the same key on the next run
    (tmp_path / "bad.key").write_text("not a key")
    with pytest.raises(ValueError, match="bad.key is not an unencrypted PEM private key"):
        load_or_create_key(tmp_path / "bad.key")


def test_roster_files_are_checked(tmp_path):
    a, b = "a" * 64, "b" * 64
    good = tmp_path / "roster.json"
    good.write_text(json.dumps({"0": a, "1": b}))
    assert load_roster(good) == {0: a, 1: b}
    for content, message in ((json.dumps([a]), "must hold an object"), (json.dumps({"x": a}), "entry 'x'"),
                             (json.dumps({"0": "abc"}), "entry '0'"), (json.dumps({"0": a, "1": a}), "one key to several"),
                             ("{", "cannot read")):
        good.write_text(content)
        with pytest.raises(ValueError, match=message):
            load_roster(good)
