"""Run an untrusted Python program on this machine with limits, and report what happened.

`run_code(code, stdin)` writes `code` to `main.py` in a fresh temporary work directory and runs it
with this interpreter (`python -I -B`: isolated mode, no bytecode written) through
`_launcher.py`. Every run gets:

- a new session (`start_new_session`), a minimal environment (PATH, locale, one-thread BLAS,
  HOME = TMPDIR = the work directory; nothing inherited, so no secrets), stdin from a file;
- resource limits set before the program starts (soft = hard, except CPU): CPU seconds (the
  timeout, rounded up, plus one; SIGXCPU there, SIGKILL a second later), address space
  (`memory_mb`), 16 MiB per written file, 256 open files, no core dumps, and RLIMIT_NPROC = the
  tasks its user already runs + 64. Linux does not apply RLIMIT_NPROC to root, so a run started
  by root is not limited by it;
- a wall-clock timeout (counted from the call, interpreter start included), after which the whole
  process tree is killed: its process group, then every process whose environment carries the
  run's marker (`REINFORGE_SANDBOX_RUN`), which finds children that called setsid. The sweep also
  runs after every normal exit. Should this process die mid-run, the launcher notices (a pipe
  closes) and kills the run's process group. Without namespaces, a process that left the group
  and exec'd with a new environment (which needs the guard out of the way) escapes both;
- stdout and stderr read as they come, each capped at `max_output_bytes` (the program is killed
  when one goes over);
- when the machine allows unprivileged namespaces (probed once per process with `unshare`):
  new user, network, PID and mount namespaces (`unshare --user --map-root-user --net --pid
  --fork --kill-child --mount --mount-proc`). The program then has no network (only a loopback
  that is down), sees only its own processes, and every process it starts dies with the
  namespace's init when the run ends;
- unless `guard=False`: an audit hook in the program's interpreter refusing file writes outside
  the work directory, new processes, signals, sockets, ctypes and rlimit changes (the list is
  in `_launcher.py`). The hook is a guard against accidents and ordinary model output, not a
  security boundary: a few deliberate lines of Python switch it off.

`isolation()` says which of these layers are in effect; every RunResult repeats it. The work
directory is removed afterwards. What is and is not guaranteed is in docs/sandbox.md.
"""

from __future__ import annotations

import functools
import math
import os
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MARKER = "REINFORGE_SANDBOX_RUN"
MAX_FILE_BYTES = 16 * 2**20
DEFAULT_MAX_OUTPUT_BYTES = 64 * 2**10
PROCESS_ALLOWANCE = 64  # processes (threads count) a program may add to those its user already runs
BLOCKED = "[reinforge sandbox]"  # the launcher's guard starts its error messages with this
STATUSES = ("ok", "runtime_error", "timeout", "memory", "output_limit", "blocked", "sandbox_error")
_NAMESPACE_FLAGS = ["--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc"]
_LAUNCHER = Path(__file__).with_name("_launcher.py")


class SandboxUnavailableError(RuntimeError):
    """The sandbox could not run the program at all (as opposed to the program failing)."""


@dataclass(frozen=True)
class RunResult:
    """What one run did. `status` is one of STATUSES; `exit_code` is negative for a signal and None
    when unknown; `stdout`/`stderr` are decoded (invalid UTF-8 replaced) and capped; `reason` says in
    words what happened; `isolation` names the layers that were in effect."""

    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    wall_s: float
    reason: str
    isolation: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def run_code(
    code: str,
    stdin: str = "",
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    guard: bool = True,
) -> RunResult:
    """Run the Python program `code` with `stdin` in the local sandbox; see the module docstring.
    `guard=False` leaves out the audit-hook guard (for programs you trust, and to test the OS layers)."""
    if timeout_s <= 0 or memory_mb <= 0 or max_output_bytes <= 0:
        raise ValueError("run_code needs timeout_s, memory_mb and max_output_bytes > 0")
    started = time.monotonic()
    token = secrets.token_hex(12)
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="reinforge-sandbox-"))
    try:
        Path(workdir, "main.py").write_text(code, encoding="utf-8", errors="replace")  # no lone surrogates
        with tempfile.TemporaryFile() as stdin_file:
            stdin_file.write(stdin.encode("utf-8", errors="replace"))
            stdin_file.seek(0)
            return _run(workdir, token, stdin_file, started, timeout_s, memory_mb, max_output_bytes, guard)
    finally:
        _remove_tree(workdir)


def isolation() -> str:
    """The isolation layers local runs get on this machine, in words."""
    layers = ["new session", "rlimits"]
    if os.getuid() == 0:
        layers[-1] += " (running as root: RLIMIT_NPROC is not enforced)"
    if _namespace_prefix():
        layers.append("user+network+pid+mount namespaces (no network)")
    else:
        layers.append(f"no namespaces ({_namespace_problem()}): network reachable unless the guard blocks it")
    return ", ".join(layers)


def _run(workdir, token, stdin_file, started, timeout_s, memory_mb, max_output_bytes, guard) -> RunResult:
    status_read, status_write = os.pipe()
    lifeline_read, lifeline_write = os.pipe()  # the launcher kills the run when this process's end closes
    command = [
        *_namespace_prefix(),
        _python(), "-I", "-B", str(_LAUNCHER), workdir, str(status_write), str(lifeline_read), "1" if guard else "0",
        str(_cpu_limit_s(timeout_s)), str(memory_mb * 2**20), str(MAX_FILE_BYTES), str(_process_limit()),
    ]
    try:
        process = subprocess.Popen(
            command, stdin=stdin_file, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir,
            env=_environment(workdir, token), start_new_session=True, pass_fds=(status_write, lifeline_read),
        )
    except BaseException:
        os.close(status_read)
        os.close(lifeline_write)
        raise
    finally:
        os.close(status_write)
        os.close(lifeline_read)
    try:
        outcome, stdout, stderr = _collect(process, started + timeout_s, max_output_bytes)
    finally:
        _kill_tree(process, token)
        process.wait()
        os.close(lifeline_write)
        wait_status = _read_all(status_read)
    try:
        exit_code = os.waitstatus_to_exitcode(int(wait_status))
    except (ValueError, OverflowError):  # no status, or garbage a program wrote into the pipe
        exit_code = process.returncode
    out, err = stdout.decode("utf-8", errors="replace"), stderr.decode("utf-8", errors="replace")
    status, reason = _classify(outcome, exit_code, err, timeout_s, memory_mb, max_output_bytes)
    if outcome == "exited" and not wait_status:  # the launcher ended without reporting on the program
        status, reason = "sandbox_error", f"the sandbox could not run the program: {_last_line(err) or f'status {exit_code}'}"
    return RunResult(status, exit_code, out, err, time.monotonic() - started, reason, isolation())


def _collect(process: subprocess.Popen, deadline: float, cap: int) -> tuple[str, bytes, bytes]:
    """Read stdout and stderr until both close or the program ends: ("exited" | "timeout" | "output_limit", out, err)."""
    buffers = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
    selector = selectors.DefaultSelector()
    for stream in (process.stdout, process.stderr):
        selector.register(stream.fileno(), selectors.EVENT_READ)
    outcome = "exited"
    try:
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                outcome = "timeout"
                break
            exited = process.poll() is not None
            # once the program has exited, only what is already in the pipes is read: a process it left
            # behind may hold them open
            for key, _ in selector.select(timeout=0 if exited else min(remaining, 0.1)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                buffers[key.fd] += chunk
            if any(len(buffer) > cap for buffer in buffers.values()):
                outcome = "output_limit"
                break
            if exited and not selector.select(timeout=0):
                break
        if outcome == "exited":
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                outcome = "timeout"
    finally:
        selector.close()
    out, err = (bytes(buffers[stream.fileno()][:cap]) for stream in (process.stdout, process.stderr))
    return outcome, out, err


def _classify(outcome, exit_code, stderr, timeout_s, memory_mb, cap) -> tuple[str, str]:
    if outcome == "timeout":
        return "timeout", f"did not finish within {timeout_s:g} s of wall time; killed"
    if outcome == "output_limit":
        return "output_limit", f"wrote more than {cap} bytes to stdout or stderr; killed"
    if exit_code == -signal.SIGXCPU:
        return "timeout", f"used more than {_cpu_limit_s(timeout_s)} s of CPU time; killed"
    if exit_code == -signal.SIGXFSZ:
        return "runtime_error", f"wrote a file larger than {MAX_FILE_BYTES // 2**20} MiB; killed"
    if exit_code == 0:
        return "ok", "exited with status 0"
    last_line = _last_line(stderr)
    if "MemoryError" in stderr:
        return "memory", f"ran out of its {memory_mb} MiB of memory: {last_line}"
    if BLOCKED in stderr:
        return "blocked", last_line
    if exit_code is not None and exit_code < 0:
        return "runtime_error", f"killed by signal {_signal_name(-exit_code)}"
    return "runtime_error", f"exited with status {exit_code}" + (f": {last_line}" if last_line else "")


def _cpu_limit_s(timeout_s: float) -> int:
    """RLIMIT_CPU's soft limit for a run: the wall-clock timeout rounded up, plus one second."""
    return math.ceil(timeout_s) + 1


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _kill_tree(process: subprocess.Popen, token: str) -> None:
    """SIGKILL the run's process group, its first process, and every process carrying its marker."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if process.poll() is None:
        process.kill()
    for _ in range(5):  # a process found late may have started others before it died
        marked = _marked_processes(token)
        if not marked:
            return
        for pid in marked:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


def _marked_processes(token: str) -> list[int]:
    """Live processes whose environment has MARKER=token (zombies have no environment to read)."""
    needle = f"{MARKER}={token}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as file:
                if needle in file.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def _process_limit() -> int:
    """RLIMIT_NPROC for the run: the tasks (threads) of this user now, plus PROCESS_ALLOWANCE; 0 (unset) for root."""
    uid = os.getuid()
    if uid == 0:
        return 0
    tasks = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry.name}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            tasks += int(fields.get("Threads", "1"))
    return tasks + PROCESS_ALLOWANCE


def _environment(workdir: str, token: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        MARKER: token,
    }


def _python() -> str:
    return sys.executable or shutil.which("python3") or "python3"


@functools.cache
def _namespace_prefix() -> tuple[str, ...]:
    """The `unshare ...` command prefix when namespaces work here, else ()."""
    return () if _namespace_problem() else (shutil.which("unshare"), *_NAMESPACE_FLAGS)  # type: ignore[return-value]


@functools.cache
def _namespace_problem() -> str:
    """Why namespaces cannot be used here ("" when they can): one probe run per process."""
    unshare = shutil.which("unshare")
    if not unshare or not sys.platform.startswith("linux"):
        return "no unshare command"
    try:
        probe = subprocess.run(
            [unshare, *_NAMESPACE_FLAGS, _python(), "-I", "-B", "-c", "pass"],
            capture_output=True, timeout=30, env={"PATH": "/usr/bin:/bin"},
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unshare failed: {error}"
    if probe.returncode != 0:
        return "unshare failed: " + (_last_line(probe.stderr.decode(errors="replace")) or f"status {probe.returncode}")
    return ""


def _read_all(fd: int) -> str:
    """What is in the status pipe now, without waiting for its end: the launcher has exited, and a
    process the program left behind (one that reopened the pipe through /proc) must not block this one."""
    os.set_blocking(fd, False)
    chunks = []
    try:
        while chunk := os.read(fd, 64):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace").strip()


def _remove_tree(path: str) -> None:
    """Remove the work directory even if the program took away its own permissions."""

    def make_writable_and_retry(function, failed_path, _):
        parent = os.path.dirname(failed_path)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
        if os.path.isdir(failed_path) and not os.path.islink(failed_path):
            os.chmod(failed_path, stat.S_IRWXU)
        function(failed_path)

    try:
        shutil.rmtree(path, onerror=make_writable_and_retry)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
