"""The shared data types: what a message carries and how a rollout's verdicts decide it."""

from dgrpo.types import ACCEPT, Message, Rollout, Verdict


def test_a_message_travels_as_json_ready_fields_and_is_keyed_by_its_origin():
    m = Message(2, 5, "p7", 1, "text", (4, 5, 2), None, "tok")
    assert m.to_dict() == {"node": 2, "round": 5, "prompt_id": "p7", "index": 1, "text": "text",
                           "token_ids": [4, 5, 2], "seed": None, "tokenizer": "tok", "context": "", "signature": None}
    assert m.key == (2, 5, "p7", 1) and Message(**{**m.to_dict(), "token_ids": (4, 5, 2)}) == m


def test_a_rollout_is_accepted_until_a_defense_rejects_it():
    r = Rollout("p", [1], [2], "t", sender=0)
    assert r.accepted and r.verdicts == [] and ACCEPT.accepted
    r.verdicts.append(Verdict(False, "topk", "token outside top-10", 3))
    assert not r.accepted
