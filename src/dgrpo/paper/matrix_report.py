"""Files of ``dgrpo paper matrix``: ``matrix.json``, ``table.md`` (detection and false-positive
rates with Wilson 95% intervals) and ``matrix.png`` (detection-rate heat map, false positives as the
last row); :func:`merge_rows` adds rows measured by another call on the same honest pool."""

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
    """Heat map of detection rates (attacks × defenses) with the false-positive row at the bottom, coloured on one
    scale of good (green: a high detection rate, a low false-positive rate) to bad (red); the numbers are the rates."""
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
    colour = grid.copy()
    colour[-1] = 1 - colour[-1]  # (review u36f: a 0 % false-positive row was red, as if bad)
    ax.imshow(colour, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
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
    """Write ``table.md``, ``matrix.png`` and ``matrix.json`` from ``result``; the table is built before
    anything is written, and the JSON (what a later merge reads) is written last."""
    table = table_markdown(result)
    plot(result, out / "matrix.png")
    (out / "table.md").write_text(table)
    (out / "matrix.json").write_text(json.dumps(result, indent=1))


def read_matrix(path) -> dict:
    """The ``matrix.json`` at ``path``, checked (:func:`check_matrix`).

    Raises:
        ValueError: naming ``path``: missing, a folder, not text, not JSON, or not a matrix.json.
    """
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path}: cannot read a matrix.json ({type(err).__name__}: {str(err)[:80]}); "
                         "give the matrix.json a `dgrpo paper matrix` call wrote") from None
    check_matrix(result, str(path))
    return result


def check_matrix(result, name: str = "matrix") -> None:
    """Refuse what is not a ``matrix.json`` of ``dgrpo paper matrix``: a mapping with ``attacks`` (row →
    mapping with a ``detection`` mapping of defense → rate mapping) and ``honest`` (defense → rate mapping).

    Raises:
        ValueError: naming ``name`` and the first field that is missing or of the wrong type.
    """
    fix = "give the matrix.json a `dgrpo paper matrix` call wrote"
    if not isinstance(result, dict) or not isinstance(result.get("attacks"), dict) or not isinstance(result.get("honest"), dict):
        raise ValueError(f"{name}: not a matrix.json (no 'attacks' and 'honest' mappings); {fix}")
    for row, cell in result["attacks"].items():
        det = cell.get("detection") if isinstance(cell, dict) else None
        if not isinstance(det, dict) or not all(isinstance(v, dict) for v in det.values()):
            raise ValueError(f"{name}: row {row!r} has no 'detection' mapping of defense -> rate; {fix}")
    if not all(isinstance(v, dict) for v in result["honest"].values()):
        raise ValueError(f"{name}: 'honest' is not a mapping of defense -> rate; {fix}")


SETUP_FIELDS = ("model", "seed", "max_new_tokens", "round", "group_size", "top_k")


def merge_rows(base: dict, extra: dict) -> dict:
    """``base`` with the attack rows of ``extra`` appended: a slow row measured by a later call of the
    matrix (``--rows``) joins the table it belongs to.

    The two must be one experiment: the same setup (:data:`SETUP_FIELDS`) and the same honest pool,
    checked by the pool's digest (``honest_digest``, :func:`dgrpo.paper.matrix.pool_digest`) when both
    have one, and always by its false-positive counts on a shared filter other than ``none`` (the pool
    is sampled under the assigned seeds, so a second call draws the same completions and every defense
    both measured rejects the same number of them).
    Defenses ``extra`` did not measure are absent from its rows (shown as "—").

    Raises:
        ValueError: not matrix results, another setup, another honest pool, or a row ``base`` already has.
    """
    check_matrix(base, "base")
    check_matrix(extra, "extra")
    other = [f"{k}: {base.get(k)!r} vs {extra.get(k)!r}" for k in SETUP_FIELDS if base.get(k) != extra.get(k)]
    if other:
        raise ValueError(f"another setup, not one matrix ({'; '.join(other)}); measure the rows with the base's settings")
    shared = sorted(set(base["honest"]) & set(extra["honest"]))
    pool = [f"{d}: {base['honest'][d].get('rejected')}/{base['honest'][d].get('n')} vs "
            f"{extra['honest'][d].get('rejected')}/{extra['honest'][d].get('n')}" for d in shared
            if (base["honest"][d].get("rejected"), base["honest"][d].get("n"))
            != (extra["honest"][d].get("rejected"), extra["honest"][d].get("n"))]
    if pool or not [d for d in shared if d != "none"]:  # `none` rejects nothing: it checks only the pool's size
        raise ValueError("another honest pool (false positives " + ("; ".join(pool) or "on no shared filter but none") +
                         "); measure the rows with the base's n_honest, seed and at least one of its defenses")
    digests = (base.get("honest_digest"), extra.get("honest_digest"))
    if None not in digests and digests[0] != digests[1]:
        raise ValueError(f"another honest pool (digest {digests[0][:12]} vs {digests[1][:12]}); "
                         "measure the rows with the base's n_honest, seed and model")
    again = sorted(set(base["attacks"]) & set(extra["attacks"]))
    if again:
        raise ValueError(f"rows {again} are in the base already; drop them from one side first")
    return {**base, "attacks": {**base["attacks"], **extra["attacks"]}}
