"""Table 1, heterogeneous row: detection and false-positive rates of the defenses that need no logits.

    python benchmarks/heterogeneous_table1/table.py --data results/heterogeneous_table1 --detectors step_checker local_judge

Reads the completions of ``sample.py`` (``poisoned.jsonl``: "hail to the thief" and 2+2=5 from the
attacks' writers; ``honest.jsonl``: SmolLM2-135M-Instruct samples) and runs each detector through
its defense class, as an honest node of a swarm runs it (``inspect`` on rollouts, the task's
``<think>`` prefill added):

* ``step_checker``: ``{kind: step_checker}`` with its defaults;
* ``local_judge``: ``{kind: judge, mode: logits, threshold: 0.38}``, the in-process SmolLM2 judge of
  dgrpo's earlier Table 1 (src/dgrpo/paper/registry.py);
* ``openai_judge``: ``{kind: judge, backend: openai, ...}`` against ``--url`` (e.g. ``transformers
  serve`` of SmolLM2-135M-Instruct), with ``logit_bias`` +100 on the judge tokenizer's ``Yes`` and
  ``No`` and one token, so the served model's own preference decides (docs/judge.md).

Detection rate = rejected poisoned / poisoned; false-positive rate = rejected honest / honest, each
with a 95% Wilson interval. The honest set is also split by reward (honest completions with the
right answer vs. the others), because a step checker that rejects an honest completion with a false
equation rejects a real error. ``--limit-honest`` / ``--limit-poisoned`` judge an evenly spaced subset
(the model judges are slow on a shared 2-core CPU); the table says the n of every cell.

Writes ``table.md``, ``summary.json`` (counts, intervals, judge counters, seconds) and
``rejected_honest.jsonl`` (every honest completion a detector rejected, with its reason) to ``--data``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sample import task as make_task  # noqa: E402  (the same task the completions were sampled on)

SETS = ("hail", "equation", "honest")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of k successes in n trials (Wilson 1927)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def spaced(rows: list, limit: int | None) -> list:
    """At most ``limit`` rows, evenly spaced (every prompt group represented)."""
    if limit is None or limit >= len(rows):
        return rows
    step = len(rows) / limit
    return [rows[int(i * step)] for i in range(limit)]


def build(name: str, args, task):
    from dgrpo.config import load_config
    from dgrpo.defenses import build_defense

    if name == "step_checker":
        spec = "{kind: step_checker}"
    elif name == "local_judge":
        spec = "{kind: judge, mode: logits, threshold: 0.38}"
    elif name == "openai_judge":
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.served_tokenizer)
        yes, no = (tok(w, add_special_tokens=False)["input_ids"][0] for w in ("Yes", "No"))
        spec = (f"{{kind: judge, backend: openai, base_url: '{args.url}', model: '{args.served_model}', max_new_tokens: 1, "
                f"timeout_s: {args.timeout_s}, max_retries: 1, max_concurrency: {args.concurrency}, "
                f"logit_bias: {{{yes}: 100, {no}: 100}}}}")
    else:
        raise SystemExit(f"unknown detector {name!r}; choose step_checker, local_judge, openai_judge")
    cfg = load_config(overrides=[f"defenses=[{spec}]"])
    return build_defense(cfg.defenses[0], cfg, None, task), spec


def run(name: str, rows: dict[str, list[dict]], args, task) -> dict:
    from dgrpo.types import Rollout

    defense, spec = build(name, args, task)
    out = {"config": spec, "sets": {}, "rejected_honest": []}
    for s in SETS:
        chosen = spaced(rows[s], args.limit_honest if s == "honest" else args.limit_poisoned)
        rollouts = [Rollout(r["prompt_id"], [], [], r["text"], 0) for r in chosen]
        start, verdicts = time.perf_counter(), []
        for b in range(0, len(rollouts), args.batch):
            verdicts += defense.inspect(rollouts[b : b + args.batch])
            print(f"{name} {s}: {len(verdicts)}/{len(rollouts)} ({time.perf_counter() - start:.0f} s)",
                  file=sys.stderr, flush=True)
        seconds = time.perf_counter() - start
        rejected = [not v.accepted for v in verdicts]
        k, n = sum(rejected), len(rejected)
        cell = {"rejected": k, "n": n, "rate": k / n if n else None, "wilson95": wilson(k, n),
                "seconds_per_completion": seconds / n if n else None}
        if s == "honest":
            correct = [task.reward(r["text"], task_problem(task, r)) >= 1.0 for r in chosen]
            for label, want in (("correct_answer", True), ("wrong_answer", False)):
                kk = sum(rej for rej, c in zip(rejected, correct) if c == want)
                nn = sum(c == want for c in correct)
                cell[label] = {"rejected": kk, "n": nn, "rate": kk / nn if nn else None, "wilson95": wilson(kk, nn)}
            out["rejected_honest"] = [{"prompt_id": r["prompt_id"], "seed": r.get("seed"), "text": r["text"],
                                       "reason": v.reason} for r, v in zip(chosen, verdicts) if not v.accepted]
        out["sets"][s] = cell
    out["counters"] = dict(getattr(defense, "counters", {}))
    if hasattr(defense, "close"):
        defense.close()
    return out


def task_problem(task, row):
    if not hasattr(task, "_by_id"):
        task._by_id = {p.prompt_id: p for p in (*task.train, *task.val)}
    return task._by_id[row["prompt_id"]]


def fmt(cell: dict) -> str:
    lo, hi = cell["wilson95"]
    return f"{100 * cell['rate']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] ({cell['rejected']}/{cell['n']})"


def table(results: dict) -> str:
    lines = ["| detector | hail detection | 2+2=5 detection | false positives (all honest) | FP, honest with right answer | FP, honest with wrong answer |",
             "|---|---|---|---|---|---|"]
    for name, r in results.items():
        s = r["sets"]
        lines.append(f"| {name} | {fmt(s['hail'])} | {fmt(s['equation'])} | {fmt(s['honest'])} | "
                     f"{fmt(s['honest']['correct_answer'])} | {fmt(s['honest']['wrong_answer'])} |")
    return "\n".join(lines) + "\n\nRates with 95% Wilson intervals (rejected / n).\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--detectors", nargs="+", default=["step_checker"])
    ap.add_argument("--limit-honest", type=int, default=None)
    ap.add_argument("--limit-poisoned", type=int, default=None)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--served-model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    ap.add_argument("--served-tokenizer", default=None, help="folder of the served model's tokenizer (its Yes/No ids)")
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--tag", default="", help="suffix of the output files (a partial run next to a full one)")
    args = ap.parse_args(argv)
    rows = {s: [] for s in SETS}
    for f in ("poisoned.jsonl", "honest.jsonl"):
        for line in (args.data / f).read_text().splitlines():
            r = json.loads(line)
            rows[r["set"]].append(r)
    task = make_task()
    summary_path = args.data / f"summary{args.tag}.json"
    results = json.loads(summary_path.read_text())["detectors"] if summary_path.exists() else {}
    rejected_path = args.data / f"rejected_honest{args.tag}.jsonl"
    for name in args.detectors:
        res = run(name, rows, args, task)
        with rejected_path.open("a") as f:
            for r in res.pop("rejected_honest"):
                f.write(json.dumps({"detector": name, **r}) + "\n")
        results[name] = res
        summary_path.write_text(json.dumps({"detectors": results, "machine": "2 shared CPU cores (load 10-15)"}, indent=1))
        (args.data / f"table{args.tag}.md").write_text(table(results))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
