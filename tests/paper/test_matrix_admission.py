"""The matrix builds and admits messages as a run does (issue 32): its attacker writes through the run's
``Swarm.write`` (the protocol's length rule in its context), a protocol attacker sends through its own
``send`` (``Swarm.route``), and its ``validation`` column is the run's admission (:mod:`dgrpo.swarm.admission`),
so a poison a run refuses on receipt is refused in that column and one a run admits is not."""

from __future__ import annotations

from dgrpo.config import load_config
from dgrpo.paper.matrix import _attack_messages, build_setup, honest_pool, run_matrix
from dgrpo.swarm.schedule import horizontal_prompts, horizontal_slots
from dgrpo.swarm.validation import Limits, check_message
from dgrpo.training.build import build_run

TOKENS = 8


def test_a_forged_sender_refused_by_a_run_is_refused_in_the_validation_column(tmp_path, tiny_model_dir):
    # a run: node 3 forges node 0's identity; peer 0's receive refuses every message it routes
    cfg = load_config(None, [f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=run", "swarm.group_size=8",
                             "swarm.prompts_per_round=2", f"sampling.max_new_tokens={TOKENS}", "swarm.malicious=[3]",
                             "attack.kind=forged_identity"])
    run = build_run(cfg)
    swarm, r = run.swarm, 0
    prompts = horizontal_prompts(run.task.train, 2, cfg.seed, r)
    local = swarm.write({k: horizontal_slots(prompts, 8, 4, k) for k in swarm.hosted}, r)
    routed = swarm.route(run.transport.all_gather(local), 0, r)
    forged = [m for m in routed if swarm.carriers.get(id(m)) == 3]
    assert len(forged) == 4 and {m.node for m in forged} == {0}  # 2 prompts x G/m = 2 slots, claiming node 0
    refused = dict((id(m), reason) for m, reason in swarm.receive(swarm.policies[0], routed, r).invalid)
    assert all(refused[id(m)] == "identity: claims node 0 but is signed by node 3" for m in forged)
    # what the matrix's column ran before (the message checks alone, sender = the claimed node) passes them
    policy = swarm.policies[0]
    assert all(check_message(m, sender=m.node, round_idx=r, prompt_ids=swarm.problems, tokenizer=policy.tokenizer,
                             tokenizer_id=policy.tokenizer_id, limits=Limits.for_completions(TOKENS)) is None
               for m in forged)

    # the matrix: its validation column refuses every forged poison, and no honest message
    result = run_matrix(tmp_path / "matrix", model=tiny_model_dir, n_honest=8, n_poisoned=4,
                        attacks=["forged_identity"], defenses=["none", "validation"], max_new_tokens=TOKENS)
    row = result["attacks"]["forged_identity"]
    assert row["poisoned"] == 4 and row["detection"]["validation"]["rejected"] == 4
    assert result["honest"]["validation"]["rejected"] == 0 and result["honest"]["validation"]["n"] == 8


def test_the_length_rule_is_told_to_the_attacker_and_checked_on_receipt_as_in_a_run(tiny_model_dir, caplog):
    setup = build_setup(tiny_model_dir, 0, TOKENS, ["validation"])
    honest_pool(setup, 8, ["validation"])
    # the matrix's own config (MATRIX_PROTOCOL): the rule off, the paper's unshortened hail poisons, all admitted
    off, _, passed, _, _ = _attack_messages(setup, ["attack.kind=injection"], 4)
    assert len(off) == 4 and min(len(m.token_ids) for m in off) > 12 and len(passed) == 4
    # the rule on for the row: the attacker is told it in its context, as in a run, and drops copied sentences
    # (fit_poison), but a poison still over 8 tokens is refused by the row's admission for its length
    caplog.clear()
    on, _, passed, _, _ = _attack_messages(setup, ["attack.kind=injection", "swarm.protocol.enforce_length=true"], 4)
    assert all(len(a.token_ids) <= len(b.token_ids) for a, b in zip(on, off))
    assert sum(len(m.token_ids) for m in on) < sum(len(m.token_ids) for m in off)
    assert passed == set()
    refusals = [r.getMessage().split("): ", 1)[1] for r in caplog.records if "rejected message from node 3" in r.getMessage()]
    assert refusals == [f"length: {len(m.token_ids)} tokens (sampling.max_new_tokens={TOKENS})" for m in on]
