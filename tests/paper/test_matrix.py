"""`dgrpo paper matrix` end to end on a tiny model, in seconds."""

import json

import pytest

from dgrpo.paper.matrix import ATTACKS, run_matrix
from dgrpo.paper.matrix_columns import default_columns
from dgrpo.paper.registry import REGISTRY


def test_matrix_end_to_end_on_a_tiny_model(tmp_path, tiny_model_dir):
    attacks = ["hail", "topk_hail", "equation_sampled", "grind_hail", "flooding", "replayed_round", "dos_prompt_grind"]
    result = run_matrix(tmp_path, model=tiny_model_dir, n_honest=16, n_poisoned=4, attacks=attacks,
                        max_new_tokens=8, attack_overrides={"topk_hail": ["attack.tries=1"], "grind_hail": ["attack.tries=2"],
                                                            "equation_sampled": ["attack.candidates=1"],
                                                            "dos_prompt_grind": ["attack.prompt_tries=2"]})
    saved = json.loads((tmp_path / "matrix.json").read_text())
    assert saved["attacks"].keys() == set(attacks) and (tmp_path / "matrix.png").stat().st_size > 0
    assert "| **false positives** (honest, 16) |" in (tmp_path / "table.md").read_text()
    honest, rows = result["honest"], result["attacks"]
    # honest samples are drawn inside the top-k under their assigned seeds: no defense of the sampler flags them
    for name in ("none", "topk", "replay", "replay_bound", "validation"):
        assert honest[name]["rejected"] == 0 and honest[name]["n"] == 16
    # the oracle text of the shipped injection is far outside a random model's top-10 of 400 tokens
    assert rows["hail"]["poisoned"] == 4 and rows["hail"]["detection"]["topk"]["rate"] == 1.0
    assert rows["hail"]["full_reward"] == 1.0 and rows["hail"]["detection"]["none"]["rejected"] == 0
    # constrained decoding and grinding stay inside the top-k by construction
    assert rows["topk_hail"]["detection"]["topk"]["rejected"] == 0
    assert rows["grind_hail"]["detection"]["topk"]["rejected"] == 0
    # grinding claims the seed that produced each sample: replay passes it; only binding can catch a ground seed
    grind = rows["grind_hail"]
    assert grind["detection"]["replay"]["rejected"] == 0
    assert grind["detection"]["replay_bound"]["rejected"] == grind["stats"]["ground"]
    # prompt-choice grinding sends its bound seeds' own samples: even bound replay passes all of it
    prompts = rows["dos_prompt_grind"]
    assert prompts["poisoned"] == 4 and prompts["stats"]["prompts"] == 1 and prompts["stats"]["ground"] == 0
    assert all(prompts["detection"][d]["rejected"] == 0 for d in ("topk", "replay", "replay_bound"))
    # flooding: 4 copies of each of its 4 messages; the run's admission (the validation column) refuses the
    # 3 extra copies of each: at an index beyond its slot each claims the seed of the slot it copies (seed binding)
    assert rows["flooding"]["poisoned"] == 16 and rows["flooding"]["detection"]["validation"]["rejected"] == 12
    # a replayed honest message claims its old round's seed: of the defenses only seed binding catches it; the
    # run's admission refuses the 4 replayed (re-signed by the attacker, they claim their honest senders: identity)
    replayed = rows["replayed_round"]
    assert replayed["poisoned"] == 8 and replayed["detection"]["replay_bound"]["rate"] == 1.0
    assert replayed["detection"]["validation"]["rejected"] == 4
    # the step checker: the oracle's arithmetic is true; 2+2=5 (here the oracle rewrite, no sample qualifies) is not
    assert rows["hail"]["detection"]["step_checker"]["rejected"] == 0
    assert rows["equation_sampled"]["stats"]["fallback"] == 4 and rows["equation_sampled"]["detection"]["step_checker"]["rate"] == 1.0
    assert "kl" not in honest and result["not_filters"]["kl"]


def test_matrix_refuses_unknown_rows(tmp_path):
    with pytest.raises(ValueError, match="unknown matrix rows/columns"):
        run_matrix(tmp_path, attacks=["hail", "nope"])


def test_matrix_is_registered_and_covers_ten_attacks_and_six_defenses():
    assert REGISTRY["matrix"].func is run_matrix
    assert len(ATTACKS) >= 10 and len([d for d in default_columns() if d != "kl"]) >= 6


def test_a_row_measured_later_merges_into_the_table_it_belongs_to(tmp_path, tiny_model_dir):
    """Two calls with the same setup draw the same honest pool, so the rows of the second join the first;
    the merged table equals one call measuring both rows (up to the seconds each took)."""
    from dgrpo.paper.matrix_report import merge_rows

    kw = dict(model=tiny_model_dir, n_honest=8, n_poisoned=4, max_new_tokens=8, defenses=["none", "topk", "replay", "step_checker"])
    first = run_matrix(tmp_path / "a", attacks=["hail"], **kw)
    later = run_matrix(tmp_path / "b", attacks=["dos_written"], **kw)
    both = run_matrix(tmp_path / "c", attacks=["hail", "dos_written"], **kw)
    merged = merge_rows(first, later)
    assert list(merged["attacks"]) == ["hail", "dos_written"] and merged["honest"] == both["honest"]
    for row in ("hail", "dos_written"):
        assert {k: v for k, v in merged["attacks"][row].items() if k != "seconds"} == \
            {k: v for k, v in both["attacks"][row].items() if k != "seconds"}
    with pytest.raises(ValueError, match=r"rows \['hail'\] are in the base already"):
        merge_rows(merged, first)
    with pytest.raises(ValueError, match="another setup, not one matrix \\(max_new_tokens: 8 vs 9\\)"):
        merge_rows(first, {**later, "max_new_tokens": 9})
    pool = json.loads(json.dumps(later))
    pool["honest"]["topk"]["rejected"] += 1  # another pool: one more honest completion rejected
    with pytest.raises(ValueError, match="another honest pool \\(false positives topk: 0/8 vs 1/8\\)"):
        merge_rows(first, pool)
    with pytest.raises(ValueError, match="extra: not a matrix.json"):
        merge_rows(first, {"cells": {}})


def test_the_pool_digest_tells_two_pools_apart(tmp_path, tiny_model_dir):
    """The digest is of the pool's token ids: the same seed gives the same digest, another seed another
    (a second method beside the false-positive counts, which a judge-only call cannot compare)."""
    from dgrpo.paper.matrix_report import merge_rows

    kw = dict(model=tiny_model_dir, n_honest=8, n_poisoned=4, max_new_tokens=8, defenses=["none", "topk"])
    a = run_matrix(tmp_path / "a", attacks=["hail"], **kw)
    b = run_matrix(tmp_path / "b", attacks=["dos_written"], **kw)
    c = run_matrix(tmp_path / "c", attacks=["dos_written"], seed=1, **kw)
    assert a["honest_digest"] == b["honest_digest"] != c["honest_digest"] and len(a["honest_digest"]) == 64
    with pytest.raises(ValueError, match="another honest pool \\(digest"):
        merge_rows(a, {**c, "seed": 0})  # the setup says seed 0; the pool is another
    with pytest.raises(ValueError, match="no shared filter but none"):
        merge_rows(a, {**b, "honest": {"none": a["honest"]["none"]}})


def test_attack_overrides_are_checked_before_any_sampling(tmp_path, tiny_model_dir):
    # found by a user-level review: a misspelt row dropped its override silently, and a bad override was only
    # refused after the honest pool (minutes on SmolLM2) was sampled; no model is loaded before these errors.
    # The tiny model and pool keep a regression to seconds (on SmolLM2 it ran the whole matrix in CI, 40 min)
    kw = dict(model=tiny_model_dir, n_honest=8, n_poisoned=4, max_new_tokens=8, defenses=["none"])
    with pytest.raises(ValueError, match=r"attack_overrides names unknown rows \['nosuch'\]"):
        run_matrix(tmp_path, attacks=["hail"], attack_overrides={"nosuch": ["attack.tries=2"]}, **kw)
    grind_horizontally = {"dos_prompt_grind": ["attack.prompt_tries=4", "swarm.mode=horizontal"]}
    with pytest.raises(ValueError, match="prompt_tries > 1 needs swarm.mode=vertical"):
        run_matrix(tmp_path, attacks=["dos_prompt_grind"], attack_overrides=grind_horizontally, **kw)
    assert not (tmp_path / "matrix.json").exists()


def test_the_heat_map_colours_a_low_false_positive_rate_as_good(tmp_path, monkeypatch):
    """The detection rows are coloured by their rate (green high) and the false-positive row by 1 - its rate (green
    low), on one scale; before, a 0 % false-positive row was drawn red (review u36f). Hand-made result: 2 attacks x
    2 defenses, rates 1.0 / 0.25 and 0.5 / 0.0, false positives 0.0 and 0.2 -> colours [[1, .25], [.5, 0], [1, .8]]."""
    import matplotlib.axes

    from dgrpo.paper.matrix_report import plot

    shown = []
    real = matplotlib.axes.Axes.imshow
    monkeypatch.setattr(matplotlib.axes.Axes, "imshow", lambda self, x, **kw: (shown.append(x.copy()), real(self, x, **kw))[1])
    det = lambda a, b: {"topk": {"rate": a}, "replay": {"rate": b}}  # noqa: E731
    result = {"defenses": ["topk", "replay"], "not_filters": {}, "model": "m", "top_k": 10,
              "attacks": {"hail": {"detection": det(1.0, 0.25)}, "gleeb": {"detection": det(0.5, 0.0)}},
              "honest": det(0.0, 0.2)}
    plot(result, tmp_path / "m.png")
    assert [[round(float(v), 6) for v in row] for row in shown[0]] == [[1.0, 0.25], [0.5, 0.0], [1.0, 0.8]]
