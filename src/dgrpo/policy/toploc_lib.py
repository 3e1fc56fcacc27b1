"""The ``toploc`` library (Prime Intellect's TOPLOC, arXiv 2501.16007), importable with this project's torch.

``toploc==0.1.6`` ships compiled extensions (``toploc/C/csrc/{poly,ndd,utils}.*.so``) built against an
older torch: with torch 2.13 they fail to import (``undefined symbol:
_ZNK2at10TensorBase14const_data_ptrIfLi0EEEPKT_v``, docs/verification.md). The wheel ships their C++
sources too. :func:`load_toploc` imports the library as it is when it can; otherwise it compiles the
shipped sources once against the installed torch (:func:`torch.utils.cpp_extension.load`, ninja and a
C++ compiler, cached under the torch extensions folder: ``$TORCH_EXTENSIONS_DIR`` or
``~/.cache/torch_extensions``), registers the three extension modules under the names toploc's Python
code imports them by, and then imports ``toploc``: its Python API (``build_proofs``, ``verify_proofs``,
``ProofPoly``) runs unchanged on the rebuilt extension.

``poly.cpp`` ``#include``\\ s ``ndd.cpp`` and ``utils.cpp``, so one shared library holds all three
modules' init functions (``PyInit_poly``, ``PyInit_ndd``, ``PyInit_utils``): one compile (about a minute
of one core here), each module loaded from the same file by its own name.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

TOPLOC_VERSION = "0.1.6"
MODULES = ("ndd", "utils", "poly")  # the extension modules toploc/C/csrc provides, in dependency order
_BUILD_NAME = "dgrpo_toploc_" + TOPLOC_VERSION.replace(".", "_")
_toploc: ModuleType | None = None


def _forget_partial_import() -> None:
    """Drop what a failed ``import toploc`` left in ``sys.modules`` (its parents imported fine)."""
    for name in [n for n in sys.modules if n == "toploc" or n.startswith("toploc.")]:
        del sys.modules[name]


def build_extension(csrc: Path, verbose: bool = False) -> Path:
    """Compile toploc's shipped ``poly.cpp`` (with ``ndd.cpp`` and ``utils.cpp``, which it includes)
    against the installed torch; a no-op when the cached build is up to date.

    Args:
        csrc: the folder ``toploc/C/csrc`` of the installed wheel.

    Returns:
        Path of the shared library.

    Raises:
        RuntimeError: the compiler or ninja is missing or the build fails (torch's message, with the fix).
    """
    import torch.utils.cpp_extension as ext

    bin_dir = str(Path(sys.executable).parent)  # ninja from PyPI installs next to the interpreter
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    try:
        return Path(ext.load(name=_BUILD_NAME, sources=[str(csrc / "poly.cpp")], extra_cflags=["-O2", "-fopenmp"],
                             extra_ldflags=["-fopenmp"], is_python_module=False, verbose=verbose))
    except (RuntimeError, OSError, FileNotFoundError) as err:
        raise RuntimeError(f"toploc: rebuilding its extension against torch failed ({type(err).__name__}: "
                           f"{str(err)[-300:]}); install g++ (the README's first line) and ninja (`pip install "
                           "ninja`, in the dev extra)") from err


def load_toploc(verbose: bool = False) -> ModuleType:
    """The ``toploc`` module, its extension rebuilt from the shipped sources when the shipped one does
    not import (module docstring). Cached: later calls return the same module.

    Raises:
        ImportError: ``toploc`` is not installed (``pip install toploc==0.1.6``, in the dev extra).
        RuntimeError: the rebuild fails (:func:`build_extension`).
    """
    global _toploc
    if _toploc is not None:
        return _toploc
    import torch  # noqa: F401  (the extension links against the loaded libtorch)

    try:
        import toploc

        _toploc = toploc
        return toploc
    except ImportError as err:
        spec = importlib.util.find_spec("toploc")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"toploc is not installed: pip install toploc=={TOPLOC_VERSION} (dgrpo's dev extra)") from err
        _forget_partial_import()
    csrc = Path(list(spec.submodule_search_locations)[0]) / "C" / "csrc"
    library = build_extension(csrc, verbose)
    for short in MODULES:  # each from the one library, by its own init function (PyInit_<short>)
        name = f"toploc.C.csrc.{short}"
        loader = importlib.machinery.ExtensionFileLoader(name, str(library))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
        loader.exec_module(module)
        sys.modules[name] = module
    import toploc

    _toploc = toploc
    return toploc
