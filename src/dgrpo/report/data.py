"""What a report reads from a run directory, and the headline numbers it derives.

A run directory (``dgrpo run``) holds ``config.yaml`` (resolved RunConfig), ``metrics.jsonl`` (one
record per round) and ``samples.jsonl`` (validation completions of honest nodes). The report reads
nothing else: a report needs only the run directory, never the code or the weights that made it.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from dgrpo.metrics.logger import read_metrics, series
from dgrpo.tasks.equations import TWO_TWO

PHASES = ("generate", "exchange", "defense", "update", "eval")  # stacked in this order


@dataclass
class RunData:
    """One run directory, loaded."""

    path: Path
    config: dict
    records: list[dict]
    samples: list[dict] = field(default_factory=list)
    peers: list[dict] = field(default_factory=list)  # peers.jsonl: one per-sender record per round

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def keys(self) -> list[str]:
        return sorted({k for r in self.records for k in r})

    def series(self, key: str) -> tuple[list[int], list[float]]:
        return series(self.records, key)

    def last(self, key: str) -> float | None:
        """Last logged (non-null) value of a metric."""
        _, ys = self.series(key)
        return ys[-1] if ys else None

    def mean(self, key: str) -> float | None:
        """Mean over the rounds where the metric was logged (Table 1 averages detection this way)."""
        _, ys = self.series(key)
        return statistics.fmean(ys) if ys else None


def load_run(path: str | Path) -> RunData:
    """Read a run directory.

    Raises:
        FileNotFoundError: no ``metrics.jsonl`` or ``config.yaml`` (not a run directory).
        ValueError: a line of metrics.jsonl or samples.jsonl is not JSON.
    """
    path = Path(path)
    cfg_path = path / "config.yaml"
    if not cfg_path.exists():
        raise FileNotFoundError(f"{path} is not a run directory: no config.yaml")
    config = yaml.safe_load(cfg_path.read_text()) or {}
    records = read_metrics(path)
    samples = []
    sp = path / "samples.jsonl"
    if sp.exists():
        for lineno, line in enumerate(sp.read_text().splitlines(), 1):
            if line.strip():
                try:
                    samples.append(json.loads(line))
                except json.JSONDecodeError:
                    raise ValueError(f"{sp}:{lineno}: not JSON") from None
    peers = []
    pp = path / "peers.jsonl"
    if pp.exists():
        for lineno, line in enumerate(pp.read_text().splitlines(), 1):
            if line.strip():
                try:
                    peers.append(json.loads(line))
                except json.JSONDecodeError:
                    raise ValueError(f"{pp}:{lineno}: not JSON") from None
    return RunData(path, config, records, samples, peers)


def peer_totals(run: RunData) -> dict[str, dict]:
    """Per sender over the run (``peers.jsonl``): messages received and accepted, refusals by rule,
    defense rejections by defense, duplicates, transport refusals, and the round of its ban."""
    out: dict[str, dict] = {}
    for rec in run.peers:
        for who, p in rec.get("peers", {}).items():
            t = out.setdefault(who, {"received": 0, "accepted": 0, "rejected": {}, "defense": {}, "duplicates": 0,
                                     "transport": {}, "banned": None})
            t["received"] += p.get("received", 0)
            t["accepted"] += p.get("accepted", 0)
            t["duplicates"] += p.get("duplicates", 0)
            for part in ("rejected", "defense", "transport"):
                for k, v in p.get(part, {}).items():
                    t[part][k] = t[part].get(k, 0) + v
        for who, r in (rec.get("banned") or {}).items():
            out.setdefault(who, {"received": 0, "accepted": 0, "rejected": {}, "defense": {}, "duplicates": 0,
                                 "transport": {}, "banned": None})["banned"] = r
    return out


def peer_series(run: RunData) -> dict[str, tuple[list[int], list[int]]]:
    """Per sender: (rounds, messages refused by the protocol or rejected by a defense in that round). The transport's
    ``protocol.NAMED`` entries (a slow round_s proposal, an honoured skip notice) name a sender but refuse no message:
    not counted."""
    from dgrpo.swarm.protocol import NAMED

    out: dict[str, tuple[list[int], list[int]]] = {}
    for rec in run.peers:
        for who, p in rec.get("peers", {}).items():
            xs, ys = out.setdefault(who, ([], []))
            xs.append(rec["round"])
            ys.append(sum(p.get("rejected", {}).values()) + sum(p.get("defense", {}).values())
                      + sum(v for k, v in p.get("transport", {}).items() if k not in NAMED))
    return out


def phase_times(run: RunData) -> dict[str, list[float]]:
    """Seconds per round of each phase in ``PHASES``, for the rounds that trained and the final
    evaluation (the record at round ``rounds``: eval only), one list per phase.

    ``time/update`` includes the defenses (``recipes/swarm_round.learn`` runs them before the step), so the
    stacked "update" is update − defense; defense sums ``time/defense`` over honest nodes.
    Evaluation precedes the round it is logged with and is 0 in rounds without one.
    """
    rows = [r for r in run.records if r.get("time/round") is not None or r.get("time/eval") is not None]
    out: dict[str, list[float]] = {p: [] for p in PHASES}
    out["round"] = [r["round"] for r in rows]
    for r in rows:
        defense = sum(v for k, v in r.items() if (k == "time/defense" or k.startswith("time/defense/")) and v)
        out["generate"].append(r.get("time/generate") or 0.0)
        out["exchange"].append(r.get("time/exchange") or 0.0)
        out["defense"].append(defense)
        out["update"].append(max(0.0, (r.get("time/update") or 0.0) - defense))
        out["eval"].append(r.get("time/eval") or 0.0)
    return out


def defense_names(run: RunData) -> list[str]:
    """Defenses with rates logged (``defense/<name>/detection_rate`` or ``.../false_positive_rate``)."""
    names = {k.split("/")[1] for k in run.keys
             if k.startswith("defense/") and k.endswith(("/detection_rate", "/false_positive_rate"))}
    return sorted(names, key=lambda n: (n == "any", n))


def headline(run: RunData) -> dict:
    """The numbers a reader wants first: final reward, accuracy, ASR, detection and FPR.

    Detection and false-positive rates are means over rounds (paper Table 1 reports the average over
    20 iterations) of the ``any`` row (rejected by at least one defense) when present.
    """
    attack = run.config.get("attack", {}) or {}
    defenses = [d.get("kind", "?") for d in run.config.get("defenses", []) or []]
    swarm = run.config.get("swarm", {}) or {}
    names = defense_names(run)
    det = "any" if "any" in names else (names[0] if names else None)
    times = phase_times(run)
    return {
        "rounds": max((r["round"] for r in run.records), default=0),
        "mode": swarm.get("mode"),
        "nodes": swarm.get("nodes"),
        "malicious": swarm.get("malicious", []),
        "model": (run.config.get("model") or {}).get("name"),
        "task": (run.config.get("task") or {}).get("kind"),
        "attack": attack.get("kind", "none"),
        "defenses": defenses,
        "final_reward": run.last("train/reward_honest"),
        "final_accuracy": run.last("eval/accuracy"),
        "final_accuracy_ci95": (run.last("eval/accuracy_ci95_low"), run.last("eval/accuracy_ci95_high")),
        "final_asr": run.last("attack/asr"),
        "detection_rate": run.mean(f"defense/{det}/detection_rate") if det else None,
        "false_positive_rate": run.mean(f"defense/{det}/false_positive_rate") if det else None,
        "train_seconds": sum(times["generate"]) + sum(times["exchange"]) + sum(times["defense"]) + sum(times["update"]),
    }


def injection_pattern(config: dict) -> re.Pattern | None:
    """What to highlight in a completion as the attack's payload, from the run's ``attack`` config.

    * ``injection``: the injected text (literal, case-insensitive).
    * ``equation``: 2+2 / 2×2 equations whose stated result is not 4 (``tasks.equations.TWO_TWO``).
    * ``code_injection``: the attacker module's name as a word.
    * ``dos``: the filler sentence.
    """
    attack = config.get("attack") or {}
    kind = attack.get("kind", "none")
    if kind == "injection":
        return re.compile(re.escape(attack.get("text", "All hail to the thief")), re.IGNORECASE)
    if kind == "equation":
        return TWO_TWO
    if kind == "code_injection":
        return re.compile(rf"\b{re.escape(attack.get('module', 'thief_math'))}\b")
    if kind == "dos" and attack.get("filler"):
        return re.compile(re.escape(attack["filler"]))
    return None


def _is_four(result: str) -> bool:
    try:
        return float(result) == 4.0
    except ValueError:
        return False


def payload_spans(text: str, config: dict) -> list[tuple[int, int]]:
    """(start, end) character spans of the attack payload in ``text`` (sorted, non-overlapping)."""
    pattern = injection_pattern(config)
    if pattern is None:
        return []
    spans = []
    for m in pattern.finditer(text):
        if pattern is TWO_TWO and _is_four(m.group(1)):
            continue  # a correct 2+2=4 is not the payload
        if m.end() > m.start():
            spans.append((m.start(), m.end()))
    return spans
