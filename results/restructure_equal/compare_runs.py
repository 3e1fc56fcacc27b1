"""Compare two folders of runs.sh's run directories file by file: every record of every metrics.jsonl,
peers.jsonl and samples.jsonl, summary.json / groups.json / bans.json and the evaluation's reference
completions (eval_reference/*.json: ids and log-probabilities), exactly, ``time/*`` keys (and a record's
seconds) left out. A run in one folder only is a difference. Prints each difference, then a count per run.

``--rounds N``: only the records of rounds 0..N-1 of each .jsonl file (runs cut short: the rounds both
finished), and no summary/groups/bans file (written at the end)."""
import json
import sys
from pathlib import Path

PATTERNS = ("metrics.jsonl", "peers.jsonl", "samples.jsonl", "summary.json", "groups.json", "bans.json",
            "eval_reference/*.json")


def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if not k.startswith("time/") and k not in ("seconds", "time")}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return "NaN" if isinstance(x, float) and x != x else x  # (NaN != NaN: equal NaNs compare equal here)


def collect(run: Path, rounds: int | None = None) -> dict:
    out = {}
    for pattern in PATTERNS:
        for f in sorted(run.rglob(pattern)):
            text = f.read_text()
            if f.suffix == ".jsonl":
                rows = [json.loads(line) for line in text.splitlines() if line.strip()]
                rows = rows if rounds is None else [r for r in rows if r["round"] < rounds]
            elif rounds is not None and f.name in ("summary.json", "groups.json", "bans.json"):
                continue
            else:
                rows = json.loads(text)
            out[str(f.relative_to(run))] = strip(rows)
    return out


def count(x) -> int:
    return sum(count(v) for v in x.values()) if isinstance(x, dict) else sum(count(v) for v in x) if isinstance(x, list) else 1


args = sys.argv[1:]
rounds = int(args.pop(args.index("--rounds") + 1)) if "--rounds" in args else None
args = [a for a in args if a != "--rounds"]
only = set(args.pop(args.index("--runs") + 1).split(",")) if "--runs" in args else None  # compare these runs only
args = [a for a in args if a != "--runs"]
before, after = Path(args[0]), Path(args[1])
total = 0
for run in sorted({p.name for d in (before, after) for p in d.iterdir() if p.is_dir()} & (only or {p.name for d in (before, after) for p in d.iterdir()})):
    a, b = collect(before / run, rounds), collect(after / run, rounds)
    diff = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    for k in diff:
        print("DIFFERS", run, k)
    n = count(a)
    total += len(diff)
    print(f"{run}: {len(a)} files, {n} values (time aside); {len(diff)} files differ")
print(("every non-time value equal" + (f" (rounds 0-{rounds - 1})" if rounds is not None else "")) if total == 0 else f"{total} files differ")
