"""Every `dgrpo …` command line of README.md and docs/*.md parses, and every one that starts a run passes
the config loader as written (the path `dgrpo run` takes: argparse, then ``load_config`` with its
section defaults, the recipe chosen for the config), in the mode and transport its overrides ask for.

Commands are read from the ```bash blocks (continuation lines joined, comments dropped) and from the
inline `dgrpo …` spans that give settings. A synopsis's
optional ``[…]`` groups are left out and the placeholders a reader fills in (``K``, ``ADDR``, ``T``, a
trailing ``...``) get the values of :data:`PLACEHOLDERS`. A run command runs up to the recipe: the recipe
is replaced by one that records the config, so no model loads. ``dgrpo keys`` and ``dgrpo config`` run
for real (cheap); the other commands (``paper``, ``report``, ``resume``, ``detector``) are parsed.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

import dgrpo.recipes
from dgrpo.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "mykinds" / "README.md"]
RUNS = {"run", "federated", "ensemble", "harden"}  # the commands that build a run config

# what a reader puts in for each placeholder of the docs' commands
PLACEHOLDERS = {
    "swarm.hivemind.node=K": "swarm.hivemind.node=1",
    "[ADDR]": "[/ip4/127.0.0.1/tcp/31337/p2p/QmYMYN5]",
    "QmYMYN5…": "QmYMYN5",
    "threshold: T}": "threshold: 0.5}",
    "key_dir=KEYS_OF_THIS_NODE": "key_dir=keys",
    "dgrpo run … 'swarm.hivemind.join": ("dgrpo run swarm.transport=hivemind swarm.nodes=4 swarm.hivemind.node=3 "
                                         "'swarm.hivemind.initial_peers=[/ip4/127.0.0.1/tcp/31337/p2p/QmYMYN5]' "
                                         "'swarm.hivemind.join"),  # "…": the hivemind settings of the lines above
    "$R": "results/heterogeneous_table1_v2",
    "dgrpo keys N": "dgrpo keys 4",
    "runs/arithmetic__injection__nodefense__seed0__…": "runs/arithmetic__injection__nodefense__seed0",
}


def _bash_blocks() -> list[tuple[str, str]]:
    """(doc:line, text) of every ```bash block."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in re.finditer(r"^```bash\n(.*?)^```", text, re.M | re.S):
            body = m.group(1)
            if body.startswith("# machine A"):  # two columns, one per machine: the left one is machine A's
                body = "\n".join(re.split(r"(?<=\S)\s{3,}", line)[0] for line in body.splitlines()) + "\n"
            out.append((f"{doc.name}:{text[:m.start()].count(chr(10)) + 2}", body))
    return out


def _argv(line: str) -> list[str] | None:
    """The dgrpo arguments of a shell line (``dgrpo …``, ``python -m dgrpo …``, ``torchrun … -m dgrpo …``),
    optional groups dropped and placeholders filled; None when the line runs no dgrpo command."""
    for key, value in PLACEHOLDERS.items():
        line = line.replace(key, value)
    tokens = shlex.split(line, comments=True)
    if "dgrpo" not in tokens:
        return None
    i = tokens.index("dgrpo")
    if i and tokens[i - 1] != "-m" and not all("=" in t for t in tokens[:i]):  # (env assignments before it)
        return None
    out, optional = [], False
    for t in tokens[i + 1:]:
        if t.startswith("[") and not optional:  # a synopsis's optional group: left out
            optional = True
        if not optional and t not in ("...", "…"):
            out.append(t)
        if optional and t.endswith("]"):
            optional = False
    while out and out[-1].startswith("("):  # "(same arguments)"
        out.pop()
    return out


def _inline_commands() -> list[tuple[str, str]]:
    """(doc:line, text) of every inline `dgrpo …` span outside the code blocks that gives settings or
    options (``dgrpo run model.name=…``; a bare ``dgrpo resume`` names a command, it is no example)."""
    out = []
    for doc in DOCS:
        text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), doc.read_text(), flags=re.M | re.S)
        for m in re.finditer(r"`((?:[A-Z_]+=\S+ )*(?:python -m )?dgrpo [^`]+)`", text):
            line = " ".join(m.group(1).split())
            if any("=" in t or t.startswith("-") for t in line.split()[1:]):
                out.append((f"{doc.name}:{text[:m.start()].count(chr(10)) + 1} (inline)", line))
    return out


def _commands() -> list[tuple[str, list[str], str]]:
    out = []
    lines = [(where, line) for where, body in _bash_blocks() for line in body.replace("\\\n", " ").splitlines()]
    for where, line in lines + _inline_commands():
        argv = _argv(line)
        if argv is not None:
            out.append((where, argv, line))
    return out


COMMANDS = _commands()


def test_the_docs_have_the_commands_this_test_checks():
    """The reader finds the commands (a change of block syntax must not empty this test)."""
    subs = {argv[0] for _, argv, _ in COMMANDS}
    assert {"run", "federated", "ensemble", "harden", "keys", "config", "paper", "resume", "report",
            "detector"} <= subs
    assert sum(argv[0] == "run" for _, argv, _ in COMMANDS) >= 20
    torchrun = [argv for _, argv, line in COMMANDS if line.lstrip().startswith("torchrun")]
    assert torchrun and all(a[0] in ("run", "resume") for a in torchrun)


@pytest.fixture()
def doc_cwd(tmp_path, monkeypatch):
    """A folder where the docs' relative paths resolve: configs/, examples/ and results/ of the repository."""
    for name in ("configs", "examples", "results"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# The worked example's defense command needs the example's module saved first: it is run by
# tests/test_architecture_examples.py::test_the_docs_command_runs_the_saved_defense, not here.
SAVED_DEFENSE = [c for c in COMMANDS if "defenses=[{kind: length}]" in c[1]]
CHECKED_HERE = [c for c in COMMANDS if c not in SAVED_DEFENSE]


def test_only_the_worked_defense_command_is_checked_elsewhere():
    assert len(SAVED_DEFENSE) == 1 and SAVED_DEFENSE[0][0].startswith("architecture.md:")


@pytest.mark.parametrize("where, argv, line", CHECKED_HERE, ids=[f"{w}:{' '.join(a)[:60]}" for w, a, _ in CHECKED_HERE])
def test_every_dgrpo_command_of_the_docs_is_valid(where, argv, line, doc_cwd, monkeypatch, capsys):
    configs = []
    monkeypatch.setattr(dgrpo.recipes, "run", lambda cfg, run_dir=None: configs.append(cfg) or Path("never-run"))
    if "PYTHONPATH=examples" in line:
        monkeypatch.syspath_prepend(str(ROOT / "examples"))
    if argv[0] in RUNS or argv[0] in ("keys", "config"):
        if any("keys/roster.json" in a for a in argv):  # the block's `dgrpo keys 4 --out keys` comes first
            assert main(["keys", "4", "--out", "keys"]) == 0
        if any("path: runs/detector" in a for a in argv):  # after `dgrpo detector train --out runs/detector`
            _trained_detector_stand_in(doc_cwd / "runs" / "detector")
        try:
            code = main(argv)
        except SystemExit as exit_:  # `dgrpo run --help`
            code = exit_.code
        err = capsys.readouterr().err
        assert code == 0, f"{where}: {line.strip()}\n{err[-2000:]}"
        if argv[0] in RUNS and "--help" not in argv:
            [cfg] = configs
            _check_claims(cfg, argv, line)
    else:
        args = build_parser().parse_args(argv)
        assert args.command == argv[0]


def _trained_detector_stand_in(folder: Path) -> None:
    """The ``detector.json`` that ``dgrpo detector train`` writes (the file a config check reads)."""
    from dgrpo.verify.detector_meta import META_FILE, TEMPLATE_VERSION

    folder.mkdir(parents=True)
    (folder / META_FILE).write_text(json.dumps({"base_model": "smollm2-135m-instruct", "template_version": TEMPLATE_VERSION,
                                                "max_length": 384, "threshold": 0.5, "base_shape": {}}))


def _check_claims(cfg, argv: list[str], line: str) -> None:
    """The config is the one the command asks for: its mode, transport and recipe section."""
    overrides = dict(a.split("=", 1) for a in argv[1:] if "=" in a and not a.startswith("-"))
    if "swarm.mode" in overrides:
        assert cfg.swarm.mode == overrides["swarm.mode"]
    if "swarm.transport" in overrides:
        assert cfg.swarm.transport == overrides["swarm.transport"]
    elif line.lstrip().startswith("torchrun"):
        pytest.fail(f"a torchrun command without swarm.transport=distributed: {line.strip()}")
    section = {"federated": "federated", "ensemble": "ensemble", "harden": "hardening"}.get(argv[0])
    if section:
        assert getattr(cfg, section) is not None
        assert dgrpo.recipes.recipe(cfg).__name__ == f"dgrpo.recipes.{argv[0] if argv[0] != 'harden' else 'hardening'}"
    else:
        assert dgrpo.recipes.recipe(cfg).__name__ == f"dgrpo.recipes.{cfg.swarm.mode}"


def test_the_command_reader_fills_placeholders_and_drops_optional_groups():
    assert _argv("dgrpo run [--config FILE.yaml] [key.sub=value ...]   # train") == ["run"]
    assert _argv("dgrpo paper matrix --set n=1 [--set 'attacks=[hail, topk_hail]']") == ["paper", "matrix", "--set", "n=1"]
    assert _argv("torchrun --nproc-per-node 4 -m dgrpo run swarm.nodes=4 ...") == ["run", "swarm.nodes=4"]
    assert _argv("PYTHONPATH=examples dgrpo run a=1") == ["run", "a=1"]
    assert _argv("pip install dgrpo") is None and _argv("transformers serve M --port 8000 &") is None
    assert _argv("dgrpo run swarm.hivemind.node=K") == ["run", "swarm.hivemind.node=1"]
