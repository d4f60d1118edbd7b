"""Running untrusted code for code rewards: the local sandbox and the Sandbox Fusion client.

- `run_code(code, stdin, timeout_s=, memory_mb=, ...)` (local.py) runs a Python program on this
  machine with limits and returns a `RunResult`; `isolation()` names the layers in effect here.
- `run_code_remote(url, code, stdin, ...)` (fusion.py) runs it on a Sandbox Fusion service and
  returns the same `RunResult`, or raises `SandboxUnavailableError` when the service cannot be used.

A `RunResult` with status `sandbox_error` means the sandbox, not the program, failed (the local
launcher did not start, or Sandbox Fusion answered SandboxError); the code scorer raises
`SandboxUnavailableError` for it, so that the row is counted in `reward/errors`.

What each guarantees, and what not, is in docs/sandbox.md.
"""

from reinforge.reward.sandbox.fusion import run_code_remote
from reinforge.reward.sandbox.local import STATUSES, RunResult, SandboxUnavailableError, isolation, run_code

__all__ = ["STATUSES", "RunResult", "SandboxUnavailableError", "isolation", "run_code", "run_code_remote"]
