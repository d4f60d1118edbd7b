"""Code scorer: run the response's program against test cases; the score is the pass rate.

The program is the last complete fenced block of the response whose language tag is empty or
python/py/python3 (```python ... ``` or ``` ... ```, the opening fence at the start of a line).
No such block scores 0.

Test cases (`ground_truth`, a dict or its JSON string; verl's prime_code / sandbox_fusion shapes):

- stdin/stdout: `{"inputs": [str, ...], "outputs": [str, ...]}`. Each input is fed on stdin; the
  output passes when it equals the expected one after line endings are unified, trailing
  whitespace is removed from every line and trailing blank lines are dropped; failing that, when
  the lines split into the same whitespace-separated tokens, each equal, or both integers of the
  same value, or both numbers (not both integers) within 1e-6 (absolute or relative). An expected output given as a list of lines is joined with "\\n".
- call-based: `{"fn_name": name, "inputs": [...], "outputs": [...]}`. An input is a list of
  arguments, or a string of JSON values one per line (sandbox_fusion's form; a line that is not
  JSON is an error in the test cases). `name` is a method of `Solution()` when the program has a
  `Solution` class (as in verl), else one of the program's globals; unlike verl, a name only the
  prelude bound (`from math import *` gives `gcd`) does not count, so a program that defines
  nothing cannot pass by the prelude's functions. The return
  value, passed back as JSON (tuples become lists), passes when it equals the expected value (a
  string is parsed as JSON when it is JSON) or, as in prime_code, the first item of an expected
  non-empty list.
- assert-style: a list of statements `["assert f(1) == 2", ...]`, or `{"assert_case": [...]}`
  with optional `inputs` (stdin, default "") and `outputs` (default None) of the same length.
  Each statement is appended to the program, followed by a line that prints a marker (with a
  number drawn for the run, as the call harness's marker has); the case passes when the program exits with status 0 having printed the marker (so a program that exits
  early, `sys.exit(0)` say, does not pass statements it never ran) and, when the expected output
  is not None, what it printed before the marker matches it.

Every program runs after verl's prelude (prime_code's, also sandbox_fusion's for call-based
cases): `from typing import *`, `from collections import *`, `import math`, ... and a recursion
limit of 600000, so solutions that rely on it, e.g. LeetCode-style `List[int]` annotations without
an import, pass as in verl. `from __future__` lines of the program are moved above it.

Scoring follows verl's continuous mode (what verl's default_compute_score uses for code): the
pass rate over the first 10 cases; when all of those pass, the remaining cases run until one
fails, and a failure there makes the score 10/11, so only a program that passes every case
scores 1.0 (verl's sandbox_fusion scorer gives 10/11 for a wrong answer there, but 1.0 for a
runtime error or a timeout). Unlike verl, a case that times out stops the run: the cases after
it count as failed without being run, which bounds the time one response can take. A program
that does not compile scores 0 without running (it is compiled, never run, in the calling
process).

`compute_score` returns `{"score": passed / total, "acc": the same, "passed": passed, "total": total, "reason": ...}`
where `total` is the number of cases the score counts, and `reason` says which case failed and
how; `acc` is the score, as verl's reward loop records the float its code scorer returns, so that
validation's headline is `val-core/<data_source>/acc/...` here too. With `sandbox_fusion_url` the programs run on that Sandbox Fusion service (cases of one
response in parallel, at most `concurrent_semaphore`'s count in flight); otherwise in the local
sandbox, one after another. Test cases of the wrong shape, a sandbox service that cannot be
reached, and a sandbox that cannot run programs (status `sandbox_error`) raise: the reward
manager then scores the row 0 and counts it in `reward/errors`.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import re
import secrets
import textwrap
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from reinforge.reward.sandbox.fusion import run_code_remote
from reinforge.reward.sandbox.local import DEFAULT_MAX_OUTPUT_BYTES, RunResult, SandboxUnavailableError, run_code

# verl's default_compute_score routes the first four here; primeintellect and livecodebench data in the
# same test-case shapes (e.g. converted with verl's recipes) are routed here too
CODE_DATA_SOURCES = ("codecontests", "apps", "codeforces", "taco", "primeintellect", "livecodebench")
FIRST_CASES = 10  # verl's continuous score looks at the first 10 cases
DEFAULT_TIMEOUT_S = 10.0  # per case, as verl's prime_code (continuous) and sandbox_fusion
DEFAULT_MEMORY_MB = 1024
REMOTE_WORKERS = 32  # cases of one response sent to Sandbox Fusion at once (the semaphore caps them further)

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL | re.MULTILINE)  # opens at a line start
_PYTHON_TAGS = {"", "python", "py", "python3"}
# the harness's markers end in a number drawn for each run, and the program's file is removed as it starts (_UNLISTED), so
# it cannot read them from its own source; deliberate introspection (its code object's constants) still can, as it can
# switch the sandbox's guard off: docs/sandbox.md
_RESULT_MARK = "__reinforge_call_result_{}__:"
_ASSERT_DONE_MARK = "__reinforge_assert_done_{}__"
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
# verl's prime_code runs every program after these lines (sandbox_fusion: call-based programs)
_PRELUDE_MODULES = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics",
                    "itertools", "functools", "operator", "io", "sys", "json")
_UNLISTED = ("try:\n    import os as __reinforge_os\n    __reinforge_os.remove(__file__)\nexcept Exception:\n"
             "    pass\n")  # where the program runs from a file (the local sandbox; Sandbox Fusion may not)
_PRELUDE = (
    "".join(f"from {name} import *\n" for name in (*_PRELUDE_MODULES, "builtins", "typing"))
    + "".join(f"import {name}\n" for name in _PRELUDE_MODULES)
    + "sys.setrecursionlimit(6 * 10**5)\n"
)
_CALL_HARNESS = """

def __reinforge_call():
    import json, sys
    name = {fn_name!r}
    args = [json.loads(line) for line in sys.stdin.read().splitlines() if line.strip()]
    if "Solution" in globals():  # as verl: a program with a Solution class is called through it
        target = getattr(globals()["Solution"](), name, None)
    else:  # a global the prelude bound and the program left alone (math's gcd, say) is not the program's
        prelude = {{}}
        exec(compile({prelude!r}, "prelude", "exec"), prelude)
        target = globals().get(name)
        target = None if name in prelude and target is prelude[name] else target
    if target is None:
        where = "its Solution class has no method" if "Solution" in globals() else "the program defines no function"
        raise NameError(f"{{where}} {{name!r}}")
    result = target(*args)
    print()
    print({mark!r} + json.dumps(result, default=repr))


__reinforge_call()
"""


class InvalidTestCases(ValueError):
    """The ground truth is not test cases in a known shape."""


@dataclass(frozen=True)
class CodeTestCase:
    """One case: what runs (`suffix` is appended to the program), its stdin, what it must produce."""

    kind: str  # "stdio", "call" or "assert"
    stdin: str
    expected: Any  # str (stdio, assert), a JSON value (call), or None (assert: running to the end decides)
    statement: str = ""  # assert: the statement appended to the program (then a line printing the done marker)
    fn_name: str = ""  # call: the function to call


@dataclass(frozen=True)
class CaseOutcome:
    passed: bool
    why: str  # what went wrong ("" when passed)
    stops: bool = False  # a timeout: later cases are not run


def compute_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    sandbox_fusion_url: str | None = None,
    concurrent_semaphore: Any = None,
    memory_limit_mb: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """Pass rate of the response's program on the test cases; see the module docstring."""
    cases = parse_test_cases(ground_truth)
    code = extract_code(solution_str)
    if code is None:
        return _result(0, min(len(cases), FIRST_CASES), "no ```python code block in the response")
    syntax_error = _syntax_error(code)
    if syntax_error:
        return _result(0, min(len(cases), FIRST_CASES), f"the program does not compile: {syntax_error}")
    memory_mb = memory_limit_mb or DEFAULT_MEMORY_MB
    if sandbox_fusion_url:
        runner = functools.partial(
            run_code_remote, sandbox_fusion_url, timeout_s=timeout_s, memory_mb=memory_mb, semaphore=concurrent_semaphore
        )
        workers = REMOTE_WORKERS
    else:
        runner = functools.partial(run_code, timeout_s=timeout_s, memory_mb=memory_mb)
        workers = 1
    return score_cases(code, cases, runner, workers)


def score_cases(code: str, cases: Sequence[CodeTestCase], runner: Callable[..., RunResult], workers: int = 1) -> dict[str, Any]:
    """Run `cases` with `runner(program, stdin, max_output_bytes=...)` and score them (verl's continuous rule)."""
    if not cases:
        return _result(0, 0, "the ground truth has no test cases")
    check = functools.partial(_check_case, _with_prelude(code), runner)
    first = min(len(cases), FIRST_CASES)
    outcomes = _run_until_stop(check, cases[:first], workers, stop_on_failure=False)
    passed = sum(outcome.passed for outcome in outcomes)
    failure = _first_failure(outcomes)
    if failure is not None:
        return _result(passed, first, _failure_reason(passed, first, *failure, skipped=first - len(outcomes)))
    rest = _run_until_stop(check, cases[first:], workers, stop_on_failure=True)
    failure = _first_failure(rest)
    if failure is None:
        return _result(len(cases), len(cases), f"passed all {len(cases)} test cases")
    index, outcome = failure
    return _result(first, first + 1, f"passed the first {first} test cases; case {first + index + 1}: {outcome.why}")


def extract_code(solution_str: str) -> str | None:
    """The last complete fenced block tagged python (or untagged), dedented (a fence inside a list
    item is indented), or None."""
    blocks = [body for tag, body in _FENCE.findall(solution_str) if tag.lower() in _PYTHON_TAGS]
    return textwrap.dedent(blocks[-1]) if blocks else None


def parse_test_cases(ground_truth: Any) -> list[CodeTestCase]:
    """The test cases of `ground_truth` (a dict, a list of assert statements, or their JSON string)."""
    spec = ground_truth
    if isinstance(spec, (str, bytes)):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as error:
            raise InvalidTestCases(f"the ground truth of a code sample is not JSON test cases ({error}): {_short(ground_truth)}") from error
    if isinstance(spec, Sequence) and not isinstance(spec, (str, bytes)):
        spec = {"assert_case": list(spec)}
    if not isinstance(spec, Mapping):
        raise InvalidTestCases(f"code test cases must be a dict or a list of assert statements, got {type(spec).__name__}")
    asserts = spec.get("assert_case")
    if asserts is not None:
        return _assert_cases(spec, asserts)
    if "inputs" not in spec or "outputs" not in spec:
        raise InvalidTestCases(
            f"code test cases need 'inputs' and 'outputs' (or 'assert_case'); got keys {sorted(spec)}"
        )
    inputs, outputs = _same_length_lists(spec, "inputs", "outputs")
    fn_name = spec.get("fn_name")
    if fn_name:
        return [
            CodeTestCase("call", _call_stdin(value, i), _json_value(expected), fn_name=str(fn_name))
            for i, (value, expected) in enumerate(zip(inputs, outputs, strict=True))
        ]
    return [CodeTestCase("stdio", _text(value), _text(expected)) for value, expected in zip(inputs, outputs, strict=True)]


def outputs_match(actual: str, expected: str) -> bool:
    """Whether a program's stdout matches the expected output (rules in the module docstring)."""
    actual_lines, expected_lines = _lines(actual), _lines(expected)
    if actual_lines == expected_lines:
        return True
    if len(actual_lines) != len(expected_lines):
        return False
    return all(_tokens_match(a.split(), e.split()) for a, e in zip(actual_lines, expected_lines, strict=True))


def _check_case(code: str, runner: Callable[..., RunResult], case: CodeTestCase) -> CaseOutcome:
    nonce = secrets.token_hex(8)
    program = code
    if case.kind == "call":
        program += _CALL_HARNESS.format(fn_name=case.fn_name, mark=_RESULT_MARK.format(nonce), prelude=_PRELUDE)
    elif case.kind == "assert":
        program += f"\n\n{case.statement}\nprint({chr(10) + _ASSERT_DONE_MARK.format(nonce)!r})\n"
    cap = DEFAULT_MAX_OUTPUT_BYTES
    if isinstance(case.expected, str):
        cap = max(cap, 2 * len(case.expected.encode()) + 1024)
    result = runner(program, case.stdin, max_output_bytes=cap)
    if result.status == "sandbox_error":
        raise SandboxUnavailableError(f"{result.isolation}: {result.reason}")
    if not result.ok:
        return CaseOutcome(False, f"{result.status.replace('_', ' ')}: {result.reason}", result.status == "timeout")
    if case.kind == "call":
        return _check_call(result.stdout, case.expected, _RESULT_MARK.format(nonce))
    stdout = result.stdout
    if case.kind == "assert":
        stdout, done = stdout.rstrip(), _ASSERT_DONE_MARK.format(nonce)
        if not stdout.endswith(done):
            return CaseOutcome(False, "the program exited before its test statement finished")
        stdout = stdout[: -len(done)]
    if case.expected is None or outputs_match(stdout, case.expected):
        return CaseOutcome(True, "")
    return CaseOutcome(False, f"wrong answer: expected {_short(case.expected)}, got {_short(stdout)}")


def _check_call(stdout: str, expected: Any, mark: str) -> CaseOutcome:
    marked = [line for line in stdout.splitlines() if line.startswith(mark)]
    if not marked:
        return CaseOutcome(False, "the function returned nothing the harness could read")
    try:
        actual = json.loads(marked[-1][len(mark):])
    except json.JSONDecodeError:  # the program printed the mark itself
        return CaseOutcome(False, "the function returned nothing the harness could read")
    if actual == expected or (isinstance(expected, list) and expected and actual == expected[0]):
        return CaseOutcome(True, "")
    return CaseOutcome(False, f"wrong answer: expected {_short(json.dumps(expected))}, returned {_short(json.dumps(actual))}")


def _run_until_stop(check: Callable[[CodeTestCase], CaseOutcome], cases: Sequence[CodeTestCase], workers: int,
                    stop_on_failure: bool) -> list[CaseOutcome]:
    """Outcomes of the cases in order, ending at the first that stops the run (or fails, with
    `stop_on_failure`); cases after it are not started (with workers > 1, ones already running finish)."""
    if workers <= 1:
        outcomes = []
        for case in cases:
            outcomes.append(check(case))
            if outcomes[-1].stops or (stop_on_failure and not outcomes[-1].passed):
                break
        return outcomes
    stop = threading.Event()

    def run(case: CodeTestCase) -> CaseOutcome | None:
        if stop.is_set():
            return None
        outcome = check(case)
        if outcome.stops or (stop_on_failure and not outcome.passed):
            stop.set()
        return outcome

    with ThreadPoolExecutor(max_workers=min(workers, len(cases)) or 1, thread_name_prefix="reinforge-code") as pool:
        results = list(pool.map(run, cases))
    outcomes = []
    for outcome in results:  # keep the order-based rule of the sequential run
        if outcome is None:
            break
        outcomes.append(outcome)
        if outcome.stops or (stop_on_failure and not outcome.passed):
            break
    return outcomes


def _with_prelude(code: str) -> str:
    """`code` after verl's prelude, its `from __future__` statements (which must come first, and may span lines)
    moved above it. A program that does not parse is left after the prelude as it is (it fails to run)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _UNLISTED + _PRELUDE + code
    lines = re.split(r"(?<=\n)", code.replace("\r\n", "\n").replace("\r", "\n"))  # ast's lines (not form feeds')
    spans = [(node.lineno - 1, node.end_lineno) for node in tree.body
             if isinstance(node, ast.ImportFrom) and node.module == "__future__"]
    futures = "".join("".join(lines[start:end]).rstrip("\n") + "\n" for start, end in spans)
    for start, end in spans:
        lines[start:end] = ["\n"] * (end - start)  # blanked where they stood
    return futures + _UNLISTED + _PRELUDE + "".join(lines)


def _syntax_error(code: str) -> str:
    """Why `code` does not compile ("" when it does). Compiling runs none of it."""
    try:
        compile(code, "main.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as error:
        return f"{type(error).__name__}: {error}"
    return ""


def _first_failure(outcomes: list[CaseOutcome]) -> tuple[int, CaseOutcome] | None:
    return next(((i, outcome) for i, outcome in enumerate(outcomes) if not outcome.passed), None)


def _failure_reason(passed: int, total: int, index: int, outcome: CaseOutcome, skipped: int) -> str:
    reason = f"passed {passed} of {total} test cases; case {index + 1}: {outcome.why}"
    if skipped:
        reason += f" ({skipped} later case{'s' if skipped > 1 else ''} not run)"
    return reason


def _result(passed: int, total: int, reason: str) -> dict[str, Any]:
    score = passed / total if total else 0.0
    return {"score": score, "acc": score, "passed": passed, "total": total, "reason": reason}


def _assert_cases(spec: Mapping[str, Any], asserts: Any) -> list[CodeTestCase]:
    if not isinstance(asserts, list) or not all(isinstance(statement, str) for statement in asserts):
        raise InvalidTestCases("'assert_case' must be a list of Python statements (strings)")
    if not asserts:
        raise InvalidTestCases("code test cases: 'assert_case' is an empty list")
    inputs = spec.get("inputs", [""] * len(asserts))
    outputs = spec.get("outputs", [None] * len(asserts))
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not len(inputs) == len(outputs) == len(asserts):
        raise InvalidTestCases(
            f"'assert_case' has {len(asserts)} statements; 'inputs' and 'outputs', when given, must be lists of the same length"
        )
    return [
        CodeTestCase("assert", _text(stdin or ""), None if expected is None else _text(expected), statement)
        for statement, stdin, expected in zip(asserts, inputs, outputs, strict=True)
    ]


def _same_length_lists(spec: Mapping[str, Any], *keys: str) -> list[list[Any]]:
    values = [spec[key] for key in keys]
    if not all(isinstance(value, list) for value in values):
        raise InvalidTestCases(f"code test cases: {' and '.join(repr(key) for key in keys)} must be lists")
    if len({len(value) for value in values}) != 1:
        raise InvalidTestCases(f"code test cases: {len(values[0])} inputs but {len(values[1])} outputs")
    if not values[0]:
        raise InvalidTestCases(f"code test cases: {' and '.join(repr(key) for key in keys)} are empty lists")
    return values


def _call_stdin(value: Any, index: int) -> str:
    """The harness's stdin: one JSON value per argument per line (a string input is that already, checked here)."""
    if isinstance(value, str):
        for line in filter(str.strip, value.splitlines()):
            try:
                json.loads(line)
            except json.JSONDecodeError as error:
                raise InvalidTestCases(f"code test cases: input {index + 1} of a call-based case is a string whose "
                                       f"line {_short(line)} is not a JSON value ({error}); a string input holds one "
                                       f"JSON value per argument per line, else give a list of arguments") from None
        return value
    arguments = value if isinstance(value, list) else [value]
    return "\n".join(json.dumps(argument) for argument in arguments)


def _json_value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(item) for item in value)
    return str(value)


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _tokens_match(actual: list[str], expected: list[str]) -> bool:
    return len(actual) == len(expected) and all(a == e or _close(a, e) for a, e in zip(actual, expected, strict=True))


def _close(a: str, e: str) -> bool:
    """Numbers within 1e-6; two integers only when equal (as verl's prime_code: 1000000008 is not 1000000007)."""
    if _INTEGER.match(a) and _INTEGER.match(e):  # as digit strings: int() refuses numbers of over 4300 digits
        return _integer_text(a) == _integer_text(e)
    try:
        x, y = float(a), float(e)
    except ValueError:
        return False
    return math.isfinite(x) and math.isfinite(y) and math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-6)


def _integer_text(token: str) -> str:
    """An integer token as its value's digits: no plus sign or leading zeros, and -0 is 0."""
    digits = token.lstrip("+-").lstrip("0") or "0"
    return ("-" if token.startswith("-") and digits != "0" else "") + digits


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text if len(text) <= limit else text[:limit] + "...")
