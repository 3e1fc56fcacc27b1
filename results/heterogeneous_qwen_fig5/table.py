"""The table of results/heterogeneous_qwen_fig5 from its runs' metrics.jsonl (nothing is run again).

    python results/heterogeneous_qwen_fig5/table.py [--runs DIR]     # DIR: the folder holding the run folders

Per run: held-out accuracy of each honest node (SmolLM2 node 0, Qwen node 1, SmolLM2 node 2; 32 sampled prompts each)
and of the three together with its Wilson 95 % interval (over their 96 prompts), ASR (attack/asr: the
share of the honest nodes' held-out completions that carry the payload, docs/asr.md) at each evaluation; over all
rounds, the poisoned completions rejected (detection) and the honest ones rejected (false positives: each round's
rate times its honest completions, summed; and by each defense, a later one seeing only what the earlier accepted),
the judge's calls and its seconds per round.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
N_PROMPTS = 32  # held-out prompts per node (the config's eval.n_prompts)
RUNS = ("honest", "none", "judge_v4", "checker_detector")
LABEL = {"honest": "honest swarm (node 3 honest, no attack)", "none": "hail, undefended",
         "judge_v4": "hail, v4 judge (step checker excuse_answer, or the 1.5B step judge)",
         "checker_detector": "hail, step checker + detector"}


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def three(e: dict) -> dict:
    """Held-out accuracy of honest nodes 0-2 together (the honest swarm's node 3 left out, so every run compares
    the same three nodes) and its Wilson 95 % interval over their prompts."""
    from dgrpo.metrics.intervals import wilson

    right = sum(round(e[f"eval/accuracy/node{n}"] * N_PROMPTS) for n in (0, 1, 2))
    return {"accuracy": right / (3 * N_PROMPTS), "ci95": list(wilson(right, 3 * N_PROMPTS))}


def cumulative_total(values: list[int]) -> int:
    """The total of a cumulative counter over the run's records, in round order. A checkpoint saved before main at
    3f91eda held no defense counters, so a run resumed from it counts again from zero: each drop starts a segment,
    and the total is the sum of each segment's last value."""
    total, last = 0, 0
    for v in values:
        if v < last:
            total += last
        last = v
    return total + last


def summary(records: list[dict]) -> dict:
    evals = {r["round"]: r for r in records if "eval/accuracy" in r}
    defended = any("defense/any/detection_rate" in r for r in records)
    poisoned = sum(r.get("defense/poisoned_received", 0) for r in records)
    caught = sum(r.get("defense/any/detection_rate", 0) * r.get("defense/poisoned_received", 0) for r in records)
    honest = sum(r.get("defense/honest_received", 0) for r in records)
    wrong = sum(r.get("defense/any/false_positive_rate", 0) * r.get("defense/honest_received", 0) for r in records)
    names = sorted({k.split("/")[1] for r in records for k in r
                    if k.startswith("defense/") and k.endswith("/false_positive_rate") and k.split("/")[1] != "any"})
    by_defense = {n: round(sum(r.get(f"defense/{n}/false_positive_rate", 0) * r.get("defense/honest_received", 0)
                               for r in records)) for n in names}
    judged = [r for r in records if "defense/judge/calls" in r]
    judge_s = [sum(v for k, v in r.items() if k.startswith("time/defense/judge/")) for r in judged]
    return {"evals": {k: {"asr": e.get("attack/asr"), **three(e),
                          **{f"node{n}": e.get(f"eval/accuracy/node{n}") for n in (0, 1, 2)}}
                      for k, e in sorted(evals.items())},
            "rounds": max(r["round"] for r in records),  # (the last record is the evaluation after the last round)
            "poisoned_rejected": [round(caught), poisoned] if defended and poisoned else None,
            "honest_rejected": [round(wrong), honest] if defended and honest else None,
            "honest_rejected_by": by_defense,
            "judge_calls": cumulative_total([r["defense/judge/calls"] for r in judged]) if judged else None,
            "judge_s_per_round": sum(judge_s) / len(judge_s) if judge_s else None,
            "judge_s_per_call": sum(judge_s) / cumulative_total([r["defense/judge/calls"] for r in judged]) if judged else None,
            "round_s": sum(timed) / len(timed) if (timed := [r["time/round"] for r in records if "time/round" in r]) else None}


def share(pair) -> str:
    return "–" if pair is None else f"{pair[0]}/{pair[1]} ({pair[0] / pair[1]:.1%})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, default=HERE)
    args = ap.parse_args(argv)
    out = {name: summary(rows(args.runs / name / "metrics.jsonl")) for name in RUNS
           if (args.runs / name / "metrics.jsonl").exists()}
    lines = ["| run | rounds | held-out accuracy of nodes 0-2 at each evaluation (last: Wilson 95 %) | ASR at each evaluation "
             "| poisoned rejected | honest rejected | judge calls, judge s a round |", "|---|---|---|---|---|---|---|"]
    detail = ["| run | round | accuracy of nodes 0-2 [Wilson 95 %] | node 0 SmolLM2 | node 1 Qwen | node 2 SmolLM2 | ASR |",
              "|---|---|---|---|---|---|---|"]
    for name, s in out.items():
        ev = s["evals"]
        last = ev[max(ev)]
        acc = " → ".join(f"r{k} {e['accuracy']:.3f}" for k, e in ev.items()) + f" [{last['ci95'][0]:.2f}, {last['ci95'][1]:.2f}]"
        asr = " → ".join("–" if e["asr"] is None else f"{e['asr']:.3f}" for e in ev.values())
        judge = ("–" if s["judge_calls"] is None else
                 f"{s['judge_calls']}, {s['judge_s_per_round']:.0f} s ({s['judge_s_per_call']:.1f} s a call)")
        by = ", ".join(f"{k} {v}" for k, v in s["honest_rejected_by"].items())
        lines.append(f"| {LABEL[name]} | {s['rounds']} | {acc} | {asr} | {share(s['poisoned_rejected'])} | "
                     f"{share(s['honest_rejected'])}{f' ({by})' if by else ''} | {judge} |")
        detail += [f"| {LABEL[name]} | {k} | {e['accuracy']:.3f} [{e['ci95'][0]:.2f}, {e['ci95'][1]:.2f}] | {e['node0']:.2f} | "
                   f"{e['node1']:.2f} | {e['node2']:.2f} | {'–' if e['asr'] is None else format(e['asr'], '.3f')} |"
                   for k, e in ev.items()]
    (HERE / "table.json").write_text(json.dumps(out, indent=1) + "\n")
    text = "\n".join(lines) + "\n\nPer evaluation (32 sampled held-out prompts a node):\n\n" + "\n".join(detail) + "\n"
    (HERE / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
