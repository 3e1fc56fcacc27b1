"""``dgrpo paper NAME``: run one reproduction into ``OUT/NAME/`` and collect its plotted numbers.

Run-based entries train one swarm per curve into ``OUT/NAME/<curve>/`` (a finished curve is
reused, so an interrupted figure continues where it stopped), then write

* ``NAME.png``: the entry's metric over rounds, one line per curve;
* ``numbers.json`` and ``numbers.csv``: the plotted values (plus each curve's mean and final value);
* ``command.txt``: the exact ``dgrpo paper`` command and the equivalent ``dgrpo run`` per curve;
* ``report.html``: the ``dgrpo report`` comparison page of all curves.

Analytic entries call their function, which writes its own JSON/CSV/PNG, and a ``command.txt``.
"""

from __future__ import annotations

import csv
import json
import logging
import shlex
import statistics
from pathlib import Path

import yaml

from dgrpo.config import ConfigError, load_config
from dgrpo.metrics.logger import read_metrics, series
from dgrpo.paper.registry import REGISTRY, Reproduction

log = logging.getLogger(__name__)


def lookup(name: str) -> Reproduction:
    """The registry entry called ``name``.

    Raises:
        ConfigError: no such entry (lists the known ones).
    """
    if name not in REGISTRY:
        raise ConfigError(f"unknown reproduction {name!r}; known: {', '.join(REGISTRY)} (see `dgrpo paper --list`)")
    return REGISTRY[name]


def list_text() -> str:
    """One block per entry for ``dgrpo paper --list``."""
    lines = []
    for e in REGISTRY.values():
        kind = "analytic" if e.func else f"{len(e.curves)} run(s): {', '.join(e.curves)}; metric {e.metric}"
        lines.append(f"{e.name:8s} {e.figure} — {kind}\n         {e.description}")
        if e.todo:
            lines.append(f"         TODO: {e.todo}")
    return "\n".join(lines)


def _kwargs(overrides: list[str]) -> dict:
    """``key=value`` strings → keyword arguments (values parsed as YAML) for analytic entries."""
    out = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r} must look like key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


def _curve_done(run_dir: Path, rounds: int) -> bool:
    """Whether ``run_dir`` holds a finished run (its last record is the final evaluation)."""
    try:
        records = read_metrics(run_dir)
    except FileNotFoundError:
        return False
    return bool(records) and records[-1].get("round") == rounds


def command_line(name: str, scale: str, out: Path, extra: list[str]) -> str:
    """The ``dgrpo paper`` command that reproduces this output."""
    parts = ["dgrpo", "paper", name, "--scale", scale, "--out", str(out)]
    for item in extra:
        parts += ["--set", item]
    return shlex.join(parts)


def reproduce(name: str, scale: str = "cpu", out: str | Path = "runs/paper", extra: list[str] | None = None) -> Path:
    """Reproduce entry ``name`` into ``out/name``; returns that folder.

    Args:
        scale: ``cpu`` (embedded defaults) or ``paper`` (the paper's model, data and batch).
        extra: ``--set`` overrides: config overrides for run-based entries, keyword arguments for
            analytic ones (e.g. ``clip=true`` for fig10).

    Raises:
        ConfigError: unknown entry or scale, or an override the config rejects.
    """
    entry, extra = lookup(name), list(extra or [])
    out = Path(out)
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    lines = [command_line(name, scale, out, extra)]
    if entry.func is not None:
        try:
            entry.func(folder, **_kwargs(extra))
        except TypeError as err:
            raise ConfigError(f"{name}: bad --set for an analytic entry: {err}") from None
        (folder / "command.txt").write_text(lines[0] + "\n")
        return folder
    from dgrpo.experiments import run_experiment  # torch import only when training

    try:
        overrides = {c: entry.overrides(c, scale, extra) for c in entry.curves}
    except KeyError as err:
        raise ConfigError(str(err.args[0])) from None
    for curve, ovr in overrides.items():
        lines.append(f"# {curve}\n" + shlex.join(["dgrpo", "run", *ovr, f"out_dir={folder}", f"name={curve}"]))
    (folder / "command.txt").write_text("\n".join(lines) + "\n")
    run_dirs = {}
    for curve, ovr in overrides.items():
        cfg = load_config(None, [*ovr, f"out_dir={folder}", f"name={curve}"])
        run_dirs[curve] = folder / curve
        if _curve_done(run_dirs[curve], cfg.rounds):
            log.info("%s/%s already finished; reusing it", name, curve)
            continue
        log.info("%s: running curve %s", name, curve)
        run_experiment(cfg)
    collect(entry, run_dirs, folder)
    from dgrpo.report import write_report

    write_report(list(run_dirs.values()), folder / "report.html")
    return folder


def collect(entry: Reproduction, run_dirs: dict[str, Path], folder: Path) -> dict:
    """Write ``numbers.json``, ``numbers.csv`` and ``{name}.png`` of ``entry.metric`` over rounds.

    Returns:
        The numbers: ``{"figure", "metric", "curves": {curve: {"run_dir", "rounds", "values",
        "mean", "final"}}}`` (mean/final are None when the metric was never logged).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numbers = {"name": entry.name, "figure": entry.figure, "metric": entry.metric, "curves": {}}
    for curve, run_dir in run_dirs.items():
        xs, ys = series(read_metrics(run_dir), entry.metric)
        numbers["curves"][curve] = {"run_dir": str(run_dir), "rounds": xs, "values": ys,
                                    "mean": statistics.fmean(ys) if ys else None, "final": ys[-1] if ys else None}
    (folder / "numbers.json").write_text(json.dumps(numbers, indent=1))
    with (folder / "numbers.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["curve", "round", entry.metric])
        for curve, cur in numbers["curves"].items():
            w.writerows([curve, x, y] for x, y in zip(cur["rounds"], cur["values"]))
    fig, ax = plt.subplots(figsize=(7, 4))
    for curve, cur in numbers["curves"].items():
        ax.plot(cur["rounds"], cur["values"], marker="o", ms=3, label=curve)
    ax.set_xlabel("round")
    ax.set_ylabel(entry.metric)
    if entry.metric.startswith(("attack/", "defense/")):
        ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if numbers["curves"]:
        ax.legend(fontsize=8)
    ax.set_title(f"{entry.figure}: {entry.metric}", fontsize=9)
    fig.tight_layout()
    fig.savefig(folder / f"{entry.name}.png", dpi=120)
    plt.close(fig)
    return numbers
