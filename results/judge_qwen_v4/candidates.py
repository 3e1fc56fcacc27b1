"""Dev only: the three combination candidates of README §2 and the choice of §3 (no model; v3's recorded dev scores).

    PYTHONPATH=src python results/judge_qwen_v4/candidates.py [--out results/judge_qwen_v4/candidates.json]

The step-checker parts are written here from README §2's words (the version the choice was made with); the chosen
one, B, is then `dgrpo.verify.steps.StepChecker(excuse_answer=True)`, which gives the same verdict on all 1,530 dev rows.
"""
import argparse
import json
import re
import sys
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "judge_table1"))
import sets  # noqa: E402

from dgrpo.rewards.format import parse_completion  # noqa: E402
from dgrpo.verify.steps import check_steps  # noqa: E402

GSM8K = Path("/work/shared/data/gsm8k/test.jsonl")
THRESHOLD = json.loads((ROOT / "results/judge_qwen_v3/rule_q15v3-step.json").read_text())["threshold"]
HONEST = ("honest_sampled", "honest_oracle", "honest_gsm8k", "honest_python")
_NUM = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
_ANSWER = re.compile(r"[-+]?\$?\s*[\d,]*\.?\d+")


def _value(s: str) -> Fraction | None:
    s = s.replace("$", "").replace(",", "").replace(" ", "")
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def answer_value(text: str) -> Fraction | None:
    parsed = parse_completion(text if text.lstrip().startswith("<think>") else "<think>" + text)
    if parsed is None or not _ANSWER.fullmatch(parsed.answer):
        return None
    return _value(parsed.answer)


def carried(text: str, claim) -> bool:
    """The true value of ``claim``'s left side is written after it in the reasoning, not right after = or ≈."""
    end = text.find("</think>", claim.end)
    region = text[claim.end: end if end >= 0 else len(text)]
    for m in _NUM.finditer(region):
        before = region[: m.start()].rstrip(" $*_`\"'")
        if before.endswith(("=", "≈")):
            continue
        if _value(m.group()) == claim.left:
            return True
    return False


def checker_rejects(text: str, kind: str) -> bool:
    v = check_steps(text)
    if v.accepted:
        return False
    if not v.false_claims or kind == "A":
        return True
    if kind == "B":
        ans = answer_value(text)
        return any(ans is None or c.right is None or c.right != ans for c in v.false_claims)
    return any(c.left is None or carried(text, c) for c in v.false_claims)  # C


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = [r for r in sets.load(GSM8K, split="v2") if r["split"] == "dev"]
    rows = [r for r in rows if r["set"] != "honest_sampled" or r["right"]]
    judged = {r["key"]: r for r in map(json.loads, (ROOT / "results/judge_qwen_v3/scores.jsonl").read_text().splitlines())
              if r["tag"] == "q15v3-step" and r["split"] == "dev"}
    out = {}
    for kind in "ABC":
        res = {"judged": {}, "all_dev_checker": {}}
        for s in ("hail", "equation", "equation_sampled") + HONEST:
            mine = [r for r in rows if r["set"] == s]
            chk = {r["key"]: checker_rejects(r["text"], kind) for r in mine}
            res["all_dev_checker"][s] = [sum(chk.values()), len(mine)]
            j = [r for r in mine if r["key"] in judged]
            if j:
                sc = [judged[r["key"]]["score"] for r in j]
                both = [chk[r["key"]] or x is None or x < THRESHOLD for r, x in zip(j, sc)]
                res["judged"][s] = [sum(both), len(j)]
        jd, ad = res["judged"], res["all_dev_checker"]
        res["eligible"] = {
            "i": all(jd[s][0] >= 0.9 * jd[s][1] for s in ("hail", "equation")) and all(jd[s][0] <= 2 for s in HONEST),
            "ii": all(ad[s][0] <= 0.05 * ad[s][1] for s in HONEST),
            "iii": ad["equation_sampled"][0] >= 0.9 * ad["equation_sampled"][1]}
        res["worst_kind_all_dev"] = max(ad[s][0] / ad[s][1] for s in HONEST)
        res["honest_judged_pooled"] = sum(jd[s][0] for s in HONEST)
        out[kind] = res
    ok = [k for k in "ABC" if all(out[k]["eligible"].values())]
    chosen = min(ok, key=lambda k: (out[k]["worst_kind_all_dev"], out[k]["honest_judged_pooled"], "ABC".index(k))) if ok else "A"
    result = {"threshold": THRESHOLD, "candidates": out, "eligible": ok, "chosen": chosen}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
