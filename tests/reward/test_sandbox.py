"""The local sandbox against hostile programs, with and without namespaces; no process may outlive a run.

Every test runs twice where it makes sense: with the namespaces this machine offers ("namespaces",
skipped where unshare does not work) and with them turned off ("no namespaces", the fallback of
containers). Programs that could hurt the machine if containment failed are bounded themselves
(a fork bomb of at most 2**6 processes, sleeps instead of busy loops where possible).
"""

from __future__ import annotations

import ast
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from reinforge.reward.sandbox import local, run_code


@pytest.fixture(params=["namespaces", "no namespaces"])
def mode(request, monkeypatch):
    if request.param == "namespaces":
        if local._namespace_problem():
            pytest.skip(f"namespaces unavailable here: {local._namespace_problem()}")
    else:
        monkeypatch.setattr(local, "_namespace_prefix", lambda: ())
        monkeypatch.setattr(local, "_namespace_problem", lambda: "turned off by the test")
    return request.param


@pytest.fixture(autouse=True)
def no_process_outlives_a_run(monkeypatch):
    """After each test, no process carries the marker of a run this test started."""
    tokens = []
    real_token_hex = local.secrets.token_hex

    def recording_token_hex(nbytes=None):
        tokens.append(real_token_hex(nbytes))
        return tokens[-1]

    monkeypatch.setattr(local.secrets, "token_hex", recording_token_hex)
    yield
    left = [pid for token in tokens for pid in local._marked_processes(token)]
    assert not left, f"processes left behind by the sandbox: {left}"


def live_processes_with(text: str) -> list[int]:
    """Live (not zombie) processes whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def test_runs_a_program_with_stdin(mode):
    result = run_code("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", "1 2\n3\n")
    assert (result.status, result.exit_code, result.stdout, result.ok) == ("ok", 0, "6\n", True)
    assert ("namespaces (no network)" in result.isolation) == (mode == "namespaces")
    assert "turned off by the test" in result.isolation or mode == "namespaces"


def test_large_stdin_reaches_the_program(mode):
    data = "x" * 2_000_000
    result = run_code("import sys\nprint(len(sys.stdin.read()))", data)
    assert result.stdout == "2000000\n"


def test_exit_status_and_exceptions(mode):
    assert run_code("raise SystemExit(3)").exit_code == 3
    result = run_code("print('before')\n1 / 0")
    assert (result.status, result.exit_code, result.stdout) == ("runtime_error", 1, "before\n")
    assert result.reason == "exited with status 1: ZeroDivisionError: division by zero"


def test_a_signal_is_reported_as_a_negative_exit_code(mode):
    result = run_code("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", guard=False)
    assert (result.status, result.exit_code, result.reason) == ("runtime_error", -15, "killed by signal SIGTERM")


def test_infinite_loop_is_killed_at_the_timeout(mode):
    result = run_code("while True:\n    pass", timeout_s=1)
    assert result.status == "timeout" and result.exit_code == -9
    assert 1.0 <= result.wall_s < 2.5
    assert result.reason == "did not finish within 1 s of wall time; killed"


def test_the_cpu_limit_is_reported_as_a_timeout(monkeypatch):
    monkeypatch.setattr(local, "_cpu_limit_s", lambda timeout_s: 1)  # CPU time ahead of wall time, as with busy threads
    result = run_code("while True:\n    pass", timeout_s=8)
    assert (result.status, result.exit_code, result.reason) == ("timeout", -signal.SIGXCPU, "used more than 1 s of CPU time; killed")


def test_memory_hog_gets_a_memory_error(mode):
    result = run_code("blocks = [bytearray(2**20) for _ in range(1024)]\nprint(len(blocks))", memory_mb=200)
    assert result.status == "memory" and "MemoryError" in result.stderr
    assert result.reason.startswith("ran out of its 200 MiB of memory")


def test_huge_output_is_capped_and_the_program_killed(mode):
    result = run_code("while True:\n    print('y' * 1000)", timeout_s=5, max_output_bytes=10_000)
    assert result.status == "output_limit" and len(result.stdout) == 10_000
    assert result.wall_s < 4  # killed for its output, not at the timeout


def test_writing_outside_the_work_directory_is_blocked(mode, tmp_path):
    target = tmp_path / "escaped.txt"
    for program in (
        f"open({str(target)!r}, 'w').write('x')",
        f"import os\nos.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)",
        f"import os\nd = os.open({str(tmp_path)!r}, os.O_RDONLY)\nos.open('escaped.txt', os.O_WRONLY | os.O_CREAT, dir_fd=d)",
        f"import os\nos.symlink({str(target)!r}, 'link')\nopen('link', 'w').write('x')",
        f"import shutil\nshutil.copy('main.py', {str(target)!r})",
        f"import os\nos.mkfifo({str(target)!r})",  # mkfifo and mknod raise no audit event
        f"import os\nos.mknod({str(target)!r})",
        f"import os\nd = os.open({str(tmp_path)!r}, os.O_RDONLY)\nos.mkfifo('escaped.txt', dir_fd=d)",
        f"import posix\nposix.mkfifo({str(target)!r})",  # os's functions are posix's
        # the "open" event has no dir_fd: a folder opened relative to one, from a deeper working directory, is checked
        # from that descriptor's folder (which the working directory's check would put inside)
        "import os\nos.makedirs('a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t')\nw = os.open('.', os.O_RDONLY)\n"
        "os.chdir('a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t')\nd = os.open('../../..', os.O_RDONLY, dir_fd=w)\n"
        f"os.open({os.path.relpath(target, '/')!r}, os.O_WRONLY | os.O_CREAT, dir_fd=d)",
        # a str subclass answering the guard's own checks; the unchecked posix functions by a fresh import; a working
        # directory outside (the check and the call would race on it); C modules that create files unaudited
        f"class S(str):\n    startswith = endswith = lambda *a: False\nopen(S({str(target)!r}), 'w')",
        f"import sys\ndel sys.modules['posix']\nimport posix\nposix.mkfifo({str(target)!r})",
        f"import os\nos.chdir({str(tmp_path)!r})\nopen('escaped.txt', 'w')",
        f"import sqlite3\nsqlite3.connect({str(target)!r})",
    ):
        result = run_code(program)
        assert result.status == "blocked", (program, result)
        assert result.reason.startswith(("PermissionError: [reinforge sandbox]", "ImportError: [reinforge sandbox]"))
        assert not target.exists()


def test_the_work_directory_is_writable_private_and_removed(mode, monkeypatch):
    monkeypatch.setenv("REINFORGE_TEST_SECRET", "hunter2")
    program = """
import ast
import os
with open("notes.txt", "w") as f:
    f.write("kept")
print(open("notes.txt").read(), os.getcwd() == os.environ["HOME"] == os.environ["TMPDIR"])
print(sorted(os.environ))
print(os.getcwd())
"""
    result = run_code(program)
    first, names, workdir = result.stdout.splitlines()
    assert first == "kept True"
    assert ast.literal_eval(names) == sorted(local._environment("/x", "t"))  # nothing inherited, no secret
    assert not Path(workdir).exists()


def test_files_and_folders_in_the_work_directory_can_be_made_and_removed(mode):
    # CPython's audit events say "no dir_fd" with -1; the guard once took that for a directory descriptor
    program = """
import os, pathlib, shutil, tempfile
os.mkdir("sub")
pathlib.Path("sub/deeper").mkdir()
open("f", "w").write("x")
os.rename("f", "g")
os.chmod("g", 0o600)
os.utime("g")
os.remove("g")
os.mkfifo("fifo")
with tempfile.TemporaryFile() as file:
    file.write(b"x")
folder = tempfile.mkdtemp()
print(os.path.dirname(folder) == os.getcwd())
os.rmdir(folder)
shutil.rmtree("sub")
print(sorted(os.listdir(".")))
"""
    result = run_code(program)
    assert (result.status, result.stdout) == ("ok", "True\n['fifo', 'main.py']\n"), result


def test_a_small_memory_limit_is_the_programs_alone(mode):
    # the supervisor takes no limit: under 16 MiB it could not start its thread (a sandbox_error)
    assert run_code("print('hello')", memory_mb=16).stdout == "hello\n"
    result = run_code("x = bytearray(64 * 2**20)", memory_mb=16)
    assert result.status == "memory" and result.reason.startswith("ran out of its 16 MiB of memory")


def test_standard_streams_and_devnull_stay_writable():
    program = "out = open('/dev/stdout', 'w')\nout.write('via /dev/stdout\\n')\nout.flush()\n" \
              "open('/dev/null', 'w').write('x')\nprint(open(0).read().split())"
    result = run_code(program, "1 2")
    assert (result.status, result.stdout) == ("ok", "via /dev/stdout\n['1', '2']\n")


def test_resource_limits_reach_the_program(mode):
    program = """
import resource
for name in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE"):
    print(resource.getrlimit(getattr(resource, name)))
"""
    lines = run_code(program, timeout_s=2.5, memory_mb=300).stdout.splitlines()
    expected = [(4, 5), (300 * 2**20,) * 2, (local.MAX_FILE_BYTES,) * 2, (256, 256), (0, 0)]
    assert lines == [str(limit) for limit in expected]


def test_process_limit_is_what_the_user_runs_plus_an_allowance():
    if os.getuid() == 0:
        assert local._process_limit() == 0  # Linux does not apply RLIMIT_NPROC to root
    else:
        limit = local._process_limit()
        assert local.PROCESS_ALLOWANCE < limit < resource.getrlimit(resource.RLIMIT_NPROC)[0] + local.PROCESS_ALLOWANCE


def test_connecting_to_a_local_server_is_blocked(mode):
    server = socket.create_server(("127.0.0.1", 0))  # a connection would wait in its backlog
    port = server.getsockname()[1]
    try:
        guarded = run_code(f"import socket\nsocket.socket().connect(('127.0.0.1', {port}))\nprint('connected')")
        assert guarded.status == "blocked" and "network access (connect)" in guarded.reason
        if mode == "namespaces":  # the OS layer alone: no route to the host's loopback
            bare = run_code(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')",
                            guard=False)
            assert bare.status == "runtime_error" and "Network is unreachable" in bare.reason
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


SETSID_GRANDCHILD = """
import os, time
if os.fork() == 0:
    os.setsid()
    os.execv({sleep!r}, ["sleep", {token!r}])
time.sleep(0.5)  # the grandchild is running now
print("parent", flush=True)
{then}
"""


@pytest.mark.parametrize("then", ["", "while True:\n    pass"], ids=["parent exits", "parent times out"])
def test_a_setsid_grandchild_is_killed(mode, then):
    token = f"{30 + uuid.uuid4().int % 10**6 / 10**7:.7f}"  # a unique sleep duration to find it by
    program = SETSID_GRANDCHILD.format(sleep=shutil.which("sleep"), token=token, then=then)
    result = run_code(program, timeout_s=1.5, guard=False)
    assert result.stdout == "parent\n"
    assert result.status == ("ok" if not then else "timeout")
    assert live_processes_with(f"sleep {token}") == []
    blocked = run_code(program, timeout_s=2)
    assert blocked.status == "blocked" and "starting processes (fork)" in blocked.reason


CALLER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("local", {local_py!r})  # the module alone: importing reinforge takes seconds
local = sys.modules["local"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(local)
if sys.argv[1] == "no namespaces":
    local._namespace_prefix = lambda: ()
    local._namespace_problem = lambda: "turned off by the test"
local.run_code("import os\\nos.execv({sleep!r}, ['sleep', {token!r}])", timeout_s=60, guard=False)
"""


def test_a_run_dies_with_its_caller(mode):
    token = f"{40 + uuid.uuid4().int % 10**6 / 10**7:.7f}"
    caller_code = CALLER.format(local_py=local.__file__, sleep=shutil.which("sleep"), token=token)
    caller = subprocess.Popen([sys.executable, "-c", caller_code, mode])
    try:
        assert _wait_until(lambda: live_processes_with(f"sleep {token}")), "the sandboxed program did not start"
        workdir = os.readlink(f"/proc/{live_processes_with(f'sleep {token}')[0]}/cwd")
        assert Path(workdir, "main.py").exists()
        os.kill(caller.pid, signal.SIGKILL)  # no chance to clean up: only the launcher's lifeline can
        caller.wait()
        assert _wait_until(lambda: not live_processes_with(f"sleep {token}")), "the program outlived its caller"
        assert _wait_until(lambda: not Path(workdir).exists()), "the work directory outlived the caller"
    finally:
        if caller.poll() is None:
            os.kill(caller.pid, signal.SIGKILL)
            caller.wait()
        for pid in live_processes_with(f"sleep {token}"):
            os.kill(pid, signal.SIGKILL)


def _wait_until(condition, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


HOLD_THE_STATUS_PIPE = """
import os
status_fd = open(f"/proc/{{os.getppid()}}/cmdline").read().split("\\0")[5]  # python -I -B _launcher.py WORKDIR STATUS_FD ...
held = os.open(f"/proc/{{os.getppid()}}/fd/{{status_fd}}", os.O_WRONLY)  # a second write end of the launcher's pipe
os.set_inheritable(held, True)
if os.fork() == 0:
    os.setsid()
    os.execve({sleep!r}, ["sleep", {token!r}], {{}})  # a new session and no marker: beyond the sweep
"""


def test_a_process_holding_the_status_pipe_does_not_block_the_caller(mode):
    token = f"{50 + uuid.uuid4().int % 10**6 / 10**7:.7f}"
    try:
        result = run_code(HOLD_THE_STATUS_PIPE.format(sleep=shutil.which("sleep"), token=token), timeout_s=5, guard=False)
        assert (result.status, result.exit_code) == ("ok", 0) and result.wall_s < 4
        # only without namespaces can such a process outlive the run (the guard would have stopped it)
        assert bool(live_processes_with(f"sleep {token}")) == (mode == "no namespaces")
    finally:
        for pid in live_processes_with(f"sleep {token}"):
            os.kill(pid, signal.SIGKILL)


BOUNDED_FORK_BOMB = """
import os, time
for _ in range(6):  # at most 2**6 processes, even if nothing contains it
    os.fork()
print("forked", flush=True)
time.sleep(60)
"""


def test_fork_bomb_is_blocked_by_the_guard_and_contained_without_it(mode):
    guarded = run_code(BOUNDED_FORK_BOMB, timeout_s=2)
    assert guarded.status == "blocked" and guarded.stdout == ""
    unguarded = run_code(BOUNDED_FORK_BOMB, timeout_s=2, guard=False)
    assert unguarded.status == "timeout" and unguarded.stdout.count("forked") == 2**6
    # the autouse fixture checks that none of the 64 processes is left


@pytest.mark.parametrize(
    ("program", "what"),
    [
        ("import ctypes", "importing ctypes"),
        ("import os\nos.system('true')", "starting programs (os.system)"),
        ("import subprocess\nsubprocess.run(['true'])", "importing _posixsubprocess"),
        ("import os\nos.kill(1, 9)", "sending signals (os.kill)"),
        ("import resource\nresource.setrlimit(resource.RLIMIT_CPU, (100, 100))", "changing resource limits"),
    ],
)
def test_the_guard_blocks(program, what):
    result = run_code(program)
    assert result.status == "blocked" and what in result.reason


def test_a_launcher_that_cannot_start_is_a_sandbox_error(monkeypatch):
    monkeypatch.setattr(local, "_namespace_prefix", lambda: (shutil.which("unshare") or "unshare", "--no-such-option"))
    result = run_code("print(1)")
    assert result.status == "sandbox_error" and result.reason.startswith("the sandbox could not run the program: ")
    assert "unshare" in result.reason


def test_invalid_limits_are_refused():
    with pytest.raises(ValueError):
        run_code("pass", timeout_s=0)
