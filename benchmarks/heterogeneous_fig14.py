"""Fig. 5 / Fig. 14 with the best heterogeneous defense: held-out accuracy of the honest baseline, the
undefended attacks and the same attacks against the step checker chained with the trained detector.

    python benchmarks/heterogeneous_fig14.py --out results/heterogeneous_fig5/fig14 \
        --baseline results/paper_baseline/fig12/baseline \
        --curve hail_horizontal=results/paper_baseline/fig12/hail_horizontal \
        --curve hail_horizontal_defended=results/heterogeneous_fig5/fig5/hail_horizontal \
        --curve equation_vertical=results/paper_baseline/fig13/equation_vertical \
        --curve equation_vertical_defended=results/heterogeneous_fig5/fig5/equation_vertical

The runs are trained by ``dgrpo paper`` (their ``command.txt``); this draws them together through the
same code as ``dgrpo paper fig14`` (:func:`dgrpo.paper.runner.collect`: ``numbers.json``, ``fig14.png``,
Wilson 95% bands) and writes ``table.md``: accuracy at each evaluation, final ASR, mean detection and
false-positive rates.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    from dgrpo.paper.registry import REGISTRY
    from dgrpo.paper.runner import collect

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--curve", action="append", default=[], help="NAME=RUN_DIR (repeatable)")
    args = ap.parse_args(argv)
    runs = {"baseline": args.baseline}
    for item in args.curve:
        name, _, path = item.partition("=")
        if not path or not (Path(path) / "metrics.jsonl").is_file():
            raise SystemExit(f"--curve {item!r}: want NAME=RUN_DIR with a metrics.jsonl")
        runs[name] = Path(path)
    args.out.mkdir(parents=True, exist_ok=True)
    numbers = collect(REGISTRY["fig14"], runs, args.out)
    rows = ["| run | held-out accuracy by evaluation | final ASR | detection (mean) | false positives (mean) |",
            "|---|---|---|---|---|"]
    pct = lambda x: "–" if x is None else f"{100 * x:.1f}%"
    for name, cur in numbers["curves"].items():
        acc = " → ".join(f"{v:.3f}" for v in cur["values"])
        rows.append(f"| {name} | {acc} | {pct(cur.get('attack/asr:final'))} | "
                    f"{pct(cur.get('defense/any/detection_rate:mean'))} | {pct(cur.get('defense/any/false_positive_rate:mean'))} |")
    (args.out / "table.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
