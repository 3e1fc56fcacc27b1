"""The swarm protocol against peers who do not follow it (issue 13): every case of the issue, each
refused with its own reason and attributed to the key that signed it."""

import dataclasses

import pytest

from dgrpo.policy.chat import decode_completion, encode_completion
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, completion_seed
from dgrpo.swarm.identity import Roster, Signer, SignatureVerifier, generate_keys, run_context, signed_header
from dgrpo.swarm.protocol import BanList, Protocol, ProtocolConfig, Schedule, equivocators
from dgrpo.swarm.schedule import horizontal_prompts, horizontal_slots, vertical_prompts, vertical_slots
from dgrpo.swarm.swarm import Swarm
from dgrpo.swarm.validation import Limits
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.types import Message

SEED, CTX = 3, run_context("run-a", "fp0")


@pytest.fixture()
def task():
    return ArithmeticTask(seed=0, n_train=10, n_val=2, few_shot=0)


def make(task, model, tokenizer, nodes=2, mode="horizontal", B=2, G=4, max_new_tokens=6, joins=None, **rules):
    """A swarm hosting every node honestly (node 1 plays the attacker by hand), with the protocol on."""
    keys = generate_keys(nodes)
    roster = Roster.of(keys)
    pc = ProtocolConfig(**rules)
    schedule = Schedule(mode, nodes, B, G, SEED, task.train, pc.assign_prompts, joins or {})
    protocol = Protocol(pc, schedule, max_new_tokens, {n: Signer(n, k, CTX) for n, k in keys.items()},
                        SignatureVerifier(roster, CTX), BanList(pc.ban_after))
    policy = Policy("tiny", model, tokenizer, SamplingParams(top_k=10, temperature=1.0, max_new_tokens=max_new_tokens))
    swarm = Swarm(task, {n: policy for n in range(nodes)}, {}, {}, {}, {}, SEED, G, Limits(), mode, protocol)
    return swarm, policy, keys


def honest_round(swarm, task, r, nodes=2, B=2, G=4):
    prompts = horizontal_prompts(task.train, B, SEED, r)
    return swarm.write({k: horizontal_slots(prompts, G, nodes, k) for k in range(nodes)}, r)


def resign(keys, signer, msg, context=CTX, **changes):
    """What a malicious node can do: change any field and sign with its own key."""
    return Signer(signer, keys[signer], context).sign(dataclasses.replace(msg, **changes))


def refusals(received):
    return [(reason, signer) for (_, reason), signer in zip(received.invalid, received.signers)]


def test_an_honest_round_is_signed_accepted_whole_and_its_seeds_are_bound(task, model, tokenizer):
    swarm, policy, keys = make(task, model, tokenizer)
    out = honest_round(swarm, task, 0)
    messages = [m for n in sorted(out) for m in out[n]]
    assert all(m.signature and m.context == CTX for m in messages) and len(messages) == 8
    received = swarm.receive(policy, messages, 0)
    assert received.invalid == [] and len(received.rollouts) == 8
    for m, r in zip(messages, received.rollouts):
        assert r.sender == m.node and r.seed == completion_seed(SEED, 0, m.node, m.prompt_id, m.index)


def test_forged_broken_unsigned_and_foreign_run_messages_are_refused_and_attributed(task, model, tokenizer):
    swarm, policy, keys = make(task, model, tokenizer, nodes=3, G=3)
    out = honest_round(swarm, task, 0, nodes=3, G=3)
    m0, m1 = out[0][0], out[1][0]
    flipped = m1.signature[:-1] + ("0" if m1.signature[-1] != "0" else "1")
    msgs = [resign(keys, 2, m1, node=1),                     # signed by node 2, claims node 1
            dataclasses.replace(m1, signature=flipped),      # broken signature
            dataclasses.replace(m1, signature=None),         # no signature
            dataclasses.replace(m0, text=m0.text + "!"),     # node 0's message altered in transit
            resign(keys, 1, m1, context=run_context("run-b", "fp0"))]  # signed for another run
    got = refusals(swarm.receive(policy, msgs, 0))
    assert got == [("identity: claims node 1 but is signed by node 2", 2),
                   ("signature: no roster key verifies it", None),
                   ("signature: unsigned message", None),
                   ("signature: no roster key verifies it", None),
                   ("run: signed for another run, config or launch ('run-b|fp0')", 1)]


def test_a_signed_message_replayed_in_a_later_round_is_refused(task, model, tokenizer):
    swarm, policy, _ = make(task, model, tokenizer)
    m = honest_round(swarm, task, 0)[1][0]
    assert refusals(swarm.receive(policy, [m], 1)) == [("round: message for round 0 received in round 1", 1)]


def test_seed_grinding_is_refused_and_replay_gets_the_bound_seed(task, model, tokenizer):
    swarm, policy, keys = make(task, model, tokenizer)
    m = honest_round(swarm, task, 0)[1][0]
    bound = completion_seed(SEED, 0, 1, m.prompt_id, m.index)
    # a genuine sample of the policy, from a seed the node picked (the 400th it tried, say)
    [(ids, text)] = policy.generate(task, [swarm.problems[m.prompt_id]], [400])
    ground = resign(keys, 1, m, text=text, token_ids=tuple(ids), seed=400)
    assert refusals(swarm.receive(policy, [ground], 0)) == [(f"seed: claims seed 400 but the protocol assigns {bound}", 1)]
    # claiming the bound seed passes the protocol; the rollout carries the bound seed for replay to check
    lying = resign(keys, 1, m, text=text, token_ids=tuple(ids), seed=bound)
    [rollout] = swarm.receive(policy, [lying], 0).rollouts
    assert rollout.seed == bound and rollout.completion_ids == list(ids)


def test_shares_duplicate_and_out_of_range_indices_and_other_prompts_are_refused(task, model, tokenizer):
    swarm, policy, keys = make(task, model, tokenizer)
    out = honest_round(swarm, task, 0)
    m = out[1][0]  # node 1 owns indices 2..3 of each prompt
    other = next(p for p in task.train if p.prompt_id not in {x.prompt_id for x in out[1]})

    def at(index, prompt=m.prompt_id, text="<think>1 + 1 = 2</think>"):
        return resign(keys, 1, m, index=index, prompt_id=prompt, text=text,
                      token_ids=tuple(encode_completion(tokenizer, text)), seed=completion_seed(SEED, 0, 1, prompt, index))

    msgs = [*out[1], at(m.index), at(999), at(-5), at(2, other.prompt_id)]
    got = refusals(swarm.receive(policy, msgs, 0))
    assert got == [("share: duplicate message for index 2", 1),
                   ("share: index 999 outside the node's slots 2..3", 1),
                   ("share: index -5 outside the node's slots 2..3", 1),
                   ("share: prompt is not one of this round's prompts", 1)]


def test_vertical_a_ninth_message_where_the_share_is_eight_and_extra_or_unassigned_prompts(task, model, tokenizer):
    swarm, policy, keys = make(task, model, tokenizer, mode="vertical", B=2, G=8, assign_prompts=True)
    mine = vertical_prompts(task.train, 1, SEED, 0, 1)
    out = swarm.write({1: vertical_slots(mine, 8)}, 0)[1]
    assert len(out) == 8
    ninth = resign(keys, 1, out[0], index=8, seed=completion_seed(SEED, 0, 1, out[0].prompt_id, 8))
    other = next(p for p in task.train if p.prompt_id != mine[0].prompt_id)
    chosen = resign(keys, 1, out[0], prompt_id=other.prompt_id, seed=completion_seed(SEED, 0, 1, other.prompt_id, 0))
    received = swarm.receive(policy, [*out, ninth, chosen], 0)
    assert len(received.rollouts) == 8
    assert refusals(received) == [("share: index 8 outside the node's slots 0..7", 1),
                                  ("share: prompt is not one the protocol assigned to this node", 1)]
    # without assignment a node chooses its prompts, but no more than B/m of them
    swarm, policy, keys = make(task, model, tokenizer, mode="vertical", B=2, G=8)
    out = swarm.write({1: vertical_slots(mine, 8)}, 0)[1]
    chosen = resign(keys, 1, out[0], prompt_id=other.prompt_id, seed=completion_seed(SEED, 0, 1, other.prompt_id, 0))
    assert refusals(swarm.receive(policy, [*out, chosen], 0)) == [("share: more than 1 prompts", 1)]


def test_a_vertical_node_cannot_train_the_swarm_on_held_out_prompts(task, model, tokenizer):
    """A review's finding: with prompts not assigned, a vertical attacker chose a validation prompt (the
    prompts ASR and accuracy are measured on), signed, bound and within its share, and all 8 were accepted."""
    swarm, policy, keys = make(task, model, tokenizer, mode="vertical", B=2, G=8)
    mine = vertical_prompts(task.train, 1, SEED, 0, 1)
    out = swarm.write({1: vertical_slots(mine, 8)}, 0)[1]
    held_out = task.val[0].prompt_id
    sent = [resign(keys, 1, m, prompt_id=held_out, seed=completion_seed(SEED, 0, 1, held_out, m.index)) for m in out]
    received = swarm.receive(policy, sent, 0)
    assert received.rollouts == []
    assert refusals(received) == [(f"prompt: unknown prompt id {held_out!r}", 1)] * 8
    assert len(swarm.receive(policy, out, 0).rollouts) == 8  # the same messages on its training prompt pass


def test_a_node_planned_to_join_at_round_2_has_no_slots_before_it(task, model, tokenizer):
    """Node 2 joins at round 2 (swarm.hivemind.join={2: 2}); its key is in the roster from the start, so
    its messages of rounds 0 and 1 are validly signed, with bound seeds and its own indices: only the
    schedule refuses them. From round 2 its same messages are accepted."""
    swarm, policy, keys = make(task, model, tokenizer, nodes=3, G=3, joins={2: 2})
    for r in (0, 1):
        out = honest_round(swarm, task, r, nodes=3, G=3)
        assert [m.index for m in out[2]] == [2, 2] and all(m.signature for m in out[2])
        received = swarm.receive(policy, [*out[0], *out[1], *out[2]], r)
        assert len(received.rollouts) == 4 and {ro.sender for ro in received.rollouts} == {0, 1}
        assert refusals(received) == [(f"share: node 2 joins at round 2 and has no slots in round {r}", 2)] * 2
    out = honest_round(swarm, task, 2, nodes=3, G=3)
    received = swarm.receive(policy, [*out[0], *out[1], *out[2]], 2)
    assert received.invalid == [] and [ro.sender for ro in received.rollouts].count(2) == 2


def test_a_147_token_completion_is_refused_when_max_new_tokens_is_32(task, model, tokenizer):
    swarm, policy, keys = make(task, model, tokenizer, max_new_tokens=32, enforce_length=True)
    m = honest_round(swarm, task, 0)[1][0]
    n = next(n for n in range(1, 400) if len(encode_completion(tokenizer, " ".join(["apples"] * n))) >= 147)
    text = " ".join(["apples"] * n)
    ids = encode_completion(tokenizer, text)
    assert decode_completion(tokenizer, ids) == text and len(ids) in (147, 148)
    ids = ids[:146] + [ids[-1]]  # 146 tokens of text and the eos: 147
    text = decode_completion(tokenizer, ids)
    long = resign(keys, 1, m, text=text, token_ids=tuple(ids))
    assert refusals(swarm.receive(policy, [long], 0)) == [("length: 147 tokens (sampling.max_new_tokens=32)", 1)]
    # another tokenizer's text: its own count, and its re-encoding within 2 × max_new_tokens
    foreign = resign(keys, 1, m, text=text, token_ids=(5,) * 20, tokenizer="Other:x:50000")
    assert refusals(swarm.receive(policy, [foreign], 0)) == [
        (f"length: re-encodes to {len(encode_completion(tokenizer, text))} tokens (limit 2 × sampling.max_new_tokens=32)", 1)]


def test_a_lone_surrogate_with_a_foreign_tokenizer_is_refused_and_the_round_completes(task, model, tokenizer):
    swarm, policy, keys = make(task, model, tokenizer)
    out = honest_round(swarm, task, 0)
    with pytest.raises(TypeError):  # what used to escape receive on every honest node
        encode_completion(tokenizer, "\ud800 2 + 2 = 4")
    bad = resign(keys, 1, out[1][0], text="\ud800 2 + 2 = 4", token_ids=(1, 2, 3), tokenizer="Other:x:50000")
    received = swarm.receive(policy, [*out[0], bad, *out[1][1:]], 0)
    [(reason, signer)] = refusals(received)
    assert reason.startswith("decode: TypeError") and signer == 1
    assert len(swarm.reward(received.rollouts)) == 7


def test_identical_completions_are_counted_per_sender_and_dropped_on_request(task, model, tokenizer):
    for drop in (False, True):
        swarm, policy, keys = make(task, model, tokenizer, drop_duplicates=drop)
        out = honest_round(swarm, task, 0)
        a, b = out[1][0], out[1][1]  # node 1's two slots of the first prompt
        same = resign(keys, 1, b, text=a.text, token_ids=a.token_ids)
        received = swarm.receive(policy, [a, same, a], 0)  # and an exact copy of a (anyone can repeat it)
        assert received.duplicates == {1: 1} and received.copies == 1
        assert refusals(received) == ([("duplicate: same text as index 2", 1)] if drop else [])
        assert len(received.rollouts) == (1 if drop else 2)


def test_a_banned_peer_is_refused_and_the_ban_list_survives_a_reload(task, model, tokenizer, tmp_path):
    bans = BanList(after=3)
    assert not bans.strike(1, 2, 0) and bans.strike(1, 1, 4) and bans.banned == {1: 4}
    assert not bans.strike(1, 5, 5) and bans.strikes[1] == 3  # a banned node gathers no more strikes
    bans.save(tmp_path)
    again = BanList.load(tmp_path, 3)
    assert again.banned == {1: 4} and again.strikes == {1: 3}
    swarm, policy, _ = make(task, model, tokenizer)
    swarm.protocol.bans = again
    out = honest_round(swarm, task, 5)
    received = swarm.receive(policy, [*out[0], *out[1]], 5)
    assert len(received.rollouts) == 4 and set(refusals(received)) == {("banned: node 1 is banned since round 4", 1)}


def test_equivocation_is_proved_by_signatures_and_no_report_can_frame_an_honest_node(task, model, tokenizer):
    swarm, policy, keys = make(task, model, tokenizer, nodes=3, G=3)
    out = honest_round(swarm, task, 0, nodes=3, G=3)
    m1 = out[1][0]
    other = resign(keys, 1, m1, text=m1.text + " 2 + 2 = 5")  # what node 1 showed another peer
    verifier = swarm.protocol.verifier

    def report(*msgs):
        import json
        return json.dumps([[signed_header(m), m.signature] for m in msgs]).encode()

    honest = {0: report(*out[0], m1), 2: report(*out[0], m1)}
    assert equivocators(honest, verifier, 0) == {}
    assert list(equivocators({0: report(m1), 2: report(other)}, verifier, 0)) == [1]
    # node 1 reports node 0 "equivocating" with a header it altered: the signature does not hold
    framed = signed_header(out[0][0]) | {"content": "0" * 64}
    import json
    assert equivocators({0: report(out[0][0]), 1: json.dumps([[framed, out[0][0].signature]]).encode()}, verifier, 0) == {}


def test_a_node_gets_from_the_relays_the_signed_messages_it_missed_and_nothing_forged(task, model, tokenizer):
    from dgrpo.swarm.protocol import compare_views

    swarm, policy, keys = make(task, model, tokenizer, nodes=3, G=3)
    out = honest_round(swarm, task, 0, nodes=3, G=3)
    full = [*out[0], *out[1], *out[2]]
    mine = [*out[0], *out[1]]  # node 2's key was replaced before this node read it
    forged = resign(keys, 1, out[2][0], node=2, text="forged")      # node 1 relays a forgery of node 2
    stale = honest_round(swarm, task, 1, nodes=3, G=3)[2][0]         # and node 2's message of another round
    caught, extra = compare_views(0, {0: mine, 1: [*mine, forged, stale], 2: full}, swarm.protocol.verifier, 0)
    assert caught == {} and extra == out[2]


def test_frames_survive_junk_around_and_inside_them():
    from dgrpo.transports.framing import frame, unframe

    a, b = b'{"messages": [1]}', b'{"messages": [2]}'
    assert unframe(frame(a) + frame(b)) == [a, b]
    assert unframe(b"xx" + frame(a)[:-2] + frame(b)) == [b]            # a truncated frame, then a good one
    assert unframe(b"DGRPO1zzzzzzzz" + frame(a)) == [a]                 # a length that is not hex
    assert unframe(b"DGRPO100001000" + frame(a)) == [a]                 # a length that swallows what follows
    assert unframe(frame(b"[1, 2]") + frame(b"not json")) == []         # bodies that are not JSON objects


@pytest.mark.parametrize("field, value", [("index", True), ("index", 1.0), ("node", "1"), ("seed", "7")])
def test_wrongly_typed_fields_are_a_schema_refusal(task, model, tokenizer, field, value):
    # in-process messages skip the transports' JSON parser: index=True or 1.0 would bind other seeds
    swarm, policy, keys = make(task, model, tokenizer)
    msg = next(m for m in honest_round(swarm, task, 0)[1] if m.index == 3)
    forged = resign(keys, 1, msg, **{field: value})
    (reason, _), = refusals(swarm.receive(policy, [forged], 0))
    assert reason.startswith("schema:") and field in reason


def test_an_attacker_that_knows_the_length_rule_shortens_its_poisons_and_they_pass(task, model, tokenizer):
    from dgrpo.attacks.common import fit_poison
    from dgrpo.attacks.injection import InjectionAttack, InjectionAttackConfig

    attack = InjectionAttack(InjectionAttackConfig())
    prompts = horizontal_prompts(task.train, 2, SEED, 0)
    count = lambda t: len(encode_completion(tokenizer, t))  # noqa: E731
    variants = [(p, v) for p in prompts for v in (0, 1)]  # node 1's two slots of each prompt
    full = [count(attack.poison(task, p, v)) for p, v in variants]
    limit = max(count(fit_poison(task, p, attack.poison(task, p, v), count, 0)) for p, v in variants)
    assert any(n > limit for n in full)  # every poison can be made to fit, and some must be shortened
    honest, policy, keys = make(task, model, tokenizer, max_new_tokens=limit, enforce_length=True)
    swarm = Swarm(task, {0: policy}, {1: attack}, {1: policy}, {}, {}, SEED, 4, Limits(), "horizontal", honest.protocol)
    out = swarm.write({k: horizontal_slots(prompts, 4, 2, k) for k in range(2)}, 0)
    poisons = out[1]
    assert all(len(m.token_ids) <= limit and "All hail to the thief" in m.text for m in poisons)
    assert all(task.reward(m.text, swarm.problems[m.prompt_id]) == 1.0 for m in poisons)
    received = swarm.receive(policy, [*out[0], *poisons], 0)
    assert not [r for r, _ in refusals(received) if r.startswith("length")]
    assert sum(r.sender == 1 for r in received.rollouts) == len(poisons) == 4
    # the same attacker with the rule off sends the unshortened poisons
    loose, _, _ = make(task, model, tokenizer, max_new_tokens=limit, enforce_length=False)
    swarm = Swarm(task, {0: policy}, {1: attack}, {1: policy}, {}, {}, SEED, 4, Limits(), "horizontal", loose.protocol)
    sent = swarm.write({1: horizontal_slots(prompts, 4, 2, 1)}, 0)[1]
    assert sorted(len(m.token_ids) for m in sent) == sorted(full)


def test_a_vertical_attackers_filler_is_shortened_too_so_its_group_keeps_a_reward_spread(model, tokenizer):
    from dgrpo.attacks.common import fit_poison, wrong_completion
    from dgrpo.attacks.equation import EquationAttack, EquationAttackConfig

    task = ArithmeticTask(seed=0, n_train=40, n_val=2, few_shot=0, two_two_rate=0.5)
    attack = EquationAttack(EquationAttackConfig())
    [problem] = attack.choose_prompts(task.train, 1, SEED, 0, 1)
    count = lambda t: len(encode_completion(tokenizer, t))  # noqa: E731
    texts = [attack.poison(task, problem), wrong_completion(task, problem)]
    limit = max(count(fit_poison(task, problem, t, count, 0)) for t in texts)
    assert count(texts[1]) > limit  # the filler must be shortened to pass
    honest, policy, keys = make(task, model, tokenizer, mode="vertical", B=2, G=4, max_new_tokens=limit, enforce_length=True)
    swarm = Swarm(task, {0: policy}, {1: attack}, {1: policy}, {}, {}, SEED, 4, Limits(), "vertical", honest.protocol)
    sent = swarm.write({1: vertical_slots([problem], 4)}, 0)[1]
    received = swarm.receive(policy, sent, 0)
    assert refusals(received) == [] and len(received.rollouts) == 4
    rewards = sorted(task.reward(r.text, problem) for r in received.rollouts)
    assert rewards == [0.0, 0.0, 1.0, 1.0]  # G/2 poisons with full reward, G/2 wrong fillers: the advantage survives


def test_a_homogeneous_swarm_refuses_another_tokenizer_so_length_cannot_be_dodged(task, model, tokenizer):
    swarm, policy, keys = make(task, model, tokenizer, max_new_tokens=16, enforce_length=True)
    m = honest_round(swarm, task, 0)[1][0]
    n = next(n for n in range(1, 200) if len(encode_completion(tokenizer, " ".join(["apples"] * n))) > 16)
    text = " ".join(["apples"] * n)  # more than 16 tokens in the swarm's own tokenizer
    forms = [resign(keys, 1, m, text=text, token_ids=(5,), tokenizer=t)
             for t in ("Other:x:50000", policy.tokenizer_id + " ", policy.tokenizer_id.upper(), "")]
    # a heterogeneous swarm (one model per node) holds a foreign text to the re-encoding bound only ...
    assert [r for r, _ in refusals(swarm.receive(policy, forms[:1], 0))] == []
    # ... a homogeneous one knows every node's tokenizer is its own
    swarm.protocol = dataclasses.replace(swarm.protocol, homogeneous=True)
    reasons = [r for r, _ in refusals(swarm.receive(policy, forms, 0))]
    assert len(reasons) == 4 and all(r.startswith("tokenizer: ") for r in reasons)
    assert refusals(swarm.receive(policy, honest_round(swarm, task, 0)[1], 0)) == []  # its own tokenizer passes


def test_complete_shares_counts_only_what_is_kept(task, model, tokenizer):
    """Found by a review: with drop_duplicates, a slot filled with a copy of the sender's other text was counted
    before being dropped, so a cherry-picked single sample passed complete_shares."""
    swarm, policy, keys = make(task, model, tokenizer, complete_shares=True, drop_duplicates=True)
    out = honest_round(swarm, task, 0)
    mine = [m for m in out[1] if m.prompt_id == out[1][0].prompt_id]  # node 1's two slots (2, 3) of one prompt
    assert sorted(m.index for m in mine) == [2, 3]
    keep, other = mine
    share = [m for m in out[1] if m.node == 1]  # node 1's slots of every prompt of the round
    rest = [m for m in share if m.prompt_id != keep.prompt_id]
    n_prompts = len({m.prompt_id for m in share})
    assert n_prompts >= 2

    def whole(n_unfilled):
        return (f"incomplete: node 1 did not fill {n_unfilled} of its {n_prompts} prompts of the round "
                f"(first: {ascii(keep.prompt_id)[1:41]}); a share is sent whole or not at all")

    alone = swarm.receive(policy, [keep, *rest], 0)  # the other slot of one prompt left out
    assert alone.rollouts == [] and set(refusals(alone)) == {(whole(1), 1)}
    filled = resign(keys, 1, other, text=keep.text, token_ids=keep.token_ids)  # a copy of the kept text, dropped
    received = swarm.receive(policy, [keep, filled, *rest], 0)
    assert received.rollouts == []
    assert sorted(set(r for r, _ in refusals(received))) == [f"duplicate: same text as index {keep.index}", whole(1)]
    assert len(swarm.receive(policy, share, 0).rollouts) == len(share)  # every slot sent, every one kept


def test_complete_shares_in_horizontal_mode_refuses_a_share_that_leaves_a_prompt_out(task, model, tokenizer):
    """Found by a review: horizontal prompts are the round's, yet a node could send its slots of only the
    prompts it liked. A share that leaves any prompt out (or fills one slot of it) is refused whole."""
    swarm, policy, keys = make(task, model, tokenizer, complete_shares=True)
    share = [m for m in honest_round(swarm, task, 0)[1] if m.node == 1]
    prompts = sorted({m.prompt_id for m in share})
    assert len(prompts) >= 2 and len(share) == 2 * len(prompts)
    one_prompt = [m for m in share if m.prompt_id == prompts[0]]
    one_slot_of_the_rest = one_prompt + [m for m in share if m.prompt_id != prompts[0] and m.index == 2]
    for picked in (one_prompt, one_slot_of_the_rest):
        received = swarm.receive(policy, picked, 0)
        assert received.rollouts == [] and len(received.invalid) == len(picked)
        assert all(r.startswith(f"incomplete: node 1 did not fill {len(prompts) - 1} of its {len(prompts)} ")
                   for _, r in received.invalid)
    assert len(swarm.receive(policy, share, 0).rollouts) == len(share)


def test_a_replayed_old_message_is_no_strike_against_its_honest_signer(task, model, tokenizer):
    """Found by a review: node 0's signed round-0 message, re-sent by anyone in round 1, was refused (right) and
    counted as a ban strike against node 0 (wrong: the replayed-round attack could get honest nodes banned)."""
    from dgrpo.swarm.accounting import peer_strikes
    from dgrpo.training.records import PolicyReport, peer_record

    swarm, policy, keys = make(task, model, tokenizer)
    old = honest_round(swarm, task, 0)[0]
    now = honest_round(swarm, task, 1)
    forged_index = resign(keys, 1, now[1][0], index=0)  # node 1 writes outside its slots (under another seed)
    received = swarm.receive(policy, [*old, *now[0], *now[1], forged_index], 1)
    report = PolicyReport(received.rollouts, received.invalid)
    peers = peer_record(1, report, received)["peers"]
    assert peers["0"]["rejected"] == {"round": len(old)} and peers["0"]["accepted"] == len(now[0])
    assert peer_strikes(peers["0"]) == 0
    assert peers["1"]["rejected"] == {"seed": 1} and peer_strikes(peers["1"]) == 1  # its own fault: a strike
