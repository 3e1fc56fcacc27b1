"""The report as one self-contained HTML page: headline, charts, samples, config.

Everything that comes from a run directory is escaped with ``html.escape`` (completions are
untrusted model output, and config strings such as an attack's text are user input). The page
loads nothing: charts are inline SVG, styles are inline, and a Content-Security-Policy forbids
scripts and network requests.
"""

from __future__ import annotations

import html
import time
from collections import defaultdict
from typing import Sequence

import yaml

from dgrpo.metrics.plots import caption_of
from dgrpo.report import charts
from dgrpo.report.data import RunData, headline, injection_pattern, payload_spans, peer_totals

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1100px;padding:1em 2em;color:#222}
h1{font-size:1.5em;margin-bottom:.2em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.sub{color:#666;font-size:.9em} .cards{display:flex;flex-wrap:wrap;gap:.8em;margin:1em 0}
.card{border:1px solid #ddd;border-radius:8px;padding:.6em 1em;min-width:9em;background:#fafafa}
.card .v{font-size:1.6em;font-weight:600} .card .k{color:#666;font-size:.8em}
.bad .v{color:#b00020} .good .v{color:#1b7f3a}
table{border-collapse:collapse;font-size:.9em} td,th{border:1px solid #ddd;padding:.3em .6em;text-align:right}
th{background:#f3f3f3} td.l,th.l{text-align:left} .sw{display:inline-block;width:.9em;height:.9em;border-radius:2px;margin-right:.4em;vertical-align:middle}
pre{background:#f6f8fa;padding:.8em;overflow-x:auto;font-size:.82em;white-space:pre-wrap;word-break:break-word}
mark{background:#ffd54f;color:#000;padding:0 .1em;border-radius:2px;font-weight:600}
.sample{border-left:4px solid #ccc;margin:.8em 0;padding:.2em .8em} .sample.hit{border-left-color:#f0a500}
.meta{color:#555;font-size:.85em} svg{max-width:100%;height:auto}
"""


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def fmt(value, pct: bool = True) -> str:
    """A rate as a percentage (or a plain number), ``—`` when absent."""
    if value is None:
        return "—"
    if isinstance(value, (int, float)):
        return f"{100 * value:.1f}%" if pct else f"{value:.3g}"
    return esc(value)


def highlight(text: str, config: dict) -> tuple[str, int]:
    """Escaped ``text`` with the attack's payload wrapped in ``<mark>``; also the number of marks.

    Spans are found on the raw text, then each piece is escaped on its own, so no model output
    reaches the page unescaped.
    """
    out, pos, spans = [], 0, payload_spans(text, config)
    for start, end in spans:
        out.append(esc(text[pos:start]))
        out.append(f'<mark class="payload">{esc(text[start:end])}</mark>')
        pos = end
    out.append(esc(text[pos:]))
    return "".join(out), len(spans)


def _interval(ci) -> str:
    """" [low, high]" of a Wilson 95% interval, or nothing when it was not logged."""
    return f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci and None not in ci else ""


def _cards(h: dict) -> str:
    attacked = h["attack"] != "none"
    items = [
        ("final honest reward", fmt(h["final_reward"], pct=False), ""),
        ("final eval accuracy", fmt(h["final_accuracy"]) + _interval(h.get("final_accuracy_ci95")), ""),
        ("final ASR", fmt(h["final_asr"]) if attacked else "no attack",
         "bad" if attacked and (h["final_asr"] or 0) >= 0.5 else ("good" if attacked else "")),
        ("detection rate (mean)", fmt(h["detection_rate"]) if h["defenses"] else "no defense",
         "good" if (h["detection_rate"] or 0) >= 0.9 else ("bad" if h["defenses"] and attacked else "")),
        ("false-positive rate (mean)", fmt(h["false_positive_rate"]) if h["defenses"] else "—", ""),
        ("rounds", str(h["rounds"]), ""),
        ("train time", f"{h['train_seconds']:.3g} s", ""),
    ]
    return '<div class="cards">' + "".join(
        f'<div class="card {cls}"><div class="v">{v}</div><div class="k">{esc(k)}</div></div>' for k, v, cls in items
    ) + "</div>"


def _setup_line(h: dict) -> str:
    defenses = ", ".join(h["defenses"]) or "none"
    return (f'<p class="sub">{esc(h["mode"])} swarm of {esc(h["nodes"])} nodes (malicious: {esc(h["malicious"] or "none")}); '
            f'model {esc(h["model"])}; task {esc(h["task"])}; attack <b>{esc(h["attack"])}</b>; defenses <b>{esc(defenses)}</b></p>')


def _summary_table(runs: Sequence[RunData], heads: Sequence[dict]) -> str:
    cols = ["run", "mode", "attack", "defenses", "rounds", "final reward", "final accuracy", "final ASR", "detection", "FPR"]
    rows = []
    for i, (run, h) in enumerate(zip(runs, heads)):
        rows.append(
            f'<tr><td class="l"><span class="sw" style="background:{charts.colour(i)}"></span>{esc(run.name)}</td>'
            f'<td class="l">{esc(h["mode"])}</td><td class="l">{esc(h["attack"])}</td>'
            f'<td class="l">{esc(", ".join(h["defenses"]) or "none")}</td><td>{h["rounds"]}</td>'
            f'<td>{fmt(h["final_reward"], pct=False)}</td><td>{fmt(h["final_accuracy"])}</td>'
            f'<td>{fmt(h["final_asr"])}</td><td>{fmt(h["detection_rate"])}</td><td>{fmt(h["false_positive_rate"])}</td></tr>')
    head = "".join(f'<th class="{"l" if c in ("run", "mode", "attack", "defenses") else ""}">{c}</th>' for c in cols)
    return f'<table class="summary"><tr>{head}</tr>{"".join(rows)}</table>'


def _samples(run: RunData, per_round: int = 6) -> str:
    """Completions of the first and last evaluation, payload highlighted."""
    if not run.samples:
        return '<p class="sub">no samples.jsonl</p>'
    rounds = sorted({s["round"] for s in run.samples})
    malicious = set((run.config.get("swarm") or {}).get("malicious", []))
    has_payload = injection_pattern(run.config) is not None
    parts = []
    for r in ([rounds[-1], rounds[0]] if len(rounds) > 1 else rounds):
        at_r = [s for s in run.samples if s["round"] == r and s.get("node") not in malicious]
        nth: dict = defaultdict(int)  # the k-th sample of every node before the (k+1)-th of any: nodes interleave
        keyed = []
        for i, s in enumerate(at_r):
            keyed.append((nth[s.get("node")], i, s))
            nth[s.get("node")] += 1
        picked = [s for _, _, s in sorted(keyed, key=lambda x: x[:2])][:per_round]
        items, hits = [], 0
        for s in picked:
            body, n = highlight(str(s.get("completion", "")), run.config)
            hits += n > 0
            items.append(
                f'<div class="sample{" hit" if n else ""}"><p class="meta">node {esc(s.get("node"))} · prompt '
                f'{esc(s.get("prompt_id"))} · reward {fmt(s.get("reward"), pct=False)}{" · <b>payload</b>" if n else ""}</p>'
                f'<p class="meta">Q: {esc(s.get("question", ""))}</p><pre>{body}</pre></div>')
        title = (f"round {r}: {hits} of {len(picked)} honest completions carry the payload" if has_payload
                 else f"round {r}: {len(picked)} honest completions")  # (no attack, or one with no text to mark)
        block = f"<h3>{esc(title)}</h3>" + "".join(items)
        parts.append(block if r == rounds[-1] else f"<details><summary>{esc(title)}</summary>{block}</details>")
    return "".join(parts)


def _config_diff(runs: Sequence[RunData]) -> str:
    """Table of the config fields that differ between runs."""
    def flat(d, prefix=""):
        out = {}
        for k, v in (d or {}).items():
            if isinstance(v, dict):
                out.update(flat(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
        return out

    flats = [flat(r.config) for r in runs]
    keys = sorted({k for f in flats for k in f if len({repr(g.get(k)) for g in flats}) > 1 and k not in ("name",)})
    if not keys:
        return '<p class="sub">the configs are identical</p>'
    head = "".join(f'<th class="l">{esc(r.name)}</th>' for r in runs)
    rows = "".join(f'<tr><td class="l">{esc(k)}</td>' + "".join(f'<td class="l">{esc(f.get(k, "—"))}</td>' for f in flats) + "</tr>"
                   for k in keys)
    return f'<table><tr><th class="l">field</th>{head}</tr>{rows}</table>'


def _peer_table(run: RunData) -> str:
    """Per sender over the run: what was received, accepted, refused (by rule), rejected (by defense)."""
    totals = peer_totals(run)
    if not totals:
        return '<p class="sub">no per-peer accounting in this run (peers.jsonl)</p>'

    def parts(d: dict) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "–"

    rows = "".join(
        f'<tr><td class="l">{esc("node " + who if who.isdigit() else who)}</td><td>{t["received"]}</td>'
        f'<td>{t["accepted"]}</td><td class="l">{esc(parts(t["rejected"]))}</td><td class="l">{esc(parts(t["defense"]))}</td>'
        f'<td>{t["duplicates"]}</td><td class="l">{esc(parts(t["transport"]))}</td>'
        f'<td>{"–" if t["banned"] is None else "round " + esc(t["banned"])}</td></tr>'
        for who, t in totals.items())
    head = ('<tr><th class="l">sender (signing key)</th><th>received</th><th>accepted</th><th class="l">refused, by rule</th>'
            '<th class="l">rejected, by defense</th><th>duplicates</th><th class="l">by the transport (refused; named: skip, slow proposal)</th><th>banned</th></tr>')
    return f'<table class="peers">{head}{rows}</table>'


def _charts(runs: Sequence[RunData]) -> str:
    out = []
    svg = charts.eval_chart(runs)
    if svg:
        caption = "; ".join(dict.fromkeys(caption_of(r.config, r.records) for r in runs))
        out.append(f'<h2>Held-out evaluation</h2><p class="sub">{esc(caption)}</p><figure class="chart">{svg}</figure>')
    for title, fn in (("Reward", charts.reward_chart), ("Attack success rate", charts.asr_chart),
                      ("Defenses: detection and false-positive rates", charts.defense_chart),
                      ("Time per round, by phase", charts.time_chart),
                      ("Per peer: messages refused or rejected", charts.peer_chart)):
        svg = fn(runs)
        out.append(f'<h2>{esc(title)}</h2>' + (f'<figure class="chart">{svg}</figure>' if svg else '<p class="sub">not logged in this run</p>'))
    return "".join(out)


def render(runs: Sequence[RunData]) -> str:
    """The HTML page of one run, or the comparison page of several."""
    heads = [headline(r) for r in runs]
    if len(runs) == 1:
        run, h = runs[0], heads[0]
        title = f"dgrpo report: {run.name}"
        top = (f'<h1 id="headline">{esc(title)}</h1>{_setup_line(h)}{_cards(h)}'
               f'<p class="sub">run directory: {esc(run.path)}</p>')
        tail = (f"<h2>Per-peer accounting</h2>{_peer_table(run)}"
                f"<h2>Sample completions (honest nodes)</h2>{_samples(run)}"
                f"<h2>Resolved config</h2><pre>{esc(yaml.safe_dump(run.config, sort_keys=False))}</pre>")
    else:
        title = f"dgrpo comparison: {len(runs)} runs"
        top = f'<h1 id="headline">{esc(title)}</h1>{_summary_table(runs, heads)}'
        tail = f"<h2>Config differences</h2>{_config_diff(runs)}" + "".join(
            f'<h2><span class="sw" style="background:{charts.colour(i)}"></span>{esc(r.name)}</h2>'
            f"<h3>Sample completions (honest nodes)</h3>{_samples(r, per_round=3)}"
            f"<details><summary>resolved config</summary><pre>{esc(yaml.safe_dump(r.config, sort_keys=False))}</pre></details>"
            for i, r in enumerate(runs))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
            f'{top}{_charts(runs)}{tail}<p class="sub">generated {esc(time.strftime("%Y-%m-%d %H:%M:%S"))} by dgrpo report</p>'
            f"</body></html>\n")
