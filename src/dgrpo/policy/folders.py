"""Whether a model path names a saved model folder, checked before torch loads anything (the policy's
``model.name`` and the local judge's ``defenses.N.model``: config.py and defenses/judge.py share it)."""

from __future__ import annotations

from pathlib import Path


def check_model_folder(v: str) -> None:
    """A local path (``/``, ``.``, ``~``, or any path that exists) must be a folder holding
    ``config.json`` (checked before torch loads: a bad folder is reported in well under 2 s).

    Raises:
        ValueError: no such folder, a file instead of a folder, or a folder with no ``config.json``.
    """
    path = Path(v).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{v} is a file, not a model folder: give the folder that holds config.json "
                         f"({path.parent}?), or a hub id")
    if v.startswith((".", "/", "~")) and not path.is_dir():
        raise ValueError(f"no such model folder: {v}")
    if path.is_dir() and not (path / "config.json").is_file():
        raise ValueError(f"model folder {v} holds no config.json: use a folder written by save_pretrained, or a hub id")
