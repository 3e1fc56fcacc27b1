import logging, sys
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", force=True)
from dgrpo.paper.runner import reproduce
order = ["equation_sampled", "equation_oracle", "hail", "dos_written", "judge_bait", "gleeb_every_sentence", "master_key",
         "forged_identity", "flooding", "equivocation", "grind_hail", "dos_sampled", "topk_hail", "replayed_round", "topk_gleeb"]
over = {"equation_sampled": ["attack.candidates=4"], "grind_hail": ["attack.tries=4"], "dos_sampled": ["attack.tries=4"],
        "topk_hail": ["attack.tries=1"], "topk_gleeb": ["attack.tries=1"]}
defenses = ["none", "validation", "topk", "replay", "replay_bound", "reward_outlier", "steps", "kl"]
reproduce("matrix", "cpu", "/tmp/adaptive/smol_out", [f"attacks={order}", "n_honest=32", "n_poisoned=16", "threads=2",
          f"defenses={defenses}", f"attack_overrides={over}"])
