"""Issue 38 item 3 in one run: dgrpo's generation and update against the same-run float32 limit, beside the
anchors a user would pick (TRL's ``GRPOTrainer``, llama.cpp), one command, one machine, one hour.

    python benchmarks/anchors.py --out benchmarks/results/anchors

runs, one after the other, each in a fresh process on the same requests (4 prompts × 8 completions of the
embedded arithmetic task, at most 64 new tokens, 2 threads):

1. ``benchmarks/generation.py``: the float32 GEMM peak (MKL and oneDNN), the sampler's variants, the batch
   curve at 32, 64 and 128 completions, the update's variants (section 4: ``fraction_of_peak``), and the
   refilled stream against successive batches at 32, 64 and 128 rows (section 5);
2. ``benchmarks/llamacpp_generation.py`` (skipped, and said so, where ``llama-cpp-python`` is not installed):
   llama.cpp's batched generation of the same requests on the same GGUF beside dgrpo's sampler;
3. ``benchmarks/round_vs_trl.py``: one GRPO round of dgrpo against one ``GRPOTrainer`` step, interleaved.

and writes ``<out>/{generation,llamacpp,trl}.json``, ``<out>/anchors.json`` (the rows below) and
``<out>/anchors.md``. Every tokens/s is also given as a fraction of the compute limit of step 1
(``limit = best GEMM GFLOP/s × 1e9 / FLOPs per token``, FLOPs per token = 2 × linear weights + attention, as
``benchmarks/generation.py`` defines it); the update's fraction is section 4's (6 × linear weights × executed
tokens / seconds / peak). Issue 38's goals: ≥ 0.5 of the limit for a whole round's requests and at batch 32 with
refill, the update ≥ 0.7, dgrpo ≤ 0.15 × TRL's step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_step(argv: list[str], log: Path) -> int:
    """Run one benchmark script in a fresh process, its stderr into ``log``; its exit status."""
    with log.open("w") as err:
        return subprocess.run([sys.executable, *argv], cwd=HERE, stdout=subprocess.DEVNULL, stderr=err).returncode


def rows(generation: dict, llamacpp: dict | None, trl: dict | None) -> list[dict]:
    """The one-run table: one row per measurement, each with tokens/s (or seconds) and its fraction of the
    limit of ``generation``'s peak (the best of MKL and oneDNN).

    Args:
        generation: ``benchmarks/generation.py``'s report (``compute``, ``generation``, ``batch_size_curve``,
            ``update``, ``stream``).
        llamacpp: ``benchmarks/llamacpp_generation.py``'s report, or None where it did not run.
        trl: ``benchmarks/round_vs_trl.py``'s report, or None.

    Returns:
        dicts with ``what``, ``value``, ``unit``, ``fraction_of_limit`` (None where it does not apply) and ``goal``.
    """
    limits = generation["compute"]["limit_tokens_per_s"]
    limit = max(limits.values())
    out = []

    def add(what, value, unit, fraction, goal=""):
        out.append({"what": what, "value": round(value, 3), "unit": unit,
                    "fraction_of_limit": None if fraction is None else round(fraction, 3), "goal": goal})

    add("float32 compute limit (best GEMM)", limit, "tokens/s", 1.0)
    after = generation.get("generation", {}).get("variants", {}).get("after")
    if after:
        n = generation["generation"]["completions"]
        add(f"a whole round's requests ({n} completions, one sample call)", after["median_tokens_per_s"],
            "tokens/s", after["median_tokens_per_s"] / limit, ">= 0.5")
    for point in generation.get("batch_size_curve", []):
        add(f"batch {point['completions']} (one call, no refill)", point["tokens_per_s"], "tokens/s",
            point["tokens_per_s"] / limit)
    for s in generation.get("stream", []):
        for mode in ("refill", "batches"):
            tps = s[mode]["median_tokens_per_s"]
            goal = ">= 0.5" if mode == "refill" and s["rows"] == 32 else ""
            add(f"{s['requests']} requests through {s['rows']} rows, {mode}", tps, "tokens/s", tps / limit, goal)
    upd = generation.get("update", {}).get("variants", {}).get("after")
    if upd:
        best = max(upd["fraction_of_peak"].values())
        add("update (Learner.step, groups packed)", upd["median_seconds"], "s", best, ">= 0.7")
    if llamacpp:
        for name, tps in llamacpp["median_tokens_per_s"].items():
            add(f"{name}, {llamacpp['requests']} requests (llamacpp_generation.py)", tps, "tokens/s", tps / limit)
    if trl:
        add("dgrpo round / TRL GRPOTrainer step", trl["ratio_dgrpo_over_trl"], "ratio", None, "<= 0.15")
        add("dgrpo seconds per round", trl["dgrpo_seconds_per_round"], "s", None)
        add("TRL seconds per step", trl["trl_seconds_per_step"], "s", None)
    return out


def markdown(table: list[dict]) -> str:
    """``rows``' table as markdown."""
    lines = ["| measurement | value | unit | of the limit | goal |", "|---|---|---|---|---|"]
    for r in table:
        frac = "" if r["fraction_of_limit"] is None else f"{r['fraction_of_limit']:.3f}"
        lines.append(f"| {r['what']} | {r['value']:g} | {r['unit']} | {frac} | {r['goal']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the reports")
    parser.add_argument("--repeats", type=int, default=3, help="generation.py's and llamacpp_generation.py's repeats")
    parser.add_argument("--pairs", type=int, default=2, help="round_vs_trl.py's dgrpo/TRL pairs")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    common = ["--prompts", "4", "--group", "8", "--max-new-tokens", "64", "--threads", "2"]
    steps = {
        "generation": ["generation.py", *common, "--repeats", str(args.repeats), "--batches", "32", "64", "128",
                       "--update-repeats", str(args.repeats), "--stream-requests", "128",
                       "--stream-rows", "32", "64", "128", "--stream-repeats", "2", "--out", str(out / "generation.json")],
        "llamacpp": ["llamacpp_generation.py", *common, "--repeats", str(args.repeats), "--out", str(out / "llamacpp.json")],
        "trl": ["round_vs_trl.py", *common, "--steps", "2", "--pairs", str(args.pairs), "--out", str(out / "trl.json")],
    }
    meta = {"command": "python benchmarks/anchors.py " + " ".join(sys.argv[1:]), "load_average_at_start": os.getloadavg(),
            "steps": {}}
    for name, argv in steps.items():
        t0 = time.time()
        code = run_step(argv, out / f"{name}.log")
        meta["steps"][name] = {"argv": argv, "exit": code, "seconds": round(time.time() - t0, 1)}
        print(f"anchors: {name} exit {code} in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    reports = {name: json.loads((out / f"{name}.json").read_text()) if (out / f"{name}.json").exists() else None
               for name in steps}
    if reports["generation"] is None:
        sys.exit(f"anchors: generation.py wrote no report; see {out / 'generation.log'}")
    table = rows(reports["generation"], reports["llamacpp"], reports["trl"])
    (out / "anchors.json").write_text(json.dumps({**meta, "rows": table}, indent=1))
    (out / "anchors.md").write_text(markdown(table))
    print(markdown(table))


if __name__ == "__main__":
    main()
