"""The attack × defense matrix after training: one row per trained cell (``dgrpo paper
matrix_training``, curve ``ATTACK__DEFENSE``), beside the one-round detection rate the matrix measured.

Per cell, from the run's last evaluation (held-out prompts, sampled at the training temperature):

* ``asr``: the attack's own success metric (``attack/asr``: the payload's share for injections — in
  every sentence, ``attack/asr_every_sentence``, for a payload placed there — the conditional 2+2→5
  share for the equation attacks, the filler's share for written DoS, a bare master key's share), with
  a Wilson 95% interval over the completions it is measured on; none for the DoS by cherry-picking,
  whose success is length;
* ``accuracy``: held-out accuracy (``eval/accuracy``) with its interval, against the all-honest baseline;
* ``tokens``: mean completion length in tokens at round 0 and after training (what a DoS attack raises);
  round-0 values are None for a run that skipped that evaluation (``eval.first=false``);
* ``detection`` / ``fp``: the defense's mean detection and false-positive rates over the training
  rounds (``defense/any/*``; none for ``none``);
* ``refused``: messages the receivers refused on receipt over all rounds, by any rule of the protocol
  (signatures, identity, another run's or round's messages, seed binding, shares and length, and the
  message checks), which the defense's rates do not count: the ``rejected`` counts of every sender in
  ``peers.jsonl`` (:func:`_refused`; ``swarm/invalid`` leaves out what was not authenticated for its
  round, docs/protocol.md "The round's record under attack").
"""

from __future__ import annotations

import json
from pathlib import Path

from dgrpo.paper.matrix_grid import _matrix_rate, grid_markdown, plot_grid


def _final(records: list[dict], key: str):
    from dgrpo.metrics.logger import series

    values = series(records, key)[1]
    return values[-1] if values else None


def _mean(records: list[dict], key: str):
    import statistics

    from dgrpo.metrics.logger import series

    values = series(records, key)[1]
    return statistics.fmean(values) if values else None


def _total(records: list[dict], key: str):
    from dgrpo.metrics.logger import series

    values = series(records, key)[1]
    return sum(values) if values else None


def _refused(run_dir: Path, records: list[dict]):
    """Messages refused on receipt over the run: the sum of every sender's ``rejected`` counts in the run's
    ``peers.jsonl`` (one line a round: its lowest honest policy's receive; a matrix cell is homogeneous, so that
    is every receiver's), or, for a run without that file, its ``swarm/invalid`` (which then counted every
    refusal). None when neither exists."""
    from dgrpo.training.records import PEERS_FILE

    path = Path(run_dir) / PEERS_FILE
    if not path.exists():
        return _total(records, "swarm/invalid")
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sum(n for line in lines for p in line.get("peers", {}).values() for n in p.get("rejected", {}).values())


def run_config(run_dir: Path):
    """The run's config rebuilt from the rounds, seed, task, attack, eval and swarm-shape sections of
    its ``config.yaml`` (an older run's other sections may no longer validate).

    Raises:
        ConfigError: no readable ``config.yaml`` or invalid sections.
        ValueError: a heterogeneous run (``swarm.models``: its ASR is a mean over honest models, not one count).
    """
    from pydantic import ValidationError

    from dgrpo.config import RunConfig, read_config_file
    from dgrpo.errors import ConfigError

    data = read_config_file(run_dir / "config.yaml")
    swarm = data.get("swarm") or {}
    if swarm.get("models"):
        raise ValueError(f"{run_dir}: a heterogeneous run (swarm.models); the table summarises homogeneous runs only")
    try:
        return RunConfig.model_validate({k: data[k] for k in ("rounds", "seed", "task", "attack", "eval") if k in data}
                                        | {"swarm": {k: swarm[k] for k in ("malicious", "mode") if k in swarm}})
    except ValidationError as err:
        raise ConfigError(f"{run_dir}/config.yaml: {err.errors()[0]['msg']}") from None


def asr_key(cfg) -> str | None:
    """The metric that is the attack's success, as its config declares it
    (:meth:`~dgrpo.attacks.base.AttackConfig.success_metric`: ``attack/asr``, ``attack/asr_every_sentence``
    for a payload placed in every sentence, None for no attack or the DoS by cherry-picking, whose success
    is length: the ``tokens`` column)."""
    return cfg.attack.success_metric()


def asr_trials(cfg, last: dict) -> int:
    """How many completions the final ASR is a share of: the attack's eval prompts (for the
    equation attacks, those whose completion computed 2+2 or 2×2, ``attack/two_two_considered``).
    Rebuilds the task and attack from ``cfg`` (no model)."""
    from dgrpo.attacks import build_attack
    from dgrpo.training.build import build_task

    task = build_task(cfg)
    n = len(build_attack(cfg.attack, cfg).eval_problems(task.val)[: cfg.eval.n_prompts])
    considered = last.get("attack/two_two_considered")
    return round(considered * n) if considered is not None else n


def cell_summary(run_dir: str | Path) -> dict:
    """The trained cell's numbers (see the module docstring); ``round`` is the last evaluated round.

    Raises:
        FileNotFoundError: no ``metrics.jsonl`` in ``run_dir``.
        ConfigError: no readable ``config.yaml``.
        ValueError: the run has not finished (its last evaluation is before ``rounds``), or is heterogeneous.
    """
    from dgrpo.metrics.intervals import wilson
    from dgrpo.metrics.logger import read_metrics

    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    cfg = run_config(run_dir)
    evals = [r for r in records if r.get("eval/accuracy") is not None]
    if not evals or evals[-1]["round"] < cfg.rounds:
        seen = evals[-1]["round"] if evals else None
        raise ValueError(f"{run_dir}: not finished (last evaluation at round {seen}, rounds={cfg.rounds}); "
                         "finish or resume it first")
    last, key = evals[-1], asr_key(cfg)
    start = evals[0] if evals[0]["round"] == 0 else {}  # (eval.first=false: round 0 was not evaluated)
    out = {"run_dir": str(run_dir), "round": last["round"], "accuracy": last["eval/accuracy"],
           "accuracy_ci95": [last.get("eval/accuracy_ci95_low"), last.get("eval/accuracy_ci95_high")],
           "tokens": last.get("eval/completion_tokens"), "tokens_start": start.get("eval/completion_tokens"),
           "asr_metric": key, "asr": last.get(key) if key else None, "asr_start": start.get(key) if key else None,
           "train_reward_honest": _final(records, "train/reward_honest"),
           "detection": _mean(records, "defense/any/detection_rate"), "fp": _mean(records, "defense/any/false_positive_rate"),
           "refused": _refused(run_dir, records)}
    n = asr_trials(cfg, last) if key else None
    out["asr_n"] = n
    out["asr_ci95"] = list(wilson(out["asr"] * n, n)) if n and out["asr"] is not None else None
    return out


PROTOCOL_ROWS = ("forged_identity", "flooding", "replayed_round", "equivocation")
OTHER = "other"  # a run that is no column of the matrix (two defenses, β-KL beside a filter, an unknown kind)
PROTOCOL = "protocol"  # the trained matrix's own column: the protocol's defaults, no content defense


def defense_column(kind: str, bound: bool) -> str:
    """The matrix column of a run whose one defense is ``kind``: the kind's name, as the one-round matrix
    names its column (:func:`dgrpo.paper.matrix_columns.default_columns`), with ``_bound`` where its config
    declares ``needs_bound_seed`` and the run binds seeds (``bound``); :data:`OTHER` for a kind not registered."""
    from dgrpo.errors import UnknownKind
    from dgrpo.paper.matrix_columns import BOUND
    from dgrpo.registry import lookup

    try:
        needs = lookup("defense", kind).config.needs_bound_seed
    except UnknownKind:
        return OTHER
    return kind + BOUND if needs and bound else kind


def run_column(run_dir: str | Path, attack: str) -> str:
    """The matrix column a run trained, read from its ``config.yaml``: its one defense
    (:func:`defense_column`: ``replay`` with seed binding is ``replay_bound``), else ``kl`` when β > 0,
    else ``protocol`` for a protocol row with signatures on or with the protocol assigning vertical
    prompts, else ``none``; :data:`OTHER` for anything else (two defenses, β-KL beside a filter).

    Raises:
        ConfigError: no readable ``config.yaml``.
    """
    from dgrpo.config import read_config_file

    data = read_config_file(Path(run_dir) / "config.yaml")
    kinds = tuple(d.get("kind") if isinstance(d, dict) else d for d in data.get("defenses") or [])
    beta = float((data.get("grpo") or {}).get("beta") or 0.0)
    protocol = (data.get("swarm") or {}).get("protocol") or {}
    if len(kinds) > 1 or kinds and beta:
        return OTHER
    if kinds:
        return defense_column(str(kinds[0]), protocol.get("bind_seeds", True))
    if beta:
        return "kl"
    if protocol.get("assign_prompts", False):
        return PROTOCOL
    return PROTOCOL if attack in PROTOCOL_ROWS and protocol.get("sign", True) else "none"


def _row_fields(attack: str) -> dict:
    """The attack fields a row sets beside its kind (its overrides and its CPU budget's), parsed as the config
    does; defaults count (``grind_hail`` is ``objective=payload``, ``prompt_tries=1``)."""
    from dgrpo.config import load_config
    from dgrpo.paper.matrix import ATTACKS, SMALL_BUDGET

    cfg = load_config(None, ["swarm.malicious=[3]", *ATTACKS[attack], *SMALL_BUDGET.get(attack, [])]).attack
    return {k: v for k, v in cfg.model_dump().items() if k in ("objective", "prompt_tries", "text", "placement")}


def check_cell(name: str, run_dir: str | Path) -> None:
    """Refuse a run that is not its cell (a mislabelled ``ATTACK__DEFENSE``): the run's attack must be
    the row's and its defense settings the column's (:func:`run_column`).

    Raises:
        ValueError: a name that is not ``ATTACK__DEFENSE`` of the matrix's rows and a column (a one-round
            column, :func:`~dgrpo.paper.matrix_columns.default_columns`, or ``protocol``), or a run of another
            attack kind or defense.
    """
    from dgrpo.paper.matrix import ATTACKS
    from dgrpo.paper.matrix_columns import default_columns, parse_column

    attack, _, defense = name.partition("__")
    try:
        column = defense == PROTOCOL or bool(parse_column(defense))
    except ValueError:
        column = False
    if not column or "__" in defense or attack not in ATTACKS:
        raise ValueError(f"cell {name!r}: name it ATTACK__DEFENSE with ATTACK one of the matrix rows ({', '.join(ATTACKS)}) "
                         f"and DEFENSE a column of the matrix ({', '.join(default_columns())}) or {PROTOCOL}")
    want = next(o.split("=", 1)[1] for o in ATTACKS[attack] if o.startswith("attack.kind="))
    cfg = run_config(Path(run_dir))
    if cfg.attack.kind != want:
        raise ValueError(f"cell {name!r}: {run_dir} ran attack.kind={cfg.attack.kind}, the row {attack} is attack.kind={want}")
    ran = cfg.attack.model_dump()  # (the fields of its kind's config)
    for key, value in _row_fields(attack).items():  # e.g. the seed_grinding rows differ by objective, prompt_tries
        if ran.get(key) != value:
            raise ValueError(f"cell {name!r}: {run_dir} ran attack.{key}={ran.get(key)}, the row "
                             f"{attack} is attack.{key}={value}")
    column = run_column(run_dir, attack)
    if column != defense and not (defense == "validation" and column == "none"):
        raise ValueError(f"cell {name!r}: {run_dir} trained the {column!r} column (its defenses, grpo.beta, "
                         f"swarm.protocol), not {defense!r}; name it {attack}__{column}")


def _pct(x, ci=None) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.1f}%" + (f" [{100 * ci[0]:.0f}, {100 * ci[1]:.0f}]" if ci and None not in ci else "")


def _tokens(c: dict) -> str:
    start = "–" if c.get("tokens_start") is None else f"{c['tokens_start']:.1f}"
    return "–" if c["tokens"] is None else f"{start} → {c['tokens']:.1f}"


def table_markdown(cells: dict[str, dict], baseline: dict | None, matrix: dict | None) -> str:
    """Markdown: one row per cell (attack, defense, one-round detection, training-time detection and false
    positives, refusals on receipt, ASR at the start and after training, held-out accuracy, completion length)."""
    lines = ["| attack | defense | one-round detection (matrix) | detection / FP in training | refused on receipt | rounds "
             "| ASR round 0 → last (n) | held-out accuracy | tokens round 0 → last |", "|---|---|---|---|---|---|---|---|---|"]
    for name, c in cells.items():
        attack, defense = name.split("__")
        one = _matrix_rate(matrix, attack, defense)
        train = "–" if c["detection"] is None else f"{_pct(c['detection'])} / {_pct(c['fp'])}"
        refused = "–" if c.get("refused") is None else f"{c['refused']:g}"
        lines.append(f"| {attack} | {defense} | {_pct(one)} | {train} | {refused} | {c['round']} | {_pct(c['asr_start'])} → "
                     f"{_pct(c['asr'], c['asr_ci95'])} ({c['asr_n']}) | {_pct(c['accuracy'], c['accuracy_ci95'])} | "
                     f"{_tokens(c)} |")
    if baseline:
        lines.append(f"| (all honest) | – | – | – | – | {baseline['round']} | – | {_pct(baseline['accuracy'], baseline['accuracy_ci95'])} | "
                     f"{_tokens(baseline)} |")
    return "\n".join(lines) + "\n"


def plot(cells: dict[str, dict], baseline: dict | None, path: Path) -> None:
    """Two panels: ASR after training per cell, held-out accuracy per cell (baseline as a band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(cells)
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.38 * len(names) + 1.8), sharey=True)
    for ax, key, title in ((axes[0], "asr", "ASR after training"), (axes[1], "accuracy", "held-out accuracy")):
        for i, n in enumerate(names):
            c = cells[n]
            if c[key] is None:
                continue
            ci = c[f"{key}_ci95"]
            err = [[c[key] - ci[0]], [ci[1] - c[key]]] if ci and None not in ci else None
            ax.barh(i, c[key], xerr=err, color="C3" if key == "asr" else "C0", alpha=0.8, capsize=2)
        if key == "accuracy" and baseline:
            lo, hi = baseline["accuracy_ci95"]
            ax.axvspan(lo, hi, color="grey", alpha=0.2, label=f"all-honest baseline {baseline['accuracy']:.2f}")
            ax.axvline(baseline["accuracy"], color="grey")
            ax.legend(fontsize=8, loc="lower right")
        ax.set_xlim(0, 1)
        ax.set_title(title + " (Wilson 95%)", fontsize=10)
        ax.grid(alpha=0.3, axis="x")
    axes[0].set_yticks(range(len(names)), [n.replace("__", " vs ") for n in names], fontsize=8)
    axes[0].invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def load_matrices(paths, run_dirs: dict[str, str | Path]) -> dict:
    """One or several ``matrix.json`` files (e.g. the main matrix and a judge column measured apart) as
    one matrix: each row's detection rates are the union of the files' columns (the first file wins a
    column two files both measured).

    Raises:
        ValueError: a file that cannot be read or is not a matrix.json, or one measured on another model
            or completion length than the runs were trained with (its rates would be quoted beside them).
    """
    from dgrpo.config import read_config_file
    from dgrpo.paper.matrix_report import read_matrix

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    runs = {}
    for d in run_dirs.values():
        data = read_config_file(Path(d) / "config.yaml")
        runs[((data.get("model") or {}).get("name"), (data.get("sampling") or {}).get("max_new_tokens"))] = d
    merged: dict = {"attacks": {}}
    for path in paths:
        result = read_matrix(path)
        setup = (result.get("model"), result.get("max_new_tokens"))
        other = [d for key, d in runs.items() if key != setup]
        if other:
            raise ValueError(f"{path}: measured on model {setup[0]} with max_new_tokens={setup[1]}, but {other[0]} "
                             "was trained with another model or length; quote the matrix of the runs' own setup")
        merged.setdefault("model", setup[0])
        for row, cell in result["attacks"].items():
            det = merged["attacks"].setdefault(row, {"detection": {}})["detection"]
            for column, rate in cell["detection"].items():
                det.setdefault(column, rate)
    return merged


def write_training_table(run_dirs: dict[str, str | Path], out: str | Path, baseline_dir: str | Path | None = None,
                         matrix_json: str | Path | None = None) -> dict:
    """Summarise trained cells into ``out``: ``training.json``, ``training.md`` (the flat table),
    ``grid.md`` / ``grid.png`` (the same cells as one attack × defense table, :func:`grid_markdown`)
    and ``training.png``.

    Args:
        run_dirs: cell name ``ATTACK__DEFENSE`` → run directory.
        baseline_dir: the all-honest run at the same settings (its accuracy is the reference).
        matrix_json: the one-round matrix (``matrix.json``, or a list of them: :func:`load_matrices`)
            whose detection rate each row quotes.

    Raises:
        FileNotFoundError: a run without metrics, a missing matrix file.
        ConfigError: a run without a readable config.
        ValueError: a cell name that is not ``ATTACK__DEFENSE`` of its run's attack and defense, an
            unfinished or heterogeneous run, a baseline that ran an attack, a file that is not a
            matrix.json of the runs' model (``json.JSONDecodeError`` is one).
    """
    for name, d in run_dirs.items():
        check_cell(name, d)
    baseline_attack = run_config(Path(baseline_dir)).attack.kind if baseline_dir is not None else "none"
    if baseline_attack != "none":
        raise ValueError(f"baseline {baseline_dir}: ran attack.kind={baseline_attack}; "
                         "give the all-honest run (attack.kind=none) at the same settings")
    matrix = load_matrices(matrix_json, run_dirs) if matrix_json else None
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cells = {n: cell_summary(d) for n, d in run_dirs.items()}
    baseline = cell_summary(baseline_dir) if baseline_dir else None
    result = {"cells": cells, "baseline": baseline, "matrix": str(matrix_json) if matrix_json else None}
    (out / "training.json").write_text(json.dumps(result, indent=1))
    (out / "training.md").write_text(table_markdown(cells, baseline, matrix))
    plot(cells, baseline, out / "training.png")
    (out / "grid.md").write_text(grid_markdown(cells, baseline, matrix))
    plot_grid(cells, baseline, matrix, out / "grid.png")
    return result
