"""The sweep table: differing config keys and accuracy with Wilson intervals, first and last."""

import json

import yaml

from dgrpo.cli import main


def fake_run(path, lr, accs, n_prompts=10):
    path.mkdir()
    (path / "config.yaml").write_text(yaml.safe_dump({"name": path.name, "grpo": {"lr": lr, "beta": 0.0},
                                                      "eval": {"n_prompts": n_prompts}}))
    recs = [{"round": 6 * i, "eval/accuracy": a, "eval/format_rate": 0.5, "time/round": 30.0} for i, a in enumerate(accs)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_table_rows(tmp_path, capsys):
    fake_run(tmp_path / "a", 1e-5, [0.1, 0.5])
    fake_run(tmp_path / "b", 2e-5, [0.0, 1.0])
    assert main(["report", "--table", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| run | grpo.lr | evals")  # only lr differs (name is ignored)
    # Wilson 95% for 1/10: (0.0179, 0.4042); 5/10: (0.2366, 0.7634); 0/10: (0, 0.2775); 10/10: (0.7225, 1)
    assert lines[2] == "| a | 1e-05 | 2 (0, 6) | 0.100 [0.02, 0.40] | 0.500 [0.24, 0.76] | +0.400 | — | 0.50 → 0.50 | — | 1 |"
    assert lines[3] == "| b | 2e-05 | 2 (0, 6) | 0.000 [0.00, 0.28] | 1.000 [0.72, 1.00] | +1.000 | — | 0.50 → 0.50 | — | 1 |"
