import json, sys, glob
def load(d):
    f = glob.glob(f"{d}/run/*/metrics.jsonl")[0]
    return [json.loads(l) for l in open(f)]
a, b = load(sys.argv[1]), load(sys.argv[2])
eq = ne = 0
for ra, rb in zip(a, b):
    for k in sorted(set(ra) | set(rb)):
        if k.startswith("time/"): continue
        if ra.get(k) == rb.get(k): eq += 1
        else:
            ne += 1; x, y = ra.get(k), rb.get(k)
            rel = abs(x - y) / max(abs(x), 1e-30) if isinstance(x, float) and isinstance(y, float) else None
            print("DIFF round", ra.get("round"), k, x, y, rel)
print(f"records {len(a)} / {len(b)}; non-time values equal {eq}, different {ne}")
for ra, rb in zip(a, b):
    print(ra["round"], {k: (ra[k], rb.get(k)) for k in ra if k.startswith("time/")})
