"""Experiment trackers that mirror ``metrics.jsonl``: TensorBoard (installed with dgrpo), Weights &
Biases and trackio (opt-in extras). Each receives the same namespaced scalars per round
(``train/reward``, ``defense/topk/detection_rate``, …, step = round) and the resolved config once.

``tracking.trackers=[tensorboard, wandb]`` picks them; a tracker whose package is missing is a
one-line config error naming the extra to install (checked before anything loads).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from dgrpo.registry import StrictConfig

Tracker = Literal["tensorboard", "wandb", "trackio"]
PACKAGES = {"tensorboard": ("tensorboard", 'pip install tensorboard (a dependency of dgrpo: reinstall dgrpo)'),
            "wandb": ("wandb", 'pip install "dgrpo[wandb]"'), "trackio": ("trackio", 'pip install "dgrpo[trackio]"')}


class TrackingConfig(StrictConfig):
    """Where the per-round metrics go besides metrics.jsonl (docs/tracking.md)."""

    trackers: list[Tracker] = Field(default_factory=list, description="Trackers that mirror metrics.jsonl: tensorboard (RUN_DIR/tb), wandb (RUN_DIR/wandb; extra dgrpo[wandb]), trackio (extra dgrpo[trackio]). Each gets every numeric metric per round and the resolved config.")
    project: str = Field("dgrpo", min_length=1, description="W&B and trackio project; the run's name is its run directory's name.")
    wandb_mode: Literal["online", "offline", "disabled"] | None = Field(None, description="W&B mode (None = W&B's default, or $WANDB_MODE); offline writes RUN_DIR/wandb for `wandb sync`.")

    @field_validator("trackers")
    @classmethod
    def _installed(cls, v: list[str]) -> list[str]:
        for name in dict.fromkeys(v):
            module, fix = PACKAGES[name]
            if importlib.util.find_spec(module) is None:
                raise ValueError(f"tracker {name!r} needs the {module} package: {fix}")
        return list(dict.fromkeys(v))


def _scalars(record: dict) -> dict[str, float]:
    """The numeric metrics of a round record (``round`` itself and nulls left out)."""
    return {k: v for k, v in record.items()
            if k != "round" and v is not None and isinstance(v, (int, float)) and not isinstance(v, bool)}


class TensorBoardTracker:
    """Scalars to ``RUN_DIR/tb``; the resolved config as the ``config`` text (JSON)."""

    def __init__(self, run_dir: Path, config: dict | None, project: str):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(Path(run_dir) / "tb"))
        if config is not None:
            self.writer.add_text("config", "```\n" + json.dumps(config, indent=1, sort_keys=True) + "\n```", 0)

    def log(self, record: dict) -> None:
        for key, value in _scalars(record).items():
            self.writer.add_scalar(key, value, record["round"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A W&B run named after the run directory, files under ``RUN_DIR/wandb``."""

    def __init__(self, run_dir: Path, config: dict | None, project: str, mode: str | None = None):
        import wandb

        self.run = wandb.init(project=project, name=Path(run_dir).name, dir=str(run_dir), config=config or {},
                              mode=mode, reinit="create_new")

    def log(self, record: dict) -> None:
        self.run.log(_scalars(record), step=record["round"])

    def close(self) -> None:
        self.run.finish()


class TrackioTracker:
    """A trackio run named after the run directory (stored under $TRACKIO_DIR, default ~/.cache/huggingface/trackio)."""

    def __init__(self, run_dir: Path, config: dict | None, project: str):
        import trackio

        self.trackio = trackio
        self.run = trackio.init(project=project, name=Path(run_dir).name, config=config or {}, embed=False)

    def log(self, record: dict) -> None:
        self.run.log(_scalars(record), step=record["round"])

    def close(self) -> None:
        self.run.finish()


def open_trackers(run_dir: Path, names: list[str], config: dict | None, project: str = "dgrpo",
                  wandb_mode: str | None = None) -> list:
    """The trackers ``names`` for one run (in order, each once)."""
    out = []
    for name in dict.fromkeys(names):
        if name == "tensorboard":
            out.append(TensorBoardTracker(run_dir, config, project))
        elif name == "wandb":
            out.append(WandbTracker(run_dir, config, project, wandb_mode))
        elif name == "trackio":
            out.append(TrackioTracker(run_dir, config, project))
        else:
            raise ValueError(f"unknown tracker {name!r}; known: {', '.join(PACKAGES)}")
    return out
