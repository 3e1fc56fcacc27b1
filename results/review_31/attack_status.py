"""r31 review: rank 3 jams another rank's status key (overwrites 'posted' with junk, or a forged 'left:' mark)."""
import os, sys, time, threading, json
from pathlib import Path
ROOT = Path(__file__).resolve().parents[2]  # the repository (results/review_31/ is two below it)
sys.path.insert(0, str(ROOT / "tests" / "transports")); sys.path.insert(0, str(ROOT / "tests"))
import torch; torch.set_num_threads(1)
import distributed_helpers as dh
from conftest import build_tokenizer, build_model

MODE = sys.argv[1]          # jam_posted | startup_left | none
OUT = sys.argv[2]
VICTIM = 0
os.makedirs(OUT, exist_ok=True)
mdir = os.path.join(OUT, "tiny")
if not os.path.exists(mdir):
    tok = build_tokenizer(); build_model(len(tok)).save_pretrained(mdir); tok.save_pretrained(mdir)

orig = dh.apply_scenario
def scenario(s, rank, args):
    if MODE.startswith("builtin:"):
        return orig(MODE[8:], rank, args)
    if rank != 3 or MODE == "none":
        return
    import dgrpo.transports.distributed as D
    jg = D.join_group
    def join_group(cfg):
        res = jg(cfg)
        import torch.distributed as _d; store = _d.PrefixStore("dgrpo", res[0])
        if MODE.startswith("prepend"):
            from dgrpo.transports.framing import frame
            k = int(MODE[7:] or 7)
            for r in range(0, 4):
                store.append("r%d/data/%d" % (r, VICTIM), frame(json.dumps({"messages": [{}] * k}).encode()))
            print("prepended", k, flush=True)
            return res
        if MODE.startswith("subset"):
            from dgrpo.transports.framing import frame, scan
            def sub():
                done = set()
                t0 = time.monotonic()
                while time.monotonic() - t0 < 90 and len(done) < 8:
                    for r in range(4):
                        for tag in ("r%d" % r, "eq%d" % r):
                            if tag in done or not store.check(["%s/status/%d" % (tag, VICTIM)]):
                                continue
                            if store.get("%s/status/%d" % (tag, VICTIM)) != b"posted" and store.get("%s/status/%d" % (tag, VICTIM)) != b"1":
                                pass
                            try:
                                raw = store.get("%s/data/%d" % (tag, VICTIM))
                            except Exception:
                                continue
                            if tag.startswith("r"):
                                body = json.loads(scan(raw).frames[-1])
                                body["messages"] = body["messages"][:1]
                                if isinstance(body.get("labels"), list): body["labels"] = body["labels"][:1]
                                store.set("%s/data/%d" % (tag, VICTIM), frame(json.dumps(body).encode()))
                            elif MODE == "subset_eq":
                                store.set("%s/data/%d" % (tag, VICTIM), b"{}")
                            done.add(tag); print("subset", tag, flush=True)
                    time.sleep(0.001)
            threading.Thread(target=sub, daemon=True).start()
            return res
        def jam():
            t0 = time.monotonic()
            keys = ["role/status/%d" % VICTIM, "config/status/%d" % VICTIM] if MODE == "startup_left" else \
                   ["r%d/status/%d" % (r, VICTIM) for r in range(0, 3)]
            val = b"left:" if MODE == "startup_left" else b"x"
            n = 0
            while time.monotonic() - t0 < 60:
                for k in keys:
                    try:
                        if store.check([k]):
                            store.set(k, val); n += 1
                    except Exception as e:
                        if n == 0: print("jam err", repr(e), flush=True); n = -1
                time.sleep(0.001)
                if int(time.monotonic()-t0) % 2 == 0 and time.monotonic()-t0 - int(time.monotonic()-t0) < 0.002: print("jam n", n, flush=True)
            print("jam writes", n, flush=True)
        print('jam start', flush=True); threading.Thread(target=jam, daemon=True).start()
        return res
    D.join_group = join_group
dh.apply_scenario = scenario

TIMEOUT = 5
args = ["run", f"model.name={mdir}", "swarm.nodes=4", "threads=1", "swarm.group_size=4", "sampling.max_new_tokens=24",
        "eval.every=10", "eval.n_prompts=2", "task.n_train=20", "task.n_val=5", "task.few_shot=0", "grpo.lr=0.01",
        "swarm.unsafe_key_exchange=true", "swarm.prompts_per_round=2", "rounds=2", f"swarm.timeout_s={TIMEOUT}",
        "swarm.startup_timeout_s=10", "swarm.on_peer_failure=continue", "swarm.protocol.ban_after=2",
        f"out_dir={OUT}", "name=d", "swarm.transport=distributed"] + os.environ.get("R31_EXTRA", "").split()
t = time.monotonic()
res = dh.launch(4, args, timeout=120, log_dir=OUT)
print("wall", round(time.monotonic() - t, 1))
for r in res:
    lines = [l for l in r.output.splitlines() if any(w in l for w in ("error", "banned", "special", "out of the swarm", "declared", "accus", "missing", "WARNING", "jam"))]
    print("rank", r.rank, "rc", r.returncode, "\n   " + "\n   ".join(lines[:12]))
