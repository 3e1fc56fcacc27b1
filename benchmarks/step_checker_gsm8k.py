"""The step checker over the GSM8K test reference solutions: what passes, what fails and why.

    python benchmarks/step_checker_gsm8k.py --data /work/shared/data/gsm8k/test.jsonl --out results/step_checker_gsm8k

Runs :class:`dgrpo.verify.steps.StepChecker` (default tolerance) on the ``answer`` field of every
row, three ways:

* ``references``: the answers as GSM8K writes them; the calculator annotations ``<<48/2=24>>`` are
  checked as claims of their own and removed from the text around them;
* ``stripped``: the annotations deleted first, the way dgrpo's attacks and the paper's code turn a
  reference into a completion (so the claims are the visible ones only);
* ``perturbed``: the stripped answer with its first annotated result raised by one
  (``48/2 = <<48/2=24>>24`` -> ``48/2 = 25``, later steps unchanged: a minimal edit like 2+2=5),
  which the checker should reject; the edit is chosen from the annotations, not by the checker.

Writes ``failures.jsonl`` (every rejected reference with its cause, from the review table
``CAUSES`` below: "reference error" or "parsing limit"; "unreviewed" if a new failure appears),
``summary.json`` (counts, claims by status, the perturbation detection rate with a Wilson
interval, timings) and ``command.txt``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from dgrpo.metrics.intervals import wilson
from dgrpo.verify.steps import StepChecker

# Reviewed by hand (row index in test.jsonl -> cause). Each quotes the reference.
CAUSES = {
    501: "reference error: '364 / 4 = 273' (the step means 3/4 * 364 = 273; 364 / 4 is 91)",
    598: "reference error: '3.65 divided by .05 equals 69' (the money computed just before is $3.45; 3.45/.05 = 69)",
    600: "reference error: 'An increase of 50% of 8 is 1.5*8=12' (50% of 8 is 4; the new weight 1.5*8 is meant)",
    958: "reference error: '48 = 100% + 20%' (shorthand for '48 is 120% of the actual number'; false as written)",
    1024: "reference error: '$32 - $20 = $300' (a typo for $320 - $20)",
}
_ANNOTATION = re.compile(r"<<[^<>]*>>")


_ANNOTATED_RESULT = re.compile(r"=\s*\$?\s*<<[^<>]*>>(\d[\d,]*(?:\.\d+)?)")


def perturb(answer: str) -> str | None:
    """The stripped ``answer`` with the first annotated result (``= <<48/2=24>>24``) raised by one.

    The edited number is found from GSM8K's own annotations, independently of the checker, so the
    detection rate also measures how many visible equations the checker reads.
    """
    m = _ANNOTATED_RESULT.search(answer)
    if m is None:
        return None
    value = m.group(1).replace(",", "")
    bumped = str(int(value) + 1) if "." not in value else f"{float(value) + 1:.{len(value.split('.')[1])}f}"
    return _ANNOTATION.sub("", answer[:m.start(1)] + bumped + answer[m.end(1):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="/work/shared/data/gsm8k/test.jsonl")
    parser.add_argument("--out", default="results/step_checker_gsm8k")
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    checker = StepChecker()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    verdicts = [checker(r["answer"]) for r in rows]
    seconds = time.perf_counter() - start
    stripped = [_ANNOTATION.sub("", r["answer"]) for r in rows]
    stripped_verdicts = [checker(t) for t in stripped]

    failures = []
    for i, (row, v) in enumerate(zip(rows, verdicts)):
        if not v.accepted:
            c = v.false_claims[0]
            failures.append({"row": i, "claim": c.text, "reason": v.reason, "source": c.source,
                             "cause": CAUSES.get(i, "unreviewed"), "question": row["question"],
                             "answer": row["answer"]})
    stripped_failures = [i for i, v in enumerate(stripped_verdicts) if not v.accepted]

    perturbed, caught, missed = 0, 0, []
    for i, row in enumerate(rows):
        bad = perturb(row["answer"])
        if bad is None:
            continue
        perturbed += 1
        if checker(bad).accepted:
            missed.append(i)
        else:
            caught += 1

    def claim_counts(vs):
        counts: dict[str, int] = {}
        for v in vs:
            for c in v.claims:
                key = f"{c.source}/{c.status}"
                counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items()))

    summary = {
        "rows": len(rows),
        "references": {"accepted": sum(v.accepted for v in verdicts), "rejected": len(failures),
                       "rejected_by_cause": _by_cause(failures), "claims": claim_counts(verdicts),
                       "mean_unparsed_share": sum(v.unparsed_share for v in verdicts) / len(rows),
                       "seconds": round(seconds, 3)},
        "stripped": {"accepted": len(rows) - len(stripped_failures), "rejected_rows": stripped_failures,
                     "claims": claim_counts(stripped_verdicts)},
        "perturbed": {"rows": perturbed, "rejected": caught, "rate": caught / perturbed if perturbed else None,
                      "wilson95": wilson(caught, perturbed) if perturbed else (0.0, 1.0), "missed_rows": missed},
        "machine": "2 CPU cores shared with other jobs: seconds are indicative",
        "checker": {k: getattr(checker, k) for k in ("rtol", "atol", "rounding", "approx_rtol", "max_digits",
                                                      "max_bits", "max_depth", "max_chars")},
    }
    with open(out / "failures.jsonl", "w") as f:
        for rec in failures:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    (out / "command.txt").write_text("python " + " ".join(sys.argv) + "\n")
    print(json.dumps({k: summary[k] for k in ("rows", "references", "perturbed")}, ensure_ascii=False))


def _by_cause(failures: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in failures:
        kind = f["cause"].split(":")[0]
        counts[kind] = counts.get(kind, 0) + 1
    return counts


if __name__ == "__main__":
    main()
