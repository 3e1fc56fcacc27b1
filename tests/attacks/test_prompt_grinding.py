"""Prompt-choice grinding (issue 14, Must have 3): a vertical attacker picks the prompts whose bound
seeds give what it wants. Seed binding cannot see it (every sample is its slot's bound seed's own);
the protocol assigning prompts refuses it."""

import pytest

from dgrpo.attacks.seed_grinding import SeedGrindingAttack, SeedGrindingConfig
from dgrpo.config import ConfigError, load_config
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
from dgrpo.swarm.identity import Roster, Signer, SignatureVerifier, generate_keys, run_context
from dgrpo.swarm.protocol import BanList, Protocol, ProtocolConfig, Schedule
from dgrpo.swarm.schedule import vertical_prompts, vertical_slots
from dgrpo.swarm.swarm import Swarm
from dgrpo.swarm.validation import Limits
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.types import AttackContext

SEED, G, PER_NODE, ATTACKER = 3, 4, 2, 1
PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=12)


class AnyAnswerTask(ArithmeticTask):
    """A completion of an even number of characters earns full reward (a random tiny model never answers
    right): about half the samples count, so "the longest full-reward samples" is not "the longest"."""

    def reward(self, completion, problem):
        return float(len(completion) % 2 == 0)


@pytest.fixture()
def task():
    return AnyAnswerTask(seed=0, n_train=24, n_val=2, few_shot=0)


@pytest.fixture()
def model(model, tokenizer):
    """A copy of the tiny test model whose end-of-sequence token is often in its top-10 (its output row scaled
    ×7), so samples differ in length (the shared tiny model never stops within 12 tokens)."""
    import copy

    import torch

    m = copy.deepcopy(model)
    with torch.no_grad():
        m.lm_head.weight[tokenizer.eos_token_id] *= 7
    return m


def _attack(prompt_tries=4, tries=1):
    return SeedGrindingAttack(SeedGrindingConfig(objective="longest", tries=tries, prompt_tries=prompt_tries))


def _bound_lengths(model, tokenizer, policy, task, problem, r, c):
    """Total token length of the full-reward samples among the c poisoned slots' samples under their bound
    seeds (generated here, one slot at a time)."""
    seeds = [completion_seed(SEED, r, ATTACKER, problem.prompt_id, i) for i in range(c)]
    samples = [policy.generate(task, [problem], [s])[0] for s in seeds]
    return sum(len(ids) for ids, text in samples if task.reward(text, problem) == 1.0)


def test_it_sends_the_prompts_whose_bound_seed_samples_are_longest_and_samples_each_once(task, model, tokenizer):
    policy = Policy("tiny", model, tokenizer, PARAMS)
    calls = []
    generate = policy.generate
    policy.generate = lambda t, problems, seeds: calls.append(len(seeds)) or generate(t, problems, seeds)
    attack, r = _attack(), 2
    ctx = AttackContext(task, r, ATTACKER, G, "vertical", SEED, policy)
    chosen = attack.choose_prompts(task.train, PER_NODE, SEED, r, ATTACKER, ctx=ctx)
    assert sum(calls) == (G // 2) * 4 * PER_NODE  # prompt_tries × count candidates, c samples each
    scheduled = vertical_prompts(task.train, PER_NODE, SEED, r, ATTACKER)
    c = G // 2
    score = {p.prompt_id: _bound_lengths(model, tokenizer, policy, task, p, r, c) for p in task.train}
    # the scheduled prompts are candidates: a scheduled prompt left out never beats a sent one
    left_out = [score[p.prompt_id] for p in scheduled if p not in chosen]
    assert len(chosen) == PER_NODE and all(score[p.prompt_id] >= max(left_out, default=0) for p in chosen)
    assert sum(map(score.get, [p.prompt_id for p in chosen])) >= sum(map(score.get, [p.prompt_id for p in scheduled]))
    off = sum(p not in scheduled for p in chosen)
    assert off >= 1 and attack.stats["off_schedule"] == off and attack.stats["prompts"] == PER_NODE  # (this seed grinds)
    sampled = sum(calls)  # (with this test's own samples)
    poisons = attack.write(vertical_slots(chosen, G), ctx)
    assert sum(calls) == sampled  # the poisons are the samples already drawn: nothing generated twice
    for problem, group in zip(chosen, poisons):
        prompt = policy.prompt_ids(task, problem)
        for i, poison in enumerate(group[:c]):
            bound = completion_seed(SEED, r, ATTACKER, problem.prompt_id, i)
            again = sample(model, [prompt], [bound], PARAMS, tokenizer.eos_token_id, tokenizer.pad_token_id)[0]
            assert poison.seed == bound and list(poison.token_ids) == again  # exact replay with binding accepts it
    assert attack.stats["ground"] == 0 and attack.stats["poisons"] == c * PER_NODE


def test_with_every_prompt_a_candidate_it_sends_the_best(task, model, tokenizer):
    # 13 tries × 2 prompts: the 2 scheduled ones plus 24 more drawn from one epoch of the 24-prompt pool,
    # so every prompt is a candidate and the two sent must be the two best by the independent score
    policy = Policy("tiny", model, tokenizer, PARAMS)
    ctx = AttackContext(task, 1, ATTACKER, G, "vertical", SEED, policy)
    chosen = _attack(prompt_tries=13).choose_prompts(task.train, PER_NODE, SEED, 1, ATTACKER, ctx=ctx)
    score = sorted((_bound_lengths(model, tokenizer, policy, task, p, 1, G // 2) for p in task.train), reverse=True)
    assert sorted((_bound_lengths(model, tokenizer, policy, task, p, 1, G // 2) for p in chosen), reverse=True) == score[:2]
    assert score[1] > 0  # (full-reward samples exist: the reward filter matters here)


def test_one_prompt_try_is_the_nodes_schedule(task, model, tokenizer):
    policy = Policy("tiny", model, tokenizer, PARAMS)
    ctx = AttackContext(task, 0, ATTACKER, G, "vertical", SEED, policy)
    chosen = _attack(prompt_tries=1).choose_prompts(task.train, PER_NODE, SEED, 0, ATTACKER, ctx=ctx)
    assert chosen == vertical_prompts(task.train, PER_NODE, SEED, 0, ATTACKER)


def _swarm(task, model, tokenizer, attack, assign_prompts, complete_shares=False):
    keys = generate_keys(2)
    # binding, signatures, shares: the defaults; no length rule (the wrong-answer filler cannot fit in 12 tokens)
    pc = ProtocolConfig(assign_prompts=assign_prompts, complete_shares=complete_shares, enforce_length=False)
    ctx = run_context("run-a", "fp0")
    schedule = Schedule("vertical", 2, 2 * PER_NODE, G, SEED, task.train, pc.assign_prompts, {})
    protocol = Protocol(pc, schedule, PARAMS.max_new_tokens, {n: Signer(n, k, ctx) for n, k in keys.items()},
                        SignatureVerifier(Roster.of(keys), ctx), BanList(pc.ban_after))
    policy = Policy("tiny", model, tokenizer, PARAMS)
    return Swarm(task, {0: policy}, {ATTACKER: attack}, {ATTACKER: policy}, {}, {}, SEED, G, Limits(), "vertical", protocol), policy


@pytest.mark.parametrize("assign_prompts", [False, True])
def test_seed_binding_passes_it_and_assigned_prompts_refuse_it(task, model, tokenizer, assign_prompts):
    attack = _attack()
    swarm, policy = _swarm(task, model, tokenizer, attack, assign_prompts)
    r = 2  # a round in which this seed's grinding leaves its schedule
    chosen = attack.choose_prompts(task.train, PER_NODE, SEED, r, ATTACKER, ctx=swarm.attack_context(ATTACKER, r))
    sent = swarm.write({ATTACKER: vertical_slots(chosen, G)}, r)[ATTACKER]
    received = swarm.receive(policy, sent, r)
    scheduled = {p.prompt_id for p in vertical_prompts(task.train, PER_NODE, SEED, r, ATTACKER)}
    off = [m for m in sent if m.prompt_id not in scheduled]
    assert len(off) == G * attack.stats["off_schedule"] > 0
    # (the random tiny model samples a special token now and then: message validation refuses those, always)
    special = {m.key for m, reason in received.invalid if reason.startswith("special token")}
    refused = {m.key: reason for m, reason in received.invalid if m.key not in special}
    if assign_prompts:
        assert refused == {m.key: "share: prompt is not one the protocol assigned to this node" for m in off
                           if m.key not in special}
    else:  # signed, in share, every seed the bound one: nothing to refuse
        assert refused == {}
    assert len(received.rollouts) + len(received.invalid) == len(sent)


def test_prompt_tries_needs_a_vertical_swarm():
    with pytest.raises(ConfigError, match="assign_prompts is a vertical share rule"):
        load_config(None, ["swarm.protocol.assign_prompts=true"])  # horizontal
    with pytest.raises(ConfigError, match="assign_prompts is a vertical share rule"):
        load_config(None, ["swarm.mode=vertical", "swarm.protocol.assign_prompts=true", "swarm.protocol.enforce_shares=false"])
    with pytest.raises(ConfigError, match="attack.prompt_tries > 1 needs swarm.mode=vertical"):
        load_config(None, ["swarm.malicious=[3]", "attack.kind=seed_grinding", "attack.prompt_tries=4"])
    cfg = load_config(None, ["swarm.malicious=[3]", "attack.kind=seed_grinding", "attack.prompt_tries=4", "swarm.mode=vertical"])
    assert cfg.attack.prompt_tries == 4


def test_without_weights_it_says_what_it_needs(task):
    with pytest.raises(ValueError, match="needs the attacker's weights"):
        _attack().choose_prompts(task.train, PER_NODE, SEED, 0, ATTACKER)


@pytest.mark.parametrize("complete_shares", [False, True])
def test_cherry_picking_by_omission_passes_assigned_prompts_and_complete_shares_refuses_it(task, model, tokenizer,
                                                                                             complete_shares):
    """Found by a fresh review: on its assigned prompts, under bound seeds, an attacker can still send only its
    longest samples and leave the other slots empty. ``complete_shares`` refuses a share not sent whole."""
    attack = _attack(prompt_tries=1)
    swarm, policy = _swarm(task, model, tokenizer, attack, True, complete_shares)
    assigned = vertical_prompts(task.train, PER_NODE, SEED, 0, ATTACKER)
    sent = swarm.write({ATTACKER: vertical_slots(assigned, G)}, 0)[ATTACKER]
    longest = [max(g, key=lambda m: len(m.token_ids)) for g in (sent[i * G:(i + 1) * G] for i in range(PER_NODE))]
    received = swarm.receive(policy, longest, 0)
    reasons = [reason for _, reason in received.invalid]
    if complete_shares:
        assert received.rollouts == [] and len(reasons) == PER_NODE
        assert all(r.startswith(f"incomplete: node {ATTACKER} did not fill {PER_NODE} of its {PER_NODE} prompts")
                   for r in reasons)
        assert [r for _, r in swarm.receive(policy, sent, 0).invalid] == []  # sent whole, every slot passes
    else:
        assert reasons == [] and len(received.rollouts) == PER_NODE


def test_complete_shares_with_assigned_prompts_refuses_a_share_missing_a_whole_prompt(task, model, tokenizer):
    """Left open by the first complete_shares: every slot of one assigned prompt and nothing (or one slot) of
    the others passed, so the attacker picked which of its assigned prompts count. Now its whole share or none."""
    attack = _attack(prompt_tries=1)
    swarm, policy = _swarm(task, model, tokenizer, attack, True, True)
    assigned = vertical_prompts(task.train, PER_NODE, SEED, 0, ATTACKER)
    assert PER_NODE >= 2
    sent = swarm.write({ATTACKER: vertical_slots(assigned, G)}, 0)[ATTACKER]
    first = sent[:G]  # every slot of the first assigned prompt
    one_slot_each = [m for m in sent[G:] if m.index == 0]  # found by a second review: one slot of each other prompt
    left_out = sorted(p.prompt_id for p in assigned[1:])
    reason = (f"incomplete: node {ATTACKER} did not fill {PER_NODE - 1} of its {PER_NODE} prompts of the "
              f"round (first: {ascii(left_out[0])[1:41]}); a share is sent whole or not at all")
    for picked in (first, first + one_slot_each):
        received = swarm.receive(policy, picked, 0)
        assert received.rollouts == [] and [r for _, r in received.invalid] == [reason] * len(picked)
    assert len(swarm.receive(policy, sent, 0).rollouts) == PER_NODE * G  # the whole share passes
