"""The attack x defense matrix (`dgrpo paper matrix`) on SmolLM2-135M-Instruct at the issue's sizes:
1,000 honest and 200 poisoned completions per cell (about an hour on a 2-core CPU with one thread),
the faithful 2+2=5 row first (its top-k pass rate is the figure to set beside the paper's 78.5%).
No judge column: the in-process SmolLM2 judge takes ~1 s a judgment (4,000 judgments here) and its
detection rates are measured in results/heterogeneous_table1_v2; add it with --judge.

    python benchmarks/attack_matrix_smollm2.py --out runs/attack_matrix_smollm2
    python benchmarks/attack_matrix_smollm2.py --out runs/judge --rows judge_bait,master_key --only-judge

A slow row measured by a later call (--rows) joins the committed table with --merge: the two calls
must share the setup and the honest pool (checked by its false-positive counts, `merge_rows`):

    python benchmarks/attack_matrix_smollm2.py --out runs/gleeb --rows topk_gleeb --threads 1
    python benchmarks/attack_matrix_smollm2.py --out results/attack_matrix/smollm2 --merge runs/gleeb/matrix/matrix.json
"""

import argparse
import logging
import sys
from pathlib import Path

from dgrpo.paper.matrix import SMALL_BUDGET as OVERRIDES
from dgrpo.paper.matrix_report import merge_rows, read_matrix, write_outputs
from dgrpo.paper.runner import reproduce

ORDER = ["equation_sampled", "equation_oracle", "hail", "dos_written", "judge_bait", "gleeb_every_sentence", "master_key",
         "forged_identity", "flooding", "equivocation", "grind_hail", "dos_sampled", "topk_hail", "replayed_round", "topk_gleeb",
         "dos_prompt_grind"]
DEFENSES = ["none", "validation", "topk", "replay", "replay_bound", "reward_outlier", "step_checker", "kl"]

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/attack_matrix_smollm2")
    parser.add_argument("--honest", type=int, default=1000)
    parser.add_argument("--poisoned", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--judge", action="store_true", help="add the in-process judge column (slow on CPU)")
    parser.add_argument("--only-judge", action="store_true", help="the judge column alone (beside none)")
    parser.add_argument("--rows", default=",".join(ORDER), help="comma-separated rows, in order (default: all)")
    parser.add_argument("--merge", metavar="MATRIX_JSON", help="append the rows of this matrix.json to OUT/matrix/matrix.json")
    args = parser.parse_args()
    if args.merge:
        target = Path(args.out) / "matrix"
        try:  # each file is checked and named on its own, then the two are compared
            merged = merge_rows(read_matrix(target / "matrix.json"), read_matrix(args.merge))
        except ValueError as err:
            sys.exit(f"--merge: {err}")
        write_outputs(merged, target)
        print(f"{target}/matrix.json: rows {', '.join(merged['attacks'])}")
        sys.exit(0)
    rows = [r for r in args.rows.split(",") if r]
    unknown = sorted(set(rows) - set(ORDER))
    if unknown or not rows:
        parser.error(f"--rows: unknown rows {unknown}; choose from {','.join(ORDER)}" if unknown else "--rows: name at least one row")
    defenses = ["none", "judge"] if args.only_judge else DEFENSES + ["judge"] * args.judge
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", force=True)
    reproduce("matrix", "cpu", args.out, [f"attacks={rows}", f"n_honest={args.honest}", f"n_poisoned={args.poisoned}",
                                          f"threads={args.threads}", f"defenses={defenses}", f"attack_overrides={OVERRIDES}"])
