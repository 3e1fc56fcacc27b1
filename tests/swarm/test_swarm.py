"""What the nodes a process hosts do with messages: write them (honest and malicious), receive them."""

import pytest

from dgrpo.attacks.injection import InjectionAttack, InjectionAttackConfig
from dgrpo.policy.chat import decode_completion, encode_completion
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
from dgrpo.swarm.schedule import horizontal_slots
from dgrpo.swarm.swarm import Swarm
from dgrpo.swarm.validation import Limits
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.types import Message

SEED, G = 3, 4


@pytest.fixture()
def task():
    return ArithmeticTask(seed=0, n_train=10, n_val=2, few_shot=0)


@pytest.fixture()
def policy(model, tokenizer):
    return Policy("tiny", model, tokenizer, SamplingParams(top_k=10, temperature=1.0, max_new_tokens=6))


def _swarm(task, policies, attacks=None, attacker_policies=None, learners=None):
    return Swarm(task, policies, attacks or {}, attacker_policies or {}, learners or {}, {}, SEED, G, Limits())


def test_honest_nodes_sharing_a_policy_write_what_each_would_write_alone(task, policy, tokenizer):
    swarm = _swarm(task, {0: policy, 1: policy})
    prompts = task.train[:2]
    out = swarm.write({k: horizontal_slots(prompts, G, 2, k) for k in (0, 1)}, round_idx=5)
    eos = tokenizer.eos_token_id
    for node in (0, 1):  # independently: node by node, one completion at a time
        expected = []
        for p in prompts:
            for i in (2 * node, 2 * node + 1):
                seed = completion_seed(SEED, 5, node, p.prompt_id, i)
                ids = sample(policy.model, [policy.prompt_ids(task, p)], [seed], policy.sampling, eos, eos)[0]
                expected.append(Message(node, 5, p.prompt_id, i, decode_completion(tokenizer, ids), tuple(ids), seed,
                                        policy.tokenizer_id))
        assert out[node] == expected
    assert set(swarm.labels.values()) == {"honest"} and len(swarm.labels) == 8


def test_a_malicious_node_sends_its_attack_encoded_with_the_tokenizer_it_holds(task, policy, tokenizer):
    attack = InjectionAttack(InjectionAttackConfig(poisoned_per_group=1))
    swarm = _swarm(task, {0: policy}, {1: attack}, {1: policy})
    p = task.train[0]
    [first, filler] = swarm.write({1: horizontal_slots([p], G, 2, 1)}, round_idx=0)[1]
    assert first.text == attack.poison(task, p, 0) and first.index == 2  # node 1 owns indices 2-3
    assert list(first.token_ids) == encode_completion(tokenizer, first.text)
    assert first.seed == completion_seed(SEED, 0, 1, p.prompt_id, 2)  # the seed an honest node 1 would claim
    assert swarm.labels[first.key] == "poisoned" and swarm.labels[filler.key] == "malicious"


def test_an_adaptive_attacker_sends_the_seed_and_token_ids_it_sampled(task, policy, tokenizer, model):
    from dgrpo.attacks.claimed import grind_seeds
    from dgrpo.attacks.seed_grinding import SeedGrindingAttack, SeedGrindingConfig

    attack = SeedGrindingAttack(SeedGrindingConfig(objective="longest", tries=6, poisoned_per_group=2))
    swarm = _swarm(task, {0: policy}, {1: attack}, {1: policy})
    p = task.train[0]
    sent = swarm.write({1: horizontal_slots([p], G, 2, 1)}, round_idx=0)[1]
    prompt = policy.prompt_ids(task, p)
    for m in sent:  # independently: sample every tried seed, keep the longest full-reward one (first on ties)
        tried = grind_seeds(completion_seed(SEED, 0, 1, p.prompt_id, m.index), 6)
        samples = sample(model, [prompt] * 6, tried, policy.sampling, tokenizer.eos_token_id, tokenizer.pad_token_id)
        full = [task.reward(decode_completion(tokenizer, ids), p) >= 1.0 for ids in samples]
        best = max(range(6), key=lambda j: (full[j], len(samples[j]), -j))
        assert m.seed == tried[best] and list(m.token_ids) == samples[best]


def test_receive_refuses_bad_messages_and_re_encodes_another_tokenizers_text(task, policy, tokenizer):
    swarm = _swarm(task, {0: policy})
    p = task.train[0]
    text = "<think>3 + 4 = 7</think>"
    ours = Message(1, 2, p.prompt_id, 0, text, tuple(encode_completion(tokenizer, text)), 11, policy.tokenizer_id)
    foreign = Message(2, 2, p.prompt_id, 1, text, (1, 2, 3), 12, "SomeOtherTokenizer:x:50000")
    late = Message(1, 1, p.prompt_id, 2, text, ours.token_ids, 13, policy.tokenizer_id)
    swarm.labels[ours.key] = "poisoned"
    received = swarm.receive(policy, [ours, foreign, late], round_idx=2)
    assert received.invalid == [(late, "round: message for round 1 received in round 2")]
    a, b = received.rollouts
    assert (a.sender, a.seed, a.label, a.completion_ids) == (1, 11, "poisoned", list(ours.token_ids))
    assert (b.sender, b.label, b.completion_ids) == (2, "honest", encode_completion(tokenizer, text))
    assert a.prompt_ids == policy.prompt_ids(task, p) and a.reward == 0.0  # not rewarded yet
    assert swarm.reward(received.rollouts) == received.rollouts
    assert [r.reward for r in received.rollouts] == [task.reward(text, p)] * 2


def test_which_policies_a_process_trains(task, policy, model, tokenizer):
    learner = object()  # only its presence matters here
    homogeneous = _swarm(task, {0: policy, 2: policy}, {1: None}, {1: policy}, {policy: learner})
    assert homogeneous.honest_policies == {0: policy} and homogeneous.mirror_policies == {}
    assert homogeneous.trained == {0: policy} and homogeneous.hosted == [0, 1, 2] and homogeneous.holders(policy) == [0, 2]
    # a distributed rank hosting only the attacker: it replays the honest update on the weights it knows
    attacker_rank = _swarm(task, {}, {1: None}, {1: policy}, {policy: learner})
    assert attacker_rank.mirror_policies == attacker_rank.trained == {1: policy}
    # heterogeneous: the attacker's own untrained model is nobody's to train
    other = Policy("other", model, tokenizer, policy.sampling)
    heterogeneous = _swarm(task, {0: policy}, {1: None}, {1: other}, {policy: learner})
    assert heterogeneous.trained == {0: policy}
