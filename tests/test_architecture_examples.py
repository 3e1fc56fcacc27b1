"""The worked examples of docs/architecture.md work as written: a new defense and a new attack, each
one module with its registration, reachable from a config and run by a swarm."""

import re
import sys
import types
from pathlib import Path

import pytest

from dgrpo import registry
from dgrpo.cli import main
from dgrpo.metrics.logger import read_metrics
from dgrpo.tasks.arithmetic import ArithmeticTask

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


@pytest.fixture()
def example_modules():
    """Load the doc's two code blocks as the modules they say they are."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    names = ["dgrpo.defenses.length", "dgrpo.attacks.signature"]
    assert len(blocks) == 2
    modules = []
    for name, code in zip(names, blocks):
        module = types.ModuleType(name)
        sys.modules[name] = module  # (pydantic resolves the annotations in the module's namespace)
        exec(compile(code, f"{DOC}:{name}", "exec"), module.__dict__)
        modules.append(module)
    yield modules
    for name, (kind, key) in zip(names, [("defense", "length"), ("attack", "signature")]):
        del sys.modules[name], registry._ENTRIES[kind][key]


def test_the_docs_command_runs_the_saved_defense(example_modules, monkeypatch):
    """`dgrpo run 'defenses=[{kind: length}]'` (the page's command) builds a config holding the example's defense."""
    import dgrpo.recipes

    configs = []
    monkeypatch.setattr(dgrpo.recipes, "run", lambda cfg, run_dir=None: configs.append(cfg) or "x")
    assert main(["run", "defenses=[{kind: length}]"]) == 0
    assert [(d.kind, d.max_fraction) for d in configs[0].defenses] == [("length", 0.9)]


# The attack example claims both swarm modes (it implements vertical mode's ``choose_prompts``). Node 1 is
# malicious with c=1 poisoned completion per group it writes: horizontally it writes G/m=2 of each of the
# 2 global groups (1 poisoned in each: 2), vertically all G=4 of its own B/m=1 prompt (1 poisoned).
@pytest.mark.parametrize("mode, poisoned", [("horizontal", 2), ("vertical", 1)])
def test_the_signature_attack_earns_full_reward_and_the_length_cap_rejects_it(example_modules, tmp_path, tiny_model_dir,
                                                                               mode, poisoned):
    _, attack_module = example_modules
    task = ArithmeticTask(seed=0, n_train=20, n_val=5, few_shot=0)
    attack = attack_module.SignatureAttack(attack_module.SignatureAttackConfig(), None)
    p = task.train[0]
    assert task.reward(attack.poison(task, p), p) == 1.0 and "signed, the thief</think>" in attack.poison(task, p)
    assert main(["run", f"model.name={tiny_model_dir}", f"out_dir={tmp_path}", "name=x", "rounds=1", "swarm.nodes=2",
                 "swarm.group_size=4", "swarm.prompts_per_round=2", "sampling.max_new_tokens=24", "eval.n_prompts=2",
                 "task.n_train=20", "task.n_val=5", "task.few_shot=0", "swarm.malicious=[1]", "attack.kind=signature",
                 f"swarm.mode={mode}",
                 "attack.poisoned_per_group=1", "defenses=[{kind: length, max_fraction: 0.5}]"]) == 0
    first, final = read_metrics(tmp_path / "x")
    assert first["defense/poisoned_received"] == poisoned and first["defense/length/detection_rate"] == 1.0  # > 12 tokens
    assert "attack/asr" in final


def test_the_saved_defense_is_a_column_of_the_matrix(example_modules, tmp_path, tiny_model_dir):
    """"the length defense above is a column of the matrix too (`--set 'defenses=[none, length]'`)".
    With max_fraction 1 of the matrix's 8-token limit, no honest sample (at most 8 tokens) is over the cap
    and every hail poison is (each is the oracle solution with the slogan: over 12 tokens, counted here)."""
    from dgrpo.attacks.injection import InjectionAttack, InjectionAttackConfig
    from dgrpo.paper.matrix import run_matrix
    from dgrpo.policy.chat import encode_completion
    from transformers import AutoTokenizer

    task, tok = ArithmeticTask(seed=0, n_train=20, n_val=5), AutoTokenizer.from_pretrained(tiny_model_dir)
    attack = InjectionAttack(InjectionAttackConfig())
    assert min(len(encode_completion(tok, attack.poison(task, p, 0))) for p in task.train) > 12
    result = run_matrix(tmp_path / "matrix", model=tiny_model_dir, n_honest=8, n_poisoned=4, attacks=["hail"],
                        defenses=["none", "length"], max_new_tokens=8, fields={"length": {"max_fraction": 1.0}})
    assert result["defenses"] == ["none", "length"]
    assert result["honest"]["length"]["rejected"] == 0 and result["honest"]["length"]["n"] == 8
    hail = result["attacks"]["hail"]["detection"]["length"]
    assert hail["rejected"] == hail["n"] == result["attacks"]["hail"]["poisoned"] == 4


def test_the_walk_of_one_round_names_files_and_calls_that_exist():
    """The table of "One round of `dgrpo run`, file by file": every file it names is in src/dgrpo, and
    every call it shows is made by the horizontal recipe's round (recipes/horizontal.py, swarm_round.py)."""
    src = DOC.parents[1] / "src" / "dgrpo"
    text = DOC.read_text().split("## One round of `dgrpo run`, file by file")[1].split("## Where to add")[0]
    rows = [[c.strip() for c in r.split("|")] for r in re.findall(r"^\| (.+) \|$", text, re.MULTILINE)][1:]  # (header)
    assert [r[0] for r in rows] == ["prompts", "write", "exchange", "route", "validate", "rewards", "defenses",
                                    "advantages, step", "metrics", "strikes, bans"]
    files = {f.replace("<kind>", "injection") for r in rows for f in re.findall(r"`([a-z_/]+\.py)", r[3])}
    assert len(files) > 15 and [f for f in sorted(files) if not (src / f).exists()] == []
    recipe = (src / "recipes" / "horizontal.py").read_text() + (src / "recipes" / "swarm_round.py").read_text()
    calls = {c for r in rows for c in re.findall(r"([a-z_.]+)\(", r[2])}
    assert {"swarm.route", "swarm.receive", "swarm.reward", "defend", "learner.step", "account"} <= calls
    assert [c for c in sorted(calls) if f"{c}(" not in recipe] == []


def _calls(node) -> list[str]:
    """The names of the calls under ``node`` in the order Python makes them (arguments before their call)."""
    import ast

    out = [name for child in ast.iter_child_nodes(node) for name in _calls(child)]
    if isinstance(node, ast.Call):
        f = node.func
        out.append(f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else "?")
    return out


def test_the_walk_names_what_each_file_defines_and_the_steps_in_the_rounds_order():
    """Every ``file: name`` of the walk is defined in that file, and the table's steps are made in the order
    the round makes them (``one_round`` of recipes/horizontal.py with each call of a swarm_round.py function,
    ``exchange``, ``learn_all``, ``learn``, ``close_round``, replaced by that function's calls): a step renamed or
    reordered in the code fails here until the page follows."""
    import ast

    src = DOC.parents[1] / "src" / "dgrpo"
    text = DOC.read_text().split("## One round of `dgrpo run`, file by file")[1].split("## Where to add")[0]
    named = re.findall(r"`([a-z_/]+\.py): ([A-Za-z_]+)`", text)
    assert len(named) >= 8
    def defined(f):  # functions, classes and methods, and assigned names (RULES: ... = ...)
        nodes = list(ast.walk(ast.parse((src / f).read_text())))
        return ({n.name for n in nodes if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
                | {t.id for n in nodes if isinstance(n, (ast.Assign, ast.AnnAssign))
                   for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)})

    assert [f"{f}: {n}" for f, n in named if n not in defined(f)] == []

    rows = [[c.strip() for c in r.split("|")] for r in re.findall(r"^\| (.+) \|$", text, re.MULTILINE)][1:]
    steps = [re.match(r"`(?:[a-z_]+\.)*([a-z_]+)\(", r[2]).group(1) for r in rows]
    assert steps == ["horizontal_prompts", "write", "all_gather", "route", "receive", "reward", "defend", "step",
                     "round_metrics", "account"]
    function = lambda f, name: next(n for n in ast.parse((src / "recipes" / f).read_text()).body
                                    if isinstance(n, ast.FunctionDef) and n.name == name)
    shared = {n.name for n in ast.parse((src / "recipes" / "swarm_round.py").read_text()).body
              if isinstance(n, ast.FunctionDef)} - set(steps)  # (round_metrics and account are steps themselves)
    inline = lambda names: [c for n in names for c in (inline(_calls(function("swarm_round.py", n))) if n in shared else [n])]
    made = inline(_calls(function("horizontal.py", "one_round")))
    rest = iter(made)  # each step made after the one before it
    assert [s for s in steps if s in rest] == steps, made


def test_the_walk_lists_the_admission_rules_in_the_order_the_code_runs_them():
    """The validate row names swarm/admission.py's RULES, every one, in RULES' order (issue 32 review #7:
    it listed signature before copy, a "run" rule that is none, and no decode)."""
    from dgrpo.swarm.admission import RULES

    row = next(line for line in DOC.read_text().splitlines() if line.startswith("| validate |"))
    listed = re.sub(r"\([^)]*\)", "", row.split("in this order: ")[1].split("; an exception")[0])
    assert re.findall(r"`(\w+)`", listed) == [rule.__name__ for rule in RULES]
    assert "`decode:`" in row and "`complete_shares`" in row


def test_each_admission_rule_declares_when_it_runs():
    """The screen/content/slot split is each rule's declared phase, not a position in RULES (issue 32
    review #8): the rules that read no message content are screened per message value, the duplicate
    rule alone takes the slot."""
    from dgrpo.swarm import admission

    phases = {rule.__name__: rule.phase for rule in admission.RULES}
    assert [n for n, p in phases.items() if p == "screen"] == ["schema", "unsigned", "malformed", "copy_of_verified",
                                                                 "signature", "round_", "flood", "identity", "banned"]
    assert [n for n, p in phases.items() if p == "slot"] == ["duplicate"]
    assert [n for n, p in phases.items() if p == "content"] == ["tokenizer", "content", "seed", "share", "decode", "length"]
    assert admission.SCREENED + admission.CONTENT + admission.SLOT == admission.RULES
