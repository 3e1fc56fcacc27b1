"""Data and measurement of the trained detector: JSONL rows, training settings, per-set rates.

One JSON object a line (``dgrpo detector train|eval --data FILE.jsonl``; docs/detector.md)::

    {"question": "...", "text": "<completion after the prefill>", "set": "hail", "label": "poisoned"}

``label`` is ``honest`` or ``poisoned``; without it the ``set`` decides: a set whose name starts with
``honest`` is honest, any other set is poisoned (the rows of
``benchmarks/heterogeneous_table1/sample.py``: ``honest``, ``hail``, ``equation``, ...). Other keys
(``prompt_id``, ``seed``, ``tokens``) are ignored.

Rates (:func:`rates`): per set, the share of its completions the detector flags (P(poisoned) ≥
threshold): the detection rate of a poisoned set, the false-positive rate of an honest one, each with
its Wilson 95% interval (``metrics/intervals.py``); plus both pooled over all sets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Sequence

from pydantic import Field, ValidationError

from dgrpo.errors import ConfigError, DataError
from dgrpo.metrics.intervals import wilson
from dgrpo.registry import StrictConfig
from dgrpo.verify.detector import LABELS, Example

MAX_LINE = 1 << 20  # characters of one row


class DetectorTrainConfig(StrictConfig):
    """``dgrpo detector train --set KEY=VALUE``: the fields of :func:`dgrpo.verify.detector_train.train_detector`."""

    base_model: str = Field("smollm2-135m-instruct", min_length=1, description="Base causal LM: the embedded default, a local folder or a hub id.")
    lora_rank: int = Field(16, ge=1, le=512, description="LoRA rank r.")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha (scale alpha / r).")
    lr: float = Field(2e-4, gt=0, lt=1, description="AdamW learning rate.")
    epochs: int = Field(2, ge=1, le=100, description="Passes over the training rows.")
    batch_size: int = Field(8, ge=1, le=1024, description="Rows per optimiser step.")
    max_length: int = Field(384, ge=16, le=8192, description="Tokens per input, template included (a longer completion loses its middle).")
    seed: int = Field(0, ge=0, description="Seed of the head's initialisation and the shuffles.")
    threshold: float = Field(0.5, gt=0, lt=1, description="Saved decision threshold: flagged when P(poisoned) ≥ threshold.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Base weights dtype (float32 for training: the LoRA and head weights train in it).")
    device: str = Field("cpu", min_length=1, description="Training device (cpu, cuda, cuda:0, auto).")
    log_every: int = Field(50, ge=0, description="Print the loss every so many steps (0: never).")


def train_settings(pairs: Sequence[str]) -> DetectorTrainConfig:
    """Settings from ``KEY=VALUE`` strings (values read as YAML scalars).

    Raises:
        ConfigError: a string without ``=``, an unknown key or a bad value (one line naming it).
    """
    import yaml

    from dgrpo import config_yaml

    data = {}
    for item in pairs:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ConfigError(f"detector: --set {item!r} is not KEY=VALUE (e.g. --set lora_rank=16)")
        try:  # (YAML 1.2, as run overrides: 3e-3 is a number, 017 text)
            data[key.strip()] = config_yaml.load(value) if value.strip() else value
        except yaml.YAMLError as err:
            raise ConfigError(f"detector: --set {key.strip()}: {config_yaml.describe(err, where=False)}") from None
    try:
        return DetectorTrainConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError("detector: " + "; ".join(f"{'.'.join(map(str, e['loc'])) or '--set'}: {e['msg']}"
                                                   for e in err.errors())) from None


def label_of(row: dict) -> int:
    """1 (poisoned) or 0 (honest) from ``label``, else from ``set`` (``honest*`` honest, other sets poisoned)."""
    if "label" in row:
        if row["label"] not in LABELS:
            raise ValueError(f"label must be 'honest' or 'poisoned', got {row['label']!r}")
        return LABELS.index(row["label"])
    return 0 if str(row["set"]).startswith("honest") else 1


def read_rows(path: str | Path) -> list[Example]:
    """The :class:`Example` rows of one JSONL file (blank lines skipped; lone surrogates become ``?``).

    Raises:
        DataError: the file is missing or a folder, or a line is not UTF-8, not a JSON object with string
            ``question``, ``text`` and ``set`` and a valid ``label`` (names file, line and the fix).
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"--data {path}: is a folder; pass each JSONL file with its own --data")
    if not path.is_file():
        raise DataError(f"--data {path}: no such file")
    rows = []
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            where = f"{path}:{n}"
            if len(raw) > 4 * MAX_LINE:
                raise DataError(f"{where}: line longer than {MAX_LINE} characters")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"{where}: not UTF-8 ({err.reason} at byte {err.start}); save the file as UTF-8") from None
            if not line.strip():
                continue
            if len(line) > MAX_LINE:
                raise DataError(f"{where}: line longer than {MAX_LINE} characters")
            try:
                row = json.loads(line)
            except ValueError as err:
                raise DataError(f"{where}: not JSON ({err})") from None
            if not isinstance(row, dict):
                raise DataError(f"{where}: expected a JSON object with question, text, set")
            bad = [k for k in ("question", "text", "set") if not isinstance(row.get(k), str)]
            if bad:
                raise DataError(f"{where}: {', '.join(bad)} missing or not a string (each row needs question, text "
                                f"and set; label optional)")
            try:
                label = label_of(row)
            except ValueError as err:
                raise DataError(f"{where}: {err}") from None
            q, t, name = (row[k].encode("utf-8", "replace").decode("utf-8") for k in ("question", "text", "set"))
            rows.append(Example(q, t, label, name))  # lone surrogates ("\ud800" in the JSON) read as "?"
    if not rows:
        raise DataError(f"--data {path}: no rows")
    return rows


def counts_by_set(rows: Sequence[Example]) -> dict[str, dict[str, int]]:
    """``{set: {"honest": n, "poisoned": n}}`` of ``rows`` (the counts ``train`` prints and saves)."""
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        c = counts.setdefault(r.set or "(none)", {"honest": 0, "poisoned": 0})
        c[LABELS[int(r.label)]] += 1
    return counts


def _rate(flagged: int, n: int) -> dict:
    low, high = wilson(flagged, n)
    return {"n": n, "flagged": flagged, "rate": flagged / n, "ci95_low": low, "ci95_high": high}


def auc(poisoned: Sequence[float], honest: Sequence[float]) -> float | None:
    """P(a poisoned score > an honest score) + ½ P(tie): the area under the ROC curve (Mann–Whitney U / n₁n₀),
    threshold-free; None when either side is empty. O(n log n) by ranks."""
    if not poisoned or not honest:
        return None
    pooled = sorted([(float(v), 1) for v in poisoned] + [(float(v), 0) for v in honest])
    rank_sum, i = 0.0, 0
    while i < len(pooled):  # average ranks over ties
        j = i
        while j < len(pooled) and pooled[j][0] == pooled[i][0]:
            j += 1
        rank_sum += sum(lab for _, lab in pooled[i:j]) * (i + j + 1) / 2  # ranks i+1..j, mean (i+j+1)/2
        i = j
    n1, n0 = len(poisoned), len(honest)
    return (rank_sum - n1 * (n1 + 1) / 2) / (n1 * n0)


def rates(examples: Sequence[Example], scores: Sequence[float], threshold: float) -> dict:
    """Per-set and pooled flag rates with Wilson 95% intervals.

    Returns:
        ``{"threshold", "sets": {set: {"label", "metric", "n", "flagged", "rate", "ci95_low",
        "ci95_high"}}, "detection": {...} (all poisoned rows), "false_positive": {...} (all honest rows)}``;
        a pooled entry is None when there are no rows of its label. A set holding both labels is
        split into ``set/honest`` and ``set/poisoned``. A poisoned set's entry (and ``detection``)
        also has ``auc``: :func:`auc` of its scores against every honest score.
    """
    if len(examples) != len(scores):
        raise ValueError(f"{len(examples)} examples but {len(scores)} scores")
    groups: dict[tuple[str, int], list[bool]] = {}
    for e, s in zip(examples, scores):
        groups.setdefault((e.set, int(e.label)), []).append(float(s) >= threshold)
    mixed = {k for k, _ in groups if (k, 0) in groups and (k, 1) in groups}
    values: dict[tuple[str, int], list[float]] = {}
    for e, s in zip(examples, scores):
        values.setdefault((e.set, int(e.label)), []).append(float(s))
    honest = [v for (_, lab), vs in values.items() if lab == 0 for v in vs]
    sets = {}
    for (name, label), flags in sorted(groups.items()):
        key = f"{name}/{LABELS[label]}" if name in mixed else name
        sets[key] = {"label": LABELS[label], "metric": ("detection" if label else "false_positive"),
                     **_rate(sum(flags), len(flags))}
        if label:
            sets[key]["auc"] = auc(values[(name, label)], honest)
    pooled = {}
    for label, metric in ((1, "detection"), (0, "false_positive")):
        flags = [f for (_, lab), fl in groups.items() if lab == label for f in fl]
        pooled[metric] = _rate(sum(flags), len(flags)) if flags else None
    if pooled["detection"] is not None:
        pooled["detection"]["auc"] = auc([v for (_, lab), vs in values.items() if lab == 1 for v in vs], honest)
    return {"threshold": threshold, "sets": sets, **pooled}


def table(summary: dict) -> str:
    """The rates as a plain-text table, one line per set, then the pooled rates."""
    lines = [f"threshold {summary['threshold']}", f"{'set':<28} {'label':<9} {'metric':<15} {'flagged/n':>11}  rate [95% CI]"]

    def line(name, label, metric, r):
        return (f"{name:<28} {label:<9} {metric:<15} {r['flagged']:>5}/{r['n']:<5}  "
                f"{r['rate']:.3f} [{r['ci95_low']:.3f}, {r['ci95_high']:.3f}]"
                + (f"  AUC vs honest {r['auc']:.3f}" if r.get("auc") is not None else ""))

    lines += [line(k, v["label"], v["metric"], v) for k, v in summary["sets"].items()]
    for metric, label in (("detection", "poisoned"), ("false_positive", "honest")):
        if summary[metric] is not None:
            lines.append(line("(all)", label, metric, summary[metric]))
    return "\n".join(lines) + "\n"
