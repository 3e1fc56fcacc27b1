"""Signed DHT records: what every DHT node's validator and every receiver accept and refuse."""

import json
import os
import stat
import struct

import pytest

pytest.importorskip("hivemind")

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from hivemind.dht.validation import DHTRecord  # noqa: E402
from hivemind.utils import get_dht_time  # noqa: E402
from hivemind.utils.serializer import MSGPackSerializer  # noqa: E402

from dgrpo.transports.dht.records import (  # noqa: E402
    MAX_TTL_S, SignedRecordValidator, _signed_bytes, key_id, load_or_create_key, load_roster, parse_subkey, public_hex,
    seal as seal_at, signed_expiry, subkey_for, verify)

KEY = "dgrpo/swarm/abc/r0"


def seal(private_key, key, node, body, ttl_s=60.0):
    """A record sealed to expire ``ttl_s`` seconds from now (DHT time)."""
    return seal_at(private_key, key, node, body, get_dht_time() + ttl_s)


def as_stored(key: str, subkey, value, expiration: float | None = None) -> DHTRecord:
    """The record a validator sees: the key's DHT id, msgpack subkey and value (hivemind's layout), stored with
    ``expiration`` (default: the expiry the value signs, as its writer stores it)."""
    if expiration is None:
        expiration = signed_expiry(value) if isinstance(value, bytes) and len(value) >= 136 else get_dht_time() + 60
    return DHTRecord(key_id(key), MSGPackSerializer.dumps(subkey), MSGPackSerializer.dumps(value), expiration)


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
    forged_sig = forger.sign(_signed_bytes(key_id(KEY), MSGPackSerializer.dumps(theirs), b"fake"))
    forged = forged_sig + value[64:136] + b"fake"
    cases = {
        "victim's subkey, forger's signature": (KEY, theirs, forged, "does not verify with the key of its subkey"),
        "body changed": (KEY, subkey, value[:136] + b"REAL", "does not verify"),
        "moved to round 1": ("dgrpo/swarm/abc/r1", subkey, value, "does not verify"),
        "moved to another subkey": (KEY, subkey_for(1, public_hex(victim)), value, "does not verify"),
        "plain value (no subkey)": (KEY, None, value, "is not dgrpo:NODE:PUBLIC_KEY"),
        "foreign subkey": (KEY, "peer-12D3Koo", value, "is not dgrpo:NODE:PUBLIC_KEY"),
        "value not bytes": (KEY, subkey, {"messages": []}, "is not signature + expiry + body bytes"),
        "value too short": (KEY, subkey, b"x" * 10, "is not signature + expiry + body bytes"),
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



def test_a_copy_stored_with_another_expiry_is_refused_naming_nobody_and_the_owners_refresh_is_taken():
    """Review r31i F2, F4-F7: the DHT keeps, per subkey, the copy that expires last; a record's expiry was not signed,
    so anyone re-stored an honest node's record (of this launch or an earlier one) with an expiry far ahead and the
    DHT refused the node's later records. Now the expiry is signed: a copy stored with another expiry is refused (the
    signer is not named: the storer is not known), and the owner's refresh, which signs a later expiry, is taken."""
    owner = Ed25519PrivateKey.generate()
    now = get_dht_time()
    subkey, value = seal_at(owner, KEY, 1, b"heard of round -1", now + 60)
    v = SignedRecordValidator()
    assert v.validate(as_stored(KEY, subkey, value))  # as its writer stores it
    pinned = as_stored(KEY, subkey, value, now + 1e5)
    assert not v.validate(pinned)
    assert v.rejections[-1] == (None, f"a copy of node 1's record stored with expiry {now + 1e5:.3f}, not its signed "
                                      f"{now + 60:.3f}: re-stored by another node (its storer is not known)")
    assert not v.validate(as_stored(KEY, subkey, value, now + 60.001))  # a later expiry by a millisecond: refused too
    _, fresh = seal_at(owner, KEY, 1, b"heard of round 3", now + 90)
    assert v.validate(as_stored(KEY, subkey, fresh)) and signed_expiry(fresh) == now + 90 > signed_expiry(value)
    then = now - 300  # a record of an earlier launch, long expired, stored again with a fresh expiry
    _, old = seal_at(owner, "dgrpo/swarm/heard", 1, b"heard of launch A", then + 60)
    assert verify(key_id("dgrpo/swarm/heard"), subkey, old, now + 60, now).startswith("a copy of node 1's record")
    assert not v.validate(as_stored("dgrpo/swarm/heard", subkey, old, now + 60))
    assert [node for node, _ in v.rejections] == [None] * 2  # the honest signer never named (one record: logged once)


def test_the_expiry_is_signed_and_capped():
    k = Ed25519PrivateKey.generate()
    now = get_dht_time()
    subkey, value = seal_at(k, KEY, 2, b"x", now + 60)
    moved = value[:128] + struct.pack(">d", now + 1e5) + value[136:]  # the expiry bytes changed, their signature not
    assert verify(key_id(KEY), subkey, moved) == ("expiry signature of node 2's record does not verify with the key of "
                                                  f"its subkey ({public_hex(k)[:12]}…)")
    assert not SignedRecordValidator().validate(as_stored(KEY, subkey, moved, now + 1e5))
    _, far = seal_at(k, KEY, 2, b"x", now + MAX_TTL_S + 60)  # signed by its own node, too far ahead
    assert verify(key_id(KEY), subkey, far, signed_expiry(far), now) == (
        f"node 2's record claims expiry {now + MAX_TTL_S + 60:.3f}, more than {MAX_TTL_S:g} s ahead")
    assert not SignedRecordValidator().validate(as_stored(KEY, subkey, far))
    _, most = seal_at(k, KEY, 2, b"x", now + MAX_TTL_S)
    assert verify(key_id(KEY), subkey, most, signed_expiry(most), now) == (2, public_hex(k), b"x")


def test_before_the_roster_a_key_takes_records_up_to_one_message_and_a_full_swarms_fit():
    """Issue 31: a DHT node without the roster took any number of validly signed records under fresh keys; its
    answer to every later read of the key passed libp2p's 4 MiB and each reader waited hivemind's 3 s time-out."""
    from dgrpo.transports.dht.records import DHT_MESSAGE_BYTES, record_limit

    v = SignedRecordValidator(max_value_bytes=record_limit(4) + 136)  # no roster yet (136: signatures + expiry)
    flood = [as_stored(KEY, *seal(Ed25519PrivateKey.generate(), KEY, 3, b"x" * 900_000)) for _ in range(8)]
    taken = [v.validate(r) for r in flood]
    per_record = len(flood[0].subkey) + len(flood[0].value) + 64  # what each counts
    fits = (DHT_MESSAGE_BYTES - (32 << 10)) // per_record
    assert fits == 4 and taken == [True] * fits + [False] * (8 - fits)
    assert v.rejections[-1][1] == f"node 3's record would take its key past the {DHT_MESSAGE_BYTES - (32 << 10)} bytes one read carries"
    assert v.validate(flood[0])  # a record it took, seen again (a read, a refresh): counted once
    other = "dgrpo/swarm/abc/r1"  # another key has its own budget; four nodes' largest records fit one
    full = [as_stored(other, *seal(Ed25519PrivateKey.generate(), other, n, b"y" * record_limit(4))) for n in range(4)]
    assert [v.validate(r) for r in full] == [True] * 4

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


def _hivemind_sources(root):
    return [root / "transports" / "hivemind.py", *sorted((root / "transports" / "dht").glob("*.py"))]


def _root(node):
    """The name an attribute/subscript chain starts from (``t`` of ``t.signed.roster[1]``), or None."""
    import ast

    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _reach_ins(root) -> list[str]:
    """Where a hivemind helper (transports/dht/*.py) changes the transport's state itself — assigns one of its
    attributes or theirs (``t.x = …``, ``t.x += …``, ``t.signed.run_id = …``) or mutates one in place
    (``t.alive.discard(…)``) — or reads a private field of it; where any hivemind module (transports/hivemind.py,
    dht/*.py) reads a private field of another object (``t.signed._seen``: ``self._x`` and ``cls._x`` only) or
    builds a class on a mixin (a base class defined in these modules); and every getattr/hasattr/private read in
    these modules that no comment names the hivemind version for (hivemind's own private objects)."""
    import ast

    found, parsed = [], [(path, path.read_text()) for path in _hivemind_sources(root)]
    trees = [(path, text, ast.parse(text)) for path, text in parsed]
    ours = {n.name for _, _, tree in trees for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    for path, text, tree in trees:
        lines = text.splitlines()
        for node in ast.walk(tree):
            where = f"{path.name}:{getattr(node, 'lineno', 0)}"
            named = lambda: any("hivemind 1.1.12" in line for line in lines[max(0, node.lineno - 4):node.lineno])  # noqa: E731
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
                if not named():
                    found.append(f"{where} {node.func.id}")
            if isinstance(node, ast.ClassDef):
                found += [f"{where} {node.name} inherits {b.id}" for b in node.bases if isinstance(b, ast.Name) and b.id in ours]
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "t", "transport")) \
                    and isinstance(node.value, (ast.Name, ast.Attribute)) and not named():
                found.append(f"{where} reads {ast.unparse(node)}")
            if path.parent.name != "dht":
                continue
            targets = (node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign)
                       else [])
            for target in targets:
                for leaf in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(leaf, (ast.Attribute, ast.Subscript)) and _root(leaf) in ("t", "transport"):
                        found.append(f"{where} writes {ast.unparse(leaf.value if isinstance(leaf, ast.Subscript) else leaf)}"
                                     + ("[…]" if isinstance(leaf, ast.Subscript) else ""))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Attribute) \
                    and _root(node.func.value) in ("t", "transport") \
                    and node.func.attr in ("add", "discard", "pop", "update", "append", "extend", "clear", "remove", "setdefault"):
                found.append(f"{where} mutates {ast.unparse(node.func.value)}")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("t", "transport") \
                    and node.attr.startswith("_"):
                found.append(f"{where} reads t.{node.attr}")
    return found


def test_the_hivemind_helpers_change_the_transport_only_through_its_methods(tmp_path):
    """Issue 32: the launch and commit helpers read the transport's public members and change its view of the swarm
    through its methods (enter_launch, leave_out, readmit, leave); no getattr probe is left but on hivemind's own
    private objects (named with its version). (The code before had 28 such lines: 14 writes, 8 mutations, 6 probes.)
    The record I/O is an object the transport holds (``t.signed``), not a mixin reading the transport's privates:
    no class here inherits another of these modules' (``HivemindTransport(SignedRecords)`` did), no module reads
    another object's private field."""
    from pathlib import Path

    import dgrpo

    assert _reach_ins(Path(dgrpo.__file__).parent) == []
    (tmp_path / "transports" / "dht").mkdir(parents=True)  # the check itself finds each kind of reach-in
    (tmp_path / "transports" / "hivemind.py").write_text("x = getattr(found, 'value', None)\n")
    (tmp_path / "transports" / "dht" / "launch.py").write_text(
        "t.run_id = 'x'\nt.alive -= {1}\nt.failed[1] = 'r0'\nt.rejected.append((1, 'x'))\nk = t._key\n"
        "t.signed.run_id = 'x'\nt.signed.roster[1] = 'k'\nt.signed.roster.clear()\nseen = t.signed._seen\n"
        "class Records:\n    pass\nclass Transport(Records):\n    k = self._key\n")
    assert sorted(f.split(" ", 1)[1] for f in _reach_ins(tmp_path)) == sorted([
        "getattr", "writes t.run_id", "writes t.alive", "writes t.failed[…]", "mutates t.rejected", "reads t._key",
        "writes t.signed.run_id", "writes t.signed.roster[…]", "mutates t.signed.roster", "reads t.signed._seen",
        "Transport inherits Records"])
