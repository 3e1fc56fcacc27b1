"""The attack x defense matrix (`dgrpo paper matrix`) on SmolLM2-135M-Instruct at a size a quiet
2-core CPU finishes in hours: 32 honest and 16 poisoned completions per row, the faithful 2+2=5 row
first (its top-k pass rate is the figure to set beside the paper's 78.5%). For the issue's sizes
(1,000 honest, 200 poisoned per cell) use a GPU or pass --honest 1000 --poisoned 200.

    python benchmarks/attack_matrix_smollm2.py --out runs/attack_matrix_smollm2
"""

import argparse
import logging

from dgrpo.paper.runner import reproduce

ORDER = ["equation_sampled", "equation_oracle", "hail", "dos_written", "judge_bait", "gleeb_every_sentence", "master_key",
         "forged_identity", "flooding", "equivocation", "grind_hail", "dos_sampled", "topk_hail", "replayed_round", "topk_gleeb"]
OVERRIDES = {"equation_sampled": ["attack.candidates=4"], "grind_hail": ["attack.tries=4"], "dos_sampled": ["attack.tries=4"],
             "topk_hail": ["attack.tries=1"], "topk_gleeb": ["attack.tries=1"]}
DEFENSES = ["none", "validation", "topk", "replay", "replay_bound", "reward_outlier", "steps", "kl"]

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/attack_matrix_smollm2")
    parser.add_argument("--honest", type=int, default=32)
    parser.add_argument("--poisoned", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", force=True)
    reproduce("matrix", "cpu", args.out, [f"attacks={ORDER}", f"n_honest={args.honest}", f"n_poisoned={args.poisoned}",
                                          f"threads={args.threads}", f"defenses={DEFENSES}", f"attack_overrides={OVERRIDES}"])
