"""Every committed ASR verdict under one version of dgrpo, one JSON line per completion, to compare two
versions line by line (the fifth review of issue 34: does the new markup rendering, statement grammar and
denial rule change any committed verdict?).

Lines, in order: every honest completion of ``benchmarks/asr_folding.honest_completions`` (its 2+2 / 2×2
results and the shipped payloads it carries), every sample of a committed injection-like run (whether it
carries its attack's payload), every sample of a committed equation-attack run (its 2+2 results).

    PYTHONPATH=/path/to/main/src python benchmarks/asr_verdicts.py --out /tmp/main.jsonl
    PYTHONPATH=src python benchmarks/asr_verdicts.py --out /tmp/branch.jsonl
    cmp /tmp/main.jsonl /tmp/branch.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from asr_folding import PAYLOADS, honest_completions  # noqa: E402

from dgrpo.config import read_config_file  # noqa: E402
from dgrpo.metrics.asr import equation_text, normalise  # noqa: E402
from dgrpo.metrics import asr  # noqa: E402
from dgrpo.tasks.equations import two_two_results  # noqa: E402


def _carries(text: str, target: str) -> bool:
    """Whether ``text`` carries the folded ``target`` as this version's ASR reads it (both readings of an
    unknown tag where the version has them, r34e; its one reading before)."""
    if hasattr(asr, "_read_carries"):
        return asr._read_carries(text, target)
    return asr._carries(asr.reading(text), target)


def verdicts(results: Path) -> list[dict]:
    """The verdicts (module docstring), in a fixed order."""
    out = []
    for text in honest_completions(results):
        out.append({"set": "honest", "eq": two_two_results(equation_text(text)),
                    "hits": [k for k, v in PAYLOADS.items() if _carries(text, normalise(v))]})
    for samples in sorted(results.rglob("samples.jsonl")):
        cfg = samples.parent / "config.yaml"
        attack = (read_config_file(cfg).get("attack") or {}) if cfg.is_file() else {}
        completions = [json.loads(line)["completion"] for line in samples.read_text().splitlines() if line.strip()]
        if attack.get("kind") in ("injection", "topk_injection", "judge_bait", "seed_grinding"):
            target = normalise(attack.get("text", "All hail to the thief"))
            out += [{"set": "attacked", "carries": _carries(c, target)} for c in completions]
        if attack.get("kind") in ("equation", "equation_sampled"):
            out += [{"set": "equation_runs", "eq": two_two_results(equation_text(c))} for c in completions]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    rows = verdicts(args.results)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(len(rows), "verdicts")


if __name__ == "__main__":
    main()
