"""Fixtures: an undefended and a defended hand-written run directory (see report_fixtures.py)."""

from pathlib import Path

import pytest

from report_fixtures import write_run


@pytest.fixture()
def undefended_run(tmp_path) -> Path:
    return write_run(tmp_path / "undefended", defended=False)


@pytest.fixture()
def defended_run(tmp_path) -> Path:
    return write_run(tmp_path / "defended", defended=True)
