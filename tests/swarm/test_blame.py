"""Issue 31, must-haves 1 and 2: one spelling of every signed thing, and strikes only for what the signer alone
could have caused. 4 nodes, node 3 the attacker; each row of docs/protocol.md's strike table is a case here."""

import dataclasses
import json
import re
from pathlib import Path
from typing import Callable

import pytest
from test_protocol import SEED, honest_round, make, refusals, resign

from dgrpo.policy.chat import encode_completion
from dgrpo.policy.sampling import completion_seed
from dgrpo.swarm.identity import Roster, SignatureVerifier, canonical_hex, generate_keys, message_digest, public_hex, signed_header
from dgrpo.swarm.protocol import (DROPPED, FLOOD_FACTOR, NAMED, REFUSED, STRIKES, UNAUTHENTICATED, BanList, compare_views, equivocators,
                                  merge_views)
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.swarm.accounting import apply_bans, peer_strikes
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
    apply_bans(swarm.protocol.bans, rec, (), round_idx)  # (what swarm/accounting.py applies after the round's record)
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


def strike_table() -> dict[str, tuple[str, str]]:
    """docs/protocol.md's strike table as written: each rule named in a row's first cell → (its consequence cell,
    its "attributed to" cell)."""
    text = DOCS.read_text().split("## The strike table", 1)[1]
    body = text.split("\n| rule | consequence | attributed to | why |\n|---|---|---|---|\n", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in body.splitlines():
        first, consequence, blamed = (cell.strip() for cell in line.split(" | ")[:3])
        for rule in re.findall(r"`([a-z ]+)`", first):
            rows[rule] = (consequence, blamed)
    return rows


def _blamed(cell: str) -> str:
    """The table's "attributed to" cell in one word: unsigned, signer (its signer), deliverer (who delivered it)."""
    for start, word in (("`unsigned`", "unsigned"), ("its signer", "signer"), ("who delivered it", "deliverer")):
        if cell.startswith(start):
            return word
    return cell


@dataclasses.dataclass(frozen=True)
class Row:
    """What this test expects of one row of the strike table (written here, not read from the code's sets): the
    row's consequence and whom it blames (compared with the docs' table), and a message breaking that rule alone.

    Attributes:
        attack: (keys, out, old, other_run, tokenizer) → what node 3 delivers in round 1 in the place of its first
            slot's message (``out``: round 1's honest messages by node; ``old``: node 0's of round 0;
            ``other_run``: node 0's round-1 messages signed for another run under its key).
        signer: the node whose key signed the attack (None: no roster key).
        rules: the ``swarm.protocol`` rules on for the case; ``G``: the group size (``duplicate``: 2 slots of a prompt).
        setup: applied to the swarm before the receive (a ban in force, a homogeneous swarm).
        refusals: how many refusals of this rule (default: one per attack message).
        others: node 3's refusals by other rules that the case needs (a flood: distinct messages up to the cap).
        strikes: node 3's strikes (default: ``refusals`` for a strike row, else 0).
    """

    consequence: str
    blamed: str
    attack: Callable
    signer: int | None = 3
    rules: dict = dataclasses.field(default_factory=dict)
    G: int = 4
    setup: Callable = lambda swarm: None  # noqa: E731
    refusals: int | None = None
    others: dict = dataclasses.field(default_factory=dict)
    strikes: int | None = None


def _special(tokenizer):
    return next(t for t in tokenizer.all_special_ids if t != tokenizer.eos_token_id)


def _specials(keys, m3, tokenizer, n):
    """n distinct messages of node 3 for its first slot, each with special token ids inside (``special token``)."""
    return [resign(keys, 3, m3, token_ids=(_special(tokenizer),) * i + m3.token_ids) for i in range(1, n + 1)]


def _twin(keys, out, *_):
    """Node 3's first slot with the text of its other slot of the same prompt (sent before it)."""
    m3 = out[3][0]
    o = next(m for m in out[3][1:] if m.prompt_id == m3.prompt_id)
    return [resign(keys, 3, m3, text=o.text, token_ids=o.token_ids)]


def _seeded(m):
    return completion_seed(SEED, 1, 3, m.prompt_id, 0)


SURROGATE = dict(text="\ud800 2 + 2 = 4", token_ids=(1, 2, 3), tokenizer="Other:x:50000")  # encode raises TypeError
CAP = 4 * 2  # FLOOD_FACTOR (4) × node 3's 2 slots: distinct messages it may sign in a round; its own second slot is one
ROWS = {
    "schema": Row("dropped", "unsigned", lambda k, o, *_: [resign(k, 3, o[3][0], index=True)], signer=None),
    "malformed": Row("dropped", "unsigned", lambda k, o, *_: [dataclasses.replace(o[0][0], signature=o[0][0].signature.upper())] * 3,
                     signer=None),
    "signature": Row("dropped", "unsigned", lambda k, o, *_: [dataclasses.replace(o[0][0], text=o[0][0].text + " forged")],
                     signer=None),  # node 0's signature on other content
    "run": Row("dropped", "signer", lambda k, o, old, other, *_: other, signer=0),  # node 0's, signed for a previous run
    "round": Row("dropped", "signer", lambda k, o, old, *_: old, signer=0),  # node 0's of round 0, re-sent in round 1
    "copy": Row("dropped", "deliverer", lambda k, o, *_: [dataclasses.replace(o[0][0]) for _ in range(5)], signer=0),
    "flooded": Row("dropped", "deliverer", lambda k, o, old, other, tok: _specials(k, o[3][0], tok, CAP + 5),
                   refusals=5, others={"special token": CAP - 1, "flood": 1}, strikes=1),  # (the one flood strike)
    "banned": Row("dropped", "signer", lambda k, o, *_: [o[3][0]], refusals=2,  # its second slot's message too
                  setup=lambda swarm: setattr(swarm.protocol, "bans", BanList(1, banned={3: 0}))),
    "special token": Row("refused", "signer", lambda k, o, old, other, tok: _specials(k, o[3][0], tok, 1)),
    "duplicate": Row("refused", "signer", _twin, rules=dict(drop_duplicates=True), G=16),
    "incomplete": Row("refused", "signer", lambda *_: [], rules=dict(complete_shares=True), refusals=1),  # a slot left out
    "identity": Row("strike", "signer", lambda k, o, *_: [resign(k, 3, o[3][0], node=0)]),
    "flood": Row("strike", "signer", lambda k, o, old, other, tok: _specials(k, o[3][0], tok, CAP),
                 refusals=1, others={"special token": CAP - 1}),
    "tokenizer": Row("strike", "signer", lambda k, o, *_: [resign(k, 3, o[3][0], tokenizer="Other:x:50000")],
                     setup=lambda swarm: setattr(swarm, "protocol", dataclasses.replace(swarm.protocol, homogeneous=True))),
    "prompt": Row("strike", "signer", lambda k, o, *_: [resign(k, 3, o[3][0], prompt_id="nope")]),
    "size": Row("strike", "signer", lambda k, o, *_: [resign(k, 3, o[3][0], text="a" * 9000)]),
    "vocabulary": Row("strike", "signer", lambda k, o, old, other, tok: [resign(k, 3, o[3][0], token_ids=(len(tok) + 7, *o[3][0].token_ids))]),
    "consistency": Row("strike", "signer", lambda k, o, *_: [resign(k, 3, o[3][0], text=o[3][0].text + " 2 + 2 = 5")]),
    "seed": Row("strike", "signer", lambda k, o, *_: [resign(k, 3, o[3][0], seed=7)]),
    "share": Row("strike", "signer", lambda k, o, *_: [resign(k, 3, o[3][0], index=0, seed=_seeded(o[3][0]))]),  # another's slot
    "length": Row("strike", "signer", lambda k, o, old, other, tok: [resign(k, 3, o[3][0], **_text(tok, " ".join(["apples"] * 40)))],
                  rules=dict(enforce_length=True)),
    "decode": Row("strike", "signer", lambda k, o, *_: [resign(k, 3, o[3][0], **SURROGATE)]),
}
# Rows that are no message rule, tested where their path is: rule → (its consequence cell, test file, test name); the
# test must exist and assert a reason of that rule ("rule: ...").
ELSEWHERE = {
    "record": ("round record left out of the metrics", "tests/training/test_held_records.py",
               "test_the_last_two_records_are_read_together_at_the_end_and_a_refused_one_is_named_with_its_round"),
    "missing record": ("round record left out of the metrics", "tests/training/test_held_records.py",
                       "test_a_record_still_missing_at_the_next_record_is_named_then_under_its_round"),
    "slow proposal": ("named", "tests/transports/test_clock_auto.py",
                      "test_agree_start_names_the_slow_proposer_in_peers_jsonl_never_a_strike"),
    "skip": ("named", "tests/transports/test_clocked_skips.py",
             "test_an_honest_node_late_alone_serves_a_signed_notice_and_nobody_accuses_it"),
}
NOT_IN_THE_RECORD = {"schema", "malformed", "signature", "run", "round", "identity", "copy", "flooded"}  # (docs: "The round's record under attack")


def test_every_row_of_the_strike_table_has_a_case_here_and_the_same_consequence():
    """docs/protocol.md's claim that this file tests each row: a row added there without a case (in ROWS, or a test
    of its own path in ELSEWHERE) fails here, and so does a row whose consequence or attribution the docs change."""
    table = strike_table()
    assert len(table) >= 22
    assert set(table) == set(ROWS) | set(ELSEWHERE), \
        f"rows without a case here (ROWS: a message rule; ELSEWHERE: its test): {sorted(set(table) - set(ROWS) - set(ELSEWHERE))}"
    assert {r: (c, _blamed(b)) for r, (c, b) in table.items() if r in ROWS} == {r: (x.consequence, x.blamed) for r, x in ROWS.items()}
    root = DOCS.parents[1]
    for rule, (consequence, path, name) in ELSEWHERE.items():
        source = (root / path).read_text()
        assert f"\ndef {name}(" in source, (rule, path, name)
        test = source.split(f"\ndef {name}(", 1)[1].split("\ndef ", 1)[0]
        assert f"{rule}: " in test and table[rule][0] == consequence, (rule, path, name, table[rule][0])


@pytest.mark.parametrize("rule", sorted(ROWS))
def test_each_row_of_the_strike_table(task, model, tokenizer, rule):
    """Round 1: every honest node's messages, and what node 3 delivers for ``rule`` through the real receive and
    the round's accounting (ban_after=1: one strike is a ban). A dropped or refused row strikes nobody (node 0's
    replayed messages cost node 0 nothing); a strike row strikes and bans node 3 only; each refusal is attributed as
    the table says (``unsigned``, its signer, or named under node 3, who delivered it)."""
    row = ROWS[rule]
    swarm, policy, keys = make(task, model, tokenizer, nodes=4, G=row.G, ban_after=1, **row.rules)
    row.setup(swarm)
    old = honest_round(swarm, task, 0, nodes=4, G=row.G)[0]
    out = honest_round(swarm, task, 1, nodes=4, G=row.G)
    other_run = [swarm.protocol.signers[0].for_context("run-b|fp0").sign(m) for m in out[0]]
    attack = row.attack(keys, out, old, other_run, tokenizer)
    assert rule != "decode" or attack[0].tokenizer != policy.tokenizer_id
    honest = [m for n in (0, 1, 2) for m in out[n]]
    received = receive(swarm, policy, [*honest, *out[3][1:], *attack], 1, carried=attack)
    banned_before = dict(swarm.protocol.bans.banned)
    rec, strikes = account(swarm, received, 1)
    senders = [r.sender for r in received.rollouts]
    assert [senders.count(n) for n in (0, 1, 2)] == [len(out[n]) for n in (0, 1, 2)]  # the honest messages all accepted
    assert not any(m is a for a in attack for m in received.admitted)
    n = len(attack) if row.refusals is None else row.refusals
    who = "unsigned" if row.signer is None else str(row.signer)
    if row.blamed == "deliverer":
        assert rec["3"]["transport"] == {rule: n} and all(rule not in p["rejected"] for p in rec.values())
    else:
        assert rec[who]["rejected"] == ({rule: n, **row.others} if who == "3" else {rule: n})
        assert rec["3"]["transport"] == ({} if who == "3" else {rule: n})  # another's message: node 3 delivered it
    struck = row.strikes if row.strikes is not None else (n if row.consequence == "strike" else 0)
    assert {who: strikes.get(who, 0) for who in "0123"} == {"0": 0, "1": 0, "2": 0, "3": struck}
    assert swarm.protocol.bans.banned == ({**banned_before, 3: 1} if struck else banned_before)  # ban_after=1
    # The round's record (swarm/messages: read, swarm/invalid: refused) counts a refusal only of a message its signer
    # signed for its own slot of this run and round (banned included): what anyone could send (a replay, a re-spelled or
    # forged signature, a copy) or a key signing for another's slot leaves it as the round without it
    report = PolicyReport(received.rollouts, received.invalid)
    own = (0 if rule in NOT_IN_THE_RECORD else n) + sum(row.others.values())
    assert len(report.refused) == own and report.read == len(received.rollouts) + own
    assert len(received.rollouts) == len(honest) + len(out[3]) - 1 - (rule in ("banned", "incomplete"))


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
