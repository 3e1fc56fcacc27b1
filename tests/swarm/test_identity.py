"""Node identity (issue 13, point 1): keys, the roster, `dgrpo keys`, signing; runs from a roster
file, bans that survive resume, honest runs whose metrics do not change."""

import dataclasses
import json
import stat

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics
from dgrpo.swarm.identity import (Roster, Signer, SignatureVerifier, generate_keys, load_private_key, public_hex, run_context,
                                  signed_bytes)
from dgrpo.types import Message

MSG = Message(1, 0, "p", 2, "<think>1 + 1 = 2</think>", (5, 6, 2), 77, "tok")
COMMON = ["threads=1", "swarm.group_size=4", "sampling.max_new_tokens=24", "eval.every=2", "eval.n_prompts=2",
          "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01", "swarm.nodes=2", "swarm.prompts_per_round=2"]


def test_a_signature_covers_every_field_and_the_run_context():
    keys = generate_keys(3)
    signed = Signer(1, keys[1], "run|fp").sign(MSG)
    # checked independently with the public key alone, over the documented bytes
    Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_hex(keys[1]))).verify(bytes.fromhex(signed.signature),
                                                                                  signed_bytes(signed))
    verifier = SignatureVerifier(Roster.of(keys), "run|fp")
    assert verifier.identify(signed) == (1, None)
    for change in ({"round": 1}, {"prompt_id": "q"}, {"index": 3}, {"text": MSG.text + " "}, {"token_ids": (5, 6)},
                   {"seed": 78}, {"tokenizer": "tok2"}, {"context": "run|fp2"}):
        assert verifier.identify(dataclasses.replace(signed, **change)) == (None, "signature: no roster key verifies it"), change


def test_dgrpo_keys_writes_private_keys_for_each_node_and_the_roster(tmp_path, capsys):
    assert main(["keys", "3", "--out", str(tmp_path / "k")]) == 0
    roster = Roster.load(tmp_path / "k" / "roster.json")
    assert sorted(roster.keys) == [0, 1, 2]
    for n in range(3):
        path = tmp_path / "k" / f"node{n}.key"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert public_hex(load_private_key(path)) == roster.keys[n]
    data = json.loads((tmp_path / "k" / "roster.json").read_text())
    assert data["fingerprint"] == roster.fingerprint and "PRIVATE" not in (tmp_path / "k" / "roster.json").read_text()
    assert roster.fingerprint in capsys.readouterr().out
    assert main(["keys", "0", "--out", str(tmp_path / "z")]) == 2


def test_a_run_from_a_roster_file_records_its_fingerprint_and_a_wrong_key_is_refused(tmp_path, tiny_model_dir, capsys):
    main(["keys", "2", "--out", str(tmp_path / "a")])
    main(["keys", "2", "--out", str(tmp_path / "b")])
    args = ["run", f"model.name={tiny_model_dir}", *COMMON, "rounds=1", f"out_dir={tmp_path}",
            f"swarm.protocol.roster={tmp_path / 'a' / 'roster.json'}"]
    assert main([*args, "name=ok"]) == 0
    record = json.loads((tmp_path / "ok" / "roster.json").read_text())
    assert record["fingerprint"] == Roster.load(tmp_path / "a" / "roster.json").fingerprint
    assert record["context"].startswith("ok|")
    assert main([*args, "name=bad", f"swarm.protocol.key_dir={tmp_path / 'b'}"]) == 2
    assert "does not hold the public key of nodes [0, 1]" in capsys.readouterr().err


def test_an_honest_swarm_gives_the_same_metrics_with_the_protocol_on_and_off(tmp_path, tiny_model_dir):
    args = ["run", f"model.name={tiny_model_dir}", *COMMON, "rounds=2", f"out_dir={tmp_path}",
            "defenses=[{kind: topk}, {kind: replay}]"]
    off = ["swarm.protocol.sign=false", "swarm.protocol.bind_seeds=false", "swarm.protocol.enforce_shares=false"]
    assert main([*args, "name=signed", "swarm.protocol.enforce_length=true"]) == 0 and main([*args, "name=plain", *off]) == 0
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rs]  # noqa: E731
    on = strip(read_metrics(tmp_path / "signed"))
    assert on == strip(read_metrics(tmp_path / "plain"))
    assert on[0]["defense/any/false_positive_rate"] == 0.0 and on[0]["defense/honest_received"] == 8
    peers = [json.loads(x) for x in (tmp_path / "signed" / "peers.jsonl").read_text().splitlines()]
    assert [p["peers"]["1"]["accepted"] for p in peers] == [4, 4] and all(not p["peers"]["1"]["rejected"] for p in peers)


def test_a_ban_is_logged_kept_in_the_run_directory_and_survives_resume(tmp_path, tiny_model_dir):
    args = [f"model.name={tiny_model_dir}", *COMMON, "swarm.malicious=[1]", "attack.kind=injection",
            "attack.poisoned_per_group=1", "defenses=[{kind: topk}]", "swarm.protocol.ban_after=1"]
    assert main(["run", *args, "rounds=2", f"out_dir={tmp_path}", "name=b"]) == 0
    bans = json.loads((tmp_path / "b" / "bans.json").read_text())
    assert bans["banned"] == {"1": 0} and bans["strikes"]["1"] >= 1
    assert main(["resume", str(tmp_path / "b"), "rounds=4"]) == 0
    peers = [json.loads(x) for x in (tmp_path / "b" / "peers.jsonl").read_text().splitlines()]
    assert [p["round"] for p in peers] == [0, 1, 2, 3]
    assert peers[0]["peers"]["1"]["defense"].get("topk", 0) >= 1
    for p in peers[1:]:  # banned from round 1 on, also after the resume (read back from bans.json)
        assert p["peers"]["1"] == {"received": 4, "accepted": 0, "rejected": {"banned": 4}, "defense": {},
                                   "duplicates": 0, "transport": {}}
        assert p["banned"] == {"1": 0}
    metrics = read_metrics(tmp_path / "b")
    assert [m.get("train/reward/node1") for m in metrics[1:4]] == [None, None, None]
    assert run_context("b", "x").startswith("b|")
