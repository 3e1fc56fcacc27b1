"""Prompt-choice grinding (issue 14, Must have 3): a vertical attacker picks the prompts whose bound
seeds give what it wants. Seed binding cannot see it (every sample is its slot's bound seed's own);
the protocol assigning prompts refuses it."""

import pytest

from dgrpo.attacks.seed_grinding import SeedGrindingAttack, SeedGrindingConfig
from dgrpo.config import ConfigError, load_config
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
from dgrpo.swarm.identity import Roster, Signer, Verifier, generate_keys, run_context
from dgrpo.swarm.protocol import BanList, Protocol, ProtocolConfig, Schedule
from dgrpo.swarm.schedule import vertical_prompts, vertical_slots
from dgrpo.swarm.swarm import Swarm
from dgrpo.swarm.validation import Limits
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.types import AttackContext

SEED, G, PER_NODE, ATTACKER = 3, 4, 2, 1
PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=12)


class AnyAnswerTask(ArithmeticTask):
    """Every completion earns full reward, so "longest full-reward sample" is decided by length alone
    (a random tiny model never answers right)."""

    def reward(self, completion, problem):
        return 1.0


@pytest.fixture()
def task():
    return AnyAnswerTask(seed=0, n_train=24, n_val=2, few_shot=0)


@pytest.fixture(scope="module")
def model(tokenizer):
    """A tiny model whose end-of-sequence token is often in its top-10 (its output row scaled ×7), so
    samples differ in length (the shared tiny model never stops within 12 tokens)."""
    import torch
    from conftest import build_model

    m = build_model(len(tokenizer))
    with torch.no_grad():
        m.lm_head.weight[tokenizer.eos_token_id] *= 7
    return m


def _attack(prompt_tries=4, tries=1):
    return SeedGrindingAttack(SeedGrindingConfig(objective="longest", tries=tries, prompt_tries=prompt_tries))


def _bound_lengths(model, tokenizer, policy, task, problem, r, c):
    """Total length of the c poisoned slots' samples under their bound seeds (sampled here, directly)."""
    seeds = [completion_seed(SEED, r, ATTACKER, problem.prompt_id, i) for i in range(c)]
    prompt = policy.prompt_ids(task, problem)
    return sum(len(x) for x in sample(model, [prompt] * c, seeds, PARAMS, tokenizer.eos_token_id, tokenizer.pad_token_id))


def test_it_sends_the_prompts_whose_bound_seed_samples_are_longest_and_samples_each_once(task, model, tokenizer):
    policy = Policy("tiny", model, tokenizer, PARAMS)
    calls = []
    generate = policy.generate
    policy.generate = lambda t, problems, seeds: calls.append(len(seeds)) or generate(t, problems, seeds)
    attack, r = _attack(), 2
    ctx = AttackContext(task, r, ATTACKER, G, "vertical", SEED, policy)
    chosen = attack.choose_prompts(task.train, PER_NODE, SEED, r, ATTACKER, ctx=ctx)
    scheduled = vertical_prompts(task.train, PER_NODE, SEED, r, ATTACKER)
    c = G // 2
    score = {p.prompt_id: _bound_lengths(model, tokenizer, policy, task, p, r, c) for p in task.train}
    # the scheduled prompts are candidates: a scheduled prompt left out never beats a sent one
    left_out = [score[p.prompt_id] for p in scheduled if p not in chosen]
    assert len(chosen) == PER_NODE and all(score[p.prompt_id] >= max(left_out, default=0) for p in chosen)
    assert sum(map(score.get, [p.prompt_id for p in chosen])) >= sum(map(score.get, [p.prompt_id for p in scheduled]))
    off = sum(p not in scheduled for p in chosen)
    assert off >= 1 and attack.stats["off_schedule"] == off and attack.stats["prompts"] == PER_NODE  # (this seed grinds)
    sampled = sum(calls)
    assert sampled == c * 4 * PER_NODE  # prompt_tries × count candidates, c samples each
    poisons = attack.write(vertical_slots(chosen, G), ctx)
    assert sum(calls) == sampled  # the poisons are the samples already drawn: nothing generated twice
    for problem, group in zip(chosen, poisons):
        prompt = policy.prompt_ids(task, problem)
        for i, poison in enumerate(group[:c]):
            bound = completion_seed(SEED, r, ATTACKER, problem.prompt_id, i)
            again = sample(model, [prompt], [bound], PARAMS, tokenizer.eos_token_id, tokenizer.pad_token_id)[0]
            assert poison.seed == bound and list(poison.token_ids) == again  # exact replay with binding accepts it
    assert attack.stats["ground"] == 0 and attack.stats["poisons"] == c * PER_NODE


def test_one_prompt_try_is_the_nodes_schedule(task, model, tokenizer):
    policy = Policy("tiny", model, tokenizer, PARAMS)
    ctx = AttackContext(task, 0, ATTACKER, G, "vertical", SEED, policy)
    chosen = _attack(prompt_tries=1).choose_prompts(task.train, PER_NODE, SEED, 0, ATTACKER, ctx=ctx)
    assert chosen == vertical_prompts(task.train, PER_NODE, SEED, 0, ATTACKER)


def _swarm(task, model, tokenizer, attack, assign_prompts):
    keys = generate_keys(2)
    pc = ProtocolConfig(assign_prompts=assign_prompts)  # seed binding, signatures and shares: the defaults
    ctx = run_context("run-a", "fp0")
    schedule = Schedule("vertical", 2, 2 * PER_NODE, G, SEED, task.train, pc.assign_prompts, {})
    protocol = Protocol(pc, schedule, PARAMS.max_new_tokens, {n: Signer(n, k, ctx) for n, k in keys.items()},
                        Verifier(Roster.of(keys), ctx), BanList(pc.ban_after))
    policy = Policy("tiny", model, tokenizer, PARAMS)
    return Swarm(task, {0: policy}, {ATTACKER: attack}, {ATTACKER: policy}, {}, {}, SEED, G, Limits(), "vertical", protocol), policy


@pytest.mark.parametrize("assign_prompts", [False, True])
def test_seed_binding_passes_it_and_assigned_prompts_refuse_it(task, model, tokenizer, assign_prompts):
    attack = _attack()
    swarm, policy = _swarm(task, model, tokenizer, attack, assign_prompts)
    chosen = attack.choose_prompts(task.train, PER_NODE, SEED, 0, ATTACKER, ctx=swarm.attack_context(ATTACKER, 0))
    sent = swarm.write({ATTACKER: vertical_slots(chosen, G)}, 0)[ATTACKER]
    received = swarm.receive(policy, sent, 0)
    scheduled = {p.prompt_id for p in vertical_prompts(task.train, PER_NODE, SEED, 0, ATTACKER)}
    off = [m for m in sent if m.prompt_id not in scheduled]
    assert len(off) == G * attack.stats["off_schedule"] > 0
    reasons = [reason for _, reason in received.invalid]
    if assign_prompts:
        assert reasons == ["share: prompt is not one the protocol assigned to this node"] * len(off)
        assert len(received.rollouts) == len(sent) - len(off)
    else:  # signed, in share, every seed the bound one: nothing to refuse
        assert reasons == [] and len(received.rollouts) == len(sent)


def test_prompt_tries_needs_a_vertical_swarm():
    with pytest.raises(ConfigError, match="attack.prompt_tries > 1 needs swarm.mode=vertical"):
        load_config(None, ["swarm.malicious=[3]", "attack.kind=seed_grinding", "attack.prompt_tries=4"])
    cfg = load_config(None, ["swarm.malicious=[3]", "attack.kind=seed_grinding", "attack.prompt_tries=4", "swarm.mode=vertical"])
    assert cfg.attack.prompt_tries == 4


def test_without_weights_it_says_what_it_needs(task):
    with pytest.raises(ValueError, match="needs the attacker's weights"):
        _attack().choose_prompts(task.train, PER_NODE, SEED, 0, ATTACKER)
