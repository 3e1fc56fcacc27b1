"""The hostile-program suite: every program of tests/rewards/hostile_programs.py attacks the sandbox.

Each program runs twice: with every layer, and with the audit hook left out, which shows that the
OS layers (bubblewrap's namespaces and read-only file system, seccomp, resource limits) hold alone,
as they must once a program gets past the hook (several programs do: they print nothing about it,
but their attack reaches the kernel). A host directory OUTSIDE, holding a world-readable file, a
0600 secret and a unix socket, is bound read-only into the sandbox so that the attacks have a real
target. For every program: reward 0, no marker file and no change in OUTSIDE, no process of the run
left once the call returns, the secret never printed, and the host (this process, a victim process,
its sockets) untouched. The last test sends such programs as python_math completions through the
swarm's receive path.
"""

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dgrpo.policy.policy import Policy
from dgrpo.policy.sampling import SamplingParams
from dgrpo.rewards import bwrap
from dgrpo.rewards.code import result_reward
from dgrpo.rewards.sandbox import SandboxLimits, run_python
from dgrpo.types import Message
from dgrpo.swarm.swarm import Swarm
from dgrpo.swarm.validation import Limits
from dgrpo.tasks.python_math import PythonMathTask
from hostile_programs import HOSTILE

LIMITS = SandboxLimits(timeout_s=2, cpu_s=1)
ANSWER = "4242"
SECRET = "dgrpo-secret-" + secrets.token_hex(8)


def processes_mentioning(*texts: str) -> list[str]:
    """Command lines of live processes (zombies included) that contain one of ``texts``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(t in cmd for t in texts):
                found.append(f"{pid}: {cmd[:200]}")
    return found


@pytest.fixture(scope="module")
def host():
    """OUTSIDE (bound read-only into every sandbox of this module), host sockets and a victim process."""
    parent = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None  # not under /tmp, which the sandbox replaces
    outside = Path(tempfile.mkdtemp(prefix="dgrpo-hostile-", dir=parent))
    outside.chmod(0o755)
    (outside / "public.txt").write_text("public")
    (outside / "public.txt").chmod(0o644)
    (outside / "secret.txt").write_text(SECRET)
    (outside / "secret.txt").chmod(0o600)
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(outside / "sock"))
    unix.listen(1)
    tcp = socket.create_server(("127.0.0.1", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    for s in (unix, tcp, udp):
        s.setblocking(False)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    os.environ["DGRPO_HOSTILE_SECRET"] = SECRET
    layout = bwrap.host_layout
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bwrap, "host_layout", lambda packages, extra=(): layout(packages, (str(outside),)))
        yield {"outside": outside, "unix": unix, "tcp": tcp, "udp": udp, "victim": victim}
    del os.environ["DGRPO_HOSTILE_SECRET"]
    victim.kill()
    victim.wait()
    for s in (unix, tcp, udp):
        s.close()
    shutil.rmtree(outside)


def fill(program: str, host: dict, token: str) -> str:
    out = host["outside"]
    values = {"ANSWER": ANSWER, "MARKER": repr(str(out / "marker")), "OUTSIDE": repr(str(out)),
              "SECRET_PATH": repr(str(out / "secret.txt")), "HOST_PID": str(os.getpid()),
              "VICTIM_PID": str(host["victim"].pid), "TOKEN": token, "INTERP": repr(bwrap.host_layout(()).interpreter),
              "PORT": str(host["tcp"].getsockname()[1]), "UDP_PORT": str(host["udp"].getsockname()[1]),
              "UNIX_PATH": repr(str(out / "sock"))}
    for key in sorted(values, key=len, reverse=True):  # UDP_PORT before PORT
        program = program.replace(key, values[key])
    return program


def assert_host_untouched(host: dict, *texts: str) -> None:
    out = host["outside"]
    assert sorted(p.name for p in out.iterdir()) == ["public.txt", "secret.txt", "sock"], "nothing may appear outside"
    assert (out / "public.txt").read_text() == "public" and (out / "secret.txt").read_text() == SECRET
    assert processes_mentioning(*texts) == [], "no process of the run may outlive the call"
    assert host["victim"].poll() is None, "the victim process must survive"
    for s in (host["unix"], host["tcp"]):
        with pytest.raises(BlockingIOError):  # nobody connected
            s.accept()
    with pytest.raises(BlockingIOError):  # nothing was sent
        host["udp"].recvfrom(16)


def test_the_suite_is_large_enough():
    assert len(HOSTILE) >= 40


def test_outside_is_really_visible_inside(host):
    """Control: the bound directory is there (so the attacks on it are real), its secret is masked."""
    program = fill("print(open(OUTSIDE + '/public.txt').read())\nprint(open(SECRET_PATH).read())", host, "1")
    result = run_python(program, LIMITS)
    assert result.stdout == "public\n" and "PermissionError" in result.stderr and SECRET not in result.stdout


@pytest.mark.parametrize("layers", ["all_layers", "without_audit_hook"])
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_is_contained(host, name, layers):
    token = f"987.{secrets.randbelow(10 ** 6):06d}"
    program = fill(HOSTILE[name], host, token)
    result = run_python(program, LIMITS, ("thief_math",), audit_hook=layers == "all_layers")
    assert result.isolated
    assert result_reward(result, ANSWER) == 0.0, (result.exit_status, result.stdout[-200:], result.stderr[-600:])
    assert SECRET not in result.stdout and SECRET not in result.stderr
    assert len(result.stdout) <= LIMITS.max_file_bytes
    assert_host_untouched(host, result.run_id, token)


def test_hostile_completions_through_the_swarm_receive_path(host, tokenizer, model):
    """Peer messages carrying hostile programs are scored 0 on the honest node and change nothing outside."""
    task = PythonMathTask(seed=5, difficulty=2, n_train=4, n_val=1, timeout_s=2.0)
    policy = Policy("tiny", model, tokenizer, SamplingParams(top_k=10, temperature=1.0, max_new_tokens=32))
    swarm = Swarm(task, {0: policy}, {}, {}, {}, {}, run_seed=0, group_size=4, limits=Limits())
    problem = task.train[0]
    token = f"986.{secrets.randbelow(10 ** 6):06d}"
    names = ["traced_hook_os_system", "alias_posixsubprocess_fork_exec", "traced_hook_write_outside",
             "kill_host_process", "fresh_signal_pidfd_to_victim", "print_answer_then_loop"]
    texts = [f"let me compute</think>\n<answer>\n```python\n{fill(HOSTILE[n], host, token).replace(ANSWER, problem.answer)}\n```\n</answer>"
             for n in names]
    texts.append(task.oracle_completion(problem))  # an honest peer's completion among them
    messages = [Message(1, 0, problem.prompt_id, i, text, (1, 2, 3), None, "another-tokenizer")
                for i, text in enumerate(texts)]
    received = swarm.receive(policy, messages, 0)
    assert received.invalid == []
    rollouts = swarm.reward(received.rollouts)  # the round's reward step (recipes: receive → reward)
    assert [r.reward for r in rollouts] == [0.0] * len(names) + [1.0]
    assert_host_untouched(host, token)


def test_the_unsafe_opt_out_is_unsafe(host):
    """Control for the suite's checks, and the reason the opt-out is named so: without bubblewrap a
    program that gets past the audit hook writes on the host (here into OUTSIDE)."""
    marker = host["outside"] / "marker"
    program = fill(HOSTILE["traced_hook_write_outside"], host, "1")
    result = run_python(program, SandboxLimits(timeout_s=5, unsafe_no_os_sandbox=True))
    try:
        assert not result.isolated and result.ok and result.stdout == f"{ANSWER}\n"
        assert marker.exists()
    finally:
        marker.unlink(missing_ok=True)
