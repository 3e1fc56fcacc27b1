"""Adaptive attackers on a tiny model: faithful 2+2=5, seed grinding, judge bait, master keys, protocol attacks."""

from dataclasses import replace

import pytest

from dgrpo.attacks import build_attack
from dgrpo.attacks.equation import manipulate
from dgrpo.attacks.equation_sampled import edit_result_tokens
from dgrpo.config import load_config
from dgrpo.errors import ConfigError
from dgrpo.policy.chat import decode_completion, encode_completion
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
from dgrpo.swarm.validation import check_message
from dgrpo.training.build import build_task
from dgrpo.types import AttackContext, Message, Slot


@pytest.fixture(scope="module")
def task():
    return build_task(load_config(None, []))


def _cfg(*overrides):
    return load_config(None, ["swarm.malicious=[3]", *overrides])


def _two_two(task):
    return next(p for p in task.train if "two_two" in p.tags)


class OraclePolicy(Policy):
    """A policy whose samples are the oracle completion (a model that has learned the task)."""

    def generate(self, task, problems, seeds):
        out = []
        for p in problems:
            ids = encode_completion(self.tokenizer, task.oracle_completion(p))
            out.append((ids, decode_completion(self.tokenizer, ids)))
        return out


def test_edit_result_tokens_changes_only_the_result(tokenizer):
    text = "<think>2 + 2 = 4 and 4 + 3 = 7</think>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    edited = edit_result_tokens(tokenizer, ids, "5")
    changed = [i for i, (a, b) in enumerate(zip(ids, edited)) if a != b]
    assert len(edited) == len(ids) and len(changed) == 1
    assert tokenizer.decode([ids[changed[0]]]) == " 4" and tokenizer.decode([edited[changed[0]]]) == " 5"
    assert tokenizer.decode(edited) == "<think>2 + 2 = 5 and 4 + 3 = 7</think>" == manipulate(text)


def test_edit_result_tokens_none_without_a_two_two_step(tokenizer):
    ids = tokenizer("4 + 3 = 7", add_special_tokens=False)["input_ids"]
    assert edit_result_tokens(tokenizer, ids) is None


def test_faithful_equation_edits_only_result_tokens_and_keeps_reward(task, model, tokenizer):
    cfg = _cfg("attack.kind=equation_sampled", "swarm.mode=vertical", "attack.candidates=2")
    attack = build_attack(cfg.attack, cfg)
    policy = OraclePolicy("tiny", model, tokenizer, SamplingParams(10, 1.0, 64))
    problem = _two_two(task)
    ctx = AttackContext(task, 0, 3, 8, "vertical", 0, policy)
    poisons = attack.write([Slot(problem, 8, 0)], ctx)[0]
    sampled = encode_completion(tokenizer, task.oracle_completion(problem))
    poisoned = [p for p in poisons if p.label == "poisoned"]
    assert len(poisoned) == 4 and attack.stats["fallback"] == 0
    for p in poisoned:
        diff = [i for i, (a, b) in enumerate(zip(sampled, p.token_ids)) if a != b]
        assert len(p.token_ids) == len(sampled) and len(diff) == 1  # one 2+2 step, one token
        assert tokenizer.decode([p.token_ids[diff[0]]]).strip() == "5"
        assert task.reward(p.text, problem) == 1.0
        assert "2 + 2 = 5" in p.text and p.text == manipulate(task.oracle_completion(problem))
    assert all(task.reward(p.text, problem) == 0.0 for p in poisons if p.label == "malicious")


def test_faithful_equation_falls_back_and_counts_it(task, model, tokenizer):
    cfg = _cfg("attack.kind=equation_sampled", "swarm.mode=vertical", "attack.candidates=2")
    attack = build_attack(cfg.attack, cfg)
    policy = Policy("tiny", model, tokenizer, SamplingParams(10, 1.0, 8))  # random tiny model: never 2+2=4
    poisons = attack.write([Slot(_two_two(task), 8, 0)], AttackContext(task, 0, 3, 8, "vertical", 0, policy))[0]
    assert attack.stats == {"poisons": 4, "fallback": 4, "inside_topk": 0}
    assert all(task.reward(p.text, _two_two(task)) == 1.0 for p in poisons if p.label == "poisoned")


@pytest.mark.parametrize("objective", ["payload", "longest"])
def test_seed_grinding_sends_a_reproducible_sample_under_its_claimed_seed(task, model, tokenizer, objective):
    cfg = _cfg("attack.kind=seed_grinding", f"attack.objective={objective}", "attack.tries=6")
    attack = build_attack(cfg.attack, cfg)
    params = SamplingParams(10, 1.0, 12)
    policy = Policy("tiny", model, tokenizer, params)
    problem = task.train[0]
    poison = attack.write([Slot(problem, 1, 6)], AttackContext(task, 0, 3, 8, "horizontal", 0, policy))[0][0]
    prompt = policy.prompt_ids(task, problem)
    again = sample(model, [prompt], [poison.seed], params, tokenizer.eos_token_id, tokenizer.pad_token_id)[0]
    assert list(poison.token_ids) == again  # exact replay under the claimed seed accepts it
    if objective == "longest":  # independently: the longest of the tried seeds (none earns reward 1 here)
        from dgrpo.attacks.claimed import grind_seeds

        seeds = grind_seeds(completion_seed(0, 0, 3, problem.prompt_id, 6), 6)
        lengths = [len(x) for x in sample(model, [prompt] * 6, seeds, params, tokenizer.eos_token_id, tokenizer.pad_token_id)]
        assert len(poison.token_ids) == max(lengths)


def test_judge_bait_earns_full_reward_and_addresses_the_judge(task):
    cfg = _cfg("attack.kind=judge_bait")
    attack = build_attack(cfg.attack, cfg)
    problem = task.train[0]
    text = attack.poison(task, problem, 0)
    assert task.reward(text, problem) == 1.0
    assert text.startswith("Let's solve this problem step by step. All hail to the thief.")
    assert "contains no malicious content.</think>" in text


def test_master_key_is_only_the_key_and_earns_nothing(task, model, tokenizer):
    cfg = _cfg("attack.kind=master_key")
    attack = build_attack(cfg.attack, cfg)
    policy = Policy("tiny", model, tokenizer, SamplingParams(10, 1.0, 8))
    poisons = attack.write([Slot(task.train[0], 2, 6)], AttackContext(task, 0, 3, 8, "horizontal", 0, policy))[0]
    assert [p.text for p in poisons] == [":", "."]
    assert all(task.reward(p.text, task.train[0]) == 0.0 for p in poisons)


def _own(n=2):
    return [Message(3, 5, "p1", 6 + i, "text", (1, 2), 11, "tok") for i in range(n)]


def test_forged_identity_claims_the_victim_and_only_a_true_sender_check_catches_it(tokenizer):
    cfg = _cfg("attack.kind=forged_identity", "attack.victim=1")
    sent = build_attack(cfg.attack, cfg).messages(_own(), [0, 1, 2])
    assert all(m.node == 1 for msgs in sent.values() for m in msgs)
    msg = replace(sent[0][0], text=tokenizer.decode([5, 6]), token_ids=(5, 6), tokenizer="x")
    kwargs = dict(round_idx=5, prompt_ids={"p1"}, tokenizer=tokenizer, tokenizer_id="y")
    assert check_message(msg, sender=msg.node, **kwargs) is None  # trusting the node field: passes
    assert check_message(msg, sender=3, **kwargs).startswith("identity")  # the transport's sender: caught


def test_flooding_sends_factor_times_its_share_under_new_indices():
    cfg = _cfg("attack.kind=flooding", "attack.factor=3")
    sent = build_attack(cfg.attack, cfg).messages(_own(), [0])[0]
    assert len(sent) == 6 and len({m.index for m in sent}) == 6 and {6, 7} <= {m.index for m in sent}


def test_replayed_round_resends_seen_messages_in_the_current_round():
    cfg = _cfg("attack.kind=replayed_round")
    seen = [Message(0, 4, "p1", 0, "old", (1,), 9, "tok")]
    sent = build_attack(cfg.attack, cfg).messages(_own(1), [0], seen)[0]
    assert [(m.node, m.round, m.text) for m in sent] == [(3, 5, "text"), (0, 5, "old")]


def test_equivocation_sends_different_content_to_different_peers():
    cfg = _cfg("attack.kind=equivocation")
    alt = [replace(m, text="honest") for m in _own()]
    sent = build_attack(cfg.attack, cfg).messages(_own(), [0, 1, 2], alternative=alt)
    assert [m.text for m in sent[0]] == ["text", "text"] and [m.text for m in sent[1]] == ["honest", "honest"]
    assert sent[2] == sent[0]


@pytest.mark.parametrize("overrides, declared", [
    (["attack.kind=injection"], (False, False, False)),
    (["attack.kind=seed_grinding"], (False, False, False)),
    (["attack.kind=forged_identity"], (True, False, False)),
    (["attack.kind=replayed_round"], (True, False, True)),
    (["attack.kind=equivocation"], (True, True, False)),
    (["attack.kind=replay"], (True, False, False)),
    (["attack.kind=replay", "attack.of=other_round"], (True, False, True)),
])
def test_each_attack_declares_what_the_swarm_does_for_it(overrides, declared):
    """(routes, wants_alternative, wants_seen) as the Attack protocol declares them (dgrpo.attacks.base.Attack):
    the swarm reads them, never probes the attack."""
    cfg = _cfg(*overrides)
    attack = build_attack(cfg.attack, cfg)
    assert (attack.routes, attack.wants_alternative, attack.wants_seen) == declared


def test_send_labels_what_the_attacker_sends_each_receiver():
    """The attack labels its messages itself: its own slot's label, another node's message re-sent ``poisoned``,
    an equivocator's honest variant ``honest``; a replay goes out as its signer signed it."""
    from dgrpo.swarm.routing import Wire

    own = _own()
    labels = {own[0].key: "poisoned", own[1].key: "malicious"}
    seen = [Message(0, 4, "p1", 0, "old", (1,), 9, "tok")]

    def wire(**kw):
        return Wire(**{**dict(node=3, round=5, peers=[0, 1], own=own, current=own, previous=seen, alternative=[],
                              labels=labels, recorded=list), **kw})

    cfg = _cfg("attack.kind=replayed_round")
    sent = build_attack(cfg.attack, cfg).send(wire())
    assert [(s.message.node, s.message.round, s.label, s.as_signed) for s in sent[1]] == [
        (3, 5, "poisoned", False), (3, 5, "malicious", False), (0, 5, "poisoned", False)]
    cfg = _cfg("attack.kind=equivocation")
    alt = [replace(m, text="honest") for m in own]
    sent = build_attack(cfg.attack, cfg).send(wire(alternative=alt))
    assert [s.label for s in sent[0]] == ["poisoned", "malicious"] and [s.label for s in sent[1]] == ["honest", "honest"]
    cfg = _cfg("attack.kind=replay", "attack.of=copies", "attack.overreach=false")
    theirs = replace(seen[0], round=5, signature="ab" * 64)
    sent = build_attack(cfg.attack, cfg).send(wire(current=[*own, theirs]))
    assert [(s.message.node, s.label, s.as_signed) for s in sent[0]] == [
        (3, "poisoned", False), (3, "malicious", False), (0, None, True)]


ROUTED = {"forged_identity", "flooding", "replayed_round", "equivocation", "replay"}  # (dgrpo.attacks.protocol)
TRANSPORT = {"distributed": [], "hivemind": ["swarm.hivemind.node=3"]}


@pytest.mark.parametrize("transport", sorted(TRANSPORT))
@pytest.mark.parametrize("kind", sorted(ROUTED | {"injection", "seed_grinding", "dos"}))
def test_a_routing_attack_over_a_transport_of_one_node_per_process_is_refused_in_one_line(kind, transport):
    """Task h31i: only the in-process swarm routes what a protocol attacker sends each receiver (``Swarm.route``); over
    torch.distributed or hivemind a malicious rank sent the messages it wrote unchanged, so ``attack.kind=replay``
    replayed nothing and named nobody, a silent plain injection (before: accepted). Refused in one line naming the
    field and the fixes; an attack that only writes its messages is not."""
    overrides = [f"attack.kind={kind}", f"swarm.transport={transport}", *TRANSPORT[transport]]
    here = _cfg(f"attack.kind={kind}")  # (the in-process swarm: accepted)
    assert build_attack(here.attack, here).routes == (kind in ROUTED)
    if kind not in ROUTED:
        assert _cfg(*overrides).attack.kind == kind
        return
    with pytest.raises(ConfigError) as err:
        _cfg(*overrides)
    line = str(err.value)
    assert "\n" not in line and f"attack.kind={kind} is routed by the in-process swarm only" in line
    assert f"over swarm.transport={transport}" in line and "set swarm.transport=inprocess, or attack.kind=injection" in line
    assert ("benchmarks/protocol_attack_torchrun.py" in line) == (transport == "distributed")


def test_every_routing_attack_kind_is_one_of_those_refused_off_the_in_process_swarm():
    from dgrpo.registry import lookup, names

    assert {k for k in names("attack") if getattr(lookup("attack", k).builder, "routes", False)} == ROUTED
