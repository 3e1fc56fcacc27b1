"""Charts of one or several runs as inline SVG strings (matplotlib, no network, no JavaScript).

Several runs are overlaid with one colour per run (the order given); within a run, line style
tells the series apart (solid = honest mean / detection, dashed = eval accuracy / false positives).
"""

from __future__ import annotations

import io
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # no screen
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from dgrpo.metrics.plots import EVAL_CURVES, interval_series  # noqa: E402
from dgrpo.report.data import PHASES, RunData, defense_names, peer_series, phase_times  # noqa: E402

COLOURS = [to_hex(c) for c in plt.rcParams["axes.prop_cycle"].by_key()["color"]]  # "#1f77b4", … (CSS-ready)
PHASE_COLOURS = {"generate": "#4c72b0", "exchange": "#dd8452", "defense": "#c44e52", "update": "#55a868", "eval": "#8172b3"}
STYLES = ["-", "--", ":", "-."]


def colour(i: int) -> str:
    """Colour of the i-th run of a report."""
    return COLOURS[i % len(COLOURS)]


def to_svg(fig) -> str:
    """The figure as an ``<svg>`` element (XML prolog and DOCTYPE stripped), then closed."""
    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "dgrpo"}):  # text stays text; stable ids
        fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


def _finish(ax, ylabel: str, unit_range: bool = True) -> None:
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
    ax.set_ylabel(ylabel)
    if unit_range:
        ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, ncol=2)


def _label(runs: Sequence[RunData], i: int, what: str) -> str:
    return what if len(runs) == 1 else f"{runs[i].name}: {what}"


def reward_chart(runs: Sequence[RunData]) -> str | None:
    """Reward per node (thin), honest mean (thick) and eval accuracy (dashed, markers)."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    drawn = False
    for i, run in enumerate(runs):
        for j, key in enumerate(k for k in run.keys if k.startswith("train/reward/node")):
            xs, ys = run.series(key)
            node = key.rsplit("/", 1)[-1]
            bad = int(node.removeprefix("node")) in (run.config.get("swarm") or {}).get("malicious", [])
            c = "#888888" if bad and len(runs) == 1 else (COLOURS[(j + 1) % len(COLOURS)] if len(runs) == 1 else colour(i))
            ax.plot(xs, ys, lw=0.9, alpha=0.5, color=c, ls=":" if bad else "-",
                    label=_label(runs, i, node + (" (malicious)" if bad else "")) if len(runs) == 1 else None)
            drawn = drawn or bool(xs)
        for key, style, marker in (("train/reward_honest", "-", None), ("eval/accuracy", "--", "o")):
            xs, ys = run.series(key)
            if xs:
                ax.plot(xs, ys, style, lw=2.2, marker=marker, ms=4, color=colour(i) if len(runs) > 1 else "black",
                        label=_label(runs, i, "honest mean" if key.startswith("train") else "eval accuracy"))
                drawn = True
    if not drawn:
        plt.close(fig)
        return None
    _finish(ax, "mean reward")
    return to_svg(fig)


def eval_chart(runs: Sequence[RunData]) -> str | None:
    """Held-out accuracy and format rate, sampled (solid) and greedy (dashed), with their Wilson 95%
    intervals shaded (``{key}_ci95_low/high``)."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    drawn = False
    for i, run in enumerate(runs):
        for j, (key, (label, default_colour, style)) in enumerate(EVAL_CURVES.items()):
            xs, ys = run.series(key)
            if not xs:
                continue
            c = default_colour if len(runs) == 1 else colour(i)
            ax.plot(xs, ys, style, marker="o", ms=4, lw=1.8, color=c, label=_label(runs, i, label))
            band = interval_series(run.records, key, (run.config.get("eval") or {}).get("n_prompts"))
            if band:
                ax.fill_between(band[0], band[1], band[2], color=c, alpha=0.12 if style == "-" else 0.06, lw=0)
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    _finish(ax, "rate on held-out prompts")
    return to_svg(fig)


def asr_chart(runs: Sequence[RunData]) -> str | None:
    """Every ``attack/asr*`` metric; a run's own metrics differ by line style."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    drawn = False
    for i, run in enumerate(runs):
        keys = [k for k in run.keys if k.startswith("attack/asr")]
        for j, key in enumerate(keys):
            xs, ys = run.series(key)
            if xs:
                c = COLOURS[j % len(COLOURS)] if len(runs) == 1 else colour(i)
                ax.plot(xs, ys, STYLES[j % len(STYLES)] if len(runs) > 1 else "-", marker="o", ms=4, color=c,
                        label=_label(runs, i, key.removeprefix("attack/")))
                drawn = True
    if not drawn:
        plt.close(fig)
        return None
    _finish(ax, "attack success rate")
    return to_svg(fig)


def defense_chart(runs: Sequence[RunData]) -> str | None:
    """Detection rate (solid) and false-positive rate (dashed) of each defense."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    drawn = False
    for i, run in enumerate(runs):
        for j, name in enumerate(defense_names(run)):
            c = COLOURS[j % len(COLOURS)] if len(runs) == 1 else colour(i)
            for what, style in (("detection_rate", "-"), ("false_positive_rate", "--")):
                xs, ys = run.series(f"defense/{name}/{what}")
                if xs:
                    ax.plot(xs, ys, style, marker=".", color=c, label=_label(runs, i, f"{name} {what.replace('_', ' ')}"))
                    drawn = True
    if not drawn:
        plt.close(fig)
        return None
    _finish(ax, "rate")
    return to_svg(fig)


def time_chart(runs: Sequence[RunData]) -> str | None:
    """Seconds per phase per round, stacked, the final evaluation included; one panel per run.

    The scale is the training rounds': a bar taller than 1.5 × the longest training round (most often
    an evaluation, whose 128 prompts can cost minutes) is cut at the top and labelled with its total,
    so one slow evaluation never flattens the rounds.
    """
    tables = [phase_times(r) for r in runs]
    if not any(t["round"] for t in tables):
        return None
    fig, axes = plt.subplots(len(runs), 1, figsize=(7.5, 2.6 * len(runs) + 0.6), sharex=True, squeeze=False)
    for ax, run, table in zip(axes[:, 0], runs, tables):
        bottom = [0.0] * len(table["round"])
        for phase in PHASES:
            vals = table[phase]
            ax.bar(table["round"], vals, bottom=bottom, color=PHASE_COLOURS[phase], width=0.8,
                   label=phase + (" (excl. defense)" if phase == "update" else ""))
            bottom = [b + v for b, v in zip(bottom, vals)]
        train = [t - e for t, e in zip(bottom, table["eval"])]
        top = 1.5 * max(train) if max(train, default=0) > 0 else max(bottom, default=1) or 1
        ax.set_ylim(0, top)
        for x, total in zip(table["round"], bottom):
            if total > top:  # cut: say how tall it is
                ax.text(x, top * 0.97, f"{total:.0f} s", ha="center", va="top", fontsize=7, rotation=90,
                        color="white", fontweight="bold")
        ax.set_ylabel("seconds")
        ax.grid(alpha=0.3, axis="y")
        if len(runs) > 1:
            ax.set_title(run.name, fontsize=8, loc="left")
    axes[0, 0].legend(fontsize=7, ncol=5, loc="upper left", bbox_to_anchor=(0, 1.25 if len(runs) == 1 else 1.35))
    axes[-1, 0].set_xlabel("round (the last bar: the final evaluation)")
    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    return to_svg(fig)


def peer_chart(runs: Sequence[RunData]) -> str | None:
    """Messages of each sender refused by the protocol or rejected by a defense, per round."""
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    drawn = False
    for i, run in enumerate(runs):
        for j, (who, (xs, ys)) in enumerate(sorted(peer_series(run).items())):
            c = COLOURS[j % len(COLOURS)] if len(runs) == 1 else colour(i)
            ax.plot(xs, ys, STYLES[j % len(STYLES)] if len(runs) > 1 else "-", marker=".", color=c,
                    label=_label(runs, i, f"node {who}" if who.isdigit() else who))
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    _finish(ax, "refused or rejected", unit_range=False)
    return to_svg(fig)
