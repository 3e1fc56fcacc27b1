"""Command line: ``dgrpo run``, ``dgrpo config``, ``dgrpo resume``, ``dgrpo report``, ``dgrpo paper``, ``dgrpo federated``,
``dgrpo ensemble``, ``dgrpo harden``, ``dgrpo detector``.

``dgrpo run [--config FILE.yaml] [key.sub=value ...]`` trains a swarm on the embedded defaults
(arithmetic task, SmolLM2-135M-Instruct, 4 honest nodes, horizontal) unless told otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import logging
import sys


def _run(args) -> int:
    from dgrpo.config import load_config

    cfg = load_config(args.config, args.overrides)
    from dgrpo.recipes import run

    print(f"run directory: {run(cfg)}")
    return 0


def _with_section(section: str):
    """``dgrpo federated|ensemble|harden``: ``dgrpo run`` with that config section present (defaults if unset)."""

    def command(args) -> int:
        from dgrpo.config import load_config, read_config_file

        in_file = bool(args.config) and section in read_config_file(args.config)  # (size-limited read)
        named = any(o.split("=", 1)[0].split(".", 1)[0] == section for o in args.overrides)
        extra = [] if in_file or named else [f"{section}={{}}"]
        cfg = load_config(args.config, extra + args.overrides)
        from dgrpo.recipes import run

        print(f"run directory: {run(cfg)}")
        return 0

    return command


def _resume(args) -> int:
    from dgrpo.recipes import resume

    run_dir = resume(args.run_dir, args.overrides)
    if run_dir is not None:  # (None: nothing to do, said in one line)
        print(f"run directory: {run_dir}")
    return 0


def _report(args) -> int:
    from dgrpo.report import load_run, write_report

    if args.table:
        from dgrpo.report.table import sweep_table

        table = sweep_table([load_run(p) for p in args.run_dirs])
        if args.out:
            Path(args.out).write_text(table, encoding="utf-8")
        print(table, end="")
        return 0
    path = write_report(args.run_dirs, args.out)
    print(f"report: {path}")
    return 0


def _paper(args) -> int:
    if args.jobs < 1:
        from dgrpo.errors import ConfigError

        raise ConfigError(f"--jobs must be at least 1, got {args.jobs}")
    from dgrpo.paper.runner import list_text, reproduce

    if args.list or not args.name:
        print(list_text())
        return 0
    curves = None
    if args.curves is not None:
        from dgrpo.errors import ConfigError

        curves = [c.strip() for c in args.curves.split(",")]
        if not all(curves) or len(set(curves)) != len(curves):
            raise ConfigError(f"--curves: give distinct curve names separated by commas, got {args.curves!r}")
    folder = reproduce(args.name, args.scale, args.out, args.set, args.jobs, args.seeds, curves)
    print(f"reproduction: {folder}")
    return 0


def _keys(args) -> int:
    from dgrpo.errors import ConfigError
    from dgrpo.swarm.identity import write_keys

    if not 1 <= args.nodes <= 1024:  # swarm.nodes' bounds
        raise ConfigError(f"keys: nodes must be 1 to 1024 (swarm.nodes' bounds), got {args.nodes}")
    try:
        roster = write_keys(args.out, args.nodes)
    except ValueError as err:
        raise ConfigError(f"keys: {err}") from err
    print(f"wrote {args.nodes} private keys (node0.key .. node{args.nodes - 1}.key: copy each to its node only) and "
          f"{args.out}/roster.json (fingerprint {roster.fingerprint}); run each node with "
          f"swarm.protocol.roster={args.out}/roster.json swarm.protocol.key_dir=<folder holding its key>")
    return 0


def _writable(flag: str, path: Path, folder: bool) -> None:
    """ConfigError naming ``flag`` unless ``path`` can be written (a folder, or a file in an existing folder)."""
    from dgrpo.errors import ConfigError

    if folder:
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{flag} {path}: is a file; give a folder (new or a detector's) for the detector")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(f"{flag} {path}: cannot create the folder ({err.strerror}); choose another {flag}") from None
    elif path.is_dir() or not path.parent.is_dir():
        raise ConfigError(f"{flag} {path}: {'is a folder' if path.is_dir() else 'its folder does not exist'}; "
                          f"give a file in an existing folder")


def _detector_train(args) -> int:
    from dgrpo.verify.detector_data import counts_by_set, read_rows, train_settings

    settings = train_settings(args.set)  # (bad settings, data and --out fail before any model loads)
    rows = [r for path in args.data for r in read_rows(path)]
    counts = counts_by_set(rows)
    for name, c in counts.items():
        print(f"set {name}: {c['honest']} honest, {c['poisoned']} poisoned"
              + ("  (read as poisoned: only names starting with lower-case 'honest' are honest; add label "
                 "to its rows)" if name.lower().startswith("honest") and c["poisoned"] and not c["honest"] else ""))
    from dgrpo.verify.detector_train import check_labels

    check_labels(rows)
    from dgrpo.errors import ConfigError, DeviceError
    from dgrpo.policy.device import resolve_device

    try:
        resolve_device(settings.device)
    except DeviceError as err:
        raise ConfigError(f"detector: --set device: {err}".replace("model.device=", "device=")) from None
    _writable("--out", Path(args.out), folder=True)
    from dgrpo.verify.detector_train import train_detector

    metrics = train_detector(rows, out_dir=args.out, **settings.model_dump())
    print(json.dumps(metrics))
    print(f"detector: {args.out}")
    return 0


def _detector_eval(args) -> int:
    from dgrpo.verify.detector import read_meta
    from dgrpo.verify.detector_data import rates, read_rows, table

    if args.threshold is not None and not 0 < args.threshold < 1:
        from dgrpo.errors import ConfigError

        raise ConfigError(f"detector eval: --threshold must lie in (0, 1), got {args.threshold}")
    meta = read_meta(args.model)
    rows = [r for path in args.data for r in read_rows(path)]
    out = Path(args.out) if args.out else Path(args.model) / "eval.json"
    _writable("--out", out, folder=False)
    if args.scores:
        _writable("--scores", Path(args.scores), folder=False)
    from dgrpo.verify.detector import load_detector

    scores = load_detector(args.model, args.device, args.dtype).score([(r.question, r.completion) for r in rows]).tolist()
    summary = {"model": str(args.model), "data": list(args.data),
               **rates(rows, scores, meta["threshold"] if args.threshold is None else args.threshold)}
    out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if args.scores:
        with open(args.scores, "w", encoding="utf-8") as f:
            for r, s in zip(rows, scores):
                f.write(json.dumps({"set": r.set, "label": r.label, "score": s}) + "\n")
    print(table(summary), end="")
    print(f"summary: {out}")
    return 0


class _FieldsHelp(argparse.Action):
    """``-h/--help`` of ``dgrpo run``: the usual help, then every config field (dgrpo.config_doc)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from dgrpo.config_doc import help_text

        parser.print_help()
        try:
            print("\n" + help_text(), flush=True)
        except BrokenPipeError:  # (`dgrpo run --help | head`: argparse's own help ignores it and exits 0; so here)
            _quiet_stdout()
        parser.exit()


def _quiet_stdout() -> None:
    """After a ``BrokenPipeError`` on stdout (its reader left): send what is left to devnull, so the interpreter's
    exit flush prints no second error (Python's docs, signal module, "Note on SIGPIPE")."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # (a stdout without a file descriptor)
        pass


def _config(args) -> int:
    from dgrpo.config_doc import help_text

    print(help_text(args.key))
    return 0


def _set_option(p: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE`` beside the bare ``KEY=VALUE`` overrides (``dgrpo paper`` takes ``--set``; a user who
    types it here means the same override)."""
    p.add_argument("--set", dest="set_overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="an override, repeatable (as a bare KEY=VALUE; applied after the bare ones)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dgrpo", description="Decentralised GRPO swarms, attacks and defenses.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train a swarm (embedded defaults unless configured)", add_help=False)
    run.add_argument("-h", "--help", action=_FieldsHelp, help="show this help and every config field, then exit")
    run.add_argument("--config", "-c", help="YAML config file (see configs/)")
    run.add_argument("overrides", nargs="*", help="overrides such as swarm.nodes=4 grpo.lr=1e-5")
    _set_option(run)
    run.set_defaults(func=_run)
    for name, section, text in (
            ("federated", "federated", "swarm exchanging policy updates with robust aggregation and update attacks (docs/robust.md)"),
            ("ensemble", "ensemble", "K disjoint swarms decided by majority vote, vs the single swarm (docs/robust.md)"),
            ("harden", "hardening", "TokenBuncher entropy hardening, then malicious and benign fine-tuning (docs/robust.md)")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", "-c", help="YAML config file")
        p.add_argument("overrides", nargs="*", help=f"overrides, e.g. {section}.… swarm.nodes=5")
        _set_option(p)
        p.set_defaults(func=_with_section(section))
    conf = sub.add_parser("config", add_help=False, help="every config field: description, type, default, bounds (dgrpo config --help KEY)")
    conf.add_argument("-h", "--help", action="store_true", help="(the same: dgrpo config --help KEY shows KEY)")
    conf.add_argument("key", nargs="?", help="a key or section, e.g. swarm.nodes, defenses.0.atol, task")
    conf.set_defaults(func=_config)
    res = sub.add_parser("resume", help="continue a run from its last checkpoint (a harden run: from its first unfinished phase)")
    res.add_argument("run_dir")
    res.add_argument("overrides", nargs="*", help="overrides, e.g. rounds=20 to extend a finished run")
    _set_option(res)
    res.set_defaults(func=_resume)
    rep = sub.add_parser("report", help="self-contained HTML page of one run, or a comparison of several")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    rep.add_argument("--out", "-o", help="HTML file (default: RUN_DIR/report.html for one run, ./report.html for several)")
    rep.add_argument("--table", action="store_true", help="print a markdown table of the runs (a sweep: differing config values, held-out accuracy first/last with 95%% intervals) instead of the HTML page")
    rep.set_defaults(func=_report)
    keys = sub.add_parser("keys", help="write one Ed25519 key per node and the roster (swarm.protocol.roster) for a deployment")
    keys.add_argument("nodes", type=int, help="number of nodes (swarm.nodes)")
    keys.add_argument("--out", "-o", default="keys", help="folder for node{k}.key (copy each to its node only) and roster.json")
    keys.set_defaults(func=_keys)
    pap = sub.add_parser("paper", help="reproduce a figure of the paper (see --list)")
    pap.add_argument("name", nargs="?", help="reproduction name, e.g. fig1a, fig8")
    pap.add_argument("--list", action="store_true", help="list the reproductions")
    pap.add_argument("--scale", choices=["cpu", "paper"], default="cpu", help="cpu: embedded defaults; paper: Qwen2.5-1.5B, GSM8K, 32×12 (GPU)")
    pap.add_argument("--out", default="runs/paper", help="output folder (the entry writes OUT/NAME/)")
    pap.add_argument("--jobs", type=int, default=2, help="curves trained at the same time, one process each (default 2: one per CPU core)")
    pap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra override (repeatable): a config key for runs, a keyword for analytic entries")
    pap.add_argument("--seeds", type=int, nargs="+", default=None, metavar="N", help="train every curve once per seed (CURVE_seedN); the figure draws their mean and range")
    pap.add_argument("--curves", default=None, metavar="A,B", help="train and collect only these curves (comma-separated); a later run without it reuses them")
    pap.set_defaults(func=_paper)
    det = sub.add_parser("detector", help="train or evaluate the LoRA detector of poisoned completions (docs/detector.md)")
    dsub = det.add_subparsers(dest="detector_command", required=True)
    dtr = dsub.add_parser("train", help="fine-tune a detector on labelled JSONL completions")
    dtr.add_argument("--data", action="append", required=True, metavar="FILE.jsonl", help="rows {question, text, set[, label]} (repeatable)")
    dtr.add_argument("--out", required=True, metavar="DIR", help="folder for the adapter, head and detector.json")
    dtr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="training setting (repeatable): base_model, lora_rank, lr, epochs, batch_size, max_length, seed, threshold, dtype, device, log_every")
    dtr.set_defaults(func=_detector_train)
    dev = dsub.add_parser("eval", help="per-set detection / false-positive rates with Wilson 95%% intervals")
    dev.add_argument("--model", required=True, metavar="DIR", help="a folder written by dgrpo detector train")
    dev.add_argument("--data", action="append", required=True, metavar="FILE.jsonl", help="rows {question, text, set[, label]} (repeatable)")
    dev.add_argument("--out", metavar="FILE.json", help="summary JSON (default: DIR/eval.json)")
    dev.add_argument("--scores", metavar="FILE.jsonl", help="also write every row's set, label and P(poisoned)")
    dev.add_argument("--threshold", type=float, help="flag at P(poisoned) >= this (default: the detector's saved threshold)")
    dev.add_argument("--device", default="cpu", help="cpu, cuda, cuda:0, auto")
    dev.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    dev.set_defaults(func=_detector_eval)
    return parser


def _disk_full(err: BaseException) -> str | None:
    """A write that found the disk full after a checkpoint save (a plot, a log line), said with its file
    and run folder and what to free (``dgrpo.training.durable.disk_full_after_save``); else None."""
    import errno

    if not (isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)):
        return None
    from dgrpo.training.durable import disk_full_after_save
    from dgrpo.training.run_dir import last_claimed

    return disk_full_after_save(err, last_claimed[0] if last_claimed else None)


def main(argv: list[str] | None = None) -> int:
    """The ``dgrpo`` command: its exit status (0 done, 1 its output's reader left early, 2 bad input, 3 a peer)."""
    try:
        return _main(argv)
    except BrokenPipeError:  # (a reader of stdout that left early, outside a command's own one-line errors)
        _quiet_stdout()
        return 1


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "set_overrides", None):
        args.overrides = [*args.overrides, *args.set_overrides]
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("transformers", "httpx", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from dgrpo.errors import REPORTED, PeerFailure, one_line

    try:
        return args.func(args)
    # OSError and UnicodeDecodeError: a missing or unwritable path, a path that is a file, a non-UTF-8 file
    except (*REPORTED, OSError, UnicodeDecodeError) as err:
        print(f"dgrpo: error: {one_line(_disk_full(err) or err)}", file=sys.stderr)
        return 2
    except PeerFailure as err:  # distributed swarm: a peer died or stalled (named), or this node was excluded
        print(f"dgrpo: error: {one_line(err)}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
