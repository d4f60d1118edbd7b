"""The program that starts a sandboxed run; `local.run_code` executes this file with `python -I -B`.

Command line: `_launcher.py WORKDIR STATUS_FD LIFELINE_FD GUARD CPU_S MEMORY_BYTES FILE_BYTES NPROC`.

1. This process forks the program and stays as its supervisor: it waits for the program,
   writes the program's raw wait status to STATUS_FD and exits. When this process is PID 1 of a
   fresh PID namespace (`unshare --pid --fork`), it also reaps orphans, and its exit makes the
   kernel kill every process left in the namespace, including any that called setsid. (A PID 1
   ignores signals it has no handler for, so the program must not be PID 1 itself, or
   RLIMIT_CPU's SIGXCPU would be ignored.)
2. The program's process sets its resource limits (soft = hard, so the program cannot raise
   them): address space, size of any written file, open files, no core dumps, and, when
   NPROC > 0, the number of processes of the user. CPU seconds get soft = CPU_S and hard =
   CPU_S + 1: the kernel sends SIGXCPU at the soft limit (reported as a timeout) and SIGKILL at
   the hard one, so with soft = hard a CPU-bound program would die of SIGKILL and look like any
   killed program. A limit the caller already has lower stays as it is. The supervisor keeps no
   limits of its own: a small address-space limit would leave it no room for its thread's stack.
3. A thread of the supervisor reads LIFELINE_FD, a pipe whose other end only the caller holds.
   If the caller dies mid-run (say a reward worker killed for its own timeout), the read ends and
   the supervisor removes WORKDIR, kills the program and its process group, itself included: no
   program outlives its caller.
4. With GUARD=1 the program's process installs an audit hook (PEP 578) that refuses, with a
   PermissionError or ImportError whose message starts with `[reinforge sandbox]`: writing,
   creating, renaming, removing or changing files outside WORKDIR (fd-relative paths included;
   os.mkfifo and os.mknod, which raise no audit event, and os.open, whose event has no dir_fd,
   are replaced (in os and posix) by functions that check;
   /dev/null, /dev/stdout and /dev/stderr may be written);
   opening directories outside WORKDIR (which would allow fd-relative escapes); links and
   symlinks; fork, exec, spawn, system and subprocess; kill, killpg and pthread_kill; socket
   connect, bind, sendto, sendmsg and name lookups; raising resource limits; a working directory
   outside WORKDIR; importing ctypes, cffi, _posixsubprocess, the C modules that create files
   unaudited (_sqlite3, readline, _posixshmem, _multiprocessing) and, once the guard is set, posix
   anew; and any ctypes call. An audit hook cannot be removed, but deliberate
   Python code can still defeat it (through frames, or by replacing the os.path functions the
   checks call), and native code is not audited: it is no security boundary (docs/sandbox.md).
5. WORKDIR/main.py then runs as `__main__`; its exceptions and exit status are the run's.

Only the standard library is used, and nothing is imported from reinforge: under `-I` the
sandboxed interpreter need not see this package.
"""

import operator
import os
import resource
import signal
import sys
import threading
import types

BLOCKED = "[reinforge sandbox]"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_DENIED_EVENTS = {
    "os.fork": "starting processes (fork)",
    "os.forkpty": "starting processes (forkpty)",
    "os.exec": "starting programs (exec)",
    "os.posix_spawn": "starting programs (posix_spawn)",
    "os.spawn": "starting programs (spawn)",
    "os.system": "starting programs (os.system)",
    "subprocess.Popen": "starting programs (subprocess)",
    "os.kill": "sending signals (os.kill)",
    "os.killpg": "sending signals (os.killpg)",
    "signal.pthread_kill": "sending signals (pthread_kill)",
    "os.link": "creating hard links",
    "os.symlink": "creating symbolic links",
    "socket.connect": "network access (connect)",
    "socket.bind": "network access (bind)",
    "socket.sendto": "network access (sendto)",
    "socket.sendmsg": "network access (sendmsg)",
    "socket.getaddrinfo": "network access (name lookup)",
    "socket.gethostbyname": "network access (name lookup)",
    "socket.gethostbyaddr": "network access (name lookup)",
    "resource.setrlimit": "changing resource limits",
    "resource.prlimit": "changing resource limits",
}
_ALWAYS_WRITABLE = {os.devnull, "/dev/stdout", "/dev/stderr"}
# C modules that start processes or create files unaudited (sqlite3 databases, readline's history, shared memory)
_DENIED_MODULES = {"ctypes", "_ctypes", "cffi", "_cffi_backend", "_posixsubprocess", "_sqlite3", "readline", "_posixshmem",
                   "_multiprocessing"}
# event -> (indexes of path arguments, indexes of dir_fd arguments)
_PATH_EVENTS = {
    "os.remove": ((0,), (1,)),
    "os.rmdir": ((0,), (1,)),
    "os.rename": ((0, 1), (2, 3)),
    "os.mkdir": ((0,), (2,)),
    "os.chmod": ((0,), (2,)),
    "os.chown": ((0,), (3,)),
    "os.utime": ((0,), (3,)),
    "os.truncate": ((0,), ()),
    "os.chflags": ((0,), ()),
    "os.lchflags": ((0,), ()),
    "os.setxattr": ((0,), ()),
    "os.removexattr": ((0,), ()),
}


def main() -> None:
    workdir, status_fd, lifeline_fd, guard = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    cpu_s, memory_bytes, file_bytes, nproc = (int(value) for value in sys.argv[5:9])
    program = os.fork()
    if program:
        _supervise(program, workdir, status_fd, lifeline_fd)
    os.close(status_fd)
    os.close(lifeline_fd)
    _set_limits(cpu_s, memory_bytes, file_bytes, nproc)
    if guard:
        sys.addaudithook(_make_guard(workdir))
    _run_program(os.path.join(workdir, "main.py"))


def _set_limits(cpu_s: int, memory_bytes: int, file_bytes: int, nproc: int) -> None:
    limits = [  # (kind, soft, hard)
        (resource.RLIMIT_CPU, cpu_s, cpu_s + 1),
        (resource.RLIMIT_AS, memory_bytes, memory_bytes),
        (resource.RLIMIT_FSIZE, file_bytes, file_bytes),
        (resource.RLIMIT_NOFILE, 256, 256),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if nproc > 0:
        limits.append((resource.RLIMIT_NPROC, nproc, nproc))
    for kind, soft, hard in limits:
        current_hard = resource.getrlimit(kind)[1]
        if current_hard != resource.RLIM_INFINITY:  # a limit can only be lowered
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        resource.setrlimit(kind, (soft, hard))


def _supervise(program: int, workdir: str, status_fd: int, lifeline_fd: int) -> None:
    """Wait for the program (reaping any orphan handed to a PID 1), report its wait status; never returns."""
    threading.Thread(target=_die_with_caller, args=(lifeline_fd, program, workdir), daemon=True).start()
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == program:
            os.write(status_fd, str(status).encode())
            os._exit(0)


def _die_with_caller(lifeline_fd: int, program: int, workdir: str) -> None:
    """Once the caller is gone: remove the work directory (the caller cannot), kill the program and the group.
    The directory goes first: the program's death lets the main thread exit this process."""
    try:
        os.read(lifeline_fd, 1)  # returns (or fails) only when the caller's end is closed
    except OSError:
        pass
    import shutil

    shutil.rmtree(workdir, ignore_errors=True)
    os.kill(program, signal.SIGKILL)
    os.killpg(0, signal.SIGKILL)
    os._exit(1)  # a PID 1 survives its own SIGKILL; its exit then ends the namespace


def _make_guard(workdir: str):
    root = os.path.realpath(workdir)

    guarded: list[bool] = []

    def deny(what: str, error: type[Exception] = PermissionError) -> None:
        raise error(f"{BLOCKED} {what} is not allowed in the sandbox")

    def inside(path, base: str | None = None) -> bool:
        path = str.__str__(os.fsdecode(os.fspath(path)))  # an exact str: a subclass's own methods cannot answer for it
        if path in _ALWAYS_WRITABLE:
            return True
        full = os.path.normpath(os.path.join(base or os.getcwd(), path))
        return full == root or full.startswith(root + os.sep)

    def directory_of(event: str, dir_fd) -> str | None:
        """The folder a dir_fd argument names (None for none: CPython's events pass -1 then), as the kernel has it."""
        if dir_fd is None or (type(dir_fd) is int and dir_fd == -1):
            return None
        try:
            return os.readlink(f"/proc/self/fd/{operator.index(dir_fd)}")
        except (OSError, TypeError, ValueError):
            deny(f"{event} relative to a directory descriptor")

    def confine(event: str, args: tuple, path_indexes: tuple, dir_fd_indexes: tuple) -> None:
        bases = [directory_of(event, args[index]) for index in dir_fd_indexes if index < len(args)]
        for index, path in enumerate(args[index] for index in path_indexes):
            if isinstance(path, int):
                deny(f"{event} on a file descriptor")
            base = bases[min(index, len(bases) - 1)] if bases else None  # rename: (src, dst, src_dir_fd, dst_dir_fd)
            if not inside(path, base):
                deny(f"{event} outside the work directory ({os.path.join(base or '', os.fsdecode(os.fspath(path)))})")

    def check_open(path, mode, flags, base: str | None = None) -> None:
        if path is None or isinstance(path, int):
            return
        writes = (isinstance(flags, int) and flags & _WRITE_FLAGS) or (mode and any(c in mode for c in "wax+"))
        where = os.path.join(base or "", os.fsdecode(os.fspath(path)))
        if writes and not inside(path, base):
            deny(f"writing {where} (outside the work directory)")
        if not writes and not inside(path, base) and os.path.isdir(where if base else path):
            deny(f"opening the directory {where}")

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            check_open(*args)
        elif event in _PATH_EVENTS:
            confine(event, args, *_PATH_EVENTS[event])
        elif event in _DENIED_EVENTS:
            deny(_DENIED_EVENTS[event])
        elif event.startswith("ctypes."):
            deny("ctypes")
        elif event == "import" and (args[0].partition(".")[0] in _DENIED_MODULES or (guarded and args[0] == "posix")):
            deny(f"importing {args[0]}", ImportError)
        elif event == "os.chdir":
            by_fd = isinstance(args[0], int)
            if not inside(directory_of("os.fchdir", args[0]) or "." if by_fd else args[0]):
                deny("changing the working directory outside the work directory" if by_fd else
                     f"changing the working directory to {os.fsdecode(os.fspath(args[0]))} (outside the work directory)")

    def plain(path, dir_fd):
        """The path and descriptor as the call will use them, converted once (a check and a call must read the same)."""
        if not isinstance(path, int):  # an exact str or bytes, not a subclass or an object with __fspath__
            path = os.fspath(path)
            path = bytes(path) if isinstance(path, bytes) else str.__str__(path)
        return path, (dir_fd if dir_fd is None else operator.index(dir_fd))

    def unaudited(name: str, function):  # os.mkfifo and os.mknod raise no audit event: checked here
        def checked(path, *args, dir_fd=None, **kwargs):
            path, dir_fd = plain(path, dir_fd)
            confine(f"os.{name}", (path, dir_fd), (0,), (1,))
            return function(path, *args, dir_fd=dir_fd, **kwargs)
        return checked

    def open_relative(function):  # the "open" event has no dir_fd: a path relative to one is checked from its folder here
        def checked(path, flags, mode=0o777, *, dir_fd=None):
            path, dir_fd = plain(path, dir_fd)
            base = directory_of("os.open", dir_fd)
            if base is not None:
                check_open(path, None, flags, base)
            return function(path, flags, mode, dir_fd=dir_fd)
        return checked

    import posix  # os's functions are posix's: both names are replaced, and os.supports_dir_fd lists the replacements

    for name in ("mkfifo", "mknod", "open"):
        original = getattr(posix, name)
        checked = open_relative(original) if name == "open" else unaudited(name, original)
        setattr(os, name, checked)
        setattr(posix, name, checked)
        if original in os.supports_dir_fd:
            os.supports_dir_fd.discard(original)
            os.supports_dir_fd.add(checked)
    guarded.append(True)  # from now on, a fresh import of posix (with the unchecked functions) is refused
    return hook


def _run_program(path: str) -> None:
    with open(path, "rb") as file:
        source = file.read()
    module = types.ModuleType("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    sys.argv = [path]
    exec(compile(source, "main.py", "exec"), module.__dict__)


if __name__ == "__main__":
    main()
