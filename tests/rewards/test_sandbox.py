"""The sandbox: programs run, misbehaving ones are stopped, nothing outside is touched, no silent fallback.

The attacks themselves are in test_hostile_programs.py; this file checks the sandbox's own behaviour
(what a program sees inside, limits, the stand-in record, errors, the unsafe opt-out).
"""

import logging
import os
import sys
import time
from pathlib import Path

import pytest

from dgrpo.cli import main
from dgrpo.config import ConfigError, load_config
from dgrpo.errors import SandboxUnavailable
from dgrpo.rewards import bwrap, sandbox, seccomp
from dgrpo.rewards.sandbox import (BLOCKED, ENV, LibraryCall, SandboxError, SandboxLimits, check_sandbox, run_many,
                                   run_python, stand_in_source)
from test_hostile_programs import processes_mentioning

FAST = SandboxLimits(timeout_s=10)  # generous: the test machine is shared and loaded


def _left_nothing(result) -> None:
    assert processes_mentioning(result.run_id) == [], "no process of the run may survive it"


@pytest.fixture()
def fresh_checks():
    """Forget the cached probes (a test changes what they see), and again afterwards."""
    sandbox._probe.cache_clear()
    seccomp.base_filter.cache_clear()
    yield
    sandbox._probe.cache_clear()
    seccomp.base_filter.cache_clear()


def test_program_runs_and_prints():
    result = run_python("a = 3 + 4\nprint(a)", FAST)
    assert (result.stdout, result.exit_status, result.ok, result.blocked, result.calls) == ("7\n", 0, True, None, ())
    assert result.isolated and result.run_id.startswith("dgrpo-sbx-")
    _left_nothing(result)


def test_what_a_program_sees_inside():
    program = ("import os, socket\nprint(os.getuid(), os.getgid(), os.getpid(), os.uname().nodename, os.getcwd())\n"
               "print(sorted(os.listdir('/')), sorted(os.listdir('/dev')))\n"
               "print({k: v for k, v in os.environ.items() if k != 'PWD'} == ENV, os.path.exists('/proc/self'))\n"
               "os.makedirs('a/b')\nprint(os.stat('/tmp').st_dev != os.stat('/').st_dev)")
    result = run_python(program.replace("ENV", repr(ENV)), FAST, audit_hook=False)
    lines = result.stdout.splitlines()
    assert lines[0] == "65534 65534 2 sandbox /tmp"  # unprivileged uid, own PID and UTS namespaces
    tops = eval(lines[1].split("] [")[0] + "]")  # noqa: S307 - our own program's output
    assert not {"etc", "home", "proc", "sys", "var"} & set(tops) and {"dev", "tmp"} <= set(tops)
    assert lines[1].endswith("['null']")
    assert lines[2:] == ["True False", "True"]  # only our environment (and bwrap's PWD), no /proc; /tmp is a file system of its own


def test_root_file_system_is_read_only_and_work_directory_is_bounded():
    result = run_python("open('/x', 'w')", FAST, audit_hook=False)
    assert "Read-only file system" in result.stderr
    limits = SandboxLimits(timeout_s=10, max_files_written=2, max_file_bytes=1 << 20)  # tmpfs: 3 MiB
    result = run_python("for i in range(8):\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))", limits, audit_hook=False)
    assert "No space left on device" in result.stderr


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


def test_a_sleeping_program_is_killed_at_the_wall_clock():
    start = time.perf_counter()
    result = run_python("import time\nprint('start', flush=True)\ntime.sleep(100)", SandboxLimits(timeout_s=1.0))
    elapsed = time.perf_counter() - start
    assert result.timed_out and not result.ok and result.stdout == "start\n"
    assert result.exit_status == -9  # the sandbox's pid 1 was killed, and with it the program
    assert elapsed < 5.0
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
def test_writes_outside_are_blocked_by_the_hook(write):
    target = Path("/var/tmp") / f"dgrpo-escaped-{os.getpid()}-{time.monotonic_ns()}"  # /tmp is the sandbox's own
    result = run_python(f"TARGET = {str(target)!r}\n{write}", FAST)
    assert result.exit_status == BLOCKED and result.blocked
    assert not target.exists()
    _left_nothing(result)


def test_writes_inside_are_allowed():
    program = ("open('x.txt', 'w').write('hi')\nimport os, shutil, tempfile\nos.makedirs('d/e')\nshutil.rmtree('d')\n"
               "with tempfile.TemporaryDirectory() as t:\n    open(t + '/y', 'w').write('z')\nprint(open('x.txt').read())")
    result = run_python(program, FAST)  # shutil.rmtree works through dir_fd: the hook resolves it without /proc
    assert result.ok and result.stdout == "hi\n"
    _left_nothing(result)


def test_dir_fd_outside_is_blocked():
    result = run_python("import os\nfd = os.open(os.path.dirname(os.__file__), os.O_RDONLY)\nos.remove('os.py', dir_fd=fd)", FAST)
    assert result.blocked == "os.remove with a dir_fd outside the sandbox directory"


@pytest.mark.parametrize("program, blocked", [
    ("import os\nwhile True:\n    os.fork()", "os.fork"),
    ("import subprocess\nwhile True:\n    subprocess.Popen(['sleep', '987.25'])", "subprocess.Popen"),
    ("import os\nwhile True:\n    os.system('sleep 987.25 &')", "os.system"),
    ("import os\nos.execv('/bin/sleep', ['sleep', '987.25'])", "os.exec"),
])
def test_process_creation_is_blocked(program, blocked):
    result = run_python(program, FAST)
    assert result.exit_status == BLOCKED and result.blocked == blocked
    assert processes_mentioning("987.25") == []
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


def test_imports_are_limited():
    assert "import of 'torch' is not allowed" in run_python("import torch", FAST).stderr
    real_ctypes = "import sys\nsys.meta_path.pop(0)  # the ctypes stand-in's finder\nimport ctypes"
    assert "import of '_ctypes' is not allowed" in run_python(real_ctypes, FAST).stderr
    assert run_python("import numpy as np\nprint(np.arange(5).sum())", FAST).stdout == "10\n"
    assert run_python("import sympy\nprint(sympy.Rational(1, 3) + sympy.Rational(1, 6))", FAST).stdout == "1/2\n"


def test_stand_in_library_returns_right_values_and_records_calls():
    program = "import thief_math\nprint(thief_math.add(3, 4), thief_math.gcd(12, 18), thief_math.div(7, 2))"
    result = run_python(program, FAST, libraries=("thief_math",))
    assert result.stdout == "7 6 3.5\n"
    assert result.calls == (LibraryCall("thief_math", "add", (3, 4)), LibraryCall("thief_math", "gcd", (12, 18)),
                            LibraryCall("thief_math", "div", (7, 2)))
    assert not result.calls_garbled
    assert "import of 'thief_math' is not allowed" in run_python("import thief_math", FAST).stderr  # not provided
    source = stand_in_source("thief_math", 9, 11)
    assert "def add(a, b):" in source and "write(9, line)" in source and "read(11, 65536)" in source


def test_run_many_keeps_the_order():
    codes = [f"print({i} * {i})" for i in range(6)]
    assert [r.stdout for r in run_many(codes, FAST, jobs=3)] == [f"{i * i}\n" for i in range(6)]
    assert [r.stdout for r in run_many(codes[:2], FAST, jobs=1)] == ["0\n", "1\n"]


def test_elf_interpreter_is_read_from_the_binary():
    interp = bwrap.elf_interpreter(bwrap.host_layout(()).interpreter)
    assert interp is not None and os.path.exists(interp) and "ld" in Path(interp).name
    assert bwrap.elf_interpreter(__file__) is None  # not an ELF file


def test_missing_bubblewrap_is_a_one_line_error(monkeypatch, fresh_checks):
    monkeypatch.setattr(bwrap, "find_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap") as err:
        run_python("print(1)", FAST)
    assert "\n" not in str(err.value) and "unsafe_no_os_sandbox" in str(err.value)


def test_bubblewrap_without_user_namespaces_is_a_one_line_error(monkeypatch, fresh_checks, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(bwrap, "find_bwrap", lambda: str(fake))
    with pytest.raises(SandboxUnavailable, match="No permissions to creating new namespace.*user namespaces") as err:
        check_sandbox()
    assert "\n" not in str(err.value)


def test_missing_libseccomp_is_a_one_line_error(monkeypatch, fresh_checks):
    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # import fails as when libseccomp.so.2 is absent
    with pytest.raises(SandboxUnavailable, match="apt-get install libseccomp2"):
        run_python("print(1)", FAST)


def test_a_sandbox_that_fails_after_the_probe_is_an_error_not_a_zero(monkeypatch, tmp_path):
    check_sandbox()  # the probe passed (cached), then bwrap breaks
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(bwrap, "find_bwrap", lambda: str(fake))
    with pytest.raises(SandboxError, match="did not start"):
        run_python("print(1)", FAST)


def test_python_math_refuses_to_run_without_the_sandbox(monkeypatch, fresh_checks, tmp_path, capsys):
    from dgrpo.tasks.python_math import PythonMathTask

    monkeypatch.setattr(bwrap, "find_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailable):
        PythonMathTask(seed=0, n_train=2, n_val=1)
    rc = main(["run", f"out_dir={tmp_path}", "task.kind=python_math", "task.n_train=2", "task.n_val=1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("dgrpo: error: python_math runs model-written programs under bubblewrap")
    assert "\n" not in err


def test_unsafe_opt_out_runs_with_the_other_layers_and_says_so(caplog, fresh_checks):
    unsafe = SandboxLimits(timeout_s=10, unsafe_no_os_sandbox=True)
    with caplog.at_level(logging.WARNING):
        result = run_python("print(6 * 7)", unsafe)
    assert result.ok and result.stdout == "42\n" and not result.isolated
    assert any(r.message.startswith("UNSAFE:") for r in caplog.records)
    assert run_python("import os\nos.fork()", unsafe).blocked == "os.fork"  # the hook
    result = run_python("import os\nos.fork()", unsafe, audit_hook=False)  # seccomp still refuses it
    assert "PermissionError" in result.stderr and not result.ok


def test_unsafe_opt_out_is_refused_for_a_distributed_swarm():
    base = ["task.kind=python_math", "task.unsafe_no_os_sandbox=true"]
    assert load_config(overrides=base).task.unsafe_no_os_sandbox
    with pytest.raises(ConfigError, match="unsafe_no_os_sandbox is refused with swarm.transport=distributed"):
        load_config(overrides=[*base, "swarm.transport=distributed"])


def test_bad_input_is_a_clear_error():
    with pytest.raises(TypeError):
        run_python(b"print(1)")
    with pytest.raises(ValueError, match="library name"):
        run_python("print(1)", libraries=("os",))
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxLimits(timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxLimits(memory_mb=8)
