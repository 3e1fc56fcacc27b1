"""What each hostile program of tests/rewards/hostile_programs.py meets, with every layer and without the hook.

    python benchmarks/sandbox_hostile_outcomes.py > results/sandbox/hostile_outcomes.md

Same set-up as tests/rewards/test_hostile_programs.py (a host directory bound read-only, host
sockets, a victim process); prints a Markdown table: exit status, and the audit hook's reason or
the program's last error line, for both runs. The test suite asserts the outcomes; this only shows them.
"""

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "rewards"))

from dgrpo.rewards import bwrap  # noqa: E402
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
        why = lines[-1] if lines else "(no error)"
    return f"{result.exit_status} · {why}".replace("|", "\\|")[:110]


def main() -> None:
    outside = Path(tempfile.mkdtemp(prefix="dgrpo-hostile-", dir="/var/tmp"))
    outside.chmod(0o755)
    (outside / "public.txt").write_text("public")
    (outside / "secret.txt").write_text(suite.SECRET)
    (outside / "secret.txt").chmod(0o600)
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(outside / "sock"))
    unix.listen(1)
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    host = {"outside": outside, "unix": unix, "tcp": tcp, "udp": udp, "victim": victim}
    layout = bwrap.host_layout
    bwrap.host_layout = lambda packages, extra=(): layout(packages, (str(outside),))
    try:
        print("# What stopped each hostile program\n")
        print("`python benchmarks/sandbox_hostile_outcomes.py > results/sandbox/hostile_outcomes.md` (programs:")
        print("`tests/rewards/hostile_programs.py`; every one earns reward 0 in both runs; exit status 86 = the audit")
        print("hook, negative = killed by that signal; limits: 2 s wall clock, 1 s CPU).\n")
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
    finally:
        bwrap.host_layout = layout
        victim.kill()
        shutil.rmtree(outside)


if __name__ == "__main__":
    main()
