"""Sandbox Fusion client: run a program on a Sandbox Fusion service (github.com/bytedance/SandboxFusion).

`run_code_remote(url, code, stdin)` POSTs, as verl does, to `url` itself, which is the service's
full `/run_code` endpoint (e.g. `http://localhost:8080/run_code`), the JSON
`{"code", "language": "python", "stdin", "run_timeout", "compile_timeout", "memory_limit_MB",
"files": {}, "fetch_files": []}`, and maps the answer (`status`; `run_result.{status, stdout,
stderr, return_code, execution_time}`) to the local sandbox's `RunResult`:

| answer | RunResult.status |
|---|---|
| status Success, run_result Finished | ok (runtime_error when return_code is not 0) |
| status Failed, run_result TimeLimitExceeded | timeout |
| status Failed, run_result Finished or Error | memory when stderr names MemoryError, else runtime_error |
| status Failed, compile_result failed | runtime_error |
| status SandboxError, or anything else | sandbox_error (the code scorer raises for it) |

stdout and stderr are cut to `max_output_bytes` (output_limit when stdout was longer).

Decided behaviours:

- Connection errors, timeouts and HTTP 5xx answers are retried, `retries` attempts in all, with
  `retry_delay_s`, 2x`retry_delay_s`, ... between them. A 4xx answer (a wrong URL path, say) or an
  answer that is not JSON is not retried. When no attempt succeeds, `SandboxUnavailableError`
  says why, naming the URL; the code scorer lets it propagate, so the reward manager scores the
  row 0 and counts it in `reward/errors` instead of stopping training.
- `semaphore` (any object usable in `with`, e.g. a threading.Semaphore of
  `reward_model.sandbox_fusion.max_concurrent`) is held for each HTTP attempt, not while waiting
  between attempts, and is shared by every caller given the same object.
- The HTTP timeout is compile + run timeout + 10 s, as in verl.

Only the standard library (urllib) is used.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time
import urllib.error
import urllib.request
from typing import Any

from reinforge.reward.sandbox.local import DEFAULT_MAX_OUTPUT_BYTES, RunResult, SandboxUnavailableError, _last_line

DEFAULT_RETRIES = 3
DEFAULT_RETRY_DELAY_S = 0.5
HTTP_TIMEOUT_MARGIN_S = 10.0


def run_code_remote(
    url: str,
    code: str,
    stdin: str = "",
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    semaphore: Any = None,
    retries: int | None = None,
    retry_delay_s: float | None = None,
) -> RunResult:
    """Run the Python program `code` with `stdin` on the Sandbox Fusion service at `url`; see the module docstring.
    `retries` and `retry_delay_s` default to DEFAULT_RETRIES and DEFAULT_RETRY_DELAY_S."""
    retries = DEFAULT_RETRIES if retries is None else retries
    retry_delay_s = DEFAULT_RETRY_DELAY_S if retry_delay_s is None else retry_delay_s
    payload = {
        "code": code,
        "language": "python",
        "stdin": stdin,
        "run_timeout": timeout_s,
        "compile_timeout": timeout_s,
        "memory_limit_MB": memory_mb,
        "files": {},
        "fetch_files": [],
    }
    started = time.monotonic()
    answer = _post(url, payload, 2 * timeout_s + HTTP_TIMEOUT_MARGIN_S, semaphore, retries, retry_delay_s)
    return _to_result(answer, url, time.monotonic() - started, memory_mb, max_output_bytes)


def _post(url: str, payload: dict, timeout_s: float, semaphore: Any, retries: int, retry_delay_s: float) -> dict:
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    problem = ""
    for attempt in range(max(retries, 1)):
        if attempt:
            time.sleep(retry_delay_s * attempt)
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with semaphore if semaphore is not None else contextlib.nullcontext():
                with urllib.request.urlopen(request, timeout=timeout_s) as response:
                    raw = response.read()
        except urllib.error.HTTPError as error:
            if error.code < 500:
                raise SandboxUnavailableError(
                    f"Sandbox Fusion at {url} answered HTTP {error.code} {error.reason}; reward_model.sandbox_fusion.url "
                    "must be the full endpoint URL, e.g. http://localhost:8080/run_code"
                ) from error
            problem = f"HTTP {error.code} {error.reason}"
            continue
        except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
            problem = str(getattr(error, "reason", None) or error)
            continue
        try:
            answer = json.loads(raw)
        except json.JSONDecodeError as error:
            raise SandboxUnavailableError(f"Sandbox Fusion at {url} answered with something that is not JSON: {raw[:200]!r}") from error
        if not isinstance(answer, dict):
            raise SandboxUnavailableError(f"Sandbox Fusion at {url} answered {answer!r}, not a JSON object")
        return answer
    raise SandboxUnavailableError(
        f"Sandbox Fusion at {url} could not be used after {max(retries, 1)} attempts: {problem}. Check that the "
        "service runs and that reward_model.sandbox_fusion.url is its /run_code endpoint."
    )


def _to_result(answer: dict, url: str, wall_s: float, memory_mb: int, cap: int) -> RunResult:
    run = answer.get("run_result") or {}
    compiled = answer.get("compile_result") or {}
    stdout, stderr = str(run.get("stdout") or ""), str(run.get("stderr") or "")
    exit_code = run.get("return_code")
    status, reason = _classify(answer.get("status"), run, compiled, stderr, exit_code, memory_mb, answer.get("message"))
    if status == "ok" and len(stdout.encode()) > cap:
        status, reason = "output_limit", f"wrote more than {cap} bytes to stdout"
    return RunResult(
        status, exit_code if isinstance(exit_code, int) else None, stdout[:cap], stderr[:cap], wall_s, reason,
        f"Sandbox Fusion service at {url}",
    )


def _classify(api_status, run: dict, compiled: dict, stderr: str, exit_code, memory_mb: int, message) -> tuple[str, str]:
    run_status = run.get("status")
    last_line = _last_line(stderr)
    if api_status == "Success" and run_status == "Finished":
        if exit_code in (0, None):
            return "ok", "exited with status 0"
        return "runtime_error", f"exited with status {exit_code}" + (f": {last_line}" if last_line else "")
    if api_status == "Failed":
        compile_status = compiled.get("status")
        if compile_status in ("Error", "TimeLimitExceeded") or (compile_status == "Finished" and compiled.get("return_code")):
            return "runtime_error", f"did not compile ({compile_status})"
        if run_status == "TimeLimitExceeded":
            return "timeout", f"did not finish within the sandbox's run_timeout ({run.get('execution_time')} s)"
        if run_status in ("Finished", "Error"):
            if "MemoryError" in stderr:
                return "memory", f"ran out of its {memory_mb} MiB of memory: {last_line}"
            return "runtime_error", f"exited with status {exit_code}" + (f": {last_line}" if last_line else "")
    detail = f": {message}" if message else ""
    return "sandbox_error", f"Sandbox Fusion answered status {api_status!r} (run status {run_status!r}){detail}"
