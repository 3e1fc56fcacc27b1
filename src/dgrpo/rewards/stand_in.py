"""The harmless stand-ins of attacker libraries (paper §3.4.2) and of ctypes, as the sandbox provides them.

A stand-in returns the right value and writes each call as one JSON line to a pipe the host reads
(:func:`parse_calls`); the program can write to that pipe too (see :mod:`dgrpo.attacks.code_injection`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# ctypes gives raw memory access without audit events, so the real one is refused (its C part,
# _ctypes, is denied). sympy asks sizeof(c_long) at import and numpy imports it optionally: this
# stand-in, served first by the runner's module finder, answers that and nothing else.
CTYPES_SHIM = (
    '"""dgrpo sandbox: ctypes is not available; this stand-in only answers sizeof(c_long) (sympy)."""\n'
    "import struct as _struct\n\n\nclass c_long:\n    pass\n\n\n"
    "def sizeof(t):\n    if t is c_long:\n        return _struct.calcsize('l')\n"
    "    raise NotImplementedError('ctypes is not available in the dgrpo sandbox')\n"
)
# Stand-in library functions: name -> expression in a and b (the value the real library returns).
STAND_IN_FUNCTIONS = {
    "add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b", "floordiv": "a // b",
    "mod": "a % b", "pow": "a ** b", "gcd": "_math.gcd(a, b)", "lcm": "_math.lcm(a, b)",
}


@dataclass(frozen=True)
class LibraryCall:
    """One call of a stand-in library function, as the stand-in recorded it."""

    module: str
    function: str
    args: tuple


def stand_in_source(module: str, record_fd: int = 3) -> str:
    """Source of the harmless stand-in for the attacker library ``module``.

    Every function of :data:`STAND_IN_FUNCTIONS` returns the right value and writes
    ``{"module", "function", "args"}`` as one JSON line (under ``PIPE_BUF``, so atomic) to the pipe
    ``record_fd`` that the host reads; a closed pipe is ignored. The JSON is written by hand: the
    ``json`` module would cost a program that imports the library 6 ms of imports.
    """
    lines = [f'"""Stand-in for the attacker library {module!r} (dgrpo sandbox): right values, calls recorded."""',
             "import math as _math", "import os as _os", "",
             "def _text(s):",
             "    s = s[:200]",
             "    return '\"' + ''.join(c if ' ' <= c < '\\x7f' and c not in '\"\\\\' else '\\\\u%04x' % min(ord(c), 0xfffd)"
             " for c in s) + '\"'", "",
             "def _token(a):",
             "    if a is None or isinstance(a, bool):",
             "        return {None: 'null', True: 'true', False: 'false'}[a]",
             "    if isinstance(a, int):",
             "        return str(a) if abs(a) < 10 ** 300 else _text(repr(a))",
             "    if isinstance(a, float):",
             "        return repr(a) if a == a and abs(a) != float('inf') else 'null'",
             "    return _text(a if isinstance(a, str) else repr(a))", "",
             "def _record(fn, args):",
             f"    line = '{{\"module\": \"{module}\", \"function\": \"' + fn + '\", \"args\": [' + ', '.join(_token(a) for a in args) + ']}}\\n'",
             "    try:",
             f"        _os.write({record_fd}, line.encode('utf-8', 'replace'))",
             "    except (OSError, ValueError):",
             "        pass", ""]
    for name, expr in STAND_IN_FUNCTIONS.items():
        lines += [f"def {name}(a, b):", f"    _record({name!r}, (a, b))", f"    return {expr}", ""]
    return "\n".join(lines)


def parse_calls(raw: bytes) -> tuple[LibraryCall, ...]:
    """The calls recorded on the pipe, skipping lines that are not a stand-in's record."""
    calls = []
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
            calls.append(LibraryCall(str(rec["module"]), str(rec["function"]), tuple(rec["args"])))
        except (ValueError, KeyError, TypeError):
            continue  # a line the program itself wrote or cut short
    return tuple(calls)
