"""What of the host a sandboxed program can reach: its identity, the bound files, its descriptors, its work directory."""

import os
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest

from dgrpo.rewards import bound_tree, bwrap, sandbox
from dgrpo.rewards.sandbox import BLOCKED, SandboxLimits, run_python
from test_hostile_programs import processes_mentioning

LIMITS = SandboxLimits(timeout_s=20)


@pytest.fixture()
def bound(monkeypatch):
    """A host directory (not under /tmp) bound read-only into every sandbox of the test."""
    folder = Path(tempfile.mkdtemp(prefix="dgrpo-bound-", dir="/var/tmp"))
    folder.chmod(0o755)
    (folder / "public.txt").write_text("public")
    (folder / "public.txt").chmod(0o644)
    layout = bwrap.host_layout
    monkeypatch.setattr(bwrap, "host_layout", lambda packages, extra=(): layout(packages, (str(folder),)))
    yield folder
    for path in sorted(folder.rglob("*"), reverse=True):
        path.chmod(0o700) if path.is_dir() else None
        path.rmdir() if path.is_dir() else path.unlink()
    folder.rmdir()


def _status(pid: str) -> dict[str, list[str]]:
    text = Path(f"/proc/{pid}/status").read_text()
    return {k: v.split() for k, v in (ln.split(":", 1) for ln in text.splitlines() if ":" in ln)}


def test_the_program_runs_as_an_id_that_owns_nothing_and_holds_no_capability():
    results = []
    thread = threading.Thread(target=lambda: results.append(run_python("import time\ntime.sleep(3)\nprint(1)", LIMITS)))
    thread.start()
    seen = None
    deadline = time.monotonic() + 20
    while seen is None and time.monotonic() < deadline:  # the interpreter of a sandbox, as the host sees it
        for line in processes_mentioning("dgrpo-sbx-"):
            pid, cmd = line.split(":", 1)
            try:
                status = _status(pid)
            except OSError:
                continue
            if "python" in cmd and status.get("Seccomp_filters") == ["2"]:
                seen = status
        time.sleep(0.02)
    thread.join()
    assert seen is not None
    assert seen["Uid"] == [str(bwrap.HOST_ID)] * 4 and seen["Gid"] == [str(bwrap.HOST_ID)] * 4
    assert seen["CapEff"] == seen["CapPrm"] == seen["CapAmb"] == ["0000000000000000"] and seen["NoNewPrivs"] == ["1"]
    assert results[0].ok and results[0].stdout == "1\n"


def test_no_bound_file_belongs_to_the_sandbox_id():
    owned = []
    for src, _ in bwrap.host_layout(sandbox.THIRD_PARTY).binds:
        for root, dirs, files in os.walk(src) if os.path.isdir(src) else [("", [], [src])]:
            for name in dirs + files:
                st = os.lstat(os.path.join(root, name))
                if bwrap.HOST_ID in (st.st_uid, st.st_gid):
                    owned.append(os.path.join(root, name))
    assert owned == []


def test_secrets_created_after_the_first_run_are_unreadable(bound):
    program = "for p in PATHS:\n    try:\n        print(open(p).read())\n    except OSError as e:\n        print(type(e).__name__)"
    assert run_python(program.replace("PATHS", repr([str(bound / "public.txt")])), LIMITS).stdout == "public\n"
    (bound / "late.txt").write_text("secret")
    (bound / "late.txt").chmod(0o600)
    (bound / "group.txt").write_text("secret")
    (bound / "group.txt").chmod(0o640)
    (bound / "closed").mkdir(mode=0o700)
    (bound / "closed" / "inner.txt").write_text("secret")
    (bound / "public.txt").chmod(0o600)  # a file made private later
    paths = [str(bound / n) for n in ("late.txt", "group.txt", "closed/inner.txt", "public.txt")]
    for hook in (True, False):
        result = run_python(program.replace("PATHS", repr(paths)), LIMITS, audit_hook=hook)
        assert result.stdout == "PermissionError\n" * 4, result.stdout


def test_fifos_and_sockets_in_bound_trees_are_masked_whenever_they_appear(bound):
    run_python("print(1)", LIMITS)  # a first run looks at the tree
    os.mkfifo(bound / "fifo", 0o666)
    (bound / "fifo").chmod(0o666)
    reader = os.open(bound / "fifo", os.O_RDONLY | os.O_NONBLOCK)  # a host reader: a writer inside could open
    try:
        program = (f"import os\nfd = os.open({str(bound / 'fifo')!r}, os.O_WRONLY | os.O_NONBLOCK)\n"
                   "os.write(fd, b'from the sandbox')\nprint('wrote')")
        for hook in (True, False):
            result = run_python(program, LIMITS, audit_hook=hook)
            assert not result.ok and "wrote" not in result.stdout
            assert result.exit_status == BLOCKED if hook else "PermissionError" in result.stderr
        assert os.read(reader, 100) == b""  # nothing arrived (and no writer is left)
    finally:
        os.close(reader)
    files, dirs = bwrap.hidden_paths(bwrap.host_layout(()), modes=False)
    assert str(bound / "fifo") in files and dirs == ()


def test_hidden_paths_follow_changes_and_modes(bound):
    layout = bwrap.host_layout(())
    assert bwrap.hidden_paths(layout, modes=True) == ((), ())
    (bound / "sub").mkdir(mode=0o755)
    os.mkfifo(bound / "sub" / "f1")
    (bound / "private.txt").write_text("x")
    (bound / "private.txt").chmod(0o600)
    (bound / "closed").mkdir(mode=0o700)
    files, dirs = bwrap.hidden_paths(layout, modes=True)  # a caller that owns the bound files masks by mode too
    assert sorted(files) == [str(bound / "private.txt"), str(bound / "sub" / "f1")] and dirs == (str(bound / "closed"),)
    files, dirs = bwrap.hidden_paths(layout, modes=False)  # the mapped identity: the kernel refuses those itself
    assert files == (str(bound / "sub" / "f1"),) and dirs == ()
    os.mkfifo(bound / "sub" / "f2")  # within the same second as the last look: still seen
    assert sorted(bwrap.hidden_paths(layout, modes=False)[0]) == [str(bound / "sub" / "f1"), str(bound / "sub" / "f2")]


def test_hidden_paths_without_inotify_compare_times(bound, monkeypatch):
    """Where a directory cannot be watched (no inotify, the watch budget spent) its ctime decides."""
    monkeypatch.setattr(bound_tree._watcher, "watch", lambda path: None)
    monkeypatch.setattr(bound_tree._watcher, "cache", {})
    monkeypatch.setattr(bound_tree._watcher, "results", {})
    monkeypatch.setattr(bound_tree._watcher, "watched", set())
    layout = bwrap.host_layout(())
    assert bwrap.hidden_paths(layout, modes=False) == ((), ())
    os.mkfifo(bound / "f1")  # within the same second as the last look
    assert bwrap.hidden_paths(layout, modes=False) == ((str(bound / "f1"),), ())


def test_the_path_for_a_caller_other_than_root(bound, monkeypatch):
    """Run by another user, bwrap maps 65534 to that user, the runner sets the limits itself and the
    masks cover what that user could read but others cannot (exercised here as root)."""
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    (bound / "mine.txt").write_text("secret")
    (bound / "mine.txt").chmod(0o600)
    program = (f"import os, resource\nprint(os.getuid(), resource.getrlimit(resource.RLIMIT_AS)[0] >> 20)\n"
               f"try:\n    open({str(bound / 'mine.txt')!r}).read()\nexcept OSError as e:\n    print(type(e).__name__)")
    result = run_python(program, LIMITS)
    assert result.stdout == f"65534 {LIMITS.memory_mb}\nPermissionError\n", result.stderr[-300:]


def test_root_of_a_namespace_that_cannot_map_the_id_falls_back_with_a_warning(monkeypatch, caplog):
    """Root inside a remapped container cannot map HOST_ID: the probe says so once and uses bwrap's own map."""
    from dgrpo.rewards import supervise

    def refuse(pid, sandbox_id, host_id):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(supervise, "write_id_maps", refuse)
    monkeypatch.setattr(sandbox, "_MAPPED", [True])
    sandbox._probe.cache_clear()
    try:
        with caplog.at_level("WARNING"):
            assert sandbox.check_sandbox() == "bwrap"
        assert sandbox._MAPPED == [False] and "cannot be mapped here" in caplog.text
        result = run_python("import os, resource\nprint(os.getuid(), resource.getrlimit(resource.RLIMIT_NOFILE))", LIMITS)
        assert result.stdout == "65534 (64, 64)\n"
    finally:
        sandbox._probe.cache_clear()


def test_no_host_file_descriptor_is_writable_inside():
    program = ("import os, stat, fcntl\nfor fd in range(1024):\n    try:\n        st = os.fstat(fd)\n    except OSError:\n"
               "        continue\n    kind = 'pipe' if stat.S_ISFIFO(st.st_mode) else oct(stat.S_IFMT(st.st_mode))\n"
               "    print(fd, kind, fcntl.fcntl(fd, fcntl.F_GETFL) & 3)")
    for hook in (True, False):
        result = run_python(program, LIMITS, ("thief_math",), audit_hook=hook)
        lines = result.stdout.splitlines()
        # stdin (read), stdout and stderr (write), the library's request (write) and reply (read) pipes
        assert [ln.split()[1:] for ln in lines] == [["pipe", "0"], ["pipe", "1"], ["pipe", "1"],
                                                   ["pipe", "1"], ["pipe", "0"]], lines
        assert [int(ln.split()[0]) for ln in lines][:3] == [0, 1, 2]


def test_only_the_files_the_interpreter_needs_are_bound():
    import sysconfig

    layout = bwrap.host_layout(sandbox.THIRD_PARTY)
    stdlib = os.path.realpath(sysconfig.get_path("stdlib"))
    for src, dest in layout.binds:
        assert not stdlib.startswith(src + os.sep), f"{src} binds more than the standard library"
        assert "site-packages" not in src or any(src.endswith(os.sep + p) or src.endswith(os.sep + p + ".libs")
                                                 for p in sandbox.THIRD_PARTY)
        mode = os.lstat(src).st_mode
        assert stat.S_ISDIR(mode) or stat.S_ISREG(mode)
    assert not [d for _, d in layout.binds if d == bwrap.WORK_DIR or d.startswith(bwrap.WORK_DIR + "/")]


def test_a_bind_under_the_work_directory_is_not_inside_for_the_hook(monkeypatch):
    host_dir = Path(tempfile.mkdtemp(prefix="dgrpo-bound-", dir="/tmp"))  # lands under the sandbox's /tmp
    host_dir.chmod(0o755)
    layout = bwrap.host_layout
    monkeypatch.setattr(bwrap, "host_layout", lambda packages, extra=(): layout(packages, (str(host_dir),)))
    try:
        program = f"open({str(host_dir / 'x')!r}, 'w').write('x')\nprint('wrote')"
        assert run_python(program, LIMITS).exit_status == BLOCKED  # the hook: a read-only bind, not the work dir
        assert "Read-only file system" in run_python(program, LIMITS, audit_hook=False).stderr
        assert run_python("open('y', 'w').write('y')\nprint(open('y').read())", LIMITS).stdout == "y\n"
        assert list(host_dir.iterdir()) == []
    finally:
        host_dir.rmdir()


def test_the_work_directory_holds_few_files_and_runs_nothing():
    flood = "import os\nn = 0\ntry:\n    while True:\n        os.mkdir(f'd{n}')\n        n += 1\nexcept OSError as e:\n    print(n, e.errno)"
    assert run_python(flood, LIMITS, audit_hook=False).stdout == f"{sandbox.WORK_INODES - 1} 28\n"  # ENOSPC
    exec_map = ("import mmap, os\nopen('lib.so', 'wb').write(b'x' * 4096)\nfd = os.open('lib.so', os.O_RDONLY)\n"
                "mmap.mmap(fd, 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC)\nprint('mapped')")
    result = run_python(exec_map, LIMITS, audit_hook=False)
    assert "mapped" not in result.stdout and "PermissionError" in result.stderr  # noexec: no code loads from it
