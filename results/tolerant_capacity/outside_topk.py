"""Review u36f: tolerant replay also accepts a token OUTSIDE the top-k whose logit lies within `tie` of a top-k
logit (token_divergence's `inside`); free_alternatives counts only top-k tokens. Count, on honest SmolLM2 positions,
the out-of-top-k tokens that would pass at the defaults, and (for scale) those within tie of the k-th logit."""
import sys, torch
from dgrpo.config import load_config
from dgrpo.policy.loading import load_policy
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample, gumbel_table
from dgrpo.policy.scoring import group_logits
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.verify.tolerant import TIE, THRESHOLD, free_alternatives
torch.set_num_threads(2)
P, G, T = int(sys.argv[1]), 8, 32
cfg = load_config(overrides=[f"sampling.max_new_tokens={T}"])
params = SamplingParams(cfg.sampling.top_k, cfg.sampling.temperature, T)
model, tok = load_policy("smollm2-135m-instruct", "float32", trainable=False)
policy = Policy("smollm2-135m-instruct", model, tok, params)
task = ArithmeticTask(seed=0); eos, pad = tok.eos_token_id, tok.pad_token_id
reqs = [p for p in (task.train[i] for i in range(P)) for _ in range(G)]
prompts = [policy.prompt_ids(task, p) for p in reqs]
seeds = [completion_seed(36, 0, 0, p.prompt_id, i) for i, p in enumerate(reqs)]
k = params.top_k
with torch.no_grad():
    comps = sample(model, prompts, seeds, params, eos, pad)
    positions = outside_pass = outside_near = inside_free = 0
    for s in range(0, len(comps), G):
        lg = group_logits(model, prompts[s], comps[s:s + G], pad).cpu()
        for g, c in enumerate(comps[s:s + G]):
            n = len(c); z = lg[g][:n].float(); positions += n
            inside_free += int(free_alternatives(lg[g], c, seeds[s + g], params).gt(0).sum())
            top_v, top_i = z.topk(k + 50, dim=-1)
            score = top_v[:, :k] / params.temperature + gumbel_table(seeds[s + g], T, k)[:n]
            best = score.max(-1).values
            for t in range(n):
                for r in range(k, k + 50):
                    zc = top_v[t, r]
                    if zc < top_v[t, k - 1] - TIE:
                        break
                    outside_near += 1
                    own = (top_v[t, :k] - zc).abs() <= TIE
                    if own.any() and best[t] - score[t][own].max() <= THRESHOLD:
                        outside_pass += 1
print(f"{len(comps)} completions, {positions} positions: out-of-top-k tokens within tie of the k-th logit {outside_near}, "
      f"of which pass tolerant replay {outside_pass}; positions with a top-k free alternative {inside_free}")
