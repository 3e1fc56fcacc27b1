"""Table and figure of the attack × defense matrix after training: every finished run of a ``dgrpo paper
matrix_training`` folder (curve ATTACK__DEFENSE), plus cells trained elsewhere at the same settings,
beside the one-round matrix's detection rate (`dgrpo.paper.matrix_training`).

    python benchmarks/attack_matrix_training_table.py --runs results/attack_matrix/smollm2/matrix_training \
        --matrix results/attack_matrix/smollm2/matrix/matrix.json --baseline results/paper_baseline/fig12/baseline \
        --cell hail__none=results/paper_baseline/fig12/hail_horizontal --out results/attack_matrix/smollm2/training
"""

import argparse
from pathlib import Path

from dgrpo.paper.matrix_training import write_training_table

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", required=True, help="a matrix_training folder (one run per ATTACK__DEFENSE subfolder)")
    parser.add_argument("--cell", action="append", default=[], metavar="ATTACK__DEFENSE=DIR", help="a cell trained elsewhere")
    parser.add_argument("--matrix", default=None, help="the one-round matrix.json")
    parser.add_argument("--baseline", default=None, help="the all-honest run at the same settings")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dirs = {d.name: d for d in sorted(Path(args.runs).iterdir()) if "__" in d.name and (d / "metrics.jsonl").exists()}
    dirs.update(dict(c.split("=", 1) for c in args.cell))
    done = {}
    for name, d in dirs.items():
        rounds = [line for line in (Path(d) / "metrics.jsonl").read_text().splitlines() if '"eval/accuracy"' in line]
        if len(rounds) >= 2:  # round 0 and the final evaluation
            done[name] = d
        else:
            print(f"skipped {name}: not finished")
    write_training_table(done, args.out, args.baseline, args.matrix)
    print((Path(args.out) / "training.md").read_text())
