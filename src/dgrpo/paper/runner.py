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

from dgrpo import config_yaml
from dgrpo.config import load_config
from dgrpo.errors import ConfigError, MetricsFileError
from dgrpo.metrics.logger import read_metrics, read_records, series
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


def list_text(width: int | None = None) -> str:
    """One block per entry for ``dgrpo paper --list``, wrapped to ``width`` columns (default: the
    terminal's, at least 60), each entry's text indented past the longest name."""
    import shutil
    import textwrap

    width = max(60, width or shutil.get_terminal_size((100, 24)).columns)
    pad = " " * (max(len(e.name) for e in REGISTRY.values()) + 2)
    lines = []
    for e in REGISTRY.values():
        kind = (f"no training runs; --set keys: {', '.join(func_keys(e.func))}" if e.func
                else f"{len(e.curves)} run(s): {', '.join(e.curves)}; metric {e.metric}")
        lines.append(textwrap.fill(f"{e.name:<{len(pad)}}{e.figure} — {kind}", width, subsequent_indent=pad,
                                   break_on_hyphens=False))
        lines.append(textwrap.fill(e.description, width, initial_indent=pad, subsequent_indent=pad))
        if e.todo:  # what keeps it from the paper's setting, in the reader's words
            lines.append(textwrap.fill(f"not yet as in the paper: {e.todo}", width, initial_indent=pad,
                                       subsequent_indent=pad))
    return "\n".join(lines)


def func_keys(func) -> list[str]:
    """The keyword arguments an analytic entry's function takes (its ``--set`` keys)."""
    import inspect

    params = list(inspect.signature(func).parameters.values())[1:]  # the first is the output folder
    return [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _kwargs(overrides: list[str]) -> dict:
    """``key=value`` strings → keyword arguments (values parsed as YAML) for analytic entries."""
    out = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r} must look like key=value")
        key, value = item.split("=", 1)
        try:  # (YAML 1.2, as run overrides)
            out[key.strip()] = config_yaml.load(value)
        except yaml.YAMLError as err:
            raise ConfigError(f"--set {key.strip()}: {config_yaml.describe(err, where=False)}") from None
    return out


def _curve_done(run_dir: Path, rounds: int) -> bool:
    """Whether ``run_dir`` holds a finished run of at least ``rounds`` rounds (its last record is the
    final evaluation); a longer finished run of the same config also serves a shorter figure."""
    try:
        records = read_metrics(run_dir)
    except FileNotFoundError:
        return False
    return bool(records) and records[-1]["round"] >= rounds


def command_line(name: str, scale: str, out: Path, extra: list[str], seeds: list[int] | None = None,
                 curves: list[str] | None = None) -> str:
    """The ``dgrpo paper`` command that reproduces this output."""
    parts = ["dgrpo", "paper", name, "--scale", scale, "--out", str(out)]
    for item in extra:
        parts += ["--set", item]
    if seeds:
        parts += ["--seeds", *map(str, seeds)]
    if curves:
        parts += ["--curves", ",".join(curves)]
    return shlex.join(parts)


def seeded_curve(curve: str, seed: int) -> str:
    """The run name of one seed of a curve (``--seeds``)."""
    return f"{curve}_seed{seed}"


def rounds_done(run_dir: Path, rounds: int) -> int:
    """How many of its ``rounds`` rounds a curve has finished, from its ``metrics.jsonl`` (read while the
    run writes it: a half-written last line is left out); ``rounds`` once its final evaluation is logged."""
    try:
        records = read_records(run_dir / "metrics.jsonl", partial_last_ok=True)
    except (FileNotFoundError, MetricsFileError):
        return 0
    return max((min(rec["round"] + 1, rounds) for _, rec in records), default=0)


def _run_parallel(pending: dict[str, list[str]], jobs: int, folder: Path, rounds: dict[str, int],
                  command: list[str] | None = None) -> None:
    """Train curves as ``python -m dgrpo run|resume`` subprocesses, at most ``jobs`` at a time, under one
    progress bar: rounds finished over all curves (each curve's ``metrics.jsonl``), the running curves
    after it; each curve's own output goes to ``<curve>.log``.

    Args:
        rounds: each pending curve's number of rounds; command: the program to run (default ``python -m dgrpo``).

    Raises:
        RuntimeError: a curve's process failed (names the curve and its log file).
    """
    import subprocess
    import sys
    import time

    from tqdm import tqdm

    command = command or [sys.executable, "-m", "dgrpo"]
    queue, running = list(pending.items()), {}
    bar = tqdm(total=sum(rounds[c] for c in pending), unit="round", desc=f"{len(pending)} curves, {jobs} at a time")
    try:
        while queue or running:
            while queue and len(running) < jobs:
                curve, args = queue.pop(0)
                log_path = folder / f"{curve}.log"
                fh = log_path.open("w")
                running[curve] = (subprocess.Popen([*command, *args], stdout=fh, stderr=subprocess.STDOUT), fh, log_path)
                bar.write(f"started curve {curve} (log {log_path})")
            time.sleep(2)
            for curve, (proc, fh, log_path) in list(running.items()):
                if proc.poll() is not None:
                    fh.close()
                    del running[curve]
                    if proc.returncode != 0:
                        for p, f, _ in running.values():
                            p.terminate()
                            f.close()
                        raise RuntimeError(f"curve {curve} failed (exit {proc.returncode}); see {log_path}")
            bar.n = sum(rounds_done(folder / c, rounds[c]) for c in pending)
            bar.set_postfix_str(f"running {', '.join(running)}" if running else "done", refresh=True)
    finally:
        bar.close()


def reproduce(name: str, scale: str = "cpu", out: str | Path = "runs/paper", extra: list[str] | None = None,
              jobs: int = 1, seeds: list[int] | None = None, curves: list[str] | None = None) -> Path:
    """Reproduce entry ``name`` into ``out/name``; returns that folder.

    Args:
        scale: ``cpu`` (embedded defaults) or ``paper`` (the paper's model, data and batch).
        extra: ``--set`` overrides: config overrides for run-based entries, keyword arguments for
            analytic ones (e.g. ``clip=true`` for fig10).
        jobs: curves trained at the same time (each in its own process).
        seeds: train every curve once per seed (``{curve}_seed{n}``, ``seed=n`` last); the figure
            then draws each seed thin and their mean with the seeds' range as a band.
        curves: train and collect only these curves (None = all); a later call without it reuses them.

    Raises:
        ConfigError: unknown entry or scale, an override the config rejects, seeds given twice or
            for an analytic entry, an unknown curve.
    """
    entry, extra = lookup(name), list(extra or [])
    if curves is not None and entry.func is not None:
        raise ConfigError(f"--curves: {name} is analytic (no curves)")
    if curves is not None:
        unknown = [c for c in curves if c not in entry.curves]
        if unknown or not curves:
            raise ConfigError(f"--curves: {name} has no curve(s) {unknown}; its curves: {', '.join(entry.curves) or 'none'}")
    if seeds is not None and (len(set(seeds)) != len(seeds) or not seeds):
        raise ConfigError(f"--seeds: give distinct seeds, got {seeds}")
    if seeds and entry.func is not None:
        raise ConfigError(f"--seeds: {name} is analytic (no training runs to seed)")
    if seeds and any(o.split("=", 1)[0].strip() == "seed" for o in extra):
        raise ConfigError("--seeds and --set seed=... both give the run seed; give one of them")
    out = Path(out)
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    lines = [command_line(name, scale, out, extra, seeds, curves)]
    if entry.func is not None:
        kwargs, keys = _kwargs(extra), func_keys(entry.func)
        unknown = [k for k in kwargs if k not in keys]
        if unknown:
            hint = " (the model is --set model=NAME_OR_DIR)" if "model" in keys and "model.name" in unknown else ""
            raise ConfigError(f"{name}: unknown --set key(s) {', '.join(unknown)}; {name} takes {', '.join(keys)}{hint}")
        try:
            entry.func(folder, **kwargs)
        except (TypeError, ValueError) as err:  # a wrong-typed or out-of-range value (json errors are ValueErrors)
            raise ConfigError(f"{name}: {err} (check its --set values)") from None
        (folder / "command.txt").write_text(lines[0] + "\n")
        return folder
    from dgrpo.recipes import resume, run  # torch import only when training

    chosen = list(entry.curves) if curves is None else curves
    try:
        if seeds:
            overrides = {seeded_curve(c, n): entry.overrides(c, scale, [*extra, f"seed={n}"])
                         for c in chosen for n in seeds}
        else:
            overrides = {c: entry.overrides(c, scale, extra) for c in chosen}
    except KeyError as err:
        raise ConfigError(str(err.args[0])) from None
    for curve, ovr in overrides.items():
        lines.append(f"# {curve}\n" + shlex.join(["dgrpo", "run", *ovr, f"out_dir={folder}", f"name={curve}"]))
    (folder / "command.txt").write_text("\n".join(lines) + "\n")
    run_dirs, pending, rounds = {}, {}, {}
    for curve, ovr in overrides.items():
        args = [*ovr, f"out_dir={folder}", f"name={curve}"]
        cfg = load_config(None, args)
        run_dirs[curve], rounds[curve] = folder / curve, cfg.rounds
        if _curve_done(run_dirs[curve], cfg.rounds):
            log.info("%s/%s already finished; reusing it", name, curve)
            continue
        if (run_dirs[curve] / "checkpoint" / "state.json").exists():  # interrupted: continue it
            pending[curve] = ["resume", str(run_dirs[curve]), *args]
            continue
        if (run_dirs[curve] / "metrics.jsonl").exists():  # interrupted before any checkpoint: start over
            import shutil

            shutil.rmtree(run_dirs[curve])
        pending[curve] = ["run", *args]
    if jobs > 1 and len(pending) > 1:
        _run_parallel(pending, jobs, folder, rounds)
    else:
        for curve, (verb, *args) in pending.items():
            log.info("%s: %s curve %s", name, "resuming" if verb == "resume" else "running", curve)
            resume(args[0], args[1:]) if verb == "resume" else run(load_config(None, args))
    collect(entry, run_dirs, folder, seeds)
    from dgrpo.report import write_report

    write_report(list(run_dirs.values()), folder / "report.html")
    return folder


def _fmt(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _write_table(numbers: dict, path: Path) -> None:
    """Markdown table of mean detection and false-positive rates per curve (Table 1 layout)."""
    rows = ["| curve | detection rate (poisoned rejected) | false-positive rate (honest rejected) | final ASR |",
            "|---|---|---|---|"]
    for curve, cur in numbers["curves"].items():
        rows.append(f"| {curve} | {_fmt(cur.get('defense/any/detection_rate:mean'))} | "
                    f"{_fmt(cur.get('defense/any/false_positive_rate:mean'))} | {_fmt(cur.get('attack/asr:final'))} |")
    path.write_text("\n".join(rows) + "\n")


def seed_groups(numbers: dict, seeds: list[int]) -> dict:
    """Per curve of a ``--seeds`` reproduction: the rounds every seed logged, and at each the mean,
    min and max over seeds; ``final_mean`` / ``final_min`` / ``final_max`` at the last such round."""
    groups = {}
    bases = dict.fromkeys(c.rsplit("_seed", 1)[0] for c in numbers["curves"])
    for base in bases:
        runs = [numbers["curves"][seeded_curve(base, n)] for n in seeds]
        common = sorted(set.intersection(*(set(r["rounds"]) for r in runs)))
        at = [[dict(zip(r["rounds"], r["values"]))[x] for r in runs] for x in common]
        g = {"seeds": list(seeds), "rounds": common, "mean": [statistics.fmean(v) for v in at],
             "min": [min(v) for v in at], "max": [max(v) for v in at]}
        if common:
            g.update(final_mean=g["mean"][-1], final_min=g["min"][-1], final_max=g["max"][-1])
        groups[base] = g
    return groups


def collect(entry: Reproduction, run_dirs: dict[str, Path], folder: Path, seeds: list[int] | None = None) -> dict:
    """Write ``numbers.json``, ``numbers.csv`` and ``{name}.png`` of ``entry.metric`` over rounds.

    Returns:
        The numbers: ``{"figure", "metric", "curves": {curve: {"run_dir", "rounds", "values",
        "mean", "final"}}}`` (mean/final are None when the metric was never logged); with ``seeds``
        also ``"seeds": {curve: seed_groups(...)}``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numbers = {"name": entry.name, "figure": entry.figure, "metric": entry.metric, "curves": {}}
    for curve, run_dir in run_dirs.items():
        records = read_metrics(run_dir)
        xs, ys = series(records, entry.metric)
        numbers["curves"][curve] = {"run_dir": str(run_dir), "rounds": xs, "values": ys,
                                    "mean": statistics.fmean(ys) if ys else None, "final": ys[-1] if ys else None}
        lo, hi = (dict(zip(*series(records, f"{entry.metric}_ci95_{end}"))) for end in ("low", "high"))
        if xs and all(x in lo and x in hi for x in xs):  # a rate logged with its Wilson 95% interval
            numbers["curves"][curve]["ci95"] = [[lo[x], hi[x]] for x in xs]
        for key in ("defense/any/detection_rate", "defense/any/false_positive_rate", "attack/asr",
                    "train/reward_honest", "eval/accuracy"):
            vals = series(records, key)[1]
            if vals:
                numbers["curves"][curve][f"{key}:mean"] = statistics.fmean(vals)
                numbers["curves"][curve][f"{key}:final"] = vals[-1]
    if seeds:
        numbers["seeds"] = seed_groups(numbers, seeds)
    (folder / "numbers.json").write_text(json.dumps(numbers, indent=1))
    if entry.metric.startswith("defense/"):
        _write_table(numbers, folder / "table.md")
    with (folder / "numbers.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["curve", "round", entry.metric])
        for curve, cur in numbers["curves"].items():
            w.writerows([curve, x, y] for x, y in zip(cur["rounds"], cur["values"]))
    fig, ax = plt.subplots(figsize=(7, 4))
    if seeds:
        for i, (base, g) in enumerate(numbers["seeds"].items()):
            colour = f"C{i}"
            for n in seeds:
                cur = numbers["curves"][seeded_curve(base, n)]
                ax.plot(cur["rounds"], cur["values"], color=colour, lw=0.8, alpha=0.45)
            ax.fill_between(g["rounds"], g["min"], g["max"], color=colour, alpha=0.15)
            ax.plot(g["rounds"], g["mean"], color=colour, marker="o", ms=3, lw=2,
                    label=f"{base}: mean of seeds {', '.join(map(str, seeds))} (band: min-max)")
    for i, (curve, cur) in enumerate(({} if seeds else numbers["curves"]).items()):
        ax.plot(cur["rounds"], cur["values"], marker="o", ms=3, label=curve, color=f"C{i}")
        if "ci95" in cur:
            ax.fill_between(cur["rounds"], *zip(*cur["ci95"]), color=f"C{i}", alpha=0.12, lw=0)
    if any("ci95" in cur for cur in numbers["curves"].values()) and not seeds:
        ax.text(0.01, 0.01, "bands: Wilson 95% intervals", transform=ax.transAxes, fontsize=7, alpha=0.7)
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
