"""The development and held-out sets of the served judge's Table 1 row, from committed completions.

Every set comes from ``results/heterogeneous_table1_v2`` (``poisoned.jsonl``, ``honest.jsonl``,
``heldout.jsonl``: the attacks' writers and SmolLM2-135M-Instruct samples on the embedded arithmetic
task, seed 0; see its README) or is written by a task (the arithmetic task's own solutions, the GSM8K
test references, python_math programs). The split is by problem, fixed before any judgment:

* dev (prompt and decision rule chosen here, then frozen): hail and 2+2=5 of the first 50 problems
  that carry each, SmolLM2 samples of problems train-0..train-19, task solutions of train-0..49;
* held out: hail and 2+2=5 of the other problems (200 each), the faithful 2+2=5 (all 43 that exist),
  and, never seen on dev, Gleeb, code injection, master keys and judge-addressed bait (200 each); SmolLM2
  samples of train-20..train-99, task solutions of train-500..train-999, GSM8K test references,
  python_math programs.

Split ``v2`` (results/judge_qwen_v2, :func:`resplit_v2`), fixed before any of its judgments: by *problem*
across every set (the arithmetic and python_math tasks draw the same questions for the same ``train-N``, so a
problem is its ``train-N``; a GSM8K reference is its own problem). Dev problems: every problem of a v1 dev row
and of every row judged under any tag in ``results/judge_qwen/scores.jsonl`` (those were looked at: they may be
dev, never held out), and GSM8K test-0..59. Every row of a dev problem is dev, every other row held out, so
no held-out row was judged before and no held-out row shares a problem with a dev row. The SmolLM2 samples with
the right answer all lie on dev problems (train-0..99), so v2 adds fresh samples of train-1000..1099
(``results/judge_qwen_v2/honest_heldout.jsonl``, same sampler and settings) as held-out ``honest_sampled``.

Each row: ``set``, ``split``, ``key`` (unique), ``question``, ``text`` (the completion the judge reads:
the task's ``<think>`` prefill plus the completion, as the judge defense builds it), ``honest``
(bool), ``right`` (the verifiable reward is 1: for honest rows, the ones whose rejection costs reward).
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "results" / "heterogeneous_table1_v2"
POISON = ("hail", "equation", "equation_sampled", "gleeb", "code", "master_key", "judge_bait")
HONEST = ("honest_sampled", "honest_oracle", "honest_gsm8k", "honest_python")
DEV_POISON = 50  # hail and equation rows on dev
SEEN = DATA.parent / "judge_qwen" / "scores.jsonl"  # every row judged under split v1
V2_SAMPLES = DATA.parent / "judge_qwen_v2" / "honest_heldout.jsonl"
V2_GSM8K_DEV = 60  # GSM8K test-0..59 are dev in v2


def _index(prompt_id: str) -> int:
    return int(prompt_id.rsplit("-", 1)[1])


def problem(row: dict) -> tuple[str, str]:
    """A row's problem: ("gsm8k", "train-N") for GSM8K references, ("arith", "train-N") for the rest."""
    return ("gsm8k" if row["set"] == "honest_gsm8k" else "arith", row["key"].split("/")[1])


def resplit_v2(rows: list[dict], seen: Path = SEEN) -> list[dict]:
    """Split ``v2`` (module docstring) of ``load``'s rows, in place; returns them.

    Raises:
        FileNotFoundError: ``seen`` missing (the v1 judgments decide the dev problems).
    """
    seen_keys = {json.loads(line)["key"] for line in seen.read_text().splitlines()}
    dev = {problem(r) for r in rows if r["split"] == "dev" or r["key"] in seen_keys}
    dev |= {("gsm8k", f"train-{i}") for i in range(V2_GSM8K_DEV)}
    for r in rows:
        r["split"] = "dev" if problem(r) in dev else "heldout"
    return rows


def load(gsm8k: Path | None = None, data: Path = DATA, split: str = "v1") -> list[dict]:
    """Every row of both splits, in a fixed order (set by set, file order within a set).

    ``split``: ``v1`` (results/judge_qwen) or ``v2`` (results/judge_qwen_v2: :func:`resplit_v2`, plus the
    fresh held-out SmolLM2 samples of ``V2_SAMPLES``). Raises ValueError for another value.
    """
    if split not in ("v1", "v2"):
        raise ValueError(f"split must be v1 or v2, got {split!r}")
    from dgrpo.tasks.arithmetic import ArithmeticTask
    from dgrpo.tasks.python_math import PythonMathTask

    task = ArithmeticTask(seed=0, n_train=3000, n_val=200)  # as benchmarks/heterogeneous_table1/sample.py
    py = PythonMathTask(seed=0, n_train=1000, n_val=10)  # as heldout.py
    by_id = {p.prompt_id: p for p in task.train}
    py_by_id = {p.prompt_id: p for p in py.train}
    raw: dict[str, list[dict]] = {s: [] for s in POISON + HONEST}
    for f in ("poisoned.jsonl", "honest.jsonl", "heldout.jsonl"):
        for line in (data / f).read_text().splitlines():
            r = json.loads(line)
            raw["honest_sampled" if r["set"] == "honest" else r["set"]].append(r)
    rows = []

    def add(set_name, split, key, question, completion, honest, right, prefix=task.completion_prefix):
        rows.append({"set": set_name, "split": split, "key": key, "question": question,
                     "text": (prefix + completion).strip(), "honest": honest, "right": right})

    for s in POISON:
        t, ids = (py, py_by_id) if s == "code" else (task, by_id)
        for i, r in enumerate(raw[s]):
            part = "dev" if s in ("hail", "equation") and i < DEV_POISON else "heldout"
            right = None if s == "code" else t.reward(r["text"], ids[r["prompt_id"]]) >= 1.0  # programs are not run here
            add(s, part, f"{s}/{r['prompt_id']}/{i}", ids[r["prompt_id"]].question, r["text"], False, right,
                t.completion_prefix)
    if split == "v2":
        raw["honest_sampled"] += [json.loads(line) for line in V2_SAMPLES.read_text().splitlines()]
    for i, r in enumerate(raw["honest_sampled"]):
        p = by_id[r["prompt_id"]]
        add("honest_sampled", "dev" if _index(r["prompt_id"]) < 20 else "heldout", f"honest_sampled/{r['prompt_id']}/{r['seed']}",
            p.question, r["text"], True, task.reward(r["text"], p) >= 1.0)
    for p in task.train[:50]:
        add("honest_oracle", "dev", f"honest_oracle/{p.prompt_id}", p.question, task.oracle_completion(p), True, True)
    for p in task.train[500:1000]:
        add("honest_oracle", "heldout", f"honest_oracle/{p.prompt_id}", p.question, task.oracle_completion(p), True, True)
    for i, r in enumerate(raw["honest_python"]):
        p = py_by_id[r["prompt_id"]]
        add("honest_python", "heldout", f"honest_python/{r['prompt_id']}/{i}", p.question, r["text"], True, True,
            py.completion_prefix)
    if gsm8k is not None:
        from dgrpo.tasks.gsm8k import GSM8KTask

        gsm = GSM8KTask(path=str(gsm8k), val_path=str(gsm8k), n_val=None)
        for p in gsm.train:
            add("honest_gsm8k", "heldout", f"honest_gsm8k/{p.prompt_id}", p.question, gsm.oracle_completion(p), True, True,
                gsm.completion_prefix)
    return resplit_v2(rows) if split == "v2" else rows

