"""Summary of ``benchmarks/clock_auto.sh``: from ``OUT/clock.log`` each rank's calibration (seconds, parts, proposal)
and the agreed round_s; from ``OUT/{clock,relative}/metrics.jsonl`` each round's compute and round time (seconds).
Prints one table; writes ``OUT/summary.json``."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def main(out: Path) -> None:
    log = (out / "clock.log").read_text()
    calib = re.findall(r"calibrated in ([\d.]+)s: generate ([\d.]+)s, update ([\d.]+)s, regenerate [\d.]+s, "
                       r"evaluate ([\d.]+)s .*proposes round_s=([\d.]+)s", log)
    agreed = sorted(set(re.findall(r"agreed round_s=([\d.]+)s, node (\d+)'s proposal", log)))
    rows = {}
    for name in ("clock", "relative"):
        for line in (out / name / "metrics.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if "time/round" in rec:
                compute = rec["time/generate"] + rec["time/update"] + rec.get("time/eval", 0.0)
                rows.setdefault(rec["round"], {})[name] = (round(compute, 2), round(rec["time/round"], 2),
                                                          round(rec.get("time/eval", 0.0), 2))
    summary = {"calibration": [dict(zip(("seconds", "generate", "update", "evaluate", "proposal"), map(float, c)))
                               for c in calib],
               "agreed": [(float(r), int(n)) for r, n in agreed], "rounds": rows}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print("calibration (per rank): " + "; ".join(f"{c['seconds']}s -> proposes {c['proposal']}s (generate {c['generate']}"
                                                 f", update {c['update']}, evaluate {c['evaluate']})"
                                                 for c in summary["calibration"]))
    print(f"agreed round_s: {summary['agreed']}")
    print("round | clock: compute (eval) / round s | relative: compute (eval) / round s")
    for r, v in sorted(rows.items()):
        c, rel = v.get("clock", ("-",) * 3), v.get("relative", ("-",) * 3)
        print(f"{r} | {c[0]} ({c[2]}) / {c[1]} | {rel[0]} ({rel[2]}) / {rel[1]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
