"""The step checker's matrix column takes its registry name (issue 32, r32c item 2): rename `steps` ->
`step_checker` in committed matrix.json files (defenses, honest, every row's detection; order kept)."""
import json, sys
for path in sys.argv[1:]:
    d = json.load(open(path))
    ren = lambda k: "step_checker" if k == "steps" else k
    d["defenses"] = [ren(k) for k in d["defenses"]]
    d["honest"] = {ren(k): v for k, v in d["honest"].items()}
    for row in d["attacks"].values():
        row["detection"] = {ren(k): v for k, v in row["detection"].items()}
    open(path, "w").write(json.dumps(d, indent=1))
