"""Issue 31, must-haves 1 and 2: one spelling of every signed thing, and strikes only for what the signer alone
could have caused. 4 nodes, node 3 the attacker; each row of docs/protocol.md's strike table is a case here."""

import dataclasses
import json
import re
from pathlib import Path

import pytest
from test_protocol import CTX, SEED, honest_round, make, refusals, resign

from dgrpo.policy.chat import encode_completion
from dgrpo.policy.sampling import completion_seed
from dgrpo.swarm.identity import Roster, SignatureVerifier, canonical_hex, generate_keys, message_digest, public_hex, signed_header
from dgrpo.swarm.protocol import (DROPPED, FLOOD_FACTOR, NAMED, REFUSED, STRIKES, UNAUTHENTICATED, BanList, compare_views, equivocators,
                                  merge_views)
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.swarm.accounting import peer_strikes
from dgrpo.training.records import PolicyReport, peer_record

DOCS = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


@pytest.fixture()
def task():
    return ArithmeticTask(seed=0, n_train=10, n_val=2, few_shot=0)


def four(task, model, tokenizer, ban_after=2, **rules):
    """4 nodes, horizontal, B=2 × G=4: each node owns one slot of each of the 2 prompts (2 slots)."""
    swarm, policy, keys = make(task, model, tokenizer, nodes=4, G=4, ban_after=ban_after, **rules)
    return swarm, policy, keys, honest_round(swarm, task, 0, nodes=4, G=4)


def account(swarm, received, round_idx, carrier=None, sent=()):
    """What the round's accounting (recipes/swarm_round.py: account) does with one receive: the per-peer record and the strikes it adds (ban list)."""
    if carrier is not None:
        swarm.carriers.update({id(m): carrier for m in sent})
        received = swarm.last_received[next(iter(swarm.last_received))]
    rec = peer_record(round_idx, PolicyReport(received.rollouts, received.invalid), received)["peers"]
    strikes = {who: peer_strikes(p) for who, p in rec.items()}
    for who, n in strikes.items():
        if who.isdigit():
            swarm.protocol.bans.strike(int(who), n, round_idx)
    return rec, strikes


def receive(swarm, policy, messages, round_idx, carried=None):
    """node 3 delivers ``carried`` (default: all ``messages``; what route records in a real run)."""
    swarm.carriers = {id(m): 3 for m in (messages if carried is None else carried)}
    return swarm.receive(policy, messages, round_idx)


# ---------------------------------------------------------------------- must-have 1: one spelling
def _one_letter_upper(s: str) -> str:
    """The first hex letter in upper case (``s[:10].upper()`` was a no-op when the first 10 hex digits were
    all digits, ~0.9 % of signatures: a flaky case)."""
    return re.sub("[a-f]", lambda c: c.group().upper(), s, count=1)


@pytest.mark.parametrize("spell", [str.upper, lambda s: "0x" + s, lambda s: s + "\n", lambda s: " " + s[1:],
                                   lambda s: s[:-2], lambda s: s + "00", _one_letter_upper])
def test_a_signature_in_any_other_spelling_is_malformed_and_never_verified(task, model, tokenizer, spell):
    swarm, policy, keys, out = four(task, model, tokenizer)
    m = out[0][0]
    assert bytes.fromhex(m.signature.upper()) == bytes.fromhex(m.signature)  # what the old check accepted
    before = swarm.protocol.verifier.verified
    got = refusals(receive(swarm, policy, [dataclasses.replace(m, signature=spell(m.signature))], 0))
    assert got == [("malformed: signature is not 128 lower-case hex digits", None)]
    assert swarm.protocol.verifier.verified == before  # refused before any Ed25519 verification


def test_a_roster_key_in_another_spelling_is_refused_naming_the_node():
    keys = {n: public_hex(k) for n, k in generate_keys(3).items()}
    assert canonical_hex(keys[1], 64) == bytes.fromhex(keys[1]) and canonical_hex(keys[1].upper(), 64) is None
    with pytest.raises(ValueError, match="public key of node 1 is not 64 lower-case hex digits"):
        Roster({**keys, 1: keys[1].upper()})
    with pytest.raises(ValueError, match="node 2"):
        Roster({**keys, 2: keys[2][:-2]})


def test_copies_are_recognised_by_the_signed_content_and_verified_once(task, model, tokenizer):
    swarm, policy, keys, out = four(task, model, tokenizer)
    m = out[0][0]
    copy = dataclasses.replace(m)  # another object, the same signed content
    assert copy is not m and message_digest(copy) == message_digest(m)
    verifier = swarm.protocol.verifier
    before = verifier.verified
    received = receive(swarm, policy, [m, *[copy] * 500], 0)
    assert len(received.rollouts) == 1 and received.copies == 500 and received.invalid == []
    assert verifier.verified - before == 1  # one Ed25519 verification for 501 messages
    assert all(verifier.valid(0, b"x", m.signature) is False for _ in range(3)) and verifier.verified - before == 2


def test_a_check_out_of_the_cache_gives_the_same_answer_and_leaves_the_cache_as_it_was():
    """Review r31m F3: what anyone can make up at will (junk stop reasons) is verified with ``cache=False``: the same
    answer, a verification each time, nothing added to the cache the message path relies on (emptied when full);
    an entry already there still answers without a verification."""
    from dgrpo.swarm.identity import Signer

    keys = generate_keys(2)
    verifier, signer = SignatureVerifier(Roster.of(keys), "ctx"), Signer(0, keys[0], "ctx")
    good, bad = signer.sign_bytes(b"x"), signer.sign_bytes(b"y")
    assert [verifier.valid(0, b"x", sig, cache=False) for sig in (good, bad, good)] == [True, False, True]
    assert verifier.verified == 3 and verifier._cache == {}
    assert verifier.valid(0, b"x", good) is True and verifier.verified == 4 and len(verifier._cache) == 1
    assert verifier.valid(0, b"x", good, cache=False) is True and verifier.verified == 4  # (cached already)


@pytest.mark.parametrize("carried", [True, False], ids=["delivered by its signer", "no carrier known"])
def test_copies_of_a_signers_own_messages_are_named_and_not_counted_as_read(task, model, tokenizer, carried):
    """Review L1: 100 copies of node 3's own 2 messages. Before, a copy delivered by its own signer was named nowhere
    and swarm/messages counted it; now it is named under who delivered it (else its signer), never a strike, and
    the round read the 8 messages of the round."""
    swarm, policy, keys, out = four(task, model, tokenizer)
    honest = [m for n in (0, 1, 2) for m in out[n]]
    copies = [dataclasses.replace(m) for m in out[3] for _ in range(50)]  # other objects, the same signed content
    swarm.carriers = {id(m): 3 for m in [*out[3], *copies]} if carried else {}
    received = swarm.receive(policy, [*honest, *out[3], *copies], 0)
    rec, strikes = account(swarm, received, 0)
    assert rec["3"]["transport"] == {"copy": 100} and rec["3"]["accepted"] == 2 and rec["3"]["rejected"] == {}
    assert sum(strikes.values()) == 0 and all(rec[n]["transport"] == {} for n in "012")
    assert PolicyReport(received.rollouts, received.invalid).read == 8


@pytest.mark.parametrize("first", [True, False], ids=["forwarded first", "forwarded after"])
def test_a_forwarder_of_its_peers_messages_is_the_one_named_copy_whichever_came_first(task, model, tokenizer, first):
    """Review r31i F3: node 1 (a low rank, read before its peers) serves copies of nodes 2's and 3's 4 messages.
    Before, when its copies came first they were read and the signers' own deliveries named ``copy`` under
    nodes 2 and 3 every round. Now the forwarder is named for each (4), whichever came first, the signers
    never; node 2 delivering one of its own messages twice more is named for its own 2 repeats; no strike, and
    the round read the 8 messages of the round."""
    swarm, policy, keys, out = four(task, model, tokenizer)
    forwarded = [dataclasses.replace(m) for n in (2, 3) for m in out[n]]  # other objects, the same signed content
    repeats = [dataclasses.replace(out[2][0]) for _ in range(2)]
    own = [m for n in range(4) for m in out[n]]
    swarm.carriers = {**{id(m): m.node for m in [*own, *repeats]}, **{id(m): 1 for m in forwarded}}
    received = swarm.receive(policy, [*forwarded, *own, *repeats] if first else [*own, *forwarded, *repeats], 0)
    rec, strikes = account(swarm, received, 0)
    assert {n: rec[n]["transport"] for n in "0123"} == {"0": {}, "1": {"copy": 4}, "2": {"copy": 2}, "3": {}}
    assert received.copies == 6 and sum(strikes.values()) == 0
    assert {n: rec[n]["accepted"] for n in "0123"} == {n: 2 for n in "0123"}
    assert PolicyReport(received.rollouts, received.invalid).read == 8


def test_a_forgery_of_an_honest_content_first_does_not_make_the_honest_message_a_copy(task, model, tokenizer):
    swarm, policy, keys, out = four(task, model, tokenizer)
    m = out[0][0]
    forged = resign(keys, 3, m)  # node 0's content, signed by node 3 (it can read node 0's message first)
    received = receive(swarm, policy, [forged, forged, m], 0)
    assert refusals(received) == [("identity: claims node 0 but is signed by node 3", 3)]  # one, not one per copy
    assert [r.sender for r in received.rollouts] == [0] and received.copies == 1


def test_equivocation_and_relays_ignore_another_run_and_another_spelling(task, model, tokenizer):
    swarm, policy, keys, out = four(task, model, tokenizer)
    m = out[1][0]
    verifier = swarm.protocol.verifier
    elsewhere = resign(keys, 1, m, context="run-b|fp0", text=m.text + " other")  # node 1 in another run, same slot

    def report(*msgs):
        return json.dumps([[signed_header(x), x.signature] for x in msgs]).encode()

    assert equivocators({0: report(m), 2: report(elsewhere)}, verifier, 0) == {}
    assert list(equivocators({0: report(m), 2: report(resign(keys, 1, m, text=m.text + " x"))}, verifier, 0)) == [1]
    respelled = dataclasses.replace(m, signature=m.signature.upper())
    caught, extra = compare_views(0, {0: [m], 2: [respelled, elsewhere]}, verifier, 0)
    assert caught == {} and extra == []  # a re-spelled copy is the same message, another run's is none of ours


# ---------------------------------------------------------------------- must-have 2: the strike table
def test_the_strike_table_in_the_docs_is_the_one_the_code_applies():
    rows = re.findall(r"^\| `([a-z ]+)` \| (dropped|refused|strike|named)", DOCS.read_text(), re.M)
    assert rows, "docs/protocol.md has no strike table"
    table = dict(rows)
    assert {r for r, c in table.items() if c == "dropped"} == DROPPED
    assert {r for r, c in table.items() if c == "strike"} == STRIKES
    assert {r for r, c in table.items() if c == "refused"} == REFUSED
    assert {r for r, c in table.items() if c == "named"} == NAMED
    assert not (DROPPED & REFUSED or DROPPED & STRIKES or REFUSED & STRIKES or NAMED & (DROPPED | REFUSED | STRIKES))


def test_the_rules_the_docs_leave_out_of_the_record_are_the_ones_the_code_leaves_out():
    """docs/protocol.md, "The round's record under attack": the rules named in the `swarm/messages` row's "not counted"
    column are UNAUTHENTICATED, those of the `swarm/invalid` row's "counts" column every other rule of the strike table."""
    section = DOCS.read_text().split("## The round's record under attack", 1)[1].split("\n## ", 1)[0]
    rows = {m[0]: m[1:] for m in re.findall(r"^\| `(swarm/\w+)` \| (.*?) \| (.*?) \|$", section, re.M)}
    left_out = rows["swarm/messages"][1].split(". Each under", 1)[0]  # (then where peers.jsonl names them)
    assert set(re.findall(r"\(`([a-z ]+)`\)", left_out)) == UNAUTHENTICATED
    assert set(re.findall(r"`([a-z ]+)`", rows["swarm/invalid"][0])) == (DROPPED | REFUSED | STRIKES) - UNAUTHENTICATED
    assert UNAUTHENTICATED <= DROPPED | STRIKES and not UNAUTHENTICATED & REFUSED


def _text(tokenizer, text="<think>1 + 1 = 2</think>"):
    return dict(text=text, token_ids=tuple(encode_completion(tokenizer, text)))


def _cases(keys, out, tokenizer, old, other_run):
    """rule → (the messages node 3 delivers, who the refusals are attributed to); node 3's own cheats use its key."""
    m0, m3 = out[0][0], out[3][0]
    seeded = lambda prompt, index: completion_seed(SEED, 1, 3, prompt, index)  # noqa: E731
    return {
        "malformed": [dataclasses.replace(m0, signature=m0.signature.upper())] * 3,
        "signature": [dataclasses.replace(m0, text=m0.text + " forged")],  # node 0's signature on other content
        "run": other_run,                           # node 0's messages signed for a previous run under its key
        "round": old,                               # node 0's messages of round 0, re-sent in round 1
        "copy": [m0] * 5,
        "identity": [resign(keys, 3, m3, node=0)],
        "seed": [resign(keys, 3, m3, seed=7)],
        "share": [resign(keys, 3, m3, index=0, seed=seeded(m3.prompt_id, 0))],
        "prompt": [resign(keys, 3, m3, prompt_id="nope")],
        "consistency": [resign(keys, 3, m3, text=m3.text + " 2 + 2 = 5")],
        "length": [resign(keys, 3, m3, **_text(tokenizer, " ".join(["apples"] * 40)))],
        "size": [resign(keys, 3, m3, text="a" * 9000)],
    }


@pytest.mark.parametrize("rule", ["malformed", "signature", "run", "round", "copy", "identity", "seed", "share",
                                  "prompt", "consistency", "length", "size"])
def test_each_row_of_the_strike_table(task, model, tokenizer, rule):
    """Round 1: every honest node's messages, and what node 3 delivers for ``rule``. ban_after=2. A dropped
    row strikes nobody (node 0's replayed messages cost node 0 nothing); a strike row strikes node 3 only."""
    swarm, policy, keys, _ = four(task, model, tokenizer, enforce_length=True)
    old = honest_round(swarm, task, 0, nodes=4, G=4)[0]
    out = honest_round(swarm, task, 1, nodes=4, G=4)
    other_run = [swarm.protocol.signers[0].for_context("run-b|fp0").sign(m) for m in out[0]]
    attack = _cases(keys, out, tokenizer, old, other_run)[rule]
    honest = [m for n in (0, 1, 2) for m in out[n]]
    received = receive(swarm, policy, [*honest, *out[3][1:], *attack], 1, carried=attack)
    rec, strikes = account(swarm, received, 1)
    assert [r.sender for r in received.rollouts].count(0) == 2  # the honest messages are all accepted
    assert all(strikes.get(str(n), 0) == 0 for n in (0, 1, 2)) and not set(swarm.protocol.bans.banned) & {0, 1, 2}
    if rule in STRIKES:
        assert rec["3"]["rejected"] == {rule: 1} and strikes["3"] == 1  # the cheater's score: -1
    else:
        assert rule in DROPPED and strikes.get("3", 0) == 0
        assert rec["3"]["transport"] == {rule: len(attack)}  # the attacker is named as the one who delivered
        assert received.copies == (5 if rule == "copy" else 0)
        if rule in ("run", "round"):
            assert rec["0"]["rejected"] == {rule: len(attack)}  # node 0 signed them, once, elsewhere: no strike
    # The round's record (swarm/messages: read, swarm/invalid: refused) counts a refusal only of a message node 3 signed
    # for its own slot of this run and round (a strike row but identity, which claims node 0's slot): what anyone
    # could send (a replay, a re-spelled or forged signature, a copy) leaves it as the round without it (before: counted)
    own = int(rule in STRIKES and rule != "identity")
    report = PolicyReport(received.rollouts, received.invalid)
    assert report.read == len(honest) + len(out[3]) - 1 + own and len(report.refused) == own


def test_a_flood_of_distinct_signed_messages_is_refused_once_and_the_rest_dropped_unread(task, model, tokenizer):
    swarm, policy, keys, out = four(task, model, tokenizer)
    m3 = out[3][0]
    cap = FLOOD_FACTOR * 2
    flood = [resign(keys, 3, m3, index=100 + i) for i in range(cap + 50)]  # distinct contents, all signed by 3
    honest = [m for n in (0, 1, 2) for m in out[n]]
    received = receive(swarm, policy, [*honest, *out[3], *flood], 0)
    rec, strikes = account(swarm, received, 0)
    assert rec["3"]["rejected"] == {"seed": cap - 2, "flood": 1} and received.flooded == {3: 50 + 2 - 1}
    assert all(strikes.get(str(n), 0) == 0 for n in (0, 1, 2)) and swarm.protocol.bans.banned == {3: 0}


def test_the_reencoded_replay_with_ban_after_2_bans_nobody_honest_over_rounds(task, model, tokenizer):
    """The issue's case: every honest message re-sent with its signature in upper case, 3 rounds, ban_after=2."""
    swarm, policy, keys, _ = four(task, model, tokenizer)
    for r in range(3):
        out = honest_round(swarm, task, r, nodes=4, G=4)
        honest = [m for n in (0, 1, 2, 3) for m in out[n]]
        respelled = [dataclasses.replace(m, signature=m.signature.upper()) for m in honest if m.node != 3] * 4
        received = receive(swarm, policy, [*respelled[:5], *honest, *respelled[5:]], r)
        rec, strikes = account(swarm, received, r)
        assert len(received.rollouts) == 8 and rec["3"]["transport"] == {"malformed": len(respelled)}
        assert rec["unsigned"]["rejected"] == {"malformed": len(respelled)} and sum(strikes.values()) == 0
    assert swarm.protocol.bans.banned == {} and not swarm.protocol.bans.strikes


def test_the_banned_row_adds_no_strike(task, model, tokenizer):
    swarm, policy, keys, out = four(task, model, tokenizer)
    swarm.protocol.bans = BanList(2, banned={3: 0})
    received = receive(swarm, policy, [m for n in range(4) for m in out[n]], 0)
    rec, strikes = account(swarm, received, 0)
    assert rec["3"]["rejected"] == {"banned": 2} and strikes["3"] == 0 and swarm.protocol.bans.strikes == {}


def test_honest_nodes_are_never_struck_without_an_attacker(task, model, tokenizer):
    """Issue 31 review F: an honest sampler draws special token ids (the tiny model in 1 of 4 runs of 6 rounds)
    and, with complete_shares, that costs the node its whole share. Both are docs/protocol.md's `refused` rows:
    dropped, never a strike, so node 0 (honest, its own key) stays unbanned at ban_after=2, while node 3's seed
    cheat, a rule only it could break, still strikes it."""
    swarm, policy, keys, out = four(task, model, tokenizer, ban_after=2, complete_shares=True)
    special = tokenizer.all_special_ids[0] if tokenizer.all_special_ids[0] != tokenizer.eos_token_id else tokenizer.all_special_ids[1]
    m0 = out[0][0]
    sampled = resign(keys, 0, m0, token_ids=(special, *m0.token_ids))  # what node 0's sampler drew, signed by node 0
    cheat = resign(keys, 3, out[3][0], seed=7)
    sent = [sampled, *out[0][1:], *out[1], *out[2], cheat, *out[3][1:]]
    received = swarm.receive(policy, sent, 0)
    rec, strikes = account(swarm, received, 0)
    rules = {r.split(":", 1)[0] for (m, r), s in zip(received.invalid, received.signers) if s == 0}
    assert rules == {"special token", "incomplete"}  # refused: node 0's whole share (complete_shares)
    assert [r.sender for r in received.rollouts].count(0) == 0
    assert strikes["0"] == 0 and rec["3"]["rejected"]["seed"] == 1 and strikes["3"] >= 1
    assert 0 not in swarm.protocol.bans.banned and swarm.protocol.bans.strikes[0] == 0


def test_merge_views_is_one_list_whatever_each_node_read_first(task, model, tokenizer):
    """Issue 31 review D/E: nodes 1 and 2 read the round differently (node 2 lacks node 0's second message, a
    rank removed it; node 1 read node 3's messages in another order and one junk message). With the same relays
    both end with one list in one order (so the same strikes and bans), node 0's message restored from node 1's
    read; node 3's message that only node 3's own relay shows is not taken (it could show it to some only)."""
    swarm, policy, keys, out = four(task, model, tokenizer)
    verifier = swarm.protocol.verifier
    honest = [m for n in (0, 1, 2) for m in out[n]]
    only_own = resign(keys, 3, out[3][0], index=out[3][0].index + 1)  # signed by 3, shown in its relay only
    junk = dataclasses.replace(out[0][0], signature=None)
    view1 = [*honest, *reversed(out[3]), junk]
    view2 = [m for m in honest if m is not out[0][1]] + list(out[3])
    views = {0: honest + list(out[3]), 3: [*honest, *out[3], only_own]}
    _, merged1 = merge_views(1, {**views, 1: view1, 2: view2}, verifier, 0)
    _, merged2 = merge_views(2, {**views, 1: view1, 2: view2}, verifier, 0)
    digests = lambda ms: [message_digest(m) for m in ms if m.signature is not None]  # noqa: E731
    assert digests(merged1) == digests(merged2) == digests([*honest, *out[3]])  # node 0's relay order first
    assert merged1[-1] is junk and junk not in merged2  # own unsigned read: refused later, no strike
    assert message_digest(only_own) not in digests(merged1)
