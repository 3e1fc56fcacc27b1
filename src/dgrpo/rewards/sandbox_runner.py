"""The child side of :mod:`dgrpo.rewards.sandbox`. Never imported: run as a script.

:func:`dgrpo.rewards.sandbox.runner_argv` starts it as ``python -I -S -B -c BOOTSTRAP FD RUN_ID``:
the bootstrap reads one inherited descriptor holding a ``marshal``-ed bundle (this file, compiled by
the host; the config; the program; the stand-in modules; the program filter), which costs no mount,
and executes it. It runs inside the OS sandbox (bubblewrap, see ``docs/sandbox.md``), as root of
the sandbox's user namespace when the host mapped the sandbox identity. Before the untrusted program
starts it mounts the work tmpfs (with an inode limit), drops to the sandbox identity (which clears
every capability), closes every inherited file descriptor but three pipes, sets the resource limits
where the host could not, loads the program seccomp filter with ``prctl`` through ``_ctypes`` (the
``ctypes`` package's imports cost milliseconds; ``_ctypes`` is then dropped from ``sys.modules``),
puts a stand-in ``_posixsubprocess`` in place of the one process primitive CPython does not audit,
installs the audit hook, tells the host that the program starts, then runs the program as
``__main__`` and ends the process itself (:func:`_run`). Everything here but the program is trusted.
The audit hook is the *second* layer: an audit hook is not a security boundary (PEP 578), the
namespaces, the identity, the read-only file system and the seccomp filters are. It stops the
common attempts early with a clear reason.

The hook is written so that the program cannot steer it easily:

* it reads nothing from mutable places: every name it uses (``isinstance``, ``os.write``, the sandbox
  root, ...) is bound as a positional default when it is defined (``__defaults__`` is a tuple of
  immutable values, and assigning it or ``__code__`` raises an audited event the hook refuses);
* paths are copied into exact ``str`` objects before they are checked (a ``str`` subclass cannot
  lie about its characters), and a path given as any other object (``pathlib.Path``, ``__fspath__``)
  may only be read, because ``__fspath__`` could answer differently when the real call runs;
* "inside" is decided lexically on the normalised absolute path, and a read-only bind that lands
  under the work directory is outside. That is sound because the program cannot create symlinks or
  hard links and cannot ``chdir``; a path relative to a ``dir_fd`` is
  joined to the directory the kernel names for that fd (``/proc/self/fd``); where there is no
  ``/proc`` (inside bubblewrap) the fd must be a directory on the work directory's file system (a
  tmpfs of its own), and ``os.open``, whose event omits its ``dir_fd``, may only write to absolute paths.

A forbidden operation ends the process at once with exit status ``BLOCKED`` after writing one line
``dgrpo-sandbox: blocked: <what>`` to stderr: it cannot be caught by the program. A forbidden
*import* only raises ``ModuleNotFoundError``, because libraries import optional modules inside
``try``/``except ImportError`` (numpy does so for ``ctypes``).
"""

import itertools
import os
import sys


MS_WORK = 2 | 4 | 8  # MS_NOSUID | MS_NODEV | MS_NOEXEC (seccomp allows mount with exactly these flags)


def _libc():
    """``(call, errno)``: ``call(name, *args)`` calls a C library function with ``long``/bytes arguments.

    Built on ``_ctypes`` alone: the ``ctypes`` package's own import costs milliseconds per program."""
    import _ctypes

    class c_long(_ctypes._SimpleCData):
        _type_ = "l"

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = c_long

    class Library:
        _handle = _ctypes.dlopen(None, 0)

    def call(name, *args):
        return Function((name, Library))(*[a if isinstance(a, bytes) else c_long(a) for a in args])

    return call, _ctypes


def _buffer(ctypes_module, data):
    """A C copy of ``data`` and its address (kept alive by the caller)."""
    class c_char(ctypes_module._SimpleCData):
        _type_ = "c"

    array = type("Buffer", (ctypes_module.Array,), {"_type_": c_char, "_length_": len(data)}).from_buffer_copy(data)
    return array, ctypes_module.addressof(array)


def _mount_work(call, root, size, inodes):
    """Mount the work directory: a tmpfs of ``size`` bytes and ``inodes`` inodes (which bwrap cannot
    bound: empty files and directories cost kernel memory), no devices, no set-uid, no executables."""
    opts = f"size={size},nr_inodes={inodes},mode=1777".encode()
    if call("mount", b"tmpfs", root.encode(), b"tmpfs", MS_WORK, opts) != 0:
        raise OSError("mount of the work directory failed")
    os.chdir(root)  # the working directory was the directory under the new mount


def _drop_identity(uid):
    """Become ``uid`` (and gid), with no supplementary group: the runner starts as root of the sandbox's
    user namespace, which bwrap needed for its mounts; changing every uid away from 0 clears the
    capabilities (permitted, effective, ambient)."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or os.getgroups():
        raise OSError("the sandbox identity was not taken")


def _limits(limits):
    """Set ``(resource, soft, hard)`` limits (where the host could not set them from outside first)."""
    import resource

    for limit, soft, hard in limits:
        cap = resource.getrlimit(limit)[1]
        if cap != resource.RLIM_INFINITY:  # never above what this process may set
            soft, hard = min(soft, cap), min(hard, cap)
        resource.setrlimit(limit, (soft, hard))


def _make_guard(cfg):
    """Build the audit hook and the ``fork_exec`` replacement from the (trusted) config."""
    root = cfg["root"]
    code = cfg["blocked_exit"]
    # Read-only binds under the work directory (a venv made in /tmp) are not inside: a tuple of str.
    bound = tuple(d for d in cfg["bound_dirs"] if d == root or d.startswith(root + "/"))
    # Imports refused by name: modules that reach the OS or raw memory without audit events
    # (_ctypes, _posixshmem ...), and re-imports of the modules patched below. Extension modules
    # raise the "import" event even when loaded through importlib.util.module_from_spec.
    deny = frozenset(cfg["deny_modules"])
    allow = frozenset(sys.stdlib_module_names) | frozenset(cfg["allow_modules"])
    fatal_prefixes = ("socket.", "ctypes.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn",
                      "os.fork", "os.system", "os.kill", "os.killpg", "pty.", "os.chdir", "os.link",
                      "os.symlink", "os.chown", "os.chflags", "os.lchflags", "os.setxattr",
                      "os.removexattr", "resource.setrlimit", "resource.prlimit", "sqlite3.",
                      "ftplib.", "smtplib.", "poplib.", "imaplib.", "nntplib.", "telnetlib.",
                      "http.client.", "urllib.Request", "webbrowser.", "_posixsubprocess.",
                      "gc.get_objects", "gc.get_referrers", "gc.get_referents")
    # (event, ((index of a written path argument, index of its dir_fd argument or -1), ...)); a tuple,
    # not a dict, so that the program cannot edit it through the hook's __defaults__.
    path_events = (("os.remove", ((0, 1),)), ("os.rmdir", ((0, 1),)), ("os.rename", ((0, 2), (1, 3))),
                   ("os.mkdir", ((0, 2),)), ("os.chmod", ((0, 2),)), ("os.utime", ((0, 3),)),
                   ("os.truncate", ((0, -1),)), ("shutil.rmtree", ((0, 1),)), ("shutil.copyfile", ((1, -1),)),
                   ("shutil.copymode", ((1, -1),)), ("shutil.copystat", ((1, -1),)),
                   ("shutil.copytree", ((1, -1),)), ("shutil.move", ((0, -1), (1, -1))),
                   ("shutil.make_archive", ((0, -1),)), ("shutil.unpack_archive", ((1, -1),)))
    watched = frozenset(["open", "object.__setattr__"] + [e for e, _ in path_events])
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    # Files opened for writing and directories made, counted by a C iterator the program can only
    # advance: with RLIMIT_FSIZE this bounds the disk a program can fill.
    writes, max_writes = itertools.count(1), cfg["max_files_written"]

    def _dgrpo_guard(event, args, _root=root, _code=code, _deny=deny, _allow=allow, _fatal=fatal_prefixes,
                     _watched=watched, _paths=path_events, _wflags=write_flags, _issubclass=issubclass,
                     _str=str, _bytes=bytes, _int=int, _type=type, _join="".join, _decode=bytes.decode,
                     _encode=str.encode, _write=os.write, _exit=os._exit, _fn_type=type(_limits),
                     _mnf=ModuleNotFoundError, _repr=repr, _len=len, _base=BaseException, _next=next,
                     _writes=writes, _max_writes=max_writes, _readlink=os.readlink, _fstat=os.fstat,
                     _oserror=OSError, _root_dev=os.stat(root).st_dev, _bound=bound):
        if event == "import":
            name, top = args[0], ""
            if _issubclass(_type(name), _str):
                name = _join((name,))  # an exact str: a subclass cannot lie about its characters
                top = name.partition(".")[0]
            if top in _deny or top not in _allow:
                raise _mnf("dgrpo sandbox: import of " + _repr(name) + " is not allowed")
            return
        if event not in _watched and not event.startswith(_fatal):
            return  # the common case (exec, compile, reads of attributes ...): as fast as possible

        def stop(what):
            try:
                _write(2, _encode("\ndgrpo-sandbox: blocked: " + what + "\n", "utf-8", "replace"))
            finally:
                _exit(_code)

        def text(p):  # exact str of a path argument, or None when it is not a str/bytes
            if _issubclass(_type(p), _str):
                return _join((p,))
            if _issubclass(_type(p), _bytes):
                return _decode(p, "utf-8", "surrogateescape")
            return None

        def inside(p):  # lexical normalisation; see the module docstring for why that is enough
            if not p.startswith("/"):
                p = _root + "/" + p
            parts = []
            for part in p.split("/"):
                if part == "..":
                    if parts:
                        parts.pop()
                elif part and part != ".":
                    parts.append(part)
            norm = "/" + "/".join(parts)
            for b in _bound:
                if norm == b or norm.startswith(b + "/"):
                    return False
            return norm == _root or norm.startswith(_root + "/")

        try:
            if event.startswith(_fatal):
                return stop(event)
            if event == "object.__setattr__":
                obj, attr = args[0], args[1]
                if (_type(obj) is _fn_type and _type(attr) is _str and attr in ("__code__", "__defaults__", "__kwdefaults__")
                        and obj.__code__.co_name == "_dgrpo_guard"):
                    return stop("changing the sandbox guard")
                return
            if event == "open":
                path, mode, flags = args[0], args[1], args[2]
                if not flags & _wflags:
                    return  # reading is allowed anywhere
                p = text(path)
                if p is None:
                    if _type(path) is _int and mode is not None:
                        return  # builtin open() on an fd the program already holds
                    return stop("open for writing of a non-string path")
                if mode is None and not p.startswith("/"):
                    # os.open with a relative path: its dir_fd is not part of the event.
                    return stop("os.open for writing of relative path " + _repr(p))
                if not inside(p):
                    return stop("write outside the sandbox directory: " + _repr(p))
                if _next(_writes) > _max_writes:
                    return stop("too many files written")
                return
            for name, pairs in _paths:
                if name != event:
                    continue
                for pi, di in pairs:
                    base, d = _root, (args[di] if 0 <= di < _len(args) else None)
                    if d is not None and not (_type(d) is _int and d < 0):
                        # Relative to a directory fd: ask the kernel which directory that is.
                        if _type(d) is not _int:
                            return stop(event + " with an unusable dir_fd")
                        try:
                            base = _readlink("/proc/self/fd/" + _repr(d))
                        except _oserror:  # no /proc (bubblewrap): the fd must be on the work tmpfs
                            if _fstat(d).st_dev != _root_dev:
                                return stop(event + " with a dir_fd outside the sandbox directory")
                            base = _root
                        if not base.startswith("/"):
                            return stop(event + " with an unusable dir_fd")
                    p = text(args[pi])
                    if p is None:
                        if event == "os.truncate" and _type(args[pi]) is _int:
                            continue  # ftruncate needs an fd opened for writing, hence inside
                        return stop(event + " on a non-string path")
                    if not inside(p if p.startswith("/") else base + "/" + p):
                        return stop(event + " outside the sandbox directory: " + _repr(p))
                if event == "os.mkdir" and _next(_writes) > _max_writes:
                    return stop("too many files written")
        except _base:
            return stop("guard error on " + event)  # fail closed

    def _dgrpo_guard_fork_exec(*args, _hook=_dgrpo_guard):
        _hook("_posixsubprocess.fork_exec", ())

    return _dgrpo_guard, _dgrpo_guard_fork_exec


def _close_inherited_fds(keep):
    """Close every file descriptor above stderr except ``keep`` (what bwrap or the host left open)."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _load_seccomp(call, ctypes_module, filters):
    """Load each BPF filter (compiled by the host with libseccomp) with prctl; they stack, and stay."""
    if call("prctl", 38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: needed to load a filter unprivileged
        raise OSError(ctypes_module.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    for bpf in filters:
        code, code_at = _buffer(ctypes_module, bpf)
        fprog, fprog_at = _buffer(ctypes_module, (len(bpf) // 8).to_bytes(2, "little") + bytes(6)
                                  + code_at.to_bytes(8, "little"))  # struct sock_fprog
        if call("prctl", 22, 2, fprog_at, 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
            raise OSError(ctypes_module.get_errno(), "prctl(PR_SET_SECCOMP)")
        del code, fprog


def _exit_status(err):
    """The exit status of an uncaught ``SystemExit``, as the interpreter computes it."""
    code = err.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code if -(1 << 31) <= code < (1 << 31) else -1
    try:
        sys.stderr.write(str(code) + "\n")
    except BaseException:
        pass
    return 1


def _run(source, namespace, _run_exitfuncs, _exit=os._exit, _compile=compile, _exec=exec,
         _print_exception=sys.__excepthook__, _system_exit=SystemExit, _base=BaseException, _exc_info=sys.exc_info):
    """Run the program as the interpreter would (traceback and status 1 for an uncaught exception,
    SystemExit's status, atexit functions, flushed standard streams, status 120 when stdout cannot
    be flushed), then end the process with ``os._exit``: the interpreter's own finalization costs a
    sandboxed program more than a millisecond and decides nothing. Every function used after the
    program is bound here, before it runs."""
    status = 0
    try:
        _exec(_compile(source, "program.py", "exec"), namespace)
    except _system_exit as err:
        status = _exit_status(err)
    except _base:
        try:
            sys.excepthook(*_exc_info())
        except _base:
            _print_exception(*_exc_info())
        status = 1
    try:
        _run_exitfuncs()
    except _base:
        pass
    try:
        sys.stdout.flush()
    except _base:
        status = 120
    try:
        sys.stderr.flush()
    except _base:
        pass
    _exit(status & 0xFF if status >= 0 else 255)


class _Modules:
    """Finds the stand-in modules (and the ctypes stand-in) in the bundle: no files, no mounts."""

    def __init__(self, sources, spec_type):
        self.sources, self.spec_type = sources, spec_type

    def find_spec(self, name, path=None, target=None):
        return self.spec_type(name, self, origin="<dgrpo-sandbox>") if name in self.sources else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(compile(self.sources[module.__name__], module.__name__ + ".py", "exec"), module.__dict__)


def main():
    cfg = sys.dgrpo_bundle  # set by the bootstrap from the host's descriptor, before the program exists
    del sys.dgrpo_bundle
    call, ctypes_module = _libc()
    if cfg["work_inodes"]:
        _mount_work(call, cfg["root"], cfg["work_bytes"], cfg["work_inodes"])
    if cfg["drop_to"] is not None:
        _drop_identity(cfg["drop_to"])
    _close_inherited_fds((cfg["started_fd"], cfg["request_fd"], cfg["reply_fd"]))
    if cfg["limits"]:
        _limits(cfg["limits"])
    _load_seccomp(call, ctypes_module, cfg["filters"])
    del call, ctypes_module
    # The program must find the ctypes stand-in, not this module (reloading _ctypes is refused).
    for name in [n for n in sys.modules if n == "ctypes" or n.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]
    hook, fork_exec = _make_guard(cfg)
    # _posixsubprocess.fork_exec starts a process without any audit event (the filter refuses the
    # clone it makes): "import _posixsubprocess" finds this stand-in, whose fork_exec stops with a
    # reason. (Loading the real module under another name is refused by the filter alone.)
    posixsubprocess = type(sys)("_posixsubprocess")
    posixsubprocess.fork_exec = fork_exec
    sys.modules["_posixsubprocess"] = posixsubprocess
    # mknod/mkfifo create files without an audit event (the seccomp filter refuses them): remove the
    # usual way to reach them.
    import posix

    for name in ("mknod", "mkfifo"):
        for module in (os, posix):
            if hasattr(module, name):
                delattr(module, name)
    sys.meta_path.insert(0, _Modules(cfg["modules"], type(sys.__spec__)))  # ModuleSpec, without importing
    sys.path.extend(cfg["site_dirs"])
    # From here on a failure is the program's (a syntax error, say), not the sandbox's.
    os.write(cfg["started_fd"], b"S")
    os.close(cfg["started_fd"])
    main_module = type(sys)("__main__")
    main_module.__file__ = "program.py"
    sys.modules["__main__"] = main_module
    sys.argv = ["program.py"]
    source = cfg["program"]
    audit = cfg["audit_hook"]
    del cfg
    import atexit

    if audit:
        sys.addaudithook(hook)
    del hook, fork_exec, audit
    _run(source, main_module.__dict__, atexit._run_exitfuncs)  # arguments bound before the program runs


if __name__ == "__main__":
    main()
