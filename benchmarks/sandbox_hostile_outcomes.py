"""What each hostile program of tests/rewards/hostile_programs.py meets, with every layer and without the hook.

    python benchmarks/sandbox_hostile_outcomes.py > results/sandbox/hostile_outcomes.md

Same set-up as tests/rewards/test_hostile_programs.py (``hostile_host``: a host directory bound
read-only with FIFOs and late secrets, a directory bound under /tmp, host sockets, a victim process); prints a Markdown table: exit status, and the audit hook's reason or
the program's last error line, for both runs. The test suite asserts the outcomes; this only shows them.
"""

import secrets
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "rewards"))

from dgrpo.rewards.code import result_reward  # noqa: E402
from dgrpo.rewards.sandbox import run_python  # noqa: E402
import test_hostile_programs as suite  # noqa: E402
from hostile_programs import HOSTILE  # noqa: E402


def outcome(result) -> str:
    if result.blocked:
        why = f"hook: {result.blocked}"
    elif result.timed_out:
        why = "time limit"
    else:
        lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
        why = ascii(lines[-1])[1:-1] if lines else "(no error)"  # program bytes: escaped
    return f"{result.exit_status} · {why}".replace("|", "\\|")[:110]


def main() -> None:
    with suite.hostile_host() as host:
        print("# What stopped each hostile program\n")
        print("`python benchmarks/sandbox_hostile_outcomes.py > results/sandbox/hostile_outcomes.md` (programs:")
        print("`tests/rewards/hostile_programs.py`; every one earns reward 0 in both runs; exit status 86 = the audit")
        print("hook, negative = killed by that signal (-31: SIGSYS, another ABI); limits: 2 s wall clock, 1 s CPU).\n")
        print("| program | all layers: exit status · what stopped it | without the audit hook |")
        print("|---|---|---|")
        for name in HOSTILE:
            cells = []
            for hook in (True, False):
                token = f"987.{secrets.randbelow(10 ** 6):06d}"
                result = run_python(suite.fill(HOSTILE[name], host, token), suite.LIMITS, ("thief_math",), audit_hook=hook)
                assert result_reward(result, suite.ANSWER) == 0.0, name
                cells.append(outcome(result))
            print(f"| `{name}` | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
