"""The hostile-program suite: every program of tests/rewards/hostile_programs.py attacks the sandbox.

Each program runs twice: with every layer, and with the audit hook left out, which shows that the
OS layers (bubblewrap's namespaces and read-only file system, seccomp, resource limits) hold alone,
as they must once a program gets past the hook (several programs do: they print nothing about it,
but their attack reaches the kernel). A host directory OUTSIDE, holding a world-readable file, a
0600 secret and a unix socket, is bound read-only into the sandbox so that the attacks have a real
target. For every program: reward 0, no marker file and no change in OUTSIDE, no process of the run
left once the call returns, the secret never printed, and the host (this process, a victim process,
its sockets) untouched. While each program runs a watcher samples the host: free disk, shared memory
(``Shmem``), a non-blocking open for writing of a bound file (a lease would make it fail), a fresh
inotify instance; after it, the host FIFOs and logs are checked (no program bytes in any host log).
The second round (hostile_programs.SECOND_ROUND) also goes through the product's own scoring path,
``PythonMathTask.rewards``, beside an honest completion. The last test sends such programs as
python_math completions through the swarm's receive path.
"""

import contextlib
import ctypes
import logging
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
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
from host_cpu import HostCpu
from hostile_programs import HOSTILE, SECOND_ROUND

LIMITS = SandboxLimits(timeout_s=2, cpu_s=1)
DISK_SLACK = 1 << 30  # free disk other processes may take during a run (the disk attacks ask for 4 GiB)
SHMEM_SLACK = 512 << 20  # shared memory likewise (the attacks reach 1-3 GiB)
HOST_CPU_S = 0.5  # host CPU seconds one run and its scoring may cost (the watcher's sampling included;
# host_cpu.py: the calling thread, the watcher's and the answer-check worker, not the whole test process)
_libc = ctypes.CDLL(None, use_errno=True)
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
    with hostile_host() as made:
        yield made


@contextlib.contextmanager
def hostile_host():
    """The host the hostile programs attack (the module docstring; also benchmarks/sandbox_hostile_outcomes.py)."""
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
    for name in ("fifo_out", "fifo_in"):
        os.mkfifo(outside / name)
        (outside / name).chmod(0o666)
    fifo_out = os.open(outside / "fifo_out", os.O_RDONLY | os.O_NONBLOCK)  # a host reader: a writer could open it
    fifo_in = os.open(outside / "fifo_in", os.O_RDWR | os.O_NONBLOCK)
    os.write(fifo_in, SECRET.encode())
    tmp_bound = Path(tempfile.mkdtemp(prefix="dgrpo-hostile-", dir="/tmp"))  # lands under the sandbox's /tmp
    tmp_bound.chmod(0o755)
    os.mkfifo(tmp_bound / "fifo")
    (tmp_bound / "fifo").chmod(0o666)
    extra = {"binds": (str(outside),)}
    layout = bwrap.host_layout
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bwrap, "host_layout", lambda packages, extra_=(): layout(packages, extra["binds"]))
        run_python("print(1)", LIMITS)  # a first run: whatever is computed once, is computed before the late files
        late = outside / "late"
        late.mkdir(mode=0o755)
        (late / "late.txt").write_text(SECRET)
        (late / "late.txt").chmod(0o600)
        (late / "closed").mkdir(mode=0o700)
        (late / "closed" / "inner.txt").write_text(SECRET)
        (late / "private.txt").write_text(SECRET)
        (late / "private.txt").chmod(0o644)
        run_python("print(1)", LIMITS)
        (late / "private.txt").chmod(0o600)  # made private after a run saw it public
        yield {"outside": outside, "unix": unix, "tcp": tcp, "udp": udp, "victim": victim, "fifo_out": fifo_out,
               "fifo_in": fifo_in, "tmp_bound": tmp_bound, "extra": extra}
    del os.environ["DGRPO_HOSTILE_SECRET"]
    victim.kill()
    victim.wait()
    for s in (unix, tcp, udp):
        s.close()
    os.close(fifo_out)
    os.close(fifo_in)
    shutil.rmtree(outside)
    shutil.rmtree(tmp_bound)


class HostWatch:
    """Samples the host while a program runs: free disk, shared memory, a lease probe, inotify."""

    def __init__(self, public: Path, cpu: HostCpu | None = None):
        self.public, self.stop, self.problems, self.cpu = public, threading.Event(), [], cpu
        self.disk0, self.shmem0 = self._disk(), self._shmem()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _disk() -> int:
        return min(os.statvfs(p).f_bavail * os.statvfs(p).f_frsize for p in ("/", "/var/tmp", "/tmp"))

    @staticmethod
    def _shmem() -> int:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
        return 0

    def _sample(self) -> None:
        fell, rose = self.disk0 - self._disk(), self._shmem() - self.shmem0
        if fell > DISK_SLACK:
            self.problems.append(f"host free disk fell by {fell >> 20} MiB")
        if rose > SHMEM_SLACK:
            self.problems.append(f"host shared memory rose by {rose >> 20} MiB")
        try:
            os.close(os.open(self.public, os.O_WRONLY | os.O_NONBLOCK))  # a lease would make this fail
        except BlockingIOError:
            self.problems.append("a host open of a bound file would block (lease)")
        fd = _libc.inotify_init1(0)
        if fd < 0:
            self.problems.append(f"host inotify unusable (errno {ctypes.get_errno()})")
        else:
            os.close(fd)

    def _run(self) -> None:
        start = time.thread_time()
        while not self.stop.is_set():
            self._sample()
            time.sleep(0.01)
        if self.cpu is not None:
            self.cpu.add(time.thread_time() - start)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self._sample()


def fill(program: str, host: dict, token: str) -> str:
    out = host["outside"]
    values = {"ANSWER": ANSWER, "MARKER": repr(str(out / "marker")), "OUTSIDE": repr(str(out)),
              "SECRET_PATH": repr(str(out / "secret.txt")), "HOST_PID": str(os.getpid()),
              "VICTIM_PID": str(host["victim"].pid), "TOKEN": token, "INTERP": repr(bwrap.host_layout(()).interpreter),
              "PORT": str(host["tcp"].getsockname()[1]), "UDP_PORT": str(host["udp"].getsockname()[1]),
              "UNIX_PATH": repr(str(out / "sock")), "PUBLIC": repr(str(out / "public.txt")),
              "LATE_SECRET": repr(str(out / "late" / "late.txt")),
              "LATE_DIR_SECRET": repr(str(out / "late" / "closed" / "inner.txt")),
              "MADE_PRIVATE": repr(str(out / "late" / "private.txt")), "FIFO_OUT": repr(str(out / "fifo_out")),
              "FIFO_IN": repr(str(out / "fifo_in")), "TMP_BOUND": repr(str(host["tmp_bound"])),
              "LOGTOKEN": "dgrpo-log-" + token.replace(".", "")}
    host["extra"]["binds"] = (str(out), str(host["tmp_bound"])) if "TMP_BOUND" in program else (str(out),)
    for key in sorted(values, key=len, reverse=True):  # UDP_PORT before PORT
        program = program.replace(key, values[key])
    return program


def assert_host_untouched(host: dict, *texts: str, watch: HostWatch | None = None, logs: str = "") -> None:
    out = host["outside"]
    assert sorted(p.name for p in out.iterdir()) == ["fifo_in", "fifo_out", "late", "public.txt", "secret.txt", "sock"], \
        "nothing may appear outside"
    assert (out / "public.txt").read_text() == "public" and (out / "secret.txt").read_text() == SECRET
    assert oct(os.stat(out / "public.txt").st_mode) == "0o100644" and os.stat(out / "public.txt").st_mtime > 1
    assert [p.name for p in host["tmp_bound"].iterdir()] == ["fifo"]
    assert os.read(host["fifo_out"], 100) == b"", "nothing was written into the host FIFO"
    assert os.read(host["fifo_in"], 100) == SECRET.encode(), "nothing was read from the host FIFO"
    os.write(host["fifo_in"], SECRET.encode())
    if watch is not None:
        assert watch.problems == []
    assert not [t for t in texts if t.startswith("dgrpo-log-") and t in logs], "no program bytes in a host log"
    assert processes_mentioning(*texts) == [], "no process of the run may outlive the call"
    assert host["victim"].poll() is None, "the victim process must survive"
    for s in (host["unix"], host["tcp"]):
        with pytest.raises(BlockingIOError):  # nobody connected
            s.accept()
    with pytest.raises(BlockingIOError):  # nothing was sent
        host["udp"].recvfrom(16)


def test_the_suite_is_large_enough():
    assert len(HOSTILE) >= 40 and len(SECOND_ROUND) >= 30
    for cls in ("e1_", "e2_", "e3_", "e4_", "e5_", "e6_", "e7_", "e8_", "abi_x32", "newer_system_calls"):
        assert sum(n.startswith(cls) for n in SECOND_ROUND) >= 1, cls


def test_outside_is_really_visible_inside(host):
    """Control: the bound directory is there (so the attacks on it are real), its secret is masked."""
    program = fill("print(open(OUTSIDE + '/public.txt').read())\nprint(open(SECRET_PATH).read())", host, "1")
    result = run_python(program, LIMITS)
    assert result.stdout == "public\n" and "PermissionError" in result.stderr and SECRET not in result.stdout


@pytest.mark.parametrize("layers", ["all_layers", "without_audit_hook"])
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_is_contained(host, name, layers, caplog, capfd, monkeypatch):
    token = f"987.{secrets.randbelow(10 ** 6):06d}"
    program = fill(HOSTILE[name], host, token)
    with caplog.at_level(logging.DEBUG), HostCpu(monkeypatch) as cost, \
            HostWatch(host["outside"] / "public.txt", cost) as watch:
        result = run_python(program, LIMITS, ("thief_math",), audit_hook=layers == "all_layers")
        reward = result_reward(result, ANSWER)
    cpu = cost.seconds
    assert result.isolated
    assert reward == 0.0, (result.exit_status, result.stdout[-200:], result.stderr[-600:])
    assert cpu < HOST_CPU_S, f"running and scoring it cost the host {cpu:.2f} s of CPU"
    assert SECRET not in result.stdout and SECRET not in result.stderr
    assert len(result.stdout) <= LIMITS.max_file_bytes
    out, err = capfd.readouterr()
    assert_host_untouched(host, result.run_id, token, "dgrpo-log-" + token.replace(".", ""), watch=watch,
                          logs=caplog.text + out + err)


@pytest.mark.slow
def test_the_second_round_through_the_products_scoring_path(host, caplog, capfd):
    """Each second-round program as a python_math completion, scored by PythonMathTask.rewards (product
    defaults, audit hook on) beside two honest completions (the oracle, and one importing numpy, run
    at the same time as the hostile one): the honest ones keep 1.0, the hostile 0.0."""
    task = PythonMathTask(seed=5, difficulty=2, n_train=4, n_val=1)
    problem = task.train[0]
    token = f"985.{secrets.randbelow(10 ** 6):06d}"
    honest = task.oracle_completion(problem)
    numpy = f"numpy it is</think>\n<answer>\n```python\nimport numpy as np\nprint(int(np.int64({problem.answer})))\n```\n</answer>"
    for name in sorted(SECOND_ROUND):
        program = fill(SECOND_ROUND[name], host, token).replace(ANSWER, problem.answer)
        hostile = f"let me compute</think>\n<answer>\n```python\n{program}\n```\n</answer>"
        with caplog.at_level(logging.DEBUG), HostWatch(host["outside"] / "public.txt") as watch:
            rewards = task.rewards([hostile, honest, numpy], [problem] * 3)  # two at a time: side by side
        assert rewards == [0.0, 1.0, 1.0], name
        out, err = capfd.readouterr()
        assert_host_untouched(host, token, "dgrpo-log-" + token.replace(".", ""), watch=watch,
                              logs=caplog.text + out + err)


def test_hostile_completions_through_the_swarm_receive_path(host, tokenizer, model):
    """Peer messages carrying hostile programs are scored 0 on the honest node and change nothing outside."""
    task = PythonMathTask(seed=5, difficulty=2, n_train=4, n_val=1, timeout_s=2.0)
    policy = Policy("tiny", model, tokenizer, SamplingParams(top_k=10, temperature=1.0, max_new_tokens=32))
    swarm = Swarm(task, {0: policy}, {}, {}, {}, {}, run_seed=0, group_size=4, limits=Limits())
    problem = task.train[0]
    token = f"986.{secrets.randbelow(10 ** 6):06d}"
    names = ["traced_hook_os_system", "alias_posixsubprocess_fork_exec", "traced_hook_write_outside",
             "kill_host_process", "fresh_signal_pidfd_to_victim", "print_answer_then_loop",
             "e3_nested_brackets_on_every_descriptor", "e6_checker_bomb", "e4_lease_on_a_bound_file"]
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
