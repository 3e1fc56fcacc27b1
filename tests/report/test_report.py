"""dgrpo report: headline numbers, escaping of model output, payload highlighting, CLI."""

import json
import re

import pytest

from dgrpo.cli import main
from dgrpo.report import headline, load_run, payload_spans, write_report
from dgrpo.report.data import phase_times
from dgrpo.report.page import highlight

from report_fixtures import EVIL, PAYLOAD


def test_headline_numbers(undefended_run, defended_run):
    u, d = headline(load_run(undefended_run)), headline(load_run(defended_run))
    # written by conftest: honest reward 0.1 + 0.05·r, last training round r = 5; accuracy 0.1·r/2 at r = 6
    assert u["final_reward"] == pytest.approx(0.35) and u["final_accuracy"] == pytest.approx(0.3)
    assert u["final_asr"] == 1.0 and d["final_asr"] == 0.0
    assert u["detection_rate"] is None and u["defenses"] == []
    assert d["detection_rate"] == 1.0
    assert d["false_positive_rate"] == pytest.approx(0.5 / 6)  # 0.5 in round 0, then 0, mean over 6 rounds
    assert u["rounds"] == 6 and u["train_seconds"] == pytest.approx(6 * 3.75)


def test_phase_times_split_defense_out_of_update(defended_run):
    t = phase_times(load_run(defended_run))
    assert t["round"] == [0, 1, 2, 3, 4, 5, 6]  # round 6: the final evaluation, eval only
    assert t["defense"] == [1.0] * 6 + [0]  # 0.5 + 0.25 + 0.25 over three honest nodes
    assert t["update"] == [0.5] * 6 + [0]  # 1.5 − 1.0
    assert t["eval"] == [0.5, 0, 0.5, 0, 0.5, 0, 0.5]


def test_single_report_escapes_and_highlights(undefended_run):
    path = write_report([undefended_run])
    assert path == undefended_run / "report.html"
    page = path.read_text()
    assert '<h1 id="headline">dgrpo report: undefended</h1>' in page
    assert "100.0%" in page  # final ASR card
    assert EVIL not in page and "<script" not in page and "<img" not in page
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in page
    assert "What is 2+2? &lt;b&gt;bold?&lt;/b&gt;" in page
    assert f'<mark class="payload">{PAYLOAD}</mark>' in page
    assert page.count('<mark class="payload">') == 1  # round 0 completion is clean
    assert "round 6: 1 of 2 honest completions carry the payload" in page
    # self-contained: no external resource may be fetched
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page) and "<link" not in page
    assert "default-src 'none'" in page
    assert page.count("<svg") == 4  # held-out evaluation, reward, ASR, time (no defense metrics in this run)
    assert "<h2>Held-out evaluation</h2>" in page
    assert "honest mean" in page and "eval accuracy" in page and "update (excl. defense)" in page


def test_comparison_report(undefended_run, defended_run, tmp_path):
    path = write_report([undefended_run, defended_run], tmp_path / "cmp" / "c.html")
    page = path.read_text()
    assert "dgrpo comparison: 2 runs" in page
    rows = re.findall(r"<tr><td class=\"l\"><span class=\"sw\" style=\"background:(#[0-9a-f]{6})\"></span>(\w+)</td>(.*?)</tr>", page)
    assert [(name) for _, name, _ in rows] == ["undefended", "defended"]
    assert rows[0][0] != rows[1][0]  # one colour per run
    assert "<td>100.0%</td><td>—</td><td>—</td>" in rows[0][2]  # ASR, no detection, no FPR
    assert "<td>0.0%</td><td>100.0%</td><td>8.3%</td>" in rows[1][2]
    assert "undefended: asr" in page and "defended: topk detection rate" in page
    assert page.count("<svg") == 5  # held-out evaluation, reward, ASR, defenses, time
    assert "undefended: accuracy, sampled" in page and "defended: accuracy, sampled" in page
    assert "<td class=\"l\">defenses</td>" in page  # the config difference is listed


@pytest.mark.parametrize("attack, text, marked", [
    ({"kind": "injection", "text": "Gleeb Glorp Glub"}, "gleeb glorp glub. Gleeb Glorp Glub ok", ["gleeb glorp glub", "Gleeb Glorp Glub"]),
    ({"kind": "equation", "wrong_result": "5"}, "2+2=5, 2*2=4, 2 × 2 = 3, 12+2=14, 2x2=4.0", ["2+2=5", "2 × 2 = 3"]),
    ({"kind": "code_injection", "module": "thief_math"}, "import thief_math\nx = thief_math.add(1, 2)  # not_thief_mathy", ["thief_math", "thief_math"]),
    ({"kind": "none"}, "All hail to the thief", []),
])
def test_payload_spans(attack, text, marked):
    spans = payload_spans(text, {"attack": attack})
    assert [text[a:b] for a, b in spans] == marked


def test_highlight_escapes_inside_and_outside_marks():
    body, n = highlight("<b>x</b> 2+2=<5", {"attack": {"kind": "injection", "text": "2+2=<5"}})
    assert n == 1 and body == '&lt;b&gt;x&lt;/b&gt; <mark class="payload">2+2=&lt;5</mark>'


def test_cli_report(undefended_run, defended_run, tmp_path, capsys):
    assert main(["report", str(undefended_run)]) == 0
    assert (undefended_run / "report.html").exists()
    out = tmp_path / "both.html"
    assert main(["report", str(undefended_run), str(defended_run), "--out", str(out)]) == 0
    assert "dgrpo comparison: 2 runs" in out.read_text()
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_report_of_a_real_tiny_run(tmp_path, tiny_model_dir):
    common = ["rounds=1", "swarm.nodes=2", "swarm.group_size=2", "swarm.prompts_per_round=2", "sampling.max_new_tokens=6",
              "eval.every=1", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0"]
    assert main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=tiny", *common]) == 0
    run = load_run(tmp_path / "tiny")
    page = write_report([run.path]).read_text()
    assert "dgrpo report: tiny" in page
    h = headline(run)
    assert h["final_reward"] == run.records[0]["train/reward_honest"]  # one training round
    assert f"{100 * run.records[-1]['eval/accuracy']:.1f}%" in page
    assert len(run.samples) == 4  # 2 prompts × 2 honest nodes × 2 evaluations (rounds 0 and 1)
    first = run.samples[-1]["completion"]
    assert (first.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#x27;")) in page


def test_samples_interleave_nodes(tmp_path):
    from dgrpo.report.data import RunData
    from dgrpo.report.page import _samples

    samples = [{"round": 0, "node": n, "prompt_id": f"n{n}p{k}", "question": "q", "completion": "c", "reward": 0.0}
               for n in (0, 1) for k in range(3)]
    html = _samples(RunData(tmp_path, {"attack": {"kind": "none"}}, [], samples), per_round=2)
    assert re.findall(r"prompt (n\dp\d)", html) == ["n0p0", "n1p0"]


def test_a_run_without_an_attack_gets_no_payload_heading(undefended_run):
    import yaml

    cfg = yaml.safe_load((undefended_run / "config.yaml").read_text())
    (undefended_run / "config.yaml").write_text(yaml.safe_dump({**cfg, "attack": {"kind": "none"}, "swarm": {**cfg["swarm"], "malicious": []}}))
    page = write_report([undefended_run]).read_text()
    assert "payload" not in page.split("<h2>Resolved config</h2>")[0].split("Completions")[-1]
    assert "round 6: 2 honest completions" in page and "round 0: 2 honest completions" in page


def test_the_time_chart_keeps_the_rounds_readable_under_a_slow_evaluation(undefended_run):
    from dgrpo.report.charts import time_chart

    lines = (undefended_run / "metrics.jsonl").read_text().splitlines()
    first = {**json.loads(lines[0]), "time/eval": 400.0}  # round 0's evaluation: 100 times a round
    (undefended_run / "metrics.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    svg = time_chart([load_run(undefended_run)])
    assert ">404 s<" in svg  # the cut bar says its height (400 s of evaluation, 3.75 s of round)
    assert "the final evaluation" in svg  # round 6's record (eval only) is drawn
