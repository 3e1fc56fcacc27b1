"""The sandbox: programs run, misbehaving ones are stopped, and nothing outside is touched."""

import os
import socket
import time
from pathlib import Path

import pytest

from dgrpo.rewards import sandbox
from dgrpo.rewards.sandbox import BLOCKED, LibraryCall, SandboxError, SandboxLimits, run_python, stand_in_source

FAST = SandboxLimits(timeout_s=10)  # generous: the test machine is shared and loaded


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain ``text``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmd:
                found.append(cmd)
    return found


def _left_nothing(result) -> None:
    base = Path(result.workdir).parent
    assert not base.exists(), "the temporary directory must be removed"
    assert _processes_mentioning(base.name) == [], "no process of the run may survive it"


def test_program_runs_and_prints():
    result = run_python("a = 3 + 4\nprint(a)", FAST)
    assert (result.stdout, result.exit_status, result.ok, result.blocked, result.calls) == ("7\n", 0, True, None, ())
    _left_nothing(result)


def test_exception_is_a_failed_run():
    result = run_python("raise ValueError('boom')", FAST)
    assert result.exit_status == 1 and not result.ok
    assert "ValueError: boom" in result.stderr


def test_cpu_limit_stops_a_busy_program_before_the_wall_clock():
    result = run_python("while True:\n    pass", SandboxLimits(timeout_s=30, cpu_s=1))
    assert result.timed_out and result.exit_status == -24  # SIGXCPU
    assert result.wall_s < 20


def test_syntax_error_is_a_failed_run():
    result = run_python("print(7\n", FAST)
    assert result.exit_status == 1 and "SyntaxError" in result.stderr and result.stdout == ""


def test_infinite_loop_is_killed_within_the_limit():
    start = time.perf_counter()
    result = run_python("while True:\n    pass", SandboxLimits(timeout_s=1.0))
    elapsed = time.perf_counter() - start
    assert result.timed_out and not result.ok
    assert result.exit_status < 0  # killed by a signal
    assert elapsed < 4.0
    _left_nothing(result)


def test_socket_never_connects():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.3)
        port = server.getsockname()[1]
        result = run_python(f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))\nprint('in')", FAST)
        with pytest.raises(socket.timeout):
            server.accept()
    assert result.exit_status == BLOCKED and result.blocked.startswith("socket.")
    assert "in" not in result.stdout
    _left_nothing(result)


@pytest.mark.parametrize("write", [
    "open(TARGET, 'w').write('x')",
    "open(TARGET, 'a').write('x')",
    "import os\nos.close(os.open(TARGET, os.O_WRONLY | os.O_CREAT))",
    "import pathlib\npathlib.Path(TARGET).write_text('x')",
    "import os\nos.mkdir(TARGET)",
    "import shutil\nopen('inside.txt', 'w').write('x')\nshutil.copyfile('inside.txt', TARGET)",
    "import os\nopen('inside.txt', 'w').write('x')\nos.rename('inside.txt', TARGET)",
    "import os\nos.symlink(TARGET, 'link')\nopen('link', 'w').write('x')",
    "import os\nfd = os.open('/', os.O_RDONLY)\nos.open(TARGET.lstrip('/'), os.O_WRONLY | os.O_CREAT, dir_fd=fd)",
    "import os\nos.chdir('/')\nopen(TARGET.lstrip('/'), 'w').write('x')",
])
def test_writes_outside_are_blocked(tmp_path, write):
    target = tmp_path / "escaped"
    result = run_python(f"TARGET = {str(target)!r}\n{write}", FAST)
    assert result.exit_status == BLOCKED and result.blocked
    assert not target.exists()
    _left_nothing(result)


def test_existing_file_outside_is_not_deleted_or_changed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    for program in (f"import os\nos.remove({str(victim)!r})", f"import os\nos.chmod({str(victim)!r}, 0)",
                    f"import os\nos.truncate({str(victim)!r}, 0)", f"open({str(victim)!r}, 'r+').write('gone')"):
        result = run_python(program, FAST)
        assert result.exit_status == BLOCKED, program
    assert victim.read_text() == "keep" and victim.stat().st_mode & 0o777 != 0


def test_writes_inside_are_allowed():
    program = ("open('x.txt', 'w').write('hi')\nimport os, shutil, tempfile\nos.makedirs('d/e')\nshutil.rmtree('d')\n"
               "with tempfile.TemporaryDirectory() as t:\n    open(t + '/y', 'w').write('z')\nprint(open('x.txt').read())")
    result = run_python(program, FAST)
    assert result.ok and result.stdout == "hi\n"
    _left_nothing(result)


def test_dir_fd_outside_is_blocked(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    result = run_python(f"import os\nfd = os.open({str(tmp_path)!r}, os.O_RDONLY)\nos.remove('victim.txt', dir_fd=fd)", FAST)
    assert result.blocked.startswith("os.remove outside") and victim.read_text() == "keep"


@pytest.mark.parametrize("program, blocked", [
    ("import os\nwhile True:\n    os.fork()", "os.fork"),
    ("import subprocess\nwhile True:\n    subprocess.Popen(['sleep', '987.25'])", "subprocess.Popen"),
    ("import os\nwhile True:\n    os.system('sleep 987.25 &')", "os.system"),
    ("import os\nos.execv('/bin/sleep', ['sleep', '987.25'])", "os.exec"),
    ("import _posixsubprocess\n_posixsubprocess.fork_exec([b'/bin/sleep', b'987.25'], [b'/bin/sleep'], True, (), None,"
     " None, -1, -1, -1, -1, -1, -1, 3, 4, False, False, -1, None, None, None, -1, None, False)",
     "_posixsubprocess.fork_exec"),
])
def test_process_creation_is_blocked(program, blocked):
    result = run_python(program, FAST)
    assert result.exit_status == BLOCKED and result.blocked == blocked
    assert _processes_mentioning("987.25") == []
    _left_nothing(result)


def test_ten_gigabytes_fail_fast():
    start = time.perf_counter()
    result = run_python("x = bytearray(10 * 1024 ** 3)\nprint(len(x))", FAST)
    assert result.exit_status == 1 and "MemoryError" in result.stderr and result.stdout == ""
    assert time.perf_counter() - start < 5.0  # refused at once, never paged in
    _left_nothing(result)


def test_output_is_capped():
    result = run_python("while True:\n    print('x' * 1000)", SandboxLimits(timeout_s=10, max_file_bytes=10_000))
    assert result.output_limited and not result.ok
    assert len(result.stdout) <= 10_000


def test_number_of_files_written_is_capped():
    program = "for i in range(N):\n    open(f'f{i}', 'w').write('x')\nprint('done')"
    limits = SandboxLimits(timeout_s=10, max_files_written=5)
    assert run_python(program.replace("N", "5"), limits).ok
    assert run_python(program.replace("N", "6"), limits).blocked == "too many files written"


def test_signals_to_other_processes_are_blocked():
    result = run_python(f"import os\nos.kill({os.getpid()}, 0)", FAST)
    assert result.blocked == "os.kill"


def test_guard_cannot_be_found_or_replaced():
    result = run_python("import gc\nhooks = [o for o in gc.get_objects() if getattr(o, '__name__', '') == '_dgrpo_guard']", FAST)
    assert result.blocked == "gc.get_objects"


def test_imports_are_limited():
    assert "import of 'torch' is not allowed" in run_python("import torch", FAST).stderr
    assert "import of '_ctypes' is not allowed" in run_python("import sys\nsys.path.pop(0)\nimport ctypes", FAST).stderr
    assert run_python("import numpy as np\nprint(np.arange(5).sum())", FAST).stdout == "10\n"
    assert run_python("import sympy\nprint(sympy.Rational(1, 3) + sympy.Rational(1, 6))", FAST).stdout == "1/2\n"


def test_stand_in_library_returns_right_values_and_records_calls():
    program = "import thief_math\nprint(thief_math.add(3, 4), thief_math.gcd(12, 18), thief_math.div(7, 2))"
    result = run_python(program, FAST, libraries=("thief_math",))
    assert result.stdout == "7 6 3.5\n"
    assert result.calls == (LibraryCall("thief_math", "add", (3, 4)), LibraryCall("thief_math", "gcd", (12, 18)),
                            LibraryCall("thief_math", "div", (7, 2)))
    assert "import of 'thief_math' is not allowed" in run_python("import thief_math", FAST).stderr  # not provided
    assert "def add(a, b):" in stand_in_source("thief_math")


def test_a_sandbox_that_cannot_start_is_an_error_not_a_zero(monkeypatch):
    monkeypatch.setattr(sandbox, "isolation_prefix", lambda: ("false",))  # the wrapper fails every time
    with pytest.raises(SandboxError, match="did not start"):
        run_python("print(1)", FAST)


def test_bad_input_is_a_clear_error():
    with pytest.raises(TypeError):
        run_python(b"print(1)")
    with pytest.raises(ValueError, match="library name"):
        run_python("print(1)", libraries=("os",))
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxLimits(timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxLimits(memory_mb=8)
