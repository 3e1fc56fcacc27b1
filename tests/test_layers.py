"""The package's layering (docs/architecture.md), checked on the source: no upward import, no import
cycle, kind modules that config checks can import without torch, and no feature probing in the run."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "dgrpo"

# A module may import its own package and packages of a strictly lower rank, never one above or beside it.
RANKS = {
    "": 0, "errors": 0, "types": 0,     # foundation: stdlib (and pydantic) only
    "registry": 1,                      # the one decorator, the strict config base
    "text": 1,                          # text as a reader sees it (Unicode folding, markup), shared by rewards and metrics
    "config_yaml": 1,                   # config files and overrides: YAML 1.2 (strict), sizes, depth
    "config_inputs": 2,                 # reading a config file or override list (on config_yaml)
    "rewards": 2, "tasks": 3, "metrics": 4, "policy": 5,
    "grpo": 6, "verify": 6, "swarm": 6,                                           # components
    "attacks": 7, "defenses": 7, "hardening": 7, "robust": 7, "transports": 7,    # kinds
    "integrations": 7,                  # dgrpo's checks inside other trainers (TRL)
    "config": 8,                        # the run config: sections, kinds resolved through the registry
    "training": 9,                      # run infrastructure: build, evaluate, records, checkpoint, resume, loop
    "recipes": 10, "report": 10,        # recipes; the report reads only run directories
    "paper": 11, "config_doc": 11, "cli": 12, "__main__": 13,
}


def _package(module: str) -> str:
    """``dgrpo.swarm.swarm`` → ``swarm``; ``dgrpo.config`` → ``config``; ``dgrpo`` → ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.Module, module_level_only: bool) -> list[tuple[str, int]]:
    """(imported dgrpo module, line) of every import that runs (not under ``if TYPE_CHECKING``)."""
    out = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if _is_type_checking(node):
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, ast.Import):
            out.extend((a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "dgrpo")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dgrpo":
            for a in node.names:  # `from dgrpo.a import b` imports dgrpo.a.b when b is a module
                sub = f"{node.module}.{a.name}"
                out.append((sub if _exists(sub) else node.module, node.lineno))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if module_level_only and inner:
            return
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return out


def _exists(module: str) -> bool:
    path = SRC.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _modules() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text(), str(p)) for p in sorted(SRC.rglob("*.py"))}


def _ancestors(module: str) -> list[str]:
    """The packages whose ``__init__`` runs when ``module`` is imported (dgrpo.a.b → dgrpo, dgrpo.a)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def test_every_package_has_a_rank():
    assert sorted({_package(m) for m in _modules()} - set(RANKS)) == []


def test_no_module_imports_a_layer_above_or_beside_its_own():
    bad = []
    for module, tree in _modules().items():
        own = _package(module)
        for target, line in _imports(tree, module_level_only=False):
            other = _package(target)
            if other != own and RANKS[other] >= RANKS[own]:
                bad.append(f"{module}:{line} imports {target} ({other!r} rank {RANKS[other]} ≥ {own!r} rank {RANKS[own]})")
    assert bad == []


def test_no_import_cycle():
    graph = {}
    for module, tree in _modules().items():
        targets = {t for t, _ in _imports(tree, module_level_only=True)}
        graph[module] = {a for t in targets for a in (*_ancestors(t), t) if a != module and a not in _ancestors(module)}
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" → ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def _mutual_pairs(modules: dict[str, ast.Module]) -> list[str]:
    """Every two modules that import each other, function-level imports included (``a:line ↔ b:line``)."""
    lines = {m: {t: line for t, line in reversed(_imports(tree, module_level_only=False))} for m, tree in modules.items()}
    return [f"{a}:{lines[a][b]} ↔ {b}:{lines[b][a]}" for a in sorted(lines) for b in sorted(lines[a])
            if a < b and a in lines.get(b, {})]


def test_no_two_modules_import_each_other():
    """No mutual imports, not even through a function-level import (issue 32): a pair that needs each
    other is one job split in the wrong place (the shared piece belongs in a module below both)."""
    assert _mutual_pairs(_modules()) == []


def test_the_pair_checker_sees_a_function_level_mutual_import():
    modules = {"dgrpo.verify.a": ast.parse("from dgrpo.verify.b import f\n"),
               "dgrpo.verify.b": ast.parse("def f():\n    from dgrpo.verify.a import g\n"),
               "dgrpo.verify.c": ast.parse("import dgrpo.verify.a\n")}
    assert _mutual_pairs(modules) == ["dgrpo.verify.a:1 ↔ dgrpo.verify.b:2"]


def test_the_checker_sees_an_upward_import_and_a_cycle(tmp_path):
    """The checks above can fail: a component importing a recipe, and two modules importing each other."""
    upward = ast.parse("from dgrpo.recipes.horizontal import one_round\n")
    assert _imports(upward, module_level_only=False) == [("dgrpo.recipes.horizontal", 1)]
    assert RANKS[_package("dgrpo.recipes.horizontal")] > RANKS[_package("dgrpo.swarm.swarm")]
    lazy = ast.parse("def f():\n    import dgrpo.config\nif TYPE_CHECKING:\n    import dgrpo.cli\n")
    assert _imports(lazy, module_level_only=False) == [("dgrpo.config", 2)]  # TYPE_CHECKING imports do not run
    assert _imports(lazy, module_level_only=True) == []


def test_kind_modules_and_the_config_load_without_torch():
    """Config checks import the modules of the kinds a config names: they must stay light (a config
    error in under 2 s). Every kind module (tasks, attacks, defenses, transports, aggregators, update
    attacks), the config and the CLI load here without torch, transformers or math-verify."""
    code = ("import json, sys; from dgrpo.registry import HOMES, names; "
            "kinds = {k: names(k) for k in HOMES}; "
            "import dgrpo.config, dgrpo.cli, dgrpo.recipes, dgrpo.training.resume; "
            "print(sorted(m for m in ('torch', 'transformers', 'math_verify', 'datasets') if m in sys.modules)); "
            "print(json.dumps(kinds))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    heavy, kinds = out.stdout.split("\n")[:2]
    assert heavy == "[]"
    # every kind the source registers was loaded (a new kind module is counted by its own decorator, no edit here)
    assert json.loads(kinds) == _decorated_kinds()


def _decorated_kinds() -> dict[str, list[str]]:
    """kind → the names its home's modules register, read from the source: every ``@register("kind", "name", …)``."""
    from dgrpo.registry import HOMES

    out: dict[str, set[str]] = {k: set() for k in HOMES}
    for kind, home in HOMES.items():
        path = SRC.parent.joinpath(*home.split("."))
        for p in [path.with_suffix(".py")] if path.with_suffix(".py").is_file() else sorted(path.rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text())):
                for deco in getattr(node, "decorator_list", []):
                    if (isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith("register") and len(deco.args) >= 2
                            and all(isinstance(a, ast.Constant) for a in deco.args[:2]) and deco.args[0].value in out):
                        out[deco.args[0].value].add(deco.args[1].value)
    return {k: sorted(v) for k, v in out.items()}


def test_the_source_reader_finds_every_kind_of_a_home():
    """The reader above can fail: it sees the defense decorators, and a home's count is not empty."""
    kinds = _decorated_kinds()
    assert {"topk", "replay", "judge", "step_checker", "reward_outlier"} <= set(kinds["defense"])
    assert all(kinds.values()) and "none" in kinds["attack"]


def test_defense_needs_are_declared_on_the_config_not_listed():
    """What a run and the matrix do for a defense follows from its config class: float32 logits for the
    exact checks, seed binding beside replay, whole groups for group statistics."""
    from dgrpo.registry import lookup, names

    needs = {k: (c.needs_exact_logits, c.needs_bound_seed, c.group_statistics)
             for k in names("defense") for c in [lookup("defense", k).config]}
    assert needs["topk"] == (True, False, False) and needs["replay"] == (True, True, False)
    assert needs["reward_outlier"] == (False, False, True) and needs["judge"] == needs["step_checker"] == (False,) * 3
    build = (SRC / "training" / "build.py").read_text()
    assert '"topk"' not in build and '"replay"' not in build  # no kind list in the run's set-up


@pytest.mark.parametrize("package", ["training", "recipes", "swarm", "paper"])
def test_the_run_never_probes_what_an_object_can_do(package):
    """The run loop, records, checkpoints, resume, recipes, the swarm and the paper's reproductions use
    the Transport, Attack and Defense protocols as declared (an attack's capabilities:
    ``dgrpo.attacks.base.Attack``)."""
    probes = [f"{p.relative_to(SRC)}:{node.lineno}" for p in (SRC / package).rglob("*.py")
              for node in ast.walk(ast.parse(p.read_text()))
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")]
    assert probes == []


def test_no_module_over_400_lines():
    assert [f"{p.relative_to(SRC)}: {n}" for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400] == []


def test_the_hivemind_helpers_use_the_transports_public_members():
    """transports/dht/* (the launch, the commit, ...) talk to HivemindTransport through its public members only:
    no attribute of the transport (``t``, ``transport``) whose name starts with ``_``."""
    private = [f"{p.relative_to(SRC)}:{node.lineno} {node.value.id}.{node.attr}" for p in (SRC / "transports" / "dht").glob("*.py")
               for node in ast.walk(ast.parse(p.read_text()))
               if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
               and node.value.id in ("t", "transport") and node.attr.startswith("_")]
    assert private == []
