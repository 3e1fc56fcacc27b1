"""Hostile programs for the sandbox suite (tests/rewards/test_hostile_programs.py).

Each program tries one attack, *checks that it worked* (an assertion, or an uncaught error), and only
then prints the right answer. So a contained attack ends the program abnormally and earns reward 0;
an attack that got through would earn 1 and fail the test. Placeholders, replaced by the test:
ANSWER, MARKER (a host path, in a host directory bound read-only into the sandbox), OUTSIDE (that
directory), SECRET_PATH (a 0600 file in it), HOST_PID (the test process), VICTIM_PID (a host
process), TOKEN (a number that names any process the program manages to start), INTERP (the
interpreter's path, the only executable in the sandbox), PORT / UDP_PORT (host sockets on 127.0.0.1),
UNIX_PATH (a host unix socket in OUTSIDE); for the second round (SECOND_ROUND): PUBLIC (a world-readable
host file in OUTSIDE), LATE_SECRET / LATE_DIR_SECRET / MADE_PRIVATE (0600 files, one in a 0700
directory, one made 0600 later, all after the first run of the module), FIFO_OUT (a host FIFO with a
host reader), FIFO_IN (a host FIFO holding a secret), TMP_BOUND (a host directory bound under the
sandbox's /tmp, with a FIFO in it), LOGTOKEN (bytes that must never reach a host log).
"""

# Escapes from the audit hook. The hook's function is reachable through the kwdefaults of the
# fork_exec stand-in it installs; __cantrace__ lets sys.settrace see its frames, and the tracer
# rewrites the event name, after which the hook lets every event through (the second class).
UNHOOK = """import sys
_kw = getattr(getattr(sys.modules.get('_posixsubprocess'), 'fork_exec', None), '__kwdefaults__', None) or {}
if '_hook' in _kw:
    _kw['_hook'].__cantrace__ = True
    def _tr(frame, ev, arg):
        if frame.f_code.co_name == '_dgrpo_guard' and ev == 'call':
            frame.f_locals['event'] = 'harmless'
    sys.settrace(_tr)
"""
# ... then the real ctypes, with raw system calls.
CTYPES = UNHOOK + """sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != '_Modules']  # the stand-in
for _k in [k for k in sys.modules if 'ctypes' in k]:
    del sys.modules[_k]
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sys_call(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    assert r != -1, ('refused', nr, ctypes.get_errno())
    return r
"""
# A C extension loaded from its file under another module's name: the hook checks the top-level
# name ("json" is allowed), the loader calls PyInit_<last part> (the first class).
ALIAS = """import importlib.machinery, importlib.util, os, sys
def load(real, alias):
    d = [p for p in sys.path if p.endswith('lib-dynload')][0]
    f = d + '/' + [n for n in os.listdir(d) if n.startswith(real + '.cpython')][0]
    loader = importlib.machinery.ExtensionFileLoader(alias, f)
    m = importlib.util.module_from_spec(importlib.util.spec_from_file_location(alias, f, loader=loader))
    loader.exec_module(m)
    return m
"""
FRESH = """import _imp, importlib.machinery
def fresh(name):  # a new copy of a builtin module, with the functions the runner removed
    return _imp.create_builtin(importlib.machinery.ModuleSpec(name, importlib.machinery.BuiltinImporter))
"""
SPAWN = "[INTERP, '-c', 'import time; time.sleep(TOKEN)']"

HOSTILE = {
    # --- the classes: C extension under another name, tracing the hook, signals, devices
    "alias_posixsubprocess_fork_exec": ALIAS + f"""ps = load('_posixsubprocess', 'json._posixsubprocess')
r, w = os.pipe()
args = [a.encode() for a in {SPAWN}]
ps.fork_exec(args, [args[0]], True, (), None, None, -1, -1, -1, -1, -1, -1, r, w, False, False, -1, None, None, None, -1, None, False)
print(ANSWER)""",
    "alias_sqlite_writes_outside": ALIAS + """sq = load('_sqlite3', 'json._sqlite3')
con = sq.connect(MARKER)
con.execute('create table t (x)')
con.commit()
print(ANSWER)""",
    "alias_ctypes_system": ALIAS + """sys.modules['_ctypes'] = load('_ctypes', 'json._ctypes')
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != '_Modules']
import ctypes
assert ctypes.CDLL(None).system(('touch ' + MARKER).encode()) == 0
print(ANSWER)""",
    "traced_hook_os_system": UNHOOK + "import os\nassert os.system('touch ' + MARKER) == 0\nprint(ANSWER)",
    "traced_hook_write_outside": UNHOOK + "open(MARKER, 'w').write('x')\nprint(ANSWER)",
    "traced_hook_fork": UNHOOK + "import os\nif os.fork() == 0:\n    import time\n    time.sleep(60)\nprint(ANSWER)",
    "traced_hook_exec": UNHOOK + f"import os\nos.execv(INTERP, {SPAWN})",
    "ctypes_fork": CTYPES + "assert libc.fork() != -1\nprint(ANSWER)",
    "ctypes_ptrace_attach_pid1": CTYPES + "sys_call(101, 16, 1, 0, 0)\nprint(ANSWER)",  # PTRACE_ATTACH
    "ctypes_unshare_user": CTYPES + "sys_call(272, 0x10000000)\nprint(ANSWER)",  # CLONE_NEWUSER
    "ctypes_mount_tmpfs": CTYPES + "assert libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0\nprint(ANSWER)",
    "ctypes_bpf": CTYPES + "sys_call(321, 0, 0, 0)\nprint(ANSWER)",
    "ctypes_perf_event_open": CTYPES + "buf = ctypes.create_string_buffer(128)\nsys_call(298, ctypes.addressof(buf), 0, -1, -1, 0)\nprint(ANSWER)",
    "ctypes_io_uring_setup": CTYPES + "buf = ctypes.create_string_buffer(120)\nsys_call(425, 8, ctypes.addressof(buf))\nprint(ANSWER)",
    "ctypes_keyctl": CTYPES + "sys_call(250, 0, -1, 0)\nprint(ANSWER)",  # KEYCTL_GET_KEYRING_ID
    "ctypes_kexec_load": CTYPES + "sys_call(246, 0, 0, 0, 0)\nprint(ANSWER)",
    "ctypes_clone3": CTYPES + "buf = ctypes.create_string_buffer(88)\nsys_call(435, ctypes.addressof(buf), 88)\nprint(ANSWER)",
    "ctypes_x32_abi_syscall": CTYPES + "sys_call(0x40000000 + 57)\nprint(ANSWER)",  # x32 fork
    "pidfd_signal_to_host": "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open(HOST_PID), signal.SIGKILL)\nprint(ANSWER)",
    "fresh_signal_pidfd_to_victim": FRESH + "import os\nfresh('_signal').pidfd_send_signal(os.pidfd_open(VICTIM_PID), 9)\nprint(ANSWER)",
    "kill_host_process": "import os\nos.kill(HOST_PID, 9)\nprint(ANSWER)",
    "kill_everything": "import os\nos.kill(-1, 9)\nprint(ANSWER)",
    "kill_sandbox_init": "import os\nos.kill(1, 9)\ntry:\n    os.kill(1, 0)\nexcept ProcessLookupError:\n    print(ANSWER)",
    "fresh_posix_mknod_device": FRESH + "import stat\nfresh('posix').mknod('/tmp/mem', stat.S_IFCHR | 0o600, 0x101)\nprint(ANSWER)",
    "fresh_posix_mkfifo_outside": FRESH + "fresh('posix').mkfifo(MARKER)\nprint(ANSWER)",
    "fresh_posix_mkfifo_inside": FRESH + "fresh('posix').mkfifo('fifo')\nprint(ANSWER)",
    "outlive_daemon_thread": "import threading, time\nthreading.Thread(target=time.sleep, args=(TOKEN,), daemon=True).start()\nprint(ANSWER)",
    "outlive_double_fork": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(TOKEN)\nprint(ANSWER)",
    # --- the classic ones
    "infinite_loop": "while True:\n    pass",
    "cpu_loop_ignoring_sigxcpu": "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass",
    "sleep_forever": "import time\ntime.sleep(10 ** 6)\nprint(ANSWER)",
    "allocate_10_gb": "x = bytearray(10 * 1024 ** 3)\nprint(ANSWER)",
    "fork_bomb": "import os\nwhile True:\n    os.fork()",
    "subprocess_run": f"import subprocess\nsubprocess.run({SPAWN}, check=True)\nprint(ANSWER)",
    "multiprocessing_process": "import multiprocessing, time\nmultiprocessing.Process(target=time.sleep, args=(TOKEN,)).start()\nprint(ANSWER)",
    "os_system": "import os\nassert os.system('touch ' + MARKER) == 0\nprint(ANSWER)",
    "posix_spawn": f"import os\nos.posix_spawn(INTERP, {SPAWN}, {{}})\nprint(ANSWER)",
    "os_execv": f"import os\nos.execv(INTERP, {SPAWN})",
    "forkpty": "import os\nos.forkpty()\nprint(ANSWER)",
    "tcp_to_localhost": "import socket\nsocket.create_connection(('127.0.0.1', PORT), timeout=1).sendall(b'x')\nprint(ANSWER)",
    "udp_to_localhost": "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', UDP_PORT))\nprint(ANSWER)",
    "unix_socket_on_host": "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(UNIX_PATH)\ns.sendall(b'x')\nprint(ANSWER)",
    "write_through_dotdot": "open('../' * 12 + MARKER.lstrip('/'), 'w').write('x')\nprint(ANSWER)",
    "write_through_symlink": "import os\nos.symlink(MARKER, 'link')\nopen('link', 'w').write('x')\nprint(ANSWER)",
    "write_through_hardlink": "import os\nos.link(OUTSIDE + '/public.txt', 'hard')\nopen('hard', 'a').write('x')\nprint(ANSWER)",
    "write_through_proc_self_root": "open('/proc/self/root' + MARKER, 'w').write('x')\nprint(ANSWER)",
    "write_proc_self_mem": "open('/proc/self/mem', 'wb').write(b'x')\nprint(ANSWER)",
    "write_after_chdir": "import os\nos.chdir(OUTSIDE)\nopen('marker', 'w').write('x')\nprint(ANSWER)",
    "write_through_dir_fd": "import os\nfd = os.open(OUTSIDE, os.O_RDONLY)\nos.close(os.open('marker', os.O_WRONLY | os.O_CREAT, dir_fd=fd))\nprint(ANSWER)",
    "overwrite_standard_library": "import os\nopen(os.__file__, 'a').write('x')\nprint(ANSWER)",
    "overwrite_numpy": "import numpy, os\nopen(os.path.join(os.path.dirname(numpy.__file__), 'version.py'), 'a').write('x')\nprint(ANSWER)",
    "overwrite_interpreter": "open(INTERP, 'ab').write(b'x')\nprint(ANSWER)",
    "ctypes_stand_in": "import ctypes\nctypes.CDLL(None).system(('touch ' + MARKER).encode())\nprint(ANSWER)",
    "raise_cpu_limit": "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\nprint(ANSWER)",
    "raise_memory_limit_of_init": "import resource\nresource.prlimit(1, resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\nprint(ANSWER)",
    "thread_bomb": "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(TOKEN,)).start()",
    "one_gigabyte_of_output": "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\nprint(ANSWER)",
    "fill_the_work_directory": "for i in range(200):\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))\nprint(ANSWER)",
    "deep_recursion": "import sys\nsys.setrecursionlimit(10 ** 7)\ndef f(n):\n    return f(n + 1)\nf(0)\nprint(ANSWER)",
    "print_answer_then_loop": "print(ANSWER, flush=True)\nwhile True:\n    pass",
    "print_answer_then_raise": "print(ANSWER, flush=True)\nraise RuntimeError('late')",
    "print_answer_then_exit_3": "import os\nprint(ANSWER, flush=True)\nos._exit(3)",
    "print_answer_then_kill_itself": "import os\nprint(ANSWER, flush=True)\nos.kill(os.getpid(), 9)",
    "read_host_0600_file": "print(open(SECRET_PATH).read())\nprint(ANSWER)",
    "read_host_etc_shadow": "print(open('/etc/shadow').read())\nprint(ANSWER)",
    "read_host_home": "import os\nprint(os.listdir('/home'))\nprint(ANSWER)",
    "read_host_environment": "import os\nassert 'DGRPO_HOSTILE_SECRET' in os.environ, sorted(os.environ)\nprint(ANSWER)",
}

RAW = CTYPES + """import errno, os
def errno_of(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return 0 if r != -1 else ctypes.get_errno()
"""
WRITE_ALL = "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, LINE)\n    except OSError:\n        pass\n"

# The second review's classes (docs/sandbox.md), each as several programs: E1 host disk, E2 host memory,
# E3 output the host parses, E4 leases and locks, E5 inotify, E6 the output checker, E7 late secrets,
# E8 FIFOs and binds under /tmp; other ABIs and newer system calls; the identity.
SECOND_ROUND = {
    "e1_fallocate_stdout": "import os\nos.posix_fallocate(1, 0, 4 << 30)\nprint(ANSWER)",
    "e1_fallocate_keep_size_raw": RAW + "assert errno_of(285, 1, 1, 0, 4 << 30) == 0\nassert errno_of(285, 2, 1, 0, 4 << 30) == 0\n"
                                  "print(ANSWER)",  # FALLOC_FL_KEEP_SIZE on stdout and stderr
    "e1_ftruncate_stdout": "import os\nos.ftruncate(1, 1 << 30)\nprint(ANSWER)",
    "e1_writable_host_file_descriptor": "import os, stat, fcntl\nfound = []\nfor fd in range(1024):\n    try:\n"
                                        "        st = os.fstat(fd)\n    except OSError:\n        continue\n"
                                        "    if stat.S_ISREG(st.st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & 3:\n"
                                        "        found.append(fd)\nos.posix_fallocate(found[0], 0, 1 << 30)\nprint(ANSWER)",
    "e1_gigabyte_to_stderr": "import os\nchunk = b'x' * (1 << 20)\nfor _ in range(1024):\n    os.write(2, chunk)\nprint(ANSWER)",
    "e1_fallocate_in_the_work_directory": "import os\nfd = os.open('big', os.O_CREAT | os.O_WRONLY)\n"
                                          "os.posix_fallocate(fd, 0, 1 << 30)\nprint(ANSWER)",
    "e1_inode_flood": "import os\nfor i in range(100000):\n    os.close(os.open(f'f{i}', os.O_CREAT | os.O_WRONLY))\nprint(ANSWER)",
    "e1_sparse_terabyte": "f = open('sparse', 'wb')\nf.seek(1 << 40)\nf.write(b'x')\nf.close()\nprint(ANSWER)",
    "e2_sysv_shm_detached": RAW + "libc.shmat.restype = ctypes.c_void_p\nfor _ in range(12):  # 12 x 256 MiB, each detached\n"
                            "    sid = libc.syscall(ctypes.c_long(29), 0, ctypes.c_long(1 << 28), 0o1600)\n"
                            "    assert sid >= 0, ctypes.get_errno()\n    addr = libc.shmat(sid, None, 0)\n"
                            "    assert addr not in (None, ctypes.c_void_p(-1).value)\n    ctypes.memset(addr, 1, 1 << 28)\n"
                            "    libc.shmdt(ctypes.c_void_p(addr))\nprint(ANSWER)",
    "e2_sysv_semaphores_and_messages": RAW + "assert errno_of(64, 0, 1, 0o1600) == 0\nassert errno_of(68, 0, 0o1600) == 0\nprint(ANSWER)",
    "e2_posix_message_queue": RAW + "name = ctypes.create_string_buffer(b'q')\n"
                              "assert errno_of(240, ctypes.addressof(name), 0o100 | 2, 0o600, 0) == 0\nprint(ANSWER)",
    "e2_memfd_gigabyte": "import os\nfd = os.memfd_create('x')\nos.ftruncate(fd, 1 << 30)\nos.write(fd, b'x' * (1 << 20))\nprint(ANSWER)",
    "e2_dev_shm": "open('/dev/shm/x', 'wb').write(b'x' * (1 << 30))\nprint(ANSWER)",
    "e2_shared_anonymous_mapping": "import mmap\nm = mmap.mmap(-1, 2 << 30)\nm[-1] = 1\nprint(ANSWER)",
    "e2_pipe_buffers": "import os, fcntl\nps = [os.pipe() for _ in range(20)]\nfor r, w in ps:\n    fcntl.fcntl(w, 1031, 1 << 20)\n"
                       "    os.write(w, b'x' * 65536)\nprint(ANSWER)",
    "e2_huge_pages": RAW + "assert errno_of(9, 0, 1 << 30, 3, 0x22 | 0x40000, -1, 0) == 0\nprint(ANSWER)",
    "e2_locked_memory": RAW + "assert errno_of(151, 3) == 0\nprint(ANSWER)",
    "e2_queued_signals": "import os, signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])\n"
                         "for _ in range(100000):\n    os.kill(os.getpid(), signal.SIGRTMIN)\nprint(ANSWER)",
    # E3: the host must read all this and score it without raising; none prints the answer
    "e3_nested_brackets_on_every_descriptor": WRITE_ALL.replace("LINE", "b'[' * 50000 + b'\\n'") + "print('LOGTOKEN')",
    "e3_request_flood": WRITE_ALL.replace("LINE", "b'1 thief_math add i1 i1\\n' * 200000") + "print('LOGTOKEN')",
    "e3_endless_request_line": WRITE_ALL.replace("LINE", "b'7' * (16 << 20)") + "print('LOGTOKEN')",
    "e3_megabyte_line_then_answer": "import sys\nsys.stdout.write('LOGTOKEN ' + '1+' * (1 << 19) + str(ANSWER) + '\\n')",
    "e3_invalid_utf8": "import os\nos.write(1, b'\\xff\\xfe\\xc0' * 1000 + b'LOGTOKEN')\nos.write(2, b'\\xff' * 100000)",
    "e3_forged_blocked_marker": "import os\nos.write(2, b'\\ndgrpo-sandbox: blocked: LOGTOKEN' + b'x' * (1 << 20))\nos._exit(86)",
    "e3_o_direct_packets_on_stderr": "import os, fcntl\nfor fd in (1, 2):\n"
                                     "    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)\n"
                                     "for _ in range(300000):  # packet mode: one host read per byte\n"
                                     "    os.write(2, b'x')\nprint(ANSWER)",
    "e3_a_byte_at_a_time_on_every_descriptor": "import os\nwhile True:\n    for fd in range(1, 64):\n        try:\n"
                                               "            os.write(fd, b'x')\n        except OSError:\n"
                                               "            pass",  # one host read per byte, until killed
    "e3_empty_lines_on_every_descriptor": "import os\nwhile True:\n    for fd in range(1, 64):\n        try:\n"
                                          "            os.write(fd, b'\\n')\n        except OSError:\n"
                                          "            pass",  # each a whole (empty) request line
    "e6_terminal_escapes": "import sys\nsys.stderr.write('\\x1b]0;LOGTOKEN\\x07\\x1b[2J' * 1000)\nprint('\\x1b[2J LOGTOKEN')\n"
                           "raise SystemExit(1)",
    "e6_checker_bomb": "print('2**2**2**40')",
    "e6_checker_latex_bomb": "print('\\\\frac{' * 90 + '1' + '}{2}' * 90)",
    "e4_lease_on_a_bound_file": "import fcntl, os, time\nfd = os.open(PUBLIC, os.O_RDONLY)\nfcntl.fcntl(fd, 1024, fcntl.F_RDLCK)\n"
                                "time.sleep(1)\nprint(ANSWER)",
    "e4_lease_on_numpy": "import numpy, fcntl, os, time\nfd = os.open(numpy.__file__, os.O_RDONLY)\n"
                         "fcntl.fcntl(fd, 1024, fcntl.F_RDLCK)\ntime.sleep(1)\nprint(ANSWER)",
    "e4_flock_a_bound_file": "import fcntl, os, time\nfd = os.open(PUBLIC, os.O_RDONLY)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
                             "time.sleep(1)\nprint(ANSWER)",
    "e4_posix_lock": "import fcntl, os\nfd = os.open(PUBLIC, os.O_RDONLY)\nfcntl.lockf(fd, fcntl.LOCK_SH)\nprint(ANSWER)",
    "e4_open_file_description_lock": RAW + "fd = os.open(PUBLIC, os.O_RDONLY)\nlk = ctypes.create_string_buffer(32)\n"
                                     "assert errno_of(72, fd, 37, ctypes.addressof(lk)) == 0\nprint(ANSWER)",
    "e4_chmod_a_bound_file": "import os\nos.chmod(PUBLIC, 0o777)\nprint(ANSWER)",
    "e4_utime_a_bound_file": "import os\nos.utime(PUBLIC, (0, 0))\nprint(ANSWER)",
    "e4_directory_notification": "import fcntl, os\nfd = os.open(OUTSIDE, os.O_RDONLY)\nfcntl.fcntl(fd, fcntl.F_NOTIFY, 0x3f)\n"
                                 "print(ANSWER)",
    "e5_inotify_every_file": RAW + "import numpy, sympy  # more bound files to watch\nlibc.inotify_init1.restype = ctypes.c_int\n"
                             "fd = libc.inotify_init1(0)\nassert fd >= 0, ctypes.get_errno()\nn = 0\n"
                             "for root, dirs, files in os.walk('/'):\n    for name in [''] + files:\n"
                             "        n += libc.inotify_add_watch(fd, os.path.join(root, name).encode(), 0xfff) >= 0\n"
                             "assert n > 5000, n\nprint(ANSWER)",
    "e5_inotify_instances": RAW + "fds = [libc.inotify_init1(0) for _ in range(60)]\nassert min(fds) >= 0\nprint(ANSWER)",
    "e5_fanotify": RAW + "assert errno_of(300, 0, 0) == 0\nprint(ANSWER)",
    "e7_late_secret": "print(open(LATE_SECRET).read())\nprint(ANSWER)",
    "e7_late_secret_in_a_closed_directory": "print(open(LATE_DIR_SECRET).read())\nprint(ANSWER)",
    "e7_file_made_private_later": "print(open(MADE_PRIVATE).read())\nprint(ANSWER)",
    "e8_write_a_host_fifo": "import os\nfd = os.open(FIFO_OUT, os.O_WRONLY | os.O_NONBLOCK)\nos.write(fd, b'LOGTOKEN')\nprint(ANSWER)",
    "e8_read_a_host_fifo": "import os\nfd = os.open(FIFO_IN, os.O_RDONLY | os.O_NONBLOCK)\nprint(os.read(fd, 100))\nprint(ANSWER)",
    "e8_write_a_bind_under_tmp": "open(TMP_BOUND + '/x', 'w').write('x')\nprint(ANSWER)",
    "e8_fifo_in_a_bind_under_tmp": "import os\nfd = os.open(TMP_BOUND + '/fifo', os.O_WRONLY | os.O_NONBLOCK)\n"
                                   "os.write(fd, b'LOGTOKEN')\nprint(ANSWER)",
    # E9: the host's disk. Each checks that its calls reached the kernel (fsync of a bad descriptor: EBADF).
    "e9_fsync_storm_on_bound_files": "import os, sys\nfds = [os.open(p, os.O_RDONLY) for p in (PUBLIC, OUTSIDE, sys.executable, '/')]\n"
                                     "for _ in range(20000):\n    for fd in fds:\n        os.fsync(fd)\n        os.fdatasync(fd)\n"
                                     "try:\n    os.fsync(999)\nexcept OSError:  # EBADF: the flushes ran\n    print(ANSWER)",
    "e9_sync_everything": RAW + "for _ in range(2000):\n    os.sync()\n"
                          "assert errno_of(306, 999) == errno.EBADF and errno_of(277, 999, 0, 0, 0) == errno.EBADF\n"
                          "print(ANSWER)",
    "e9_o_direct_reads_of_libpython": RAW + "import mmap, sys\nbuf = mmap.mmap(-1, 1 << 16)\n"
                                      "addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))\n"
                                      "fd = os.open(sys.executable, os.O_RDONLY | os.O_DIRECT)\n"
                                      "for i in range(50000):  # aligned reads past the page cache\n"
                                      "    assert errno_of(17, fd, addr, 1 << 12, (i % 64) << 12) == 0\nprint(ANSWER)",
    "side_sysinfo_host_uptime_and_load": RAW + "buf = ctypes.create_string_buffer(112)  # struct sysinfo\n"
                                         "assert errno_of(99, ctypes.addressof(buf)) == 0\n"
                                         "uptime, load1 = ctypes.c_long.from_buffer(buf).value, ctypes.c_ulong.from_buffer(buf, 8).value\n"
                                         "assert uptime > 0\nprint(ANSWER)",
    "abi_x32_write_of_the_answer": CTYPES + "buf = ctypes.create_string_buffer(str(ANSWER).encode() + b'\\n')\n"
                                   "libc.syscall(ctypes.c_long(0x40000000 | 1), 1, ctypes.addressof(buf), len(buf.value))",
    "abi_i386_int80": CTYPES + "import mmap\nm = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
                      "m.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))\n"
                      "assert ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))() > 0\nprint(ANSWER)",
    "newer_system_calls": RAW + "for nr in (449, 450, 451, 452, 453, 457, 458, 462, 467, 999):\n"
                          "    assert errno_of(nr, 0, 0, 0, 0, 0) != errno.EPERM, nr  # reached the kernel\nprint(ANSWER)",
    "identity_become_root": "import os\nos.setresuid(0, 0, 0)\nprint(ANSWER)",
    "identity_give_a_file_to_root": "import os\nopen('x', 'w').write('x')\nos.chown('x', 0, 0)\nprint(ANSWER)",
}
HOSTILE.update(SECOND_ROUND)
