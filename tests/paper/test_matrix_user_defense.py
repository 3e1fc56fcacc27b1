"""A defense joins a run and the matrix by its own file alone (issue 32): one from outside src/dgrpo
(examples/mykinds: ``LengthCap``, named by import path) runs in a tiny swarm and is a column of
``dgrpo paper matrix`` and of the trained matrix (``matrix_training`` reads the run as its cell); what a
defense declares on its config (``needs_bound_seed``) gives it its ``_bound`` column, with no list to edit."""

from __future__ import annotations

from typing import ClassVar, Literal

import pytest

from dgrpo import registry
from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics
from dgrpo.paper.matrix import run_matrix
from dgrpo.paper.matrix_columns import Column, default_columns, parse_column
from dgrpo.paper.matrix_training import check_cell, defense_column, run_column

CAP = "mykinds.defenses:LengthCap"
TOKENS = 8  # sampling.max_new_tokens of both: an honest completion has at most 8 tokens, so a cap of 8 passes it


def _hail_poison_lengths(model_dir: str) -> list[int]:
    """Tokens of the hail poison of every training prompt (the oracle solution with the slogan),
    counted with the attack and the tokenizer alone, not through a swarm or the matrix."""
    from dgrpo.attacks.injection import InjectionAttack
    from dgrpo.config import load_config
    from dgrpo.policy.chat import encode_completion
    from dgrpo.training.build import build_task
    from transformers import AutoTokenizer

    cfg = load_config(None, ["swarm.malicious=[3]", "attack.kind=injection"])
    task, tok = build_task(cfg), AutoTokenizer.from_pretrained(model_dir)
    attack = InjectionAttack(cfg.attack)
    return [len(encode_completion(tok, attack.poison(task, p, 0))) for p in task.train]


def test_a_defense_from_the_users_package_runs_in_a_swarm_and_is_a_matrix_column(mykinds, tmp_path, tiny_model_dir):
    lengths = _hail_poison_lengths(tiny_model_dir)
    # every poison is over the run's cap of 12 tokens and within its 128-token sampling limit (the protocol
    # refuses longer messages before any defense), and over the matrix's cap of 8 (honest samples have <= 8)
    assert 12 < min(lengths) and max(lengths) <= 128
    assert main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=run", "rounds=1", "swarm.nodes=2",
                 "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=128", "eval.n_prompts=2",
                 "swarm.malicious=[1]", "attack.kind=injection", f"defenses=[{{kind: '{CAP}', max_tokens: 12}}]"]) == 0
    first = read_metrics(tmp_path / "run")[0]
    assert first["defense/poisoned_received"] == 4 and first["defense/length_cap/detection_rate"] == 1.0
    # the trained matrix reads the run as the cell of that column, named as the one-round matrix names it
    assert run_column(tmp_path / "run", "hail") == CAP
    check_cell(f"hail__{CAP}", tmp_path / "run")
    with pytest.raises(ValueError, match=f"trained the {CAP!r} column"):
        check_cell("hail__topk", tmp_path / "run")

    assert "length_cap" in default_columns()  # registered by the run's import: a default column from now on
    result = run_matrix(tmp_path / "matrix", model=tiny_model_dir, n_honest=8, n_poisoned=4, attacks=["hail"],
                        defenses=["none", CAP], max_new_tokens=TOKENS, fields={CAP: {"max_tokens": TOKENS}})
    assert result["defenses"] == ["none", CAP]
    assert result["honest"][CAP]["rejected"] == 0 and result["honest"][CAP]["n"] == 8
    hail = result["attacks"]["hail"]["detection"][CAP]
    assert hail["rejected"] == hail["n"] == result["attacks"]["hail"]["poisoned"] == 4
    assert "| hail (4) | 0.0% [0.0, 49.0] | 100.0% [51.0, 100.0] |" in (tmp_path / "matrix" / "table.md").read_text()
    # the same file's fields at another cap: every hail poison passes (each has fewer than 1024 tokens)
    loose = run_matrix(tmp_path / "loose", model=tiny_model_dir, n_honest=8, n_poisoned=4, attacks=["hail"],
                       defenses=[CAP], max_new_tokens=TOKENS, fields={CAP: {"max_tokens": 1024}})
    assert loose["attacks"]["hail"]["detection"][CAP]["rejected"] == 0


def test_a_declared_need_for_the_bound_seed_adds_the_bound_column():
    """A defense registered here (outside src/dgrpo) that trusts the claimed seed gets ``<kind>_bound``
    among the default columns by its config's declaration alone; one that does not, none."""
    from dgrpo.defenses.base import DefenseConfig

    class TrustsSeedConfig(DefenseConfig):
        kind: Literal["trusts_seed"] = "trusts_seed"
        needs_bound_seed: ClassVar[bool] = True

    class PlainConfig(DefenseConfig):
        kind: Literal["plain_check"] = "plain_check"

    try:
        registry.register("defense", "trusts_seed", config=TrustsSeedConfig)(type("TrustsSeed", (), {}))
        registry.register("defense", "plain_check", config=PlainConfig)(type("Plain", (), {}))
        cols = default_columns()
        assert cols.index("trusts_seed_bound") == cols.index("trusts_seed") + 1 and "plain_check_bound" not in cols
        # the trained matrix names a run's one defense the same way, by the same declaration
        assert (defense_column("trusts_seed", True), defense_column("trusts_seed", False)) == ("trusts_seed_bound", "trusts_seed")
        assert defense_column("plain_check", True) == "plain_check" and defense_column("nosuch", True) == "other"
        assert parse_column("trusts_seed_bound") == Column("trusts_seed_bound", "trusts_seed", bound=True)
        with pytest.raises(ValueError, match="unknown matrix column 'nosuch'"):
            parse_column("nosuch")
    finally:
        registry._ENTRIES["defense"].pop("trusts_seed", None)
        registry._ENTRIES["defense"].pop("plain_check", None)


@pytest.mark.parametrize("key", ["length_cap", "mykinds.defenses:LengthCapp", "topk"])
def test_fields_for_a_kind_no_selected_column_runs_are_refused_before_loading(mykinds, tmp_path, key):
    """``fields`` keyed by a kind's short name, a misspelt import path or an unselected kind used to run the
    column with its defaults silently (review r32d #2): refused in one line naming the columns' kinds, before
    any model loads (the model path does not exist)."""
    with pytest.raises(ValueError, match=rf"fields names \['{key}'\].*defense kinds: {CAP}$"):
        run_matrix(tmp_path / "m", model=str(tmp_path / "no_model"), n_honest=8, n_poisoned=4, attacks=["hail"],
                   defenses=["none", CAP], max_new_tokens=TOKENS, fields={key: {"max_tokens": 1}})
