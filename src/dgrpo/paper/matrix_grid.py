"""The trained matrix as one attack × defense table (``grid.md``) and heat map (``grid.png``): each cell
the one-round detection rate of ``dgrpo paper matrix``, then the ASR and held-out accuracy after
training (:mod:`dgrpo.paper.matrix_training` summarises the runs into the cells read here)."""

from __future__ import annotations

from pathlib import Path

from dgrpo.paper.matrix_columns import NOT_FILTERS, RECEIPT

def _matrix_rate(matrix: dict | None, attack: str, defense: str):
    cell = (((matrix or {}).get("attacks", {}).get(attack) or {}).get("detection", {})).get(defense)
    return cell.get("rate") if isinstance(cell, dict) else None


CAUGHT = 0.9  # a one-round detection rate at or above this lets < 10% through: the cell is not trained


def _grid(cells: dict[str, dict], matrix: dict | None) -> tuple[list[str], list[str], dict]:
    """Rows (the matrix's attacks, then any other trained row), columns (the matrix's, in its order,
    then any other trained column, e.g. ``protocol``) and (attack, defense) → (one-round rate, cell or None)."""
    attacks = (matrix or {}).get("attacks", {})
    rows = list(attacks)
    rows += [a for a in dict.fromkeys(n.split("__")[0] for n in cells) if a not in rows]
    trained = {tuple(n.split("__")): c for n, c in cells.items()}
    cols = list(dict.fromkeys([*(d for a in attacks.values() for d in (a or {}).get("detection", {})),
                               *(n.split("__")[1] for n in cells)]))
    return rows, cols, {(a, d): (_matrix_rate(matrix, a, d), trained.get((a, d))) for a in rows for d in cols}


def _grid_cell(one, c, defense: str = "") -> str:
    det = "n/a" if defense in NOT_FILTERS else "–" if one is None else f"{100 * one:.0f}%"  # β-KL filters nothing
    if c is None and defense == RECEIPT and one is not None and one < CAUGHT:
        return f"{det} = none"  # its checks run on receipt in every trained cell
    if c is None:
        return f"{det} caught" if one is not None and one >= CAUGHT else (f"{det} ·" if one is not None else "·")
    after = f"{c['tokens']:.0f} tok" if c["asr"] is None else f"**{c['asr']:.2f}**"
    return f"{det} → {after} ({c['accuracy']:.2f})"


def grid_markdown(cells: dict[str, dict], baseline: dict | None, matrix: dict | None) -> str:
    """The one table: a row per attack, a column per defense; each cell reads ``detection → ASR
    (accuracy)``: the one-round detection rate of the matrix, then the ASR and held-out accuracy after
    training (mean length in tokens instead of ASR for the DoS by cherry-picking). "caught": the defense
    detects >= 90% on one round, so the cell was not trained; "= none": message validation, whose checks
    run on receipt in every cell; "·": not trained (see the flat table)."""
    rows, cols, grid = _grid(cells, matrix)
    base = (f"all-honest baseline: held-out accuracy {baseline['accuracy']:.3f} "
            f"[{baseline['accuracy_ci95'][0]:.2f}, {baseline['accuracy_ci95'][1]:.2f}]; " if baseline else "")
    lines = [f"one-round detection → **ASR** after {max((c['round'] for c in cells.values()), default=0)} rounds "
             f"(held-out accuracy); {base}caught = >= {100 * CAUGHT:.0f}% detected on one round, not trained; "
             "= none: validation runs on receipt in every cell; · = not trained",
             "", "| attack | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for a in rows:
        lines.append(f"| {a} | " + " | ".join(_grid_cell(*grid[a, d], d) for d in cols) + " |")
    return "\n".join(lines) + "\n"


def plot_grid(cells: dict[str, dict], baseline: dict | None, matrix: dict | None, path: Path) -> None:
    """Heat map of :func:`grid_markdown`: colour = ASR after training (green 0 → red 1), each trained
    cell annotated with ASR and accuracy; cells caught on one round pale green, untrained ones blank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows, cols, grid = _grid(cells, matrix)
    data = np.full((len(rows), len(cols)), np.nan)
    fig, ax = plt.subplots(figsize=(1.25 * len(cols) + 3, 0.5 * len(rows) + 1.6))
    for i, a in enumerate(rows):
        for j, d in enumerate(cols):
            one, c = grid[a, d]
            if c is not None and c["asr"] is not None:
                data[i, j] = c["asr"]
                text = f"{c['asr']:.2f}\n{c['accuracy']:.2f}"
            elif c is not None:
                text = f"{c['tokens']:.0f} tok\n{c['accuracy']:.2f}"
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, color="0.8"))
            elif d == RECEIPT and one is not None:
                text = "= none"  # its checks run on receipt in every trained cell
            elif one is not None and one >= CAUGHT:
                text = "caught"
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, color="#d9f0d3"))
            else:
                text = ""
            ax.text(j, i, text, ha="center", va="center", fontsize=7)
    image = ax.imshow(np.ma.masked_invalid(data), vmin=0, vmax=1, cmap="RdYlGn_r", aspect="auto")
    ax.set_xlim(-0.5, len(cols) - 0.5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    fig.colorbar(image, ax=ax, fraction=0.03, label="ASR after training")
    base = f"; all-honest accuracy {baseline['accuracy']:.2f}" if baseline else ""
    ax.set_title(f"ASR (top) and held-out accuracy (bottom) after training{base}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
