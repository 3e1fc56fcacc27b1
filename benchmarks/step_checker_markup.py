"""The step checker on GSM8K references laid out in markup: false positives on honest text that uses
LaTeX, HTML or markdown around its results, and detection of a false step hidden by the same markup.

    python benchmarks/step_checker_markup.py --data /work/shared/data/gsm8k/test.jsonl --out results/step_checker_markup

For every reference whose first annotated result can be edited (``= <<48/2=24>>24``, as
``benchmarks/step_checker_gsm8k.py``), the annotations are removed and every visible result after ``=``
(a number directly after ``= ``) is wrapped in one layout: LaTeX ``\\(x\\)``, a tag with attributes,
an HTML comment before it, markdown bold, table bars, a decoy (``<s>wrong</s> x``: a struck-out value
before the right one); or the whole text in LaTeX's forms: ``\\quad`` after each result, ``&=`` for ``=``
(aligned equations), ``\\times``, ``{,}`` thousands and ``\\%``. Measured per layout, with Wilson 95% intervals:

* ``honest_rejected``: references the checker accepted plainly but rejects laid out (false positives);
* ``perturbed_caught``: the same reference with its first annotated result raised by one, laid out,
  rejected (detection; the edit is found from GSM8K's annotations, not by the checker).

Writes ``summary.json`` and ``command.txt``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from step_checker_gsm8k import _ANNOTATION, perturb  # noqa: E402

from dgrpo.metrics.intervals import wilson  # noqa: E402
from dgrpo.verify.steps import StepChecker  # noqa: E402

_RESULT = re.compile(r"(=\s*)(\$?)(\d[\d,]*(?:\.\d+)?(?:/\d+)?)(?![\d/ ]*\d)")  # a whole result: 4/5, 1.5
LAYOUTS = {
    "latex": lambda n: f"\\({n}\\)",
    "tag_with_attributes": lambda n: f'<span class="result" title="step">{n}</span>',
    "comment_before": lambda n: f"<!-- result -->{n}",
    "bold": lambda n: f"**{n}**",
    "table_bars": lambda n: f"| {n} |",
    "decoy_struck_out": lambda n: f"<s>{_other(n)}</s> {n}",
}


# layouts of the whole text (a second review's LaTeX-heavy forms: Qwen-style aligned output)
TEXT_LAYOUTS = {
    "quad_after_result": lambda t: _RESULT.sub(lambda m: m.group() + " \\quad", t),
    "align_ampersand": lambda t: t.replace(" = ", " &= ").replace("=", "&=") if " = " not in t else t.replace(" = ", " &= "),
    "latex_operators": lambda t: re.sub(r"(\d),(\d{3})", r"\1{,}\2", t.replace(" * ", " \\times ").replace(" x ", " \\times ")
                                        .replace("%", "\\%")),
}


def _other(n: str) -> str:
    """A different number of the same shape (the struck-out value of a decoy)."""
    return str(int(float(n.replace(",", "").split("/")[0])) + 7)


def lay_out(text: str, layout) -> str:
    return _RESULT.sub(lambda m: m.group(1) + m.group(2) + layout(m.group(3)), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="/work/shared/data/gsm8k/test.jsonl")
    parser.add_argument("--out", default="results/step_checker_markup")
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    checker = StepChecker()
    pairs = [(_ANNOTATION.sub("", r["answer"]), perturb(r["answer"])) for r in rows]
    pairs = [(h, p) for h, p in pairs if p is not None]
    plain_ok = [checker(h).accepted for h, _ in pairs]
    summary = {"data": args.data, "references": len(pairs), "plain_accepted": sum(plain_ok),
               "plain_perturbed_caught": sum(not checker(p).accepted for _, p in pairs), "layouts": {}}
    forms = {**{k: (lambda t, f=f: lay_out(t, f)) for k, f in LAYOUTS.items()}, **TEXT_LAYOUTS}
    for name, form in forms.items():
        fp = sum(ok and not checker(form(h)).accepted for (h, _), ok in zip(pairs, plain_ok))
        caught = sum(not checker(form(p)).accepted for _, p in pairs)
        n_ok = sum(plain_ok)
        summary["layouts"][name] = {
            "honest_rejected": fp, "honest_n": n_ok, "honest_rate": fp / n_ok, "honest_ci95": wilson(fp, n_ok),
            "perturbed_caught": caught, "perturbed_n": len(pairs), "detection": caught / len(pairs),
            "detection_ci95": wilson(caught, len(pairs))}
        print(f"{name:22s} false positives {fp}/{n_ok}  detection {caught}/{len(pairs)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "command.txt").write_text(f"python benchmarks/step_checker_markup.py --data {args.data} --out {args.out}\n")


if __name__ == "__main__":
    main()
