"""Load a benchmark script of a folder under benchmarks/ as a module, with its folder importable while it loads
(the scripts import their siblings by name: ``import sets``)."""

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_script(folder: str, name: str, prefix: str):
    """``benchmarks/<folder>/<name>.py`` as the module ``<prefix>_<name>``."""
    where = BENCHMARKS / folder
    sys.path.insert(0, str(where))
    try:
        spec = importlib.util.spec_from_file_location(f"{prefix}_{name}", where / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(where))
