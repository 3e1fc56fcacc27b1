"""Honest programs run to the end in the sandbox and print what they print outside it (hand-worked values).

The seccomp allow-list was measured from these programs (benchmarks/sandbox_syscalls.py); this test
is what keeps it wide enough, with the audit hook and without it.
"""

import pytest

from dgrpo.rewards.sandbox import SandboxLimits, run_many, run_python
from honest_programs import HONEST

LIMITS = SandboxLimits(timeout_s=60)  # generous: the test machine is shared and loaded


def test_the_corpus_is_broad():
    assert len(HONEST) >= 30
    text = "".join(program for program, _ in HONEST.values())
    for module in ("numpy", "sympy", "mpmath", "fractions", "decimal", "shutil", "tempfile", "signal", "random"):
        assert module in text


@pytest.mark.parametrize("hook", [True, False])
def test_honest_programs_print_their_answers(hook):
    names = sorted(HONEST)
    if hook:
        results = run_many([HONEST[n][0] for n in names], LIMITS, ("thief_math",))
    else:
        results = [run_python(HONEST[n][0], LIMITS, ("thief_math",), audit_hook=False) for n in names]
    outcomes = {n: (r.ok, r.stdout) for n, r in zip(names, results)}
    wrong = {n: (o, results[names.index(n)].stderr[-300:]) for n, o in outcomes.items() if o != (True, HONEST[n][1])}
    assert wrong == {}
