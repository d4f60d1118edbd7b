"""The code scorer: code extraction, test-case shapes, output comparison, verl's continuous score,
hostile programs scored 0 with a reason, and routing through default_compute_score."""

from __future__ import annotations

import json
import shutil
import socket
import threading

import pytest

from reinforge.reward import default_compute_score, register_scorer, registry
from reinforge.reward.sandbox import SandboxUnavailableError, local, run_code
from reinforge.reward.scorers.code import (
    CODE_DATA_SOURCES,
    InvalidTestCases,
    compute_score,
    extract_code,
    outputs_match,
    parse_test_cases,
    score_cases,
)


def fenced(program: str, tag: str = "python") -> str:
    return f"Here is my solution.\n```{tag}\n{program}\n```\nIt reads the input and prints the answer."


DOUBLE = "print(2 * int(input()))"


class RecordingRunner:
    """The local sandbox, noting the stdin of every run (to see which cases ran)."""

    def __init__(self, timeout_s: float = 5.0):
        self.stdins: list[str] = []
        self.lock = threading.Lock()
        self.timeout_s = timeout_s

    def __call__(self, program: str, stdin: str, max_output_bytes: int):
        with self.lock:
            self.stdins.append(stdin)
        return run_code(program, stdin, timeout_s=self.timeout_s, max_output_bytes=max_output_bytes)


# ------------------------------------------------------------------------------------ extraction
@pytest.mark.parametrize(
    ("response", "code"),
    [
        ("```python\na = 1\n```\nthen\n```python\nb = 2\n```", "b = 2\n"),
        ("```\nx = 1\n```", "x = 1\n"),
        ("```py\nx = 1\n```", "x = 1\n"),
        ("```python\na = 1\n```\nsample output:\n```text\n3\n```", "a = 1\n"),
        ("```python\na = 1\n```\n```cpp\nint main() {}\n```", "a = 1\n"),
        ("```python\na = 1\n```\n```python\nb = 2  # cut off by the length limit", "a = 1\n"),
        ("print(1)", None),
        ("```python\nprint(1)", None),
        ("Use ```x = 1``` inline.\n```python\ny = 2\n```", "y = 2\n"),
        ("1. Steps:\n   ```python\n   z = 3\n   if z:\n       z = 4\n   ```", "z = 3\nif z:\n    z = 4\n"),
    ],
)
def test_extract_code_takes_the_last_complete_python_block(response, code):
    assert extract_code(response) == code


# ------------------------------------------------------------------------------------ comparison
@pytest.mark.parametrize(
    ("actual", "expected", "match"),
    [
        ("3  \n\n\n", "3", True),
        ("1 2\r\n3\r\n", "1 2\n3\n", True),
        ("1  2   \n", "1 2\n", True),
        ("0.3333333\n", "0.333333\n", True),
        ("1000000.5", "1000000.0", True),
        ("0.34", "0.33", False),
        ("1 2", "1\n2", False),
        ("12", "1 2", False),
        ("YES", "yes", False),
        ("\n3", "3", False),
        ("nan", "nan", True),
        ("nan", "0", False),
    ],
)
def test_outputs_match(actual, expected, match):
    assert outputs_match(actual, expected) is match


# ------------------------------------------------------------------------------------ test cases
def test_stdio_cases_from_json_with_list_outputs_joined():
    cases = parse_test_cases(json.dumps({"inputs": ["1\n", "2\n"], "outputs": [["2", "x"], "4\n"]}))
    assert [(c.kind, c.stdin, c.expected) for c in cases] == [("stdio", "1\n", "2\nx"), ("stdio", "2\n", "4\n")]


def test_call_cases_take_argument_lists_or_json_lines():
    cases = parse_test_cases({"fn_name": "f", "inputs": [[1, [2, 3]], "4\n\"a\""], "outputs": [[5], "[1, 2]"]})
    assert [(c.kind, c.fn_name, c.stdin, c.expected) for c in cases] == [
        ("call", "f", "1\n[2, 3]", [5]),
        ("call", "f", '4\n"a"', [1, 2]),
    ]


def test_assert_cases_as_a_list_or_verl_dict():
    listed = parse_test_cases(["assert f(1) == 2"])
    assert [(c.kind, c.stdin, c.expected) for c in listed] == [("assert", "", None)]
    assert listed[0].statement == "assert f(1) == 2"
    verl = parse_test_cases({"assert_case": ["assert f(1) == 2", "print(f(1))"], "inputs": ["", "x"], "outputs": [None, "2"]})
    assert [(c.stdin, c.expected) for c in verl] == [("", None), ("x", "2")]


@pytest.mark.parametrize(
    ("ground_truth", "message"),
    [
        ("the answer is 4", "not JSON test cases"),
        (42, "must be a dict or a list of assert statements"),
        ({"inputs": ["1"]}, "need 'inputs' and 'outputs'"),
        ({"inputs": ["1", "2"], "outputs": ["1"]}, "2 inputs but 1 outputs"),
        ({"inputs": "1", "outputs": "1"}, "must be lists"),
        ({"assert_case": [1]}, "list of Python statements"),
        ({"assert_case": ["assert 1"], "inputs": ["", ""]}, "same length"),
        ({"inputs": [], "outputs": []}, "'inputs' and 'outputs' are empty lists"),
        ({"assert_case": []}, "'assert_case' is an empty list"),
        # a string input of a call-based case is JSON values, one per line: "1, 2" is bad data, not a bad program
        ({"fn_name": "add", "inputs": ["1, 2"], "outputs": [3]}, "input 1 of a call-based case is a string whose line '1, 2'"),
    ],
)
def test_malformed_test_cases_raise(ground_truth, message):
    with pytest.raises(InvalidTestCases, match=message):
        compute_score(fenced("print(1)"), ground_truth)


# ------------------------------------------------------------------------------------ scoring
def test_pass_rate_of_stdio_cases():
    result = compute_score(fenced(DOUBLE), {"inputs": ["1\n", "2\n", "3\n"], "outputs": ["2\n", "4\n", "7\n"]})
    assert result == {
        "score": 2 / 3,
        "acc": 2 / 3,  # verl records its code scorer's float as acc
        "passed": 2,
        "total": 3,
        "reason": "passed 2 of 3 test cases; case 3: wrong answer: expected '7\\n', got '6\\n'",
    }


def test_code_that_prints_extra_whitespace_passes():
    program = "n = int(input())\nprint(n, 2 * n, end='   \\n\\n\\n')"
    result = compute_score(fenced(program), json.dumps({"inputs": ["1\n", "5\n"], "outputs": ["1 2", "5 10\n"]}))
    assert (result["score"], result["reason"]) == (1.0, "passed all 2 test cases")


def test_call_based_global_function_and_solution_method():
    function = "def add(a, b):\n    print('debug output is ignored')\n    return (a + b, a)"
    apps_style = {"fn_name": "add", "inputs": [[1, 2], [3, 4], [0, 0]], "outputs": [[[3, 1]], [7, 3], [1, 1]]}
    result = compute_score(fenced(function), apps_style)
    assert (result["passed"], result["total"]) == (2, 3)
    assert result["reason"] == "passed 2 of 3 test cases; case 3: wrong answer: expected '[1, 1]', returned '[0, 0]'"
    method = "class Solution:\n    def twice(self, xs):\n        return [2 * x for x in xs]"
    fusion_style = {"fn_name": "twice", "inputs": ["[1, 2]", "[]"], "outputs": ["[2, 4]", "[]"]}
    assert compute_score(fenced(method), fusion_style)["score"] == 1.0


def test_call_based_missing_function_is_a_runtime_error():
    result = compute_score(fenced("def other():\n    pass"), {"fn_name": "plus", "inputs": [[1]], "outputs": [1]})
    assert result["score"] == 0.0 and "the program defines no function 'plus'" in result["reason"]


def test_assert_style_cases():
    program = "def f(x):\n    return x + 1"
    result = compute_score(fenced(program, tag=""), ["assert f(1) == 2", "assert f(2) == 4", "assert f(0) == 1"])
    assert (result["passed"], result["total"]) == (2, 3)
    assert result["reason"] == "passed 2 of 3 test cases; case 2: runtime error: exited with status 1: AssertionError"
    verl = {"assert_case": ["assert f(1) == 2", "print(f(5))"], "inputs": ["", ""], "outputs": [None, "6"]}
    assert compute_score(fenced(program), verl)["score"] == 1.0


def test_a_program_that_exits_before_the_assert_statements_does_not_pass():
    program = "import sys\ndef f(x):\n    return 0\nsys.exit(0)"
    result = compute_score(fenced(program), ["assert f(1) == 2", "assert f(2) == 3"])
    assert (result["score"], result["reason"]) == (
        0.0, "passed 0 of 2 test cases; case 1: the program exited before its test statement finished")
    printing = compute_score(fenced("def f(x):\n    print(x, end='')"), {"assert_case": ["f(7)"], "outputs": ["7"]})
    assert printing["score"] == 1.0  # output without a final newline still counts


def test_programs_run_after_verls_prelude():
    leetcode = "class Solution:\n    def add(self, xs: List[int]) -> int:\n        return sum(xs)"  # List not imported
    # the method, not the prelude's operator.add
    assert compute_score(fenced(leetcode), {"fn_name": "add", "inputs": [[[1, 2]]], "outputs": [3]})["score"] == 1.0
    stdio = "from __future__ import annotations\ndef deep(n: int) -> int:\n    return n if n == 0 else deep(n - 1)\n" \
            "print(deep(5000), sqrt(int(input())))"  # recursion beyond Python's default 1000; math's sqrt
    assert compute_score(fenced(stdio), {"inputs": ["16\n"], "outputs": ["0 4.0\n"]})["score"] == 1.0


def test_a_forged_result_line_is_a_wrong_answer():
    program = "def f():\n    print('__reinforge_call_result__:not json')\n    import os\n    os._exit(0)"
    result = compute_score(fenced(program), {"fn_name": "f", "inputs": [[]], "outputs": [1]})
    assert result["reason"] == "passed 0 of 1 test cases; case 1: the function returned nothing the harness could read"


def test_the_harness_markers_cannot_be_printed_by_the_program():
    # the markers end in a number drawn for each run: the old fixed ones, printed before exiting, pass nothing
    forged_call = "import os\nprint('\\n__reinforge_call_result__:3', flush=True)\nos._exit(0)\ndef add(a, b):\n    return 0"
    result = compute_score(fenced(forged_call), {"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]})
    assert result["reason"] == "passed 0 of 1 test cases; case 1: the function returned nothing the harness could read"
    forged_assert = "import os\nprint('\\n__reinforge_assert_done__', flush=True)\nos._exit(0)"
    result = compute_score(fenced(forged_assert), ["assert False"])
    assert result["reason"] == "passed 0 of 1 test cases; case 1: the program exited before its test statement finished"
    # nor read from the program's own file, which is removed as it starts
    reading = ("import os, re\nmark = re.search(r'__reinforge_assert_done_[0-9a-f]+__', open(__file__).read())\n"
               "print()\nprint(mark.group(0), flush=True)\nos._exit(0)")
    assert compute_score(fenced(reading), ["assert False"])["score"] == 0.0


def test_the_preludes_functions_are_not_the_programs():
    # verl's prelude binds math's gcd, operator's add...: a program that defines nothing does not pass by them
    for name, args, expected in [("gcd", [12, 18], 6), ("add", [1, 2], 3), ("factorial", [5], 120)]:
        result = compute_score(fenced("pass"), {"fn_name": name, "inputs": [args], "outputs": [expected]})
        assert result["score"] == 0.0 and f"the program defines no function {name!r}" in result["reason"]
    # a Solution class without the method is not rescued by a global of that name (verl calls through Solution)
    result = compute_score(fenced("class Solution:\n    pass"), {"fn_name": "gcd", "inputs": [[4, 6]], "outputs": [2]})
    assert "its Solution class has no method 'gcd'" in result["reason"]
    # the program's own function of a prelude name counts
    own = "def gcd(a, b):\n    return a if b == 0 else gcd(b, a % b)"
    assert compute_score(fenced(own), {"fn_name": "gcd", "inputs": [[12, 18]], "outputs": [6]})["score"] == 1.0


def test_integers_are_compared_exactly_and_other_numbers_within_1e_6():
    program = "print(input().strip())"
    for printed, expected, passes in [("1000000008", "1000000007", False), ("999999 5", "1000000 5", False),
                                      ("123456789012345678", "123456789012345679", False), ("+7", "7", True),
                                      ("1000000.5", "1000000.6", True), ("0.1000001", "0.1", True),
                                      ("0.1001", "0.1", False), ("3.0", "3", True), ("-0", "0", True), ("007", "7", True),
                                      ("0" * 4400 + "7", "7", True), ("1" * 5000, "1" * 4999 + "2", False)]:  # > 4300 digits
        result = compute_score(fenced(program), {"inputs": [printed], "outputs": [expected]})
        assert result["score"] == float(passes), (printed, expected, result["reason"])


def test_a_from_future_import_over_several_lines_is_moved_above_the_prelude():
    program = ('"""Sums.\x0c"""\nfrom __future__ import (annotations,\n                        division)\n'
               "text = '''\nfrom __future__ import braces\n'''\nprint(sum(map(int, input().split())), len(text))")
    assert compute_score(fenced(program), {"inputs": ["1 2\n"], "outputs": ["3 31\n"]})["score"] == 1.0


def test_no_code_block_scores_zero():
    result = compute_score("I think the answer is print(2 * int(input()))", {"inputs": ["1"], "outputs": ["2"]})
    assert result == {"score": 0.0, "acc": 0.0, "passed": 0, "total": 1, "reason": "no ```python code block in the response"}


def test_a_program_that_does_not_compile_scores_zero_without_running(monkeypatch):
    runner = RecordingRunner()
    monkeypatch.setattr("reinforge.reward.scorers.code.run_code", runner)
    result = compute_score(fenced("def f(:\n    pass"), {"inputs": ["1"] * 3, "outputs": ["1"] * 3})
    assert result["score"] == 0.0 and result["reason"].startswith("the program does not compile: SyntaxError")
    assert runner.stdins == []


def echo_cases(outputs: list[str]):
    return parse_test_cases({"inputs": [f"{i}\n" for i in range(len(outputs))], "outputs": outputs})


ECHO = "print(input())"


def test_all_cases_pass_scores_one_after_running_all():
    runner = RecordingRunner()
    result = score_cases(ECHO, echo_cases([str(i) for i in range(12)]), runner)
    assert (result["score"], result["passed"], result["total"]) == (1.0, 12, 12)
    assert len(runner.stdins) == 12


def test_a_failure_after_the_first_ten_scores_ten_of_eleven():
    outputs = [str(i) for i in range(13)]
    outputs[10] = "wrong"
    runner = RecordingRunner()
    result = score_cases(ECHO, echo_cases(outputs), runner)
    assert (result["score"], result["passed"], result["total"]) == (10 / 11, 10, 11)
    assert result["reason"] == "passed the first 10 test cases; case 11: wrong answer: expected 'wrong', got '10\\n'"
    assert len(runner.stdins) == 11  # case 13 is never run


def test_failures_in_the_first_ten_give_their_pass_rate_and_later_cases_are_not_run():
    outputs = [str(i) for i in range(14)]
    outputs[1] = outputs[4] = "wrong"
    runner = RecordingRunner()
    result = score_cases(ECHO, echo_cases(outputs), runner)
    assert (result["score"], result["passed"], result["total"]) == (0.8, 8, 10)
    assert runner.stdins == [f"{i}\n" for i in range(10)]


def test_a_timeout_stops_the_run():
    program = "n = int(input())\nwhile n == 2:\n    pass\nprint(n)"
    runner = RecordingRunner(timeout_s=1)
    result = score_cases(program, echo_cases([str(i) for i in range(6)]), runner)
    assert (result["score"], result["passed"], result["total"]) == (2 / 6, 2, 6)
    assert result["reason"] == (
        "passed 2 of 6 test cases; case 3: timeout: did not finish within 1 s of wall time; killed (3 later cases not run)"
    )
    assert runner.stdins == ["0\n", "1\n", "2\n"]


def test_parallel_runs_keep_the_sequential_rule():
    outputs = [str(i) for i in range(12)]
    outputs[3] = "wrong"
    sequential = score_cases(ECHO, echo_cases(outputs), RecordingRunner())
    parallel_runner = RecordingRunner()
    parallel = score_cases(ECHO, echo_cases(outputs), parallel_runner, workers=4)
    assert parallel == sequential and sequential["score"] == 0.9
    assert sorted(parallel_runner.stdins) == sorted(f"{i}\n" for i in range(10))


# ------------------------------------------------------------------------------------ hostile programs
@pytest.fixture(scope="module")
def server():
    """A listening socket that never accepts: a connection would wait in its backlog."""
    listener = socket.create_server(("127.0.0.1", 0))
    yield listener
    listener.close()



@pytest.mark.parametrize(
    ("program", "reason"),
    [
        ("while True:\n    pass", "timeout: did not finish within 1 s"),
        ("import os\nfor _ in range(7):\n    os.fork()\nimport time\ntime.sleep(30)", "blocked: PermissionError: [reinforge sandbox] starting processes (fork)"),
        ("x = [bytearray(2**20) for _ in range(2048)]", "memory: ran out of its 200 MiB of memory"),
        ("while True:\n    print('spam' * 1000)", "output limit: wrote more than 65536 bytes"),
        ("open(OUTSIDE, 'w').write('escaped')", "blocked: PermissionError: [reinforge sandbox] writing /tmp/reinforge-test-escape"),
        ("import socket\nsocket.socket().connect(('127.0.0.1', PORT))", "blocked: PermissionError: [reinforge sandbox] network access (connect)"),
        ("import os\nif os.fork() == 0:\n    os.setsid()\n    os.execv('/bin/sleep', ['sleep', '30'])", "blocked: PermissionError: [reinforge sandbox] starting processes (fork)"),
    ],
    ids=["infinite loop", "fork bomb", "memory hog", "huge output", "write outside", "socket", "setsid grandchild"],
)
def test_hostile_programs_score_zero_with_a_reason(program, reason, server, tmp_path_factory):
    outside = f"/tmp/reinforge-test-escape-{tmp_path_factory.getbasetemp().name}.txt"  # not in the work directory
    program = program.replace("OUTSIDE", repr(outside)).replace("PORT", str(server.getsockname()[1]))
    result = default_compute_score("codecontests", fenced(program), {"inputs": ["1\n"], "outputs": ["1\n"]},
                                   memory_limit_mb=200, timeout_s=1)
    assert result["score"] == 0.0 and result["passed"] == 0
    assert result["reason"].startswith(f"passed 0 of 1 test cases; case 1: {reason}"), result["reason"]
    server.settimeout(0.05)
    with pytest.raises(TimeoutError):
        server.accept()
    with pytest.raises(FileNotFoundError):
        open(outside).close()


def test_a_sandbox_that_cannot_run_programs_raises_instead_of_scoring_zero(monkeypatch):
    monkeypatch.setattr(local, "_namespace_prefix", lambda: (shutil.which("unshare") or "unshare", "--no-such-option"))
    with pytest.raises(SandboxUnavailableError, match="the sandbox could not run the program"):
        compute_score(fenced("print(1)"), ["assert True"])


# ------------------------------------------------------------------------------------ routing
@pytest.mark.parametrize("data_source", CODE_DATA_SOURCES)
def test_code_data_sources_route_to_the_code_scorer(data_source):
    result = default_compute_score(data_source, fenced(DOUBLE), {"inputs": ["21\n"], "outputs": ["42\n"]})
    assert result == {"score": 1.0, "acc": 1.0, "passed": 1, "total": 1, "reason": "passed all 1 test cases"}


def test_sandbox_arguments_reach_only_scorers_that_declare_them(monkeypatch):
    monkeypatch.setattr(registry, "_EXACT", dict(registry._EXACT))
    seen = {}

    def any_kwargs_scorer(solution_str, ground_truth, **kwargs):
        seen.update(kwargs)
        return 1.0

    register_scorer("my/task", any_kwargs_scorer)
    sandbox = {"sandbox_fusion_url": "http://localhost:1/run_code", "concurrent_semaphore": threading.Semaphore(1),
               "memory_limit_mb": 5}
    assert default_compute_score("my/task", "x", "y", extra_info={"a": 1}, **sandbox) == 1.0
    assert seen == {"extra_info": {"a": 1}}
    assert default_compute_score("openai/gsm8k", "#### 2", "2", **sandbox) == 1.0

    received = {}

    def code_like_scorer(solution_str, ground_truth, sandbox_fusion_url=None, concurrent_semaphore=None, memory_limit_mb=None):
        received.update(url=sandbox_fusion_url, semaphore=concurrent_semaphore, memory=memory_limit_mb)
        return 0.0

    register_scorer("my/code", code_like_scorer)
    default_compute_score("my/code", "x", "y", **sandbox)
    assert received == {"url": sandbox["sandbox_fusion_url"], "semaphore": sandbox["concurrent_semaphore"], "memory": 5}
    default_compute_score("my/code", "x", "y")
    assert received == {"url": None, "semaphore": None, "memory": None}
