"""Files of ``dgrpo paper matrix``: ``matrix.json``, ``table.md`` (detection and false-positive
rates with Wilson 95% intervals) and ``matrix.png`` (detection-rate heat map, false positives as the
last row)."""

from __future__ import annotations

import json
from pathlib import Path


def _cell(s: dict | None) -> str:
    if not s or s.get("rate") is None:
        return "—"
    return f"{100 * s['rate']:.1f}% [{100 * s['low']:.1f}, {100 * s['high']:.1f}]"


def table_markdown(result: dict) -> str:
    """The matrix as markdown: one row per attack (detection rate, 95% interval, n), the honest
    false-positive row last, then each attack's full-reward share and stats."""
    names = result["defenses"]
    lines = ["| attack (n poisoned) | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for attack, row in result["attacks"].items():
        cells = [_cell(row["detection"].get(n)) if n not in result["not_filters"] else "n/a" for n in names]
        lines.append(f"| {attack} ({row['poisoned']}) | " + " | ".join(cells) + " |")
    n_honest = next((s["n"] for s in result["honest"].values()), 0)
    cells = [_cell(result["honest"].get(n)) if n not in result["not_filters"] else "n/a" for n in names]
    lines.append(f"| **false positives** (honest, {n_honest}) | " + " | ".join(cells) + " |")
    lines += ["", "| attack | poisoned with full reward | attack stats | seconds |", "|---|---|---|---|"]
    for attack, row in result["attacks"].items():
        fr = "—" if row["full_reward"] is None else f"{100 * row['full_reward']:.1f}%"
        lines.append(f"| {attack} | {fr} | {json.dumps(row['stats'])} | {row['seconds']} |")
    for n, why in result["not_filters"].items():
        lines.append(f"\n{n}: {why}.")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """Heat map of detection rates (attacks × defenses) with the false-positive row at the bottom."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [n for n in result["defenses"] if n not in result["not_filters"]]
    rows = list(result["attacks"])
    data = [[(result["attacks"][a]["detection"].get(n) or {}).get("rate") for n in names] for a in rows]
    data.append([(result["honest"].get(n) or {}).get("rate") for n in names])
    grid = np.array([[np.nan if x is None else x for x in r] for r in data], dtype=float)
    fig, ax = plt.subplots(figsize=(1.2 * len(names) + 3, 0.45 * len(data) + 1.5))
    ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{100 * grid[i, j]:.0f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_yticks(range(len(data)), [*rows, "false positives (honest)"])
    ax.set_title(f"detection rate % ({result['model']}, one round, top-{result['top_k']})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(result: dict, out: Path) -> None:
    (out / "matrix.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(table_markdown(result))
    plot(result, out / "matrix.png")
