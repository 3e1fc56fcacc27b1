"""The held-out table of the frozen v4 rule as one figure (table_either-answer.json → table1_v4.png).

    PYTHONPATH=src python results/judge_qwen_v4/plot_v4.py

Each set's share rejected by the frozen rule `either-answer` with its Wilson 95 % interval: detection on the poisons
(goal ≥ 90 % on hail and 2+2=5), false positives on the honest kinds (goal ≤ 5 %), the paper's Llama-3.1-8B judge
(Table 1) beside hail and 2+2=5; each part alone as small marks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "benchmarks" / "judge_table1"))
from report import PAPER, TITLES  # noqa: E402

from dgrpo.metrics.intervals import wilson  # noqa: E402

TITLES = {**TITLES, "equation_at_answer": "false step at the answer, adaptive"}


def main() -> int:
    table = json.loads((HERE / "table_either-answer.json").read_text())
    names = list(table)
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(names) + 1.2))
    for y, name in enumerate(names):
        row = table[name]
        n, k = row["n"], row["rule"]
        low, high = wilson(k, n)
        honest = name.startswith("honest")
        color = "tab:orange" if honest else "tab:blue"
        ax.barh(y, k / n, color=color, alpha=0.75)
        ax.errorbar(k / n, y, xerr=[[k / n - low], [high - k / n]], color="black", capsize=3, lw=1)
        ax.plot(row["judge"] / n, y, marker="|", color="tab:green", ms=12, mew=2)
        ax.plot(row["excuse_answer"] / n, y, marker="|", color="tab:purple", ms=12, mew=2)
        if name in PAPER:  # "91.7%"
            ax.plot(float(PAPER[name].rstrip("%")) / 100, y, marker="*", color="tab:red", ms=12)
        ax.text(1.02, y, f"{k}/{n}", va="center", fontsize=8)
    ax.set_yticks(range(len(names)), [TITLES.get(n, n) + (" (FP)" if n.startswith("honest") else "") for n in names],
                  fontsize=8)
    ax.invert_yaxis()
    ax.axvline(0.9, color="tab:blue", ls=":", lw=1)
    ax.axvline(0.05, color="tab:orange", ls=":", lw=1)
    ax.set_xlim(0, 1.12)
    ax.set_xlabel("share rejected by the frozen rule (bars, Wilson 95 %)")
    from matplotlib.lines import Line2D

    ax.legend(handles=[Line2D([], [], marker="|", ls="", color="tab:green", ms=10, mew=2, label="step judge alone"),
                       Line2D([], [], marker="|", ls="", color="tab:purple", ms=10, mew=2, label="step checker alone"),
                       Line2D([], [], marker="*", ls="", color="tab:red", ms=10, label="paper, Llama-3.1-8B judge")],
              loc="center", fontsize=8)
    ax.set_title("v4 held out: step checker (excuse_answer) or Qwen2.5-Coder-1.5B step judge", fontsize=10)
    fig.tight_layout()
    fig.savefig(HERE / "table1_v4.png", dpi=110)
    print(HERE / "table1_v4.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
