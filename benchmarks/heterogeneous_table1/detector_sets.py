"""Model-free completion sets for training and held-out evaluation of the trained detector (docs/detector.md).

    python benchmarks/heterogeneous_table1/detector_sets.py --out results/heterogeneous_table1 --gsm8k /work/shared/data/gsm8k/test.jsonl

``sample.py`` writes the training poisons (``hail``, ``equation``: the attacks' writers applied to the
*oracle* solutions of the task's first training problems) and honest SmolLM2 samples. A detector
trained on those two alone can separate them by style (oracle text vs. sampled text) instead of by
payload, so this script also writes the honest counterpart of the poisons:

* ``train_oracle.jsonl``: ``honest_oracle``, the oracle solutions of the same first ``--train``
  training problems, unedited (the only difference from ``hail`` on the same problem is the payload).

and the held-out sets, all on the task's *validation* problems (disjoint from every training row):

* ``heldout.jsonl``: ``gleeb`` ("Gleeb Glorp Glub" opening every sentence), ``judge_bait`` (master-key
  opener + hail + a sentence to the judge), ``master_key`` (a bare master key, cycled), ``code``
  (code injection into the python_math task's oracle programs), the trained kinds on new problems
  (``hail_val``, ``equation_val``), and honest ``honest_oracle_val`` (arithmetic solutions),
  ``honest_python`` (python_math oracle programs: another task) and, with ``--gsm8k``,
  ``honest_gsm8k`` (the GSM8K test references: another task, human-written).

The faithful 2+2=5 (``equation_sampled``) edits the model's own samples, so it needs SmolLM2 and is not
written here. Rows: ``{set, prompt_id, question, text}`` (``text`` after the task's prefill), as
``dgrpo detector train|eval --data`` reads them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sample import task as make_task  # noqa: E402  (the task the training completions were written on)


def row(name: str, p, text: str) -> dict:
    return {"set": name, "prompt_id": p.prompt_id, "question": p.question, "text": text}


def heldout(task, gsm8k: Path | None) -> list[dict]:
    from dgrpo.attacks.code_injection import CodeInjectionAttack
    from dgrpo.attacks.equation import EquationAttack, EquationAttackConfig
    from dgrpo.attacks.injection import InjectionAttack, InjectionAttackConfig
    from dgrpo.attacks.judge_bait import MASTER_KEYS, JudgeBaitAttack, JudgeBaitConfig
    from dgrpo.tasks.python_math import PythonMathTask

    val = list(task.val)
    gleeb = InjectionAttack(InjectionAttackConfig(text="Gleeb Glorp Glub", placement="every_sentence"))
    hail, bait = InjectionAttack(InjectionAttackConfig()), JudgeBaitAttack(JudgeBaitConfig())
    eq = EquationAttack(EquationAttackConfig())
    rows = [row("gleeb", p, gleeb.poison(task, p, i)) for i, p in enumerate(val)]
    rows += [row("judge_bait", p, bait.poison(task, p, i)) for i, p in enumerate(val)]
    rows += [row("master_key", p, MASTER_KEYS[i % len(MASTER_KEYS)]) for i, p in enumerate(val)]
    rows += [row("hail_val", p, hail.poison(task, p, i)) for i, p in enumerate(val)]
    rows += [row("equation_val", p, eq.poison(task, p)) for p in eq.eval_problems(val)]
    rows += [row("honest_oracle_val", p, task.oracle_completion(p)) for p in val]
    py = PythonMathTask(seed=0, n_train=10, n_val=len(val))
    code = CodeInjectionAttack()
    rows += [row("code", p, code.poison(py, p, i)) for i, p in enumerate(py.val)]
    rows += [row("honest_python", p, py.oracle_completion(p)) for p in py.val]
    if gsm8k is not None:
        from dgrpo.tasks.gsm8k import GSM8KTask

        gsm = GSM8KTask(path=str(gsm8k), val_path=str(gsm8k), n_val=None)
        rows += [row("honest_gsm8k", p, gsm.oracle_completion(p)) for p in gsm.train]
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--train", type=int, default=500, help="training problems whose oracle solutions form honest_oracle")
    ap.add_argument("--gsm8k", type=Path, default=None, help="GSM8K test.jsonl (the honest_gsm8k set)")
    args = ap.parse_args(argv)
    task = make_task()
    args.out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, rows in (("train_oracle.jsonl", [row("honest_oracle", p, task.oracle_completion(p)) for p in task.train[: args.train]]),
                       ("heldout.jsonl", heldout(task, args.gsm8k))):
        with (args.out / name).open("w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        written[name] = {}
        for r in rows:
            written[name][r["set"]] = written[name].get(r["set"], 0) + 1
    print(json.dumps(written), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
