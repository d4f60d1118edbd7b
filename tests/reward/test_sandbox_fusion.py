"""The Sandbox Fusion client against a real HTTP server that implements the /run_code subset verl
uses, running the programs in the local sandbox: requests, answers, retries, the concurrency cap,
unreachable services, and the config binding of get_compute_score."""

from __future__ import annotations

import json
import pickle
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from reinforge.batch import Batch
from reinforge.config import load_config, unused_settings
from reinforge.errors import ConfigError
from reinforge.reward import default_compute_score, get_compute_score, make_reward_manager
from reinforge.reward.sandbox import SandboxUnavailableError, fusion, run_code, run_code_remote


class FakeSandboxFusion:
    """POST /run_code: run `code` with `stdin` in the local sandbox and answer as Sandbox Fusion does.
    Records every payload and the most requests it had in flight; `hold_s` keeps each request open
    that long; the first `fail_first` requests get HTTP `fail_status`; `garbage` answers non-JSON;
    `broken` answers SandboxError."""

    def __init__(self, hold_s: float = 0.0, fail_first: int = 0, fail_status: int = 503, garbage: bool = False,
                 broken: bool = False):
        self.hold_s, self.fail_first, self.fail_status, self.garbage = hold_s, fail_first, fail_status, garbage
        self.broken = broken
        self.payloads: list[dict] = []
        self.seen = 0
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/run_code"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, payload: dict) -> dict:
        if self.broken:
            return {"status": "SandboxError", "message": "executor pod crashed", "compile_result": None, "run_result": None}
        result = run_code(payload["code"], payload["stdin"] or "", timeout_s=payload["run_timeout"],
                          memory_mb=payload["memory_limit_MB"])
        run_status = {"ok": "Finished", "timeout": "TimeLimitExceeded"}.get(result.status, "Finished")
        return {
            "status": "Success" if result.ok else "Failed",
            "message": "",
            "compile_result": None,
            "run_result": {"status": run_status, "execution_time": result.wall_s, "return_code": result.exit_code,
                           "stdout": result.stdout, "stderr": result.stderr},
            "executor_pod_name": None,
            "files": {},
        }

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.seen += 1
                    fake.payloads.append(payload)
                    failing = fake.seen <= fake.fail_first
                if self.path != "/run_code":
                    return self._send(404, b'{"detail": "Not Found"}')
                if failing:
                    return self._send(fake.fail_status, b"overloaded")
                if fake.garbage:
                    return self._send(200, b"<html>proxy login</html>")
                with fake.lock:
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    time.sleep(fake.hold_s)
                    body = json.dumps(fake.answer(payload)).encode()
                finally:
                    with fake.lock:
                        fake.in_flight -= 1
                self._send(200, body)

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


@pytest.fixture
def sandbox_service(request):
    services = []

    def start(**kwargs) -> FakeSandboxFusion:
        services.append(FakeSandboxFusion(**kwargs))
        return services[-1]

    yield start
    for service in services:
        service.close()


@pytest.fixture
def fast_retries(monkeypatch):
    monkeypatch.setattr(fusion, "DEFAULT_RETRY_DELAY_S", 0.01)


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/run_code"


def fenced(program: str) -> str:
    return f"```python\n{program}\n```"


# ------------------------------------------------------------------------------------ requests and answers
def test_request_fields_and_an_ok_answer(sandbox_service):
    service = sandbox_service()
    result = run_code_remote(service.url, "print(input()[::-1])", "abc\n", timeout_s=3, memory_mb=300)
    assert (result.status, result.exit_code, result.stdout, result.reason) == ("ok", 0, "cba\n", "exited with status 0")
    assert result.isolation == f"Sandbox Fusion service at {service.url}"
    assert service.payloads == [{
        "code": "print(input()[::-1])", "language": "python", "stdin": "abc\n", "run_timeout": 3, "compile_timeout": 3,
        "memory_limit_MB": 300, "files": {}, "fetch_files": [],
    }]


@pytest.mark.parametrize(
    ("program", "status", "reason"),
    [
        ("1 / 0", "runtime_error", "exited with status 1: ZeroDivisionError: division by zero"),
        ("while True:\n    pass", "timeout", "did not finish within the sandbox's run_timeout"),
        ("x = [bytearray(2**20) for _ in range(2048)]", "memory", "ran out of its 200 MiB of memory: MemoryError"),
    ],
)
def test_failed_answers_map_to_statuses(sandbox_service, program, status, reason):
    result = run_code_remote(sandbox_service().url, program, timeout_s=1, memory_mb=200)
    assert result.status == status and result.reason.startswith(reason)


def test_a_sandbox_error_answer_is_a_sandbox_error_and_the_scorer_raises(sandbox_service):
    service = sandbox_service(broken=True)
    result = run_code_remote(service.url, "print(1)")
    assert result.status == "sandbox_error"
    assert result.reason == "Sandbox Fusion answered status 'SandboxError' (run status None): executor pod crashed"
    with pytest.raises(SandboxUnavailableError, match="executor pod crashed"):
        default_compute_score("apps", fenced("print(1)"), ["assert True"], sandbox_fusion_url=service.url)


def test_stdout_over_the_cap_is_an_output_limit(sandbox_service):
    result = run_code_remote(sandbox_service().url, "print('z' * 5000)", max_output_bytes=1000)
    assert result.status == "output_limit" and len(result.stdout) == 1000


# ------------------------------------------------------------------------------------ retries and failures
def test_5xx_answers_are_retried(sandbox_service, fast_retries):
    service = sandbox_service(fail_first=2)
    assert run_code_remote(service.url, "print(1)").stdout == "1\n"
    assert service.seen == 3


def test_persistent_5xx_fails_after_the_retries(sandbox_service, fast_retries):
    service = sandbox_service(fail_first=10, fail_status=500)
    with pytest.raises(SandboxUnavailableError, match=r"could not be used after 4 attempts: HTTP 500"):
        run_code_remote(service.url, "print(1)", retries=4)
    assert service.seen == 4


def test_a_wrong_path_is_not_retried_and_names_the_endpoint(sandbox_service, fast_retries):
    service = sandbox_service()
    url = service.url.replace("/run_code", "/")
    with pytest.raises(SandboxUnavailableError, match=r"HTTP 404.*must be the full endpoint URL, e.g. http://localhost:8080/run_code"):
        run_code_remote(url, "print(1)")
    assert service.seen == 1


def test_an_answer_that_is_not_json_is_an_error(sandbox_service):
    with pytest.raises(SandboxUnavailableError, match="not JSON"):
        run_code_remote(sandbox_service(garbage=True).url, "print(1)")


def test_an_unreachable_url_is_a_clear_error(fast_retries):
    url = closed_port_url()
    with pytest.raises(SandboxUnavailableError) as info:
        run_code_remote(url, "print(1)")
    assert str(info.value).startswith(f"Sandbox Fusion at {url} could not be used after 3 attempts: ")
    assert "Connection refused" in str(info.value)
    with pytest.raises(SandboxUnavailableError):
        default_compute_score("apps", fenced("print(1)"), {"inputs": [""], "outputs": ["1"]}, sandbox_fusion_url=url)


def test_an_unreachable_url_scores_zero_and_is_counted_by_the_reward_manager(tokenizer, fast_retries, capsys):
    url = closed_port_url()
    responses = [fenced("print(int(input()) + 1)"), fenced("print(1)")]
    batch = _batch(tokenizer, responses, {"inputs": ["1\n"], "outputs": ["2\n"]})
    manager = make_reward_manager("naive", tokenizer, lambda **kw: default_compute_score(sandbox_fusion_url=url, **kw))
    result = manager(batch, return_dict=True)
    assert result["reward_tensor"].abs().sum().item() == 0.0
    assert result["reward_metrics"]["reward/errors"] == 2
    assert url in capsys.readouterr().err


def _batch(tokenizer, responses: list[str], ground_truth: dict) -> Batch:
    encoded = [tokenizer(text)["input_ids"] for text in responses]
    width = max(len(ids) for ids in encoded)
    prompts = torch.full((len(responses), 2), tokenizer.pad_token_id)
    padded = torch.full((len(responses), width), tokenizer.pad_token_id)
    mask = torch.zeros((len(responses), 2 + width), dtype=torch.long)
    mask[:, :2] = 1
    for row, ids in enumerate(encoded):
        padded[row, : len(ids)] = torch.tensor(ids)
        mask[row, 2 : 2 + len(ids)] = 1
    return Batch.from_dict({
        "prompts": prompts, "responses": padded, "attention_mask": mask,
        "data_source": ["codecontests"] * len(responses),
        "reward_model": [{"ground_truth": json.dumps(ground_truth), "style": "rule"}] * len(responses),
        "extra_info": [None] * len(responses),
    })


# ------------------------------------------------------------------------------------ scoring and the cap
ECHO_CASES = {"inputs": [f"{i}\n" for i in range(8)], "outputs": [f"{i}\n" for i in range(8)]}


def test_code_scorer_runs_cases_remotely_in_parallel_up_to_the_semaphore(sandbox_service):
    service = sandbox_service(hold_s=0.15)
    capped = default_compute_score("taco", fenced("print(input())"), ECHO_CASES, sandbox_fusion_url=service.url,
                                   concurrent_semaphore=threading.Semaphore(2), memory_limit_mb=256)
    assert (capped["score"], capped["total"]) == (1.0, 8)
    assert service.max_in_flight == 2
    assert {payload["memory_limit_MB"] for payload in service.payloads} == {256}
    uncapped_service = sandbox_service(hold_s=0.15)
    default_compute_score("taco", fenced("print(input())"), ECHO_CASES, sandbox_fusion_url=uncapped_service.url)
    assert uncapped_service.max_in_flight > 2


def test_one_semaphore_caps_requests_across_concurrent_scoring_calls(sandbox_service):
    service = sandbox_service(hold_s=0.15)
    semaphore = threading.Semaphore(3)
    scores = []

    def score():
        scores.append(default_compute_score("apps", fenced("print(input())"), ECHO_CASES, sandbox_fusion_url=service.url,
                                            concurrent_semaphore=semaphore)["score"])

    threads = [threading.Thread(target=score) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert scores == [1.0, 1.0, 1.0] and service.seen == 24
    assert service.max_in_flight == 3


# ------------------------------------------------------------------------------------ config
def test_get_compute_score_binds_the_config(sandbox_service):
    service = sandbox_service(hold_s=0.2)
    config, _ = load_config([f"reward_model.sandbox_fusion.url={service.url}", "reward_model.sandbox_fusion.max_concurrent=1",
                             "reward_model.sandbox_fusion.memory_limit_mb=300"])
    bound = get_compute_score(config)  # owns the semaphore's manager: keep it, as the trainer does
    compute_score = pickle.loads(pickle.dumps(bound))  # reward worker processes receive it pickled
    result = compute_score(data_source="codeforces", solution_str=fenced("print(input())"),
                           ground_truth=json.dumps({"inputs": ["1", "2", "3"], "outputs": ["1", "2", "3"]}))
    assert result["score"] == 1.0
    assert service.max_in_flight == 1 and service.seen == 3
    assert {payload["memory_limit_MB"] for payload in service.payloads} == {300}


def test_a_custom_reward_function_gets_no_sandbox_arguments(tmp_path):
    path = tmp_path / "reward.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.5\n")
    config, _ = load_config(["reward_model.sandbox_fusion.url=http://localhost:8080/run_code",
                             f"custom_reward_function.path={path}"])
    assert get_compute_score(config)("apps", "x", "y") == 0.5


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("reward_model.sandbox_fusion.url=localhost:8080/run_code", "must be an http(s) URL"),
        ("reward_model.sandbox_fusion.max_concurrent=0", "max_concurrent=0 must be a positive integer"),
        ("reward_model.sandbox_fusion.memory_limit_mb=-1", "memory_limit_mb=-1 must be a positive integer"),
    ],
)
def test_bad_sandbox_settings_are_config_errors(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config([override])


def test_sandbox_settings_without_effect_are_reported():
    config, keys = load_config(["reward_model.sandbox_fusion.max_concurrent=8"])
    assert unused_settings(config, keys) == [
        "reward_model.sandbox_fusion.max_concurrent: used only with reward_model.sandbox_fusion.url; without it code runs "
        "in the local sandbox"
    ]
    config, keys = load_config(["reward_model.sandbox_fusion.url=http://localhost:8080/run_code",
                                "reward_model.sandbox_fusion.max_concurrent=8"])
    assert unused_settings(config, keys) == []
