"""Command line: ``dgrpo run``, ``dgrpo resume``.

``dgrpo run [--config FILE.yaml] [key.sub=value ...]`` trains a swarm on the embedded defaults
(arithmetic task, SmolLM2-135M-Instruct, 4 honest nodes, horizontal) unless told otherwise.
"""

from __future__ import annotations

import argparse
import logging
import sys


def _run(args) -> int:
    from dgrpo.config import load_config
    from dgrpo.experiments import run_experiment

    cfg = load_config(args.config, args.overrides)
    run_dir = run_experiment(cfg)
    print(f"run directory: {run_dir}")
    return 0


def _resume(args) -> int:
    from dgrpo.experiments.resume import resume

    run_dir = resume(args.run_dir, args.overrides)
    print(f"run directory: {run_dir}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dgrpo", description="Decentralised GRPO swarms, attacks and defenses.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train a swarm (embedded defaults unless configured)")
    run.add_argument("--config", "-c", help="YAML config file (see configs/)")
    run.add_argument("overrides", nargs="*", help="overrides such as swarm.nodes=4 grpo.lr=1e-5")
    run.set_defaults(func=_run)
    res = sub.add_parser("resume", help="continue a run from its last checkpoint")
    res.add_argument("run_dir")
    res.add_argument("overrides", nargs="*", help="overrides, e.g. rounds=20 to extend a finished run")
    res.set_defaults(func=_resume)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("transformers", "httpx", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from dgrpo.config import ConfigError
    from dgrpo.policy.loading import PolicyLoadError
    from dgrpo.swarm.distributed import PeerFailure
    from dgrpo.tasks.gsm8k import DataError

    try:
        return args.func(args)
    except (ConfigError, PolicyLoadError, DataError, FileExistsError, FileNotFoundError) as err:
        print(f"dgrpo: error: {err}", file=sys.stderr)
        return 2
    except PeerFailure as err:  # distributed swarm: a peer died or stalled (named), or this node was excluded
        print(f"dgrpo: error: {err}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
