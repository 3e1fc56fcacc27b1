"""Proxy for review u36f: two honest ranks of a distributed swarm with spot_fraction < 1. Rank A caught one
poisoned message (dropped it), rank B did not check it (trained on it). One AdamW step at lr 2e-5 on each
(loss = -adv * mean logp over the group, the same honest advantages; B also +1 on the poison). Then A replays
B's next-round honest completions with A's weights: fast replay (atol 1e-3), tolerant replay (defaults), top-k."""
import copy, sys, time, torch
from dgrpo.config import load_config
from dgrpo.policy.loading import load_policy
from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams, completion_seed, sample
from dgrpo.policy.scoring import group_logits
from dgrpo.tasks.arithmetic import ArithmeticTask
from dgrpo.verify.replay import replay_mismatch
from dgrpo.verify.tolerant import tolerant_mismatch
from dgrpo.verify.topk import first_outside_topk
torch.set_num_threads(2); torch.manual_seed(0)
P, G, T = int(sys.argv[1]), 8, 32
cfg = load_config(overrides=[f"sampling.max_new_tokens={T}"])
params = SamplingParams(cfg.sampling.top_k, cfg.sampling.temperature, T)
model, tok = load_policy("smollm2-135m-instruct", "float32", trainable=True)
policy = Policy("smollm2-135m-instruct", model, tok, params)
task = ArithmeticTask(seed=0); eos, pad = tok.eos_token_id, tok.pad_token_id
def batch(r, start):
    reqs = [p for p in (task.train[start + i] for i in range(P)) for _ in range(G)]
    prompts = [policy.prompt_ids(task, p) for p in reqs]
    seeds = [completion_seed(36, r, 0, p.prompt_id, i) for i, p in enumerate(reqs)]
    return prompts, seeds
t0 = time.time()
pr0, sd0 = batch(0, 0)
model.eval()
with torch.no_grad(): comps0 = sample(model, pr0, sd0, params, eos, pad)
poison = tok(" All hail to the thief! All hail to the thief!", add_special_tokens=False)["input_ids"] + [eos]
adv = [(1.0 if i % 2 else -1.0) for i in range(len(comps0))]
def stepped(extra):
    m = copy.deepcopy(model); m.train(False)
    opt = torch.optim.AdamW(m.parameters(), lr=2e-5)
    items = list(zip(pr0, comps0, adv)) + extra
    for p, c, a in items:
        lg = group_logits(m, p, [c], pad)[0]
        lp = torch.log_softmax(lg.float(), -1).gather(1, torch.tensor(c)[:, None]).mean()
        (-a * lp / len(items)).backward()
    opt.step(); m.zero_grad()
    return m
A = stepped([])
B = stepped([(pr0[0], poison, 1.0)])
diff = max((a - b).abs().max().item() for a, b in zip(A.parameters(), B.parameters()))
print(f"step done {time.time()-t0:.0f}s; max |W_A - W_B| = {diff:.2e}", flush=True)
pr1, sd1 = batch(1, P)
with torch.no_grad():
    compsB = sample(B, pr1, sd1, params, eos, pad)
    res = {"fast": 0, "tolerant": 0, "topk": 0, "fast_self": 0, "tol_self": 0}
    for s in range(0, len(compsB), G):
        cs = compsB[s:s + G]
        for name, M in (("A", A), ("B", B)):
            lg = group_logits(M, pr1[s], cs, pad).cpu()
            out = first_outside_topk(lg, cs, eos, params.top_k, 1e-3)
            for g, c in enumerate(cs):
                f = replay_mismatch(lg[g], c, sd1[s + g], params, eos) is not None
                t = tolerant_mismatch(lg[g], c, sd1[s + g], params, eos) is not None
                if name == "A":
                    res["fast"] += f; res["tolerant"] += t; res["topk"] += out[g] is not None
                else:
                    res["fast_self"] += f; res["tol_self"] += t
print(f"B's {len(compsB)} honest completions verified by A: {res}  ({time.time()-t0:.0f}s)")
