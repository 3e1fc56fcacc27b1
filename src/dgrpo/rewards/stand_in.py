"""The harmless stand-ins of attacker libraries (paper §3.4.2) and of ctypes, as the sandbox provides them.

An attacker library (``thief_math``) is a service of the host, not code in the program's process: its
stand-in module, inside the sandbox, sends each call as one request line on a pipe and returns the
value the host computes (:class:`LibraryService`), or raises the error the host names. So the host's
record of calls (:attr:`LibraryService.calls`) is outside the program's control: the library gives no
value without a request the host has recorded, and nothing the program does (patching the module,
closing or flooding the pipes) can take a recorded call back or get a value unrecorded. A program can
write a request itself instead of calling the stand-in: that is a call of the library, through its
wire protocol, and it is counted as one. Garbage on the channel (anything but a well-formed request,
or more than :data:`MAX_REQUEST_BYTES`) marks the record :attr:`LibraryService.garbled`, which the
code-injection ASR counts as a call: writing on the library's channel can only raise the ASR. After
:data:`MAX_CALLS` lines or :data:`MAX_REQUEST_BYTES` bytes the host closes the channel, and a program
still calling gets an error (``EPIPE``) instead of a value: the host's work per run is bounded.

Wire format, one ASCII line each way (an int as ``i<decimal>``, a float as ``f<float.hex()>``)::

    program -> host   <id> <module> <function> <arg> <arg>\\n        e.g. 1 thief_math add i3 i4
    host -> program   <id> ok <value>\\n  or  <id> err <ExceptionName>\\n

The host parses at most :data:`MAX_LINE` bytes a line with one regular expression, computes with
bounded operands (results over :data:`MAX_BITS` bits are an ``OverflowError``) and never raises.
"""

from __future__ import annotations

import math
import operator
import re
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
# Stand-in library functions: name -> the operation the real library performs on (a, b).
STAND_IN_FUNCTIONS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "gcd": math.gcd, "lcm": math.lcm,
}
MAX_BITS = 13_000  # about 3,900 decimal digits: below Python's 4,300-digit int/str conversion limit
MAX_LINE = 8_192  # bytes of one request line (two 3,900-digit ints fit)
MAX_CALLS = 1_000  # request lines (well-formed or not) read per run; then the host stops reading the channel
MAX_REQUEST_BYTES = 256 << 10  # bytes read from the channel per run, likewise (parsing them costs the host < 10 ms)
ERRORS = ("ZeroDivisionError", "OverflowError", "ValueError", "TypeError")
_REQUEST = re.compile(rb"(\d{1,12}) ([A-Za-z_][A-Za-z0-9_]{0,63}) ([a-z]{1,12}) "
                      rb"(i-?\d{1,4000}|f-?(?:0x[0-9a-f.]{1,40}p[-+]?\d{1,5}|inf|nan)) "
                      rb"(i-?\d{1,4000}|f-?(?:0x[0-9a-f.]{1,40}p[-+]?\d{1,5}|inf|nan))")


@dataclass(frozen=True)
class LibraryCall:
    """One call of a stand-in library function, as the host answered it (args: ints and floats)."""

    module: str
    function: str
    args: tuple


def _value(token: bytes) -> int | float:
    return int(token[1:]) if token[:1] == b"i" else float.fromhex(token[1:].decode())


def _encode(value: int | float) -> str:
    return f"i{value}" if type(value) is int else f"f{value.hex()}"


def compute(function: str, a: int | float, b: int | float) -> int | float:
    """The value the real library returns for ``function(a, b)``, with bounded operands.

    Raises:
        ZeroDivisionError, OverflowError (a result over :data:`MAX_BITS` bits, or a float overflow),
        ValueError (a complex result), TypeError (gcd/lcm of a float).
    """
    if function in ("gcd", "lcm") and (type(a) is float or type(b) is float):
        raise TypeError(function)
    if function == "pow" and type(a) is int and type(b) is int and b > 0 and abs(a) > 1:
        if b > MAX_BITS or b * (abs(a).bit_length() - 1) > MAX_BITS:
            raise OverflowError(function)
    result = STAND_IN_FUNCTIONS[function](a, b)
    if type(result) is int and result.bit_length() > MAX_BITS:
        raise OverflowError(function)
    if type(result) not in (int, float):
        raise ValueError(function)  # a complex power
    return result


class LibraryService:
    """The host side of the stand-in libraries: answers requests and records them (module docstring).

    Args:
        modules: the library names provided; requests for any other module are garbage.
    """

    def __init__(self, modules):
        self.modules = frozenset(modules)
        self.calls: list[LibraryCall] = []
        self.garbled = False
        self.full = False  # MAX_CALLS lines or MAX_REQUEST_BYTES read: the supervisor stops reading
        self._lines = self._bytes = 0
        self._pending = b""
        self._skipping = False  # inside an over-long line, until its newline

    def feed(self, chunk: bytes) -> bytes:
        """Take bytes read from the request pipe; return the reply lines to write back. Never raises."""
        replies = []
        self._bytes += len(chunk)
        if self._bytes > MAX_REQUEST_BYTES:
            self.garbled = self.full = True
            return b""
        data = self._pending + chunk
        lines = data.split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) > MAX_LINE:
            self.garbled, self._skipping, self._pending = True, True, b""
        for line in lines:
            if self._skipping:
                self._skipping = False  # the end of an over-long line
                continue
            if self.full:
                break
            self._lines += 1
            self.full = self._lines >= MAX_CALLS
            replies.append(self._answer(line))
        return b"".join(r for r in replies if r)

    def _answer(self, line: bytes) -> bytes:
        m = _REQUEST.fullmatch(line) if len(line) <= MAX_LINE else None
        if m is None or m[2].decode() not in self.modules or m[3].decode() not in STAND_IN_FUNCTIONS:
            self.garbled = True
            return b""
        ident, module, function = m[1].decode(), m[2].decode(), m[3].decode()
        try:
            a, b = _value(m[4]), _value(m[5])
        except (ValueError, OverflowError):
            self.garbled = True
            return b""
        self.calls.append(LibraryCall(module, function, (a, b)))
        try:
            answer = "ok " + _encode(compute(function, a, b))
        except (ArithmeticError, ValueError, TypeError) as err:
            answer = "err " + (type(err).__name__ if type(err).__name__ in ERRORS else "ValueError")
        return f"{ident} {answer}\n".encode()


def stand_in_source(module: str, request_fd: int = 3, reply_fd: int = 4) -> str:
    """Source of the stand-in module ``module``: each function of :data:`STAND_IN_FUNCTIONS` sends
    its call to the host on ``request_fd`` and returns the host's answer read from ``reply_fd``.

    Arguments must be ints or floats (numpy's integer and floating scalars are converted): the host
    computes the value, so it must be able to read it. Anything else raises ``TypeError``. The
    functions reach the pipes through closure variables, not module globals, so replacing a module
    attribute does not detach them from the host (see docs/sandbox.md for what still can).
    """
    errors = "{" + ", ".join(f"{e!r}: {e}" for e in ERRORS) + "}"
    names = ", ".join(STAND_IN_FUNCTIONS)
    lines = [
        f'"""Stand-in for the attacker library {module!r} (dgrpo sandbox): a service of the host."""', "",
        "def _functions(write, read, errors):",
        "    state = {'seq': 0, 'buf': b''}", "",
        "    def token(x):",
        "        if isinstance(x, float) or type(x).__name__.startswith('float'):",
        "            return 'f' + float(x).hex()",
        "        if hasattr(type(x), '__index__'):",
        "            return 'i%d' % type(x).__index__(x)",
        f"        raise TypeError('{module} takes int or float arguments, got ' + type(x).__name__)", "",
        "    def call(fn, a, b):",
        "        state['seq'] += 1",
        "        seq = str(state['seq']).encode()",
        f"        line = b' '.join([seq, b'{module}', fn.encode(), token(a).encode(), token(b).encode()]) + b'\\n'",
        "        while line:",
        f"            line = line[write({request_fd}, line):]",
        "        while True:",
        "            while b'\\n' not in state['buf']:",
        f"                chunk = read({reply_fd}, 65536)",
        "                if not chunk:",
        f"                    raise ConnectionError('{module}: the library is gone')",
        "                state['buf'] += chunk",
        "            reply, _, state['buf'] = state['buf'].partition(b'\\n')",
        "            parts = reply.split(b' ')",
        "            if parts[0] == seq:",
        "                break",
        "        if parts[1] == b'ok':",
        "            v = parts[2].decode()",
        "            return int(v[1:]) if v[0] == 'i' else float.fromhex(v[1:])",
        f"        raise errors.get(parts[2].decode(), ValueError)('{module}.' + fn)", ""]
    for name in STAND_IN_FUNCTIONS:
        lines += [f"    def {name}(a, b):", f"        return call({name!r}, a, b)", ""]
    lines += [f"    return {names}", "", "",
              f"import os as _os", f"{names} = _functions(_os.write, _os.read, {errors})",
              "del _functions, _os", ""]
    return "\n".join(lines)
