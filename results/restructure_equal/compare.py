"""Compare two matrix.json files cell by cell (every number but seconds); the step checker's column
was `steps` before issue 32 and is its registry name `step_checker` after."""
import json, sys

RENAMED = {"steps": "step_checker"}


def cells(path):
    m = json.load(open(path))
    out = {}
    for k, v in m.items():
        if k in ("attacks", "honest", "defenses", "honest_seconds"):
            continue
        out[("setup", k)] = v
    for d, s in m["honest"].items():
        out[("honest", RENAMED.get(d, d))] = s
    for a, row in m["attacks"].items():
        for k, v in row.items():
            if k == "seconds":
                continue
            if k == "detection":
                for d, s in v.items():
                    out[(a, RENAMED.get(d, d))] = s
            else:
                out[(a, k)] = v
    return out, [RENAMED.get(d, d) for d in m["defenses"]]


(before, cols_b), (after, cols_a) = cells(sys.argv[1]), cells(sys.argv[2])
print(f"columns before: {cols_b}\ncolumns after:  {cols_a}")
added = [c for c in cols_a if c not in cols_b]  # a defense registered since (tolerant_replay, issue 36): new cells
diff = [k for k in sorted(set(before) | set(after), key=str)
        if before.get(k) != after.get(k) and not (k not in before and k[1] in added)]
for k in diff:
    print("DIFFERS", k, before.get(k), "->", after.get(k))
if added:
    print(f"columns added: {added} ({sum(k[1] in added for k in after)} cells, not compared)")
print(f"{len(before)} cells before, {len(after)} after; {len(diff)} differ"
      + ("; every number equal (the step checker's column renamed steps -> step_checker, column order aside)" if not diff else ""))
