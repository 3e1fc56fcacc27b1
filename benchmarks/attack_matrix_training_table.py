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

def main() -> int:
    import json
    import sys

    from dgrpo.errors import ConfigError
    from dgrpo.paper.runner import _curve_done

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", required=True, help="a matrix_training folder (one run per ATTACK__DEFENSE subfolder)")
    parser.add_argument("--cell", action="append", default=[], metavar="ATTACK__DEFENSE=DIR", help="a cell trained elsewhere")
    parser.add_argument("--matrix", action="append", default=[], help="the one-round matrix.json (repeatable: "
                        "a column measured apart, e.g. the judge's, joins the main matrix's rows)")
    parser.add_argument("--skip-unfinished", action="store_true", help="leave out runs still training instead of refusing")
    parser.add_argument("--baseline", default=None, help="the all-honest run at the same settings")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if not Path(args.runs).is_dir():
        parser.error(f"--runs: {args.runs} is not a folder")
    bad = [c for c in args.cell if "=" not in c or not Path(c.split("=", 1)[1]).is_dir()]
    if bad:
        parser.error(f"--cell: give ATTACK__DEFENSE=DIR with an existing run folder, got {bad}")
    dirs = {d.name: d for d in sorted(Path(args.runs).iterdir()) if "__" in d.name and (d / "metrics.jsonl").exists()}
    dirs.update({k: Path(v) for k, v in (c.split("=", 1) for c in args.cell)})
    try:
        from dgrpo.paper.matrix_training import run_config

        done = {name: d for name, d in dirs.items() if _curve_done(d, run_config(d).rounds)}
        unfinished = sorted(set(dirs) - set(done))
        if unfinished and not args.skip_unfinished:
            print(f"error: runs not finished: {', '.join(unfinished)}; finish them or pass --skip-unfinished "
                  "(nothing written)", file=sys.stderr)
            return 2
        for name in unfinished:
            print(f"skipped {name}: not finished")
        if not done:
            print(f"no finished runs in {args.runs} or --cell", file=sys.stderr)
            return 2
        write_training_table(done, args.out, args.baseline, args.matrix or None)
    except (ValueError, OSError, ConfigError) as err:  # json.JSONDecodeError is a ValueError
        print(f"error: {err}", file=sys.stderr)
        return 2
    print((Path(args.out) / "training.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
