"""A memory cgroup per program: page tables and dentries count against the program's memory (review 3).

RLIMIT_AS bounds mappings, not the kernel memory behind them: one 4 KiB page mapped every 1 GiB made
the host build 524 MiB of page tables; os.stat of unique missing names left 181 MB of dentries. Each
test runs the attack with the cgroup and, as a control, without one (memcg.create patched to None).
"""

import logging
import os
import threading
import time

import pytest

from dgrpo.rewards import memcg
from dgrpo.rewards.code import result_reward
from dgrpo.rewards.sandbox import SandboxLimits, run_python
from hostile_programs import CTYPES

needs_cgroup = pytest.mark.skipif(isinstance(memcg.parent(), str), reason="no memory cgroup can be made here")
# max_files_written=0: a 2 MiB work tmpfs, so the cgroup's limit is 256 + 2 + 64 MiB (64 + 2 + 64 for dentries)
PAGE_LIMITS = SandboxLimits(timeout_s=20, memory_mb=256, max_files_written=0)
DENTRY_LIMITS = SandboxLimits(timeout_s=120, memory_mb=64, max_files_written=0)


def cgroup_limit(limits: SandboxLimits) -> int:
    return (limits.memory_mb << 20) + (2 << 20) + memcg.MARGIN_BYTES


PAGE_TABLES = CTYPES + """libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
n = 0
for i in range(1, 65536):  # one page every GiB: a page-table page and a page-directory page each
    p = libc.mmap(i << 30, 4096, 3, 0x22 | 0x100000, -1, 0)  # MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE
    if p == i << 30:
        ctypes.memset(p, 1, 1)
        n += 1
print('mapped', n, flush=True)
import time
time.sleep(1)  # hold the page tables while the host samples them
"""
DENTRIES = """import os
d = os.path.dirname(os.__file__)  # a bound host directory
p = os.urandom(4).hex()  # names no earlier run made
for i in range(800_000):  # a fixed count, so a loaded machine makes the same dentries (~300 MB)
    try:
        os.stat(f'{d}/{p}{i:0244d}')
    except OSError:
        pass
print('done')
"""


def meminfo(field: str) -> int:
    with open("/proc/meminfo") as fh:
        return next(int(line.split()[1]) << 10 for line in fh if line.startswith(field + ":"))


def peak_growth(field: str, fn):
    """``(fn(), the most /proc/meminfo's field grew while fn ran, bytes)``, sampled every 10 ms."""
    base, peak, stop = meminfo(field), [0], threading.Event()

    def sample():
        while not stop.wait(0.01):
            peak[0] = max(peak[0], meminfo(field) - base)
    thread = threading.Thread(target=sample)
    thread.start()
    try:
        return fn(), peak[0]
    finally:
        stop.set()
        thread.join()


@pytest.fixture
def no_cgroup(monkeypatch):
    monkeypatch.setattr(memcg, "create", lambda *args: None)


@needs_cgroup
def test_page_tables_count_against_the_programs_memory():
    result, growth = peak_growth("PageTables", lambda: run_python(PAGE_TABLES, PAGE_LIMITS, audit_hook=False))
    assert result.exit_status == -9 and "mapped" not in result.stdout, result  # the cgroup's OOM kill
    assert growth < cgroup_limit(PAGE_LIMITS), growth >> 20  # measured 246 MiB (limit 322)


@needs_cgroup
def test_without_the_cgroup_the_page_tables_go_past_its_limit(no_cgroup):
    result, growth = peak_growth("PageTables", lambda: run_python(PAGE_TABLES, PAGE_LIMITS, audit_hook=False))
    assert result.exit_status == 0 and result.stdout.startswith("mapped"), result
    mapped = int(result.stdout.split()[1])
    # each mapping 1 GiB from the last needs its own page-table page and page-directory page (2 x 4 KiB)
    assert mapped * (8 << 10) > cgroup_limit(PAGE_LIMITS), mapped
    # and the host saw it (machine-wide PageTables, sampled every 10 ms, which other processes freeing theirs
    # lower: measured 291-512 MiB here, under load), well past what the cgroup keeps a program to
    assert growth > cgroup_limit(PAGE_LIMITS) // 2, growth >> 20


@needs_cgroup
@pytest.mark.parametrize("with_cgroup", [True, False])
def test_a_dentry_flood_is_bounded_by_the_cgroup(with_cgroup, monkeypatch):
    if not with_cgroup:
        monkeypatch.setattr(memcg, "create", lambda *args: None)
    before = meminfo("SReclaimable")
    result = run_python(DENTRIES, DENTRY_LIMITS)
    grew = meminfo("SReclaimable") - before  # what stays after the run (the cgroup's charges go to its parent)
    assert result.stdout == "done\n", result  # the cgroup reclaims the dentries: the program is not killed
    if with_cgroup:
        assert grew < cgroup_limit(DENTRY_LIMITS), grew >> 20  # limit 130 MiB; measured 42 MiB (540 without)
    else:
        assert grew > cgroup_limit(DENTRY_LIMITS), grew >> 20


@needs_cgroup
def test_honest_programs_run_inside_a_cgroup_that_is_removed_after(monkeypatch):
    peaks, made = [], []
    create, remove = memcg.create, memcg.Cgroup.remove
    monkeypatch.setattr(memcg, "create", lambda *a: made.append(create(*a)) or made[-1])
    monkeypatch.setattr(memcg.Cgroup, "remove", lambda self, *a: peaks.append(self.peak_bytes()) or remove(self, *a))
    result = run_python("import numpy as np\nprint(int(np.linalg.det(np.eye(3) * 2).round()))", SandboxLimits())
    assert result_reward(result, "8") == 1.0
    assert peaks[0] > 1 << 20, peaks  # the program's memory was charged there (measured 13 MiB)
    assert not os.path.exists(made[0].path)
    assert result_reward(run_python("print(7)"), "7") == 1.0


def test_without_a_cgroup_the_host_says_so_once(monkeypatch, caplog):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(memcg, "_WARNED", [])
    memcg.parent.cache_clear()
    try:
        with caplog.at_level(logging.WARNING):
            assert memcg.create(1 << 30, "x") is None and memcg.create(1 << 30, "y") is None
    finally:
        memcg.parent.cache_clear()
    assert caplog.text.count("no memory cgroup per program (the host is not root)") == 1


def test_own_cgroups_are_read_from_proc():
    v1 = "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n"
    assert memcg._own_cgroups(v1) == ("/process_api/abc", "/")
    assert memcg._own_cgroups("0::/user.slice/session-3.scope\n") == (None, "/user.slice/session-3.scope")
    assert memcg._own_cgroups("5:cpuacct,memory:/a\n") == ("/a", None)
