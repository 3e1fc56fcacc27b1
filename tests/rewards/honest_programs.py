"""Honest programs: what a solver of python_math (or a sampled policy) plausibly writes.

Each entry is ``name: (program, expected stdout)``; every expected output was worked out by hand (or
is a textbook value), not read from a run. Two uses: tests/rewards/test_honest_programs.py checks that
each one runs to the end in the sandbox and prints exactly that, and benchmarks/sandbox_syscalls.py
traces them to measure the system calls the seccomp allow-list must keep (docs/sandbox.md).
"""

HONEST = {
    # --- the task's own shapes: oracle programs and sampled solutions
    "oracle_integers": ("a = 3 + 4\nb = a * 5\nc = b - 6\nprint(c)", "29\n"),
    "oracle_division": ("a = 48/2\nb = 48+a\nprint(round(b))", "72\n"),
    "oracle_fraction_answer": ("a = 12/60\nb = a*50\nprint(round(b, 6))", "10.0\n"),
    "function_and_fstring": ("def apples(a, b):\n    return a * b\n\nprint(f'The answer is {apples(3, 4)}')",
                             "The answer is 12\n"),
    "class_and_list": ("class Box:\n    def __init__(self, n):\n        self.n = n\n"
                       "boxes = [Box(i) for i in range(5)]\nprint(sum(b.n for b in boxes))", "10\n"),
    "recursion": ("import sys\nsys.setrecursionlimit(5000)\ndef f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\n"
                  "print(f(3000))", "3000\n"),
    "exception_caught": ("try:\n    1 / 0\nexcept ZeroDivisionError:\n    print('undefined')", "undefined\n"),
    "big_integers": ("print(2 ** 200 % 1000)", "376\n"),  # 2^200 = ...376
    "many_lines_of_output": ("for i in range(3):\n    print(i)", "0\n1\n2\n"),
    # --- the standard library a solver reaches for
    "math_module": ("import math\nprint(math.gcd(84, 36), math.lcm(4, 6), math.comb(5, 2), math.isqrt(99))",
                    "12 12 10 9\n"),
    "fractions": ("from fractions import Fraction\nprint(Fraction(1, 3) + Fraction(1, 6))", "1/2\n"),
    "decimal": ("from decimal import Decimal, getcontext\ngetcontext().prec = 5\nprint(Decimal(1) / Decimal(7))",
                "0.14286\n"),
    "statistics": ("import statistics\nprint(statistics.mean([1, 2, 3, 4]), statistics.median([5, 1, 3]))",
                   "2.5 3\n"),
    "itertools_collections": ("import itertools, collections\n"
                              "print(len(list(itertools.permutations(range(4)))), collections.Counter('abca')['a'])",
                              "24 2\n"),
    "functools_heapq_bisect": ("import functools, heapq, bisect\n@functools.lru_cache(None)\n"
                               "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
                               "print(fib(30), heapq.nsmallest(2, [5, 1, 4]), bisect.bisect([1, 2, 4], 3))",
                               "832040 [1, 4] 2\n"),
    "random_seeded": ("import random\nrandom.seed(0)\nx = [random.random() for _ in range(3)]\nprint(len(x))", "3\n"),
    "datetime_time": ("import datetime, time\nt = time.time()\nd = datetime.date(2024, 3, 1) - datetime.date(2024, 2, 1)\n"
                      "time.sleep(0.01)\nprint(d.days, time.time() >= t, time.perf_counter() > 0)", "29 True True\n"),
    "json_re_string": ("import json, re, string\nprint(json.dumps({'a': 1}), re.findall(r'\\d+', 'a1b22'), "
                       "string.ascii_lowercase[:3])", "{\"a\": 1} ['1', '22'] abc\n"),
    "dataclass_enum_typing": ("from dataclasses import dataclass\nfrom enum import Enum\nfrom typing import List\n"
                              "class C(Enum):\n    A = 1\n@dataclass\nclass P:\n    x: int\n"
                              "ps: List[P] = [P(1), P(2)]\nprint(sum(p.x for p in ps) + C.A.value)", "4\n"),
    "hashlib_struct_pickle": ("import hashlib, struct, pickle, copy\n"
                              "print(hashlib.sha256(b'').hexdigest()[:8], struct.pack('<I', 1).hex(), "
                              "pickle.loads(pickle.dumps(copy.deepcopy([1, 2]))))", "e3b0c442 01000000 [1, 2]\n"),
    "cmath_array": ("import cmath, array\nprint(cmath.sqrt(-4), array.array('i', [1, 2, 3]).tolist())",
                    "2j [1, 2, 3]\n"),
    "files_in_the_work_directory": ("import os, tempfile\nopen('work.txt', 'w').write('12')\n"
                                    "with tempfile.NamedTemporaryFile('w+') as f:\n    f.write('x')\n    f.flush()\n"
                                    "os.makedirs('d/e', exist_ok=True)\n"
                                    "print(open('work.txt').read(), sorted(os.listdir('.'))[:2], os.getcwd())",
                                    "12 ['d', 'work.txt'] /tmp\n"),
    "shutil_pathlib_files": ("import os, shutil, tempfile, pathlib\nd = tempfile.mkdtemp()\n"
                             "p = pathlib.Path(d) / 'a.txt'\np.write_text('hello')\nshutil.copy(p, d + '/b.txt')\n"
                             "shutil.copy2(p, d + '/c.txt')\nshutil.move(d + '/c.txt', d + '/e.txt')\n"
                             "os.rename(d + '/b.txt', d + '/f.txt')\nos.replace(d + '/f.txt', d + '/g.txt')\n"
                             "with open(d + '/g.txt', 'r+') as f:\n    f.truncate(2)\n    f.flush()\n    os.fsync(f.fileno())\n"
                             "os.chmod(d + '/g.txt', 0o600)\nos.makedirs(d + '/x/y')\nos.rmdir(d + '/x/y')\n"
                             "print(sorted(os.listdir(d)), open(d + '/g.txt').read(), (pathlib.Path(d) / 'e.txt').read_text())\n"
                             "shutil.rmtree(d)\nprint(os.path.exists(d))",
                             "['a.txt', 'e.txt', 'g.txt', 'x'] he hello\nFalse\n"),
    "timeout_with_signals": ("import signal, time\ndef stop(signum, frame):\n    raise TimeoutError\n"
                             "signal.signal(signal.SIGALRM, stop)\nsignal.setitimer(signal.ITIMER_REAL, 0.05)\n"
                             "try:\n    while True:\n        time.sleep(0.01)\nexcept TimeoutError:\n    print('stopped')\n"
                             "signal.alarm(10)\nsignal.alarm(0)\nt = time.process_time()\nprint(t >= 0, time.monotonic() > 0)",
                             "stopped\nTrue True\n"),
    "growing_buffers": ("b = bytearray()\nfor _ in range(64):\n    b += bytes(1 << 20)\n"
                        "rows = [list(range(10 ** 5)) for _ in range(20)]\ndel rows\nprint(len(b) >> 20)", "64\n"),
    "read_standard_input": ("import sys\nprint(repr(sys.stdin.read()))", "''\n"),
    "memory_hungry": ("x = bytearray(200 * 1024 * 1024)\nx[-1] = 7\ny = list(range(10 ** 6))\n"
                      "print(x[-1] + len(y) // 10 ** 6)", "8\n"),
    "textwrap_unicode": ("import textwrap, unicodedata\nprint(textwrap.shorten('a b c d e f', 7), "
                         "unicodedata.name('é'))", "a [...] LATIN SMALL LETTER E WITH ACUTE\n"),
    "stderr_warning": ("import sys, warnings\nwarnings.warn('careful')\nprint('done', file=sys.stderr)\nprint(5)",
                       "5\n"),
    "platform_and_identity": ("import os, platform, sys\n"
                              "print(platform.system(), os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getppid(), "
                              "os.cpu_count() >= 1, sys.maxsize > 2 ** 32)", "Linux 65534 65534 65534 65534 1 True True\n"),
    "sys_exit_zero": ("import sys\nprint(9)\nsys.exit(0)", "9\n"),
    # --- numpy, sympy, mpmath
    "numpy_basics": ("import numpy as np\na = np.arange(1, 5)\nprint(int(a.sum()), int(np.prod(a)), a.mean())",
                     "10 24 2.5\n"),
    "numpy_large_array": ("import numpy as np\na = np.ones(5 * 10 ** 6)\nprint(int(a.sum()), a.nbytes >> 20)",
                          "5000000 38\n"),  # 5e6 * 8 bytes = 40,000,000 bytes = 38.1 MiB
    "numpy_linalg": ("import numpy as np\nx = np.linalg.solve(np.array([[2.0, 1.0], [1.0, 3.0]]), np.array([3.0, 5.0]))\n"
                     "print(np.round(x, 6).tolist(), round(float(np.linalg.det(np.eye(3) * 2)), 6))",
                     "[0.8, 1.4] 8.0\n"),  # 2x + y = 3, x + 3y = 5 -> x = 4/5, y = 7/5
    "numpy_random_fft": ("import numpy as np\nrng = np.random.default_rng(0)\nv = rng.random(8)\n"
                         "f = np.fft.fft(np.ones(4))\nprint(v.shape, np.round(f.real, 6).tolist())",
                         "(8,) [4.0, 0.0, 0.0, 0.0]\n"),
    "sympy_solve": ("import sympy as sp\nx = sp.symbols('x')\nprint(sp.solve(x ** 2 - 5 * x + 6, x))", "[2, 3]\n"),
    "sympy_calculus": ("from sympy import symbols, integrate, diff, sin, Rational, simplify\nx = symbols('x')\n"
                       "print(integrate(x ** 2, (x, 0, 3)), diff(sin(x), x), simplify(Rational(2, 4) + Rational(1, 4)))",
                       "9 cos(x) 3/4\n"),
    "mpmath_precision": ("import mpmath\nmpmath.mp.dps = 20\nprint(mpmath.nstr(mpmath.sqrt(2), 10))", "1.414213562\n"),
}
