"""The tolerant_replay defense kind: config, declared needs, the matrix's columns, and its verdicts in a swarm group."""

import pytest
import torch

from dgrpo.config import load_config
from dgrpo.defenses import build_defense
from dgrpo.paper.matrix_columns import default_columns, parse_column
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, sample
from dgrpo.policy.scoring import group_logits
from dgrpo.registry import lookup
from dgrpo.types import Rollout

PARAMS = SamplingParams(top_k=10, temperature=1.0, max_new_tokens=16)


def test_kind_parses_declares_its_needs_and_is_a_matrix_column():
    cfg = load_config(overrides=["defenses=[{kind: tolerant_replay, threshold: 0.05}]"])
    assert cfg.defenses[0].kind == "tolerant_replay" and cfg.defenses[0].threshold == 0.05
    config = lookup("defense", "tolerant_replay").config
    assert config.needs_exact_logits and config.needs_bound_seed
    cols = default_columns()
    assert cols.index("tolerant_replay_bound") == cols.index("tolerant_replay") + 1
    assert parse_column("tolerant_replay_bound").bound
    from dgrpo.defenses import tolerant_replay
    from dgrpo.verify import tolerant

    assert (tolerant_replay.TIE, tolerant_replay.THRESHOLD, tolerant_replay.EPS) == (tolerant.TIE, tolerant.THRESHOLD, tolerant.EPS)


def test_bf16_and_negative_threshold_refused():
    with pytest.raises(Exception, match="float32"):
        load_config(overrides=["model.dtype=bfloat16", "defenses=[{kind: tolerant_replay}]"])
    with pytest.raises(Exception, match="threshold"):
        load_config(overrides=["defenses=[{kind: tolerant_replay, threshold: -1}]"])


def test_honest_accepted_tampered_and_unseeded_rejected(model, tokenizer):
    eos = tokenizer.eos_token_id
    cfg = load_config(overrides=["sampling.max_new_tokens=16", "defenses=[{kind: tolerant_replay, action: zero}]"])
    defense = build_defense(cfg.defenses[0], cfg, Policy("tiny", model, tokenizer, PARAMS), task=None)
    prompt, seeds = [5, 6, 7, 8], list(range(12))
    outs = sample(model, [prompt] * 12, seeds, PARAMS, eos, eos)
    honest = [Rollout("p", prompt, o, "", 0, seed=s) for o, s in zip(outs, seeds)]
    ids = list(outs[0])
    ids[3] = next(i for i in range(5, 400) if i not in (ids[3], eos))  # one token changed at position 3
    rollouts = honest + [Rollout("p", prompt, ids, "", 0, seed=0), Rollout("p", prompt, outs[1], "", 0, seed=None)]
    with torch.no_grad():
        logits = group_logits(model, prompt, [r.completion_ids for r in rollouts], eos)
    verdicts = defense.inspect(rollouts, logits)
    assert [v.accepted for v in verdicts] == [True] * 12 + [False, False]
    assert verdicts[12].position == 3 and verdicts[12].action == "zero"
    assert verdicts[13].reason == "no sampling seed claimed"


@pytest.mark.slow
def test_matrix_rows_tolerant_replay_catches_what_replay_catches(tmp_path, tiny_model_dir):
    """Every attack of `dgrpo paper matrix` on the tiny model: the tolerant column rejects each poisoned
    completion the exact-replay column rejects (bound and unbound), and no honest one."""
    from dgrpo.paper.matrix import ATTACKS, run_matrix

    overrides = {"topk_hail": ["attack.tries=1"], "topk_gleeb": ["attack.tries=1"], "grind_hail": ["attack.tries=2"],
                 "dos_sampled": ["attack.tries=2"], "equation_sampled": ["attack.candidates=1"],
                 "dos_prompt_grind": ["attack.prompt_tries=2"]}
    cols = ["replay", "replay_bound", "tolerant_replay", "tolerant_replay_bound"]
    result = run_matrix(tmp_path, model=tiny_model_dir, n_honest=16, n_poisoned=4, attacks=list(ATTACKS),
                        defenses=cols, max_new_tokens=8, attack_overrides=overrides)
    assert all(result["honest"][c]["rejected"] == 0 for c in cols)
    caught = 0
    for name, row in result["attacks"].items():
        for exact, tolerant in (("replay", "tolerant_replay"), ("replay_bound", "tolerant_replay_bound")):
            assert row["detection"][tolerant]["rejected"] == row["detection"][exact]["rejected"], (name, exact)
        caught += row["detection"]["replay_bound"]["rejected"]
    assert caught > 0


def test_settings_that_leave_it_unsound_are_cautioned_once_and_the_wide_tie_really_frees_every_top_k_token(
        model, tokenizer, caplog):
    """Review u36 C: ``swarm.protocol.bind_seeds=false`` and ``tie: 100`` were accepted without a word. Both
    are valid (the matrix measures unbound columns on purpose), so each gets one WARNING line; the premise of
    the tie caution is checked with ``free_alternatives``: at tie 100 every other top-k token of every
    position passes (k − 1 = 9 each), at the defaults far fewer do."""
    from dgrpo.verify.tolerant import free_alternatives

    def cautions(*overrides):
        cfg = load_config(overrides=["sampling.max_new_tokens=16", *overrides])
        return cfg, cfg.defenses[0].cautions(cfg)

    assert cautions("defenses=[{kind: tolerant_replay}]")[1] == []
    assert cautions("defenses=[{kind: tolerant_replay, tie: 0.001, threshold: 0.002}]")[1] == []  # the range's edge
    assert cautions("defenses=[{kind: replay}]")[1] == []
    unbound = cautions("swarm.protocol.bind_seeds=false", "defenses=[{kind: replay}]")[1]
    assert len(unbound) == 1 and "swarm.protocol.bind_seeds=true" in unbound[0]
    assert cautions("swarm.protocol.bind_seeds=false", "defenses=[{kind: topk}]")[1] == []  # top-k reads no seed
    cfg, wide = cautions("defenses=[{kind: tolerant_replay, tie: 100}]")
    assert len(wide) == 1 and "tie=100 is wider" in wide[0] and "threshold" not in wide[0].split("is wider")[0]
    assert "tie=0.01 and threshold=0.02" in cautions("defenses=[{kind: tolerant_replay, tie: 0.01, threshold: 0.02}]")[1][0]

    import dgrpo.defenses as defenses

    defenses._CAUTIONED.discard(wide[0])
    policy = Policy("tiny", model, tokenizer, PARAMS)
    with caplog.at_level("WARNING", logger="dgrpo.defenses"):
        build_defense(cfg.defenses[0], cfg, policy, task=None)
        build_defense(cfg.defenses[0], cfg, policy, task=None)  # a second node of the same process
    assert [r.getMessage() for r in caplog.records if r.name == "dgrpo.defenses"] == wide

    eos = tokenizer.eos_token_id
    prompt, seed = [5, 6, 7, 8], 3
    ids = list(sample(model, [prompt], [seed], PARAMS, eos, eos)[0])
    with torch.no_grad():
        logits = group_logits(model, prompt, [ids], eos)[0]
    n = len(ids)
    free_wide = free_alternatives(logits, ids, seed, PARAMS, tie=100, threshold=cfg.defenses[0].threshold)
    assert free_wide.tolist() == [PARAMS.top_k - 1] * n
    assert int(free_alternatives(logits, ids, seed, PARAMS).sum()) < n  # the defaults: far from every token
