"""Reward functions written for OpenRLHF (`reward_func(queries, prompts, labels)`), called as it calls them
(reward/manager/openrlhf.py): the arguments of each call, the results it takes, what a failing call costs, and the
checks when the function is loaded."""

import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from reinforge.config.schema import Config
from reinforge.errors import ConfigError, RewardError
from reinforge.reward import get_compute_score, make_reward_manager
from reinforge.reward.manager.openrlhf import OpenRLHFRewardFunction, is_openrlhf_reward
from reinforge.reward.manager.trl import is_trl_reward
from tests.reward.test_reward_manager import make_batch

ROOT = Path(__file__).resolve().parents[2]


def load(tmp_path, source, name="compute_score", manager_name="naive", weights=None, **reward_kwargs):
    path = tmp_path / f"reward_func_{abs(hash(source))}.py"  # one file per source: a loaded file is not read again
    path.write_text(textwrap.dedent(source))
    config = Config()
    config.custom_reward_function.path = str(path)
    config.custom_reward_function.name = name
    config.custom_reward_function.reward_weights = weights
    config.custom_reward_function.reward_kwargs = reward_kwargs
    config.reward_model.reward_manager = manager_name
    return get_compute_score(config)


def with_eos(tokenizer, batch, rows):
    """Put the tokenizer's EOS after the response of each row in `rows`, as a response the model ended."""
    start = batch["prompts"].shape[1]
    for row in rows:
        length = int(batch["attention_mask"][row, start:].sum())
        batch["responses"][row, length] = tokenizer.eos_token_id
        batch["attention_mask"][row, start + length] = 1
    return batch


def score(tokenizer, function, batch):
    out = make_reward_manager("openrlhf", tokenizer, function)(batch, return_dict=True)
    last = batch["attention_mask"][:, batch["prompts"].shape[1]:].sum(-1) - 1
    return out, out["reward_tensor"][torch.arange(len(batch)), last].tolist()


def test_openrlhf_functions_are_told_from_trl_and_verl_ones_by_their_parameters():
    def reward_func(queries, prompts, labels): ...
    def with_kwargs(queries, prompts, **kwargs): ...
    def trl(prompts, completions, **kwargs): ...
    def trl_with_a_queries_column(completions, queries, **kwargs): ...
    def trl_prompts_and_a_queries_column(prompts, queries, **kwargs): ...  # OpenRLHF passes queries first
    def verl(data_source, solution_str, ground_truth, extra_info=None): ...

    assert is_openrlhf_reward(reward_func) and is_openrlhf_reward(with_kwargs)
    assert not any(is_openrlhf_reward(fn) for fn in (trl, trl_with_a_queries_column, trl_prompts_and_a_queries_column, verl))
    assert not is_trl_reward(reward_func)  # it has `prompts`, as TRL's do, but `queries` first says OpenRLHF
    assert is_trl_reward(trl_with_a_queries_column) and is_trl_reward(trl_prompts_and_a_queries_column)


SEEN = """
    import torch

    CALLS = []

    def reward_func(queries, prompts, labels):
        CALLS.append((queries, prompts, labels))
        return torch.tensor([float(len(q) - len(p)) for q, p in zip(queries, prompts)])
"""


def test_each_response_is_one_call_with_the_query_prompt_and_label_as_openrlhf_gives_them(tokenizer, tmp_path):
    function = load(tmp_path, SEEN)
    assert isinstance(function, OpenRLHFRewardFunction)
    rows = [("Q: 1+1?", "it is 2", "math", "2", None), ("Q: 2+2?", "4", "math", None, None),
            ("Q: 3+3?", "", "math", ["6", "six"], None)]
    batch = with_eos(tokenizer, make_batch(tokenizer, rows), [0, 2])
    out, rewards = score(tokenizer, function, batch)
    calls = function.func.__globals__["CALLS"]
    assert len(calls) == 3 and all(len(q) == len(p) == len(lab) == 1 for q, p, lab in calls)  # one response a call
    start = batch["prompts"].shape[1]
    for row, (queries, prompts, labels) in enumerate(sorted(calls, key=lambda call: call[1][0])):  # threads: any order
        prompt_ids = batch["prompts"][row][batch["attention_mask"][row, :start].bool()].tolist()
        response_ids = batch["responses"][row][batch["attention_mask"][row, start:].bool()].tolist()
        # OpenRLHF decodes the prompt's and the response's ids together, special tokens kept
        assert queries[0] == tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)
        assert prompts[0] == tokenizer.decode(prompt_ids, skip_special_tokens=False) == rows[row][0]
        assert labels[0] == rows[row][3]  # as the row has it: a null label is None, as OpenRLHF passes it
    assert sorted(call[0][0] for call in calls) == ["Q: 1+1?it is 2" + tokenizer.eos_token, "Q: 2+2?4",
                                                    "Q: 3+3?" + tokenizer.eos_token]
    assert rewards == [len("it is 2" + tokenizer.eos_token), 1.0, len(tokenizer.eos_token)]
    assert out["reward_extra_info"]["acc"] == rewards  # the reward alone: recorded as a plain number's
    assert out["reward_metrics"]["reward/errors"] == 0
    calls.clear()
    batch.pop(["reward_model"])  # rows without a ground truth: "", as OpenRLHF without --label_key
    score(tokenizer, function, batch)
    assert [labels for _, _, labels in calls] == [[""]] * 3


RESULTS = """
    import numpy as np
    import torch

    def reward_func(queries, prompts, labels):
        kind = labels[0]
        if kind == "dict":
            return {"rewards": torch.tensor([0.5]), "scores": torch.tensor([1.0]),
                    "extra_logs": {"format": torch.tensor([0.25]), "length": 3}}
        if kind == "rewards only":
            return {"rewards": [0.75]}
        if kind == "list":
            return [1.5]
        if kind == "float":
            return 2.0
        if kind == "numpy":
            return np.array([2.5])
        if kind == "scalar tensor":
            return torch.tensor(3.0)
        if kind == "two":
            return torch.tensor([1.0, 2.0])
        if kind == "no rewards":
            return {"scores": [1.0]}
        if kind == "logs score":
            return {"rewards": [1.0], "extra_logs": {"score": [1.0]}}
        raise ValueError("no such kind: " + kind)
"""


def test_each_result_form_of_openrlhf_is_read_and_anything_else_fails_only_its_row(tokenizer, tmp_path, capsys):
    kinds = ["dict", "rewards only", "list", "float", "numpy", "scalar tensor", "two", "no rewards", "logs score", "raises"]
    batch = make_batch(tokenizer, [("Q", "A", "src", kind, None) for kind in kinds])
    out, rewards = score(tokenizer, load(tmp_path, RESULTS), batch)
    assert rewards == [0.5, 0.75, 1.5, 2.0, 2.5, 3.0, 0.0, 0.0, 0.0, 0.0]
    info = out["reward_extra_info"]
    assert info["scores"][0] == 1.0 and info["format"][0] == 0.25 and info["length"][0] == 3
    assert info["scores"][1] == 0.75  # no scores returned: the reward, as OpenRLHF takes it
    assert out["reward_metrics"]["reward/errors"] == 4
    err = capsys.readouterr().err
    assert "returned 2 values as the reward for one query (it is called once per response" in err  # the first failure


def test_a_slow_function_under_timeout_s_runs_in_a_worker_process_and_scores(tokenizer, tmp_path):
    """The wrapper travels to the worker process by pickle; a call past timeout_s scores 0 (reward/timeouts)."""
    source = """
        import time

        def reward_func(queries, prompts, labels):
            if labels[0] == "slow":
                time.sleep(30)
            return {"rewards": [float(len(queries[0]))]}
    """
    function = load(tmp_path, source)
    batch = make_batch(tokenizer, [("Q", "AB", "src", "fast", None), ("Q", "A", "src", "slow", None)])
    manager = make_reward_manager("openrlhf", tokenizer, function, timeout_s=3)
    try:
        out = manager(batch, return_dict=True)
    finally:
        manager.close()
    assert out["reward_extra_info"]["score"] == [3.0, 0.0] and out["reward_metrics"]["reward/timeouts"] == 1


def test_loading_checks_name_the_mistake(tmp_path, capsys):
    source = "def reward_func(queries, prompts, labels):\n    return [0.0]\n"
    assert isinstance(load(tmp_path, source), OpenRLHFRewardFunction)  # found under OpenRLHF's name
    assert "defines no compute_score (verl's name, the default); taking reward_func" in capsys.readouterr().out
    helper = "def compute_score(pred, label):\n    return float(pred == label)\n\n" + source  # a grading helper of its own
    assert isinstance(load(tmp_path, helper), OpenRLHFRewardFunction)  # OpenRLHF calls reward_func whatever else is there
    assert "defines a compute_score that is no reward function's (verl's name, the default); taking reward_func" in \
        capsys.readouterr().out
    both = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n\n" + source
    assert not isinstance(load(tmp_path, both), OpenRLHFRewardFunction)  # a verl function under verl's name wins, noted
    assert "taking compute_score (custom_reward_function.name=reward_func takes the other)" in capsys.readouterr().out
    named = "def graded(queries, prompts, answers):\n    return [0.0]\n"  # OpenRLHF passes the labels positionally
    assert isinstance(load(tmp_path, named, name="graded"), OpenRLHFRewardFunction)
    with pytest.raises(RewardError, match=r"reward_func\(queries, prompts\) in .* cannot be called as OpenRLHF calls"):
        load(tmp_path, "def reward_func(queries, prompts):\n    return [0.0]\n")
    with pytest.raises(RewardError, match="reward_weights weighs TRL reward functions; reward_func in .* is written for "
                                          "OpenRLHF"):
        load(tmp_path, source, weights=[1.0])
    with pytest.raises(RewardError, match=r"reward_func takes queries: it is written for OpenRLHF .* "
                                          "reward_model.reward_manager=trl calls TRL's"):
        load(tmp_path, source, manager_name="trl")
    trl = "def accuracy(completions, **kwargs):\n    return [0.0] * len(completions)\n"
    with pytest.raises(RewardError, match="accuracy takes completions: it is written for TRL, and "
                                          "reward_model.reward_manager=openrlhf calls OpenRLHF's"):
        load(tmp_path, trl, name="accuracy", manager_name="openrlhf")
    verl = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n"
    with pytest.raises(RewardError, match="compute_score takes solution_str: it is a verl reward function, and "
                                          "reward_model.reward_manager=openrlhf calls OpenRLHF's"):
        load(tmp_path, verl, manager_name="openrlhf")
    # OpenRLHF passes the arguments by position: a file's reward_func of other parameter names is OpenRLHF's, and so is
    # any function of three positional parameters under reward_model.reward_manager=openrlhf
    assert isinstance(load(tmp_path, "def reward_func(q, p, l):\n    return [0.0]\n"), OpenRLHFRewardFunction)
    assert isinstance(load(tmp_path, "def reward_func(a, b, c):\n    return [0.0]\n", name="reward_func"),
                      OpenRLHFRewardFunction)
    assert isinstance(load(tmp_path, "def get_reward(queries, prompts, labels):\n    return [0.0]\n", name="get_reward"),
                      OpenRLHFRewardFunction)  # not taken for one of TRL's get_... factories
    assert isinstance(load(tmp_path, "def graded(q, p, l):\n    return [0.0]\n", name="graded", manager_name="openrlhf"),
                      OpenRLHFRewardFunction)


def test_the_openrlhf_manager_without_an_openrlhf_function_says_what_it_calls(tokenizer):
    with pytest.raises(ConfigError, match=r"reward_model.reward_manager=openrlhf calls a reward function written for "
                                          r"OpenRLHF, reward_func\(queries, prompts, labels\)"):
        make_reward_manager("openrlhf", tokenizer, None)


CONCURRENT = """
    import asyncio
    import threading
    import time

    import numpy as np

    LOCK = threading.Lock()
    STATE = {"active": 0, "most": 0}

    def reward_func(queries, prompts, labels):
        with LOCK:
            STATE["active"] += 1
            STATE["most"] = max(STATE["most"], STATE["active"])
        time.sleep(0.2)  # waiting on a server
        with LOCK:
            STATE["active"] -= 1
        return {"rewards": [1.0], "extra_logs": {"format": np.float32(0.5), "ok": np.bool_(True)}}

    SEMAPHORE = asyncio.Semaphore(2)  # module-level: tied to the one event loop that awaits every call

    async def async_reward_func(queries, prompts, labels):
        async with SEMAPHORE:
            await asyncio.sleep(0.05)
        return {"rewards": [float(len(labels[0]))]}
"""


def test_calls_overlap_in_threads_as_openrlhfs_and_numpy_values_come_back_as_numbers(tokenizer, tmp_path):
    function = load(tmp_path, CONCURRENT)
    batch = make_batch(tokenizer, [("Q", "A", "src", "ab", None)] * 8)
    out, rewards = score(tokenizer, function, batch)
    assert rewards == [1.0] * 8 and function.func.__globals__["STATE"]["most"] > 1
    info = out["reward_extra_info"]
    assert info["format"] == [0.5] * 8 and type(info["format"][0]) is float and info["ok"] == [True] * 8


def test_an_async_functions_calls_share_one_event_loop(tiny_model_path, tmp_path):
    """A module-level semaphore serves every call: in an event loop per call it would hang them (the scoring runs in a
    child process so that a hang fails the test instead of stopping the suite)."""
    import subprocess
    import sys

    reward = tmp_path / "async_reward.py"
    reward.write_text(textwrap.dedent(CONCURRENT))
    script = textwrap.dedent(f"""
        from transformers import AutoTokenizer
        from reinforge.config.schema import Config
        from reinforge.reward import get_compute_score, make_reward_manager
        from tests.reward.test_reward_manager import make_batch

        tokenizer = AutoTokenizer.from_pretrained({str(tiny_model_path)!r})
        config = Config()
        config.custom_reward_function.path, config.custom_reward_function.name = {str(reward)!r}, "async_reward_func"
        batch = make_batch(tokenizer, [("Q", "A", "src", "ab", None)] * 8)
        out = make_reward_manager("openrlhf", tokenizer, get_compute_score(config))(batch, return_dict=True)
        print(out["reward_extra_info"]["score"])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str([2.0] * 8)


def test_openrlhfs_prompt_options_shape_a_string_prompt_and_json_message_text_is_refused_either_way():
    from types import SimpleNamespace

    from reinforge.environment.data_files import shape_prompt
    from reinforge.errors import DataError

    row = {"input": "2+2?", "answer": "4"}
    plain = SimpleNamespace(apply_chat_template=False, input_template=None)
    chat = SimpleNamespace(apply_chat_template=True, input_template=None)
    template = SimpleNamespace(apply_chat_template=False, input_template="User: {}\nAssistant: ")
    assert shape_prompt(row, ("f.jsonl", 0), "input", plain) is row
    assert shape_prompt(row, ("f.jsonl", 0), "input", chat)["input"] == [{"role": "user", "content": "2+2?"}]
    assert shape_prompt(row, ("f.jsonl", 0), "input", template) == {"input": "User: 2+2?\nAssistant: ", "answer": "4"}
    messages = {"input": [{"role": "user", "content": "hi"}]}  # chat messages: as they are, whatever the options
    assert all(shape_prompt(messages, ("f.jsonl", 0), "input", c) is messages for c in (plain, chat, template))
    for config in (plain, chat, template):
        with pytest.raises(DataError, match="f.jsonl: row 3, column 'input': the prompt is a chat message list encoded as "
                                            "JSON text"):
            shape_prompt({"input": '[{"role": "user", "content": "hi"}]'}, ("f.jsonl", 3), "input", config)


def test_the_label_column_may_not_be_the_prompt_column():
    from reinforge.config.loading import load_config
    from reinforge.errors import ConfigError as Error

    with pytest.raises(Error, match=r"data.label_key='input' is the prompt column \(data.prompt_key\)"):
        load_config(["data.prompt_key=input", "data.label_key=input"])


class _RewardServer:
    """A reward server as OpenRLHF's `serve_rm` answers, on a free local port: POST {"query", "prompts", "labels"}
    -> {"rewards", "scores", "extra_logs"}; "down" labels get an HTTP 500."""

    def __init__(self):
        import http.server
        import json
        import threading

        self.requests = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((self.path, body))
                if body["labels"] == ["down"]:
                    self.send_error(500)
                    return
                if body["labels"] == ["list"]:
                    answer = b"[1.0]"
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(answer)
                    return
                rewards = [float(len(q) - len(p)) for q, p in zip(body["query"], body["prompts"], strict=True)]
                answer = json.dumps({"rewards": rewards, "scores": rewards, "extra_logs": {"dummy_scores": rewards}})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(answer.encode())

            def log_message(self, *args):
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/get_reward"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


def test_openrlhfs_reward_server_is_called_as_openrlhf_calls_it(tokenizer, monkeypatch, capsys):
    from reinforge.reward.manager.openrlhf import OpenRLHFRewardServer

    server = _RewardServer()
    config = Config()
    config.custom_reward_function.path = server.url
    function = get_compute_score(config)
    assert isinstance(function, OpenRLHFRewardFunction)
    batch = make_batch(tokenizer, [("Q: 1+1?", "it is 2", "src", "2", None), ("Q: 2+2?", "4", "src", ["4"], None),
                                   ("Q: 3+3?", "6", "src", "down", None)])
    monkeypatch.setattr(OpenRLHFRewardServer, "PAUSE_S", 0.01)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # not used, as OpenRLHF's client does not use it
    out, rewards = score(tokenizer, function, batch)
    assert rewards == [float(len("it is 2")), 1.0, 0.0]
    assert out["reward_extra_info"]["dummy_scores"][:2] == rewards[:2] and out["reward_metrics"]["reward/errors"] == 1
    answered = sorted((body for path, body in server.requests if body["labels"] != ["down"]), key=lambda b: b["prompts"])
    assert answered == [{"query": ["Q: 1+1?it is 2"], "prompts": ["Q: 1+1?"], "labels": ["2"]},
                        {"query": ["Q: 2+2?4"], "prompts": ["Q: 2+2?"], "labels": [["4"]]}]
    assert sum(body["labels"] == ["down"] for _, body in server.requests) == OpenRLHFRewardServer.TRIES  # tried again
    assert all(path == "/get_reward" for path, _ in server.requests)
    assert (f"the reward server {server.url} did not answer after 5 tries 0.01 s apart: HTTPError: HTTP Error 500"
            in capsys.readouterr().err)
    server.requests.clear()
    batch = make_batch(tokenizer, [("Q", "A", "src", np.int64(7), None), ("Q", "A", "src", "list", None),
                                   ("Q", "A", "src", object(), None)])
    manager = make_reward_manager("openrlhf", tokenizer, function, timeout_s=5)  # the requests' limit, still in threads
    out = manager(batch, return_dict=True)
    assert function.func.timeout_s == 5 and manager._pool is None
    assert out["reward_extra_info"]["score"] == [1.0, 0.0, 0.0] and out["reward_metrics"]["reward/errors"] == 2
    assert sorted(map(str, (body["labels"] for _, body in server.requests))) == ["['list']", "[7]"]  # numpy: its number
    err = capsys.readouterr().err
    assert f"the reward server {server.url} answered list [1.0]; it must answer a JSON object with 'rewards'" in err
    server.http.shutdown()
    for key, value, what in (("reward_kwargs", {"scale": 2}, "reward_kwargs"), ("name", "score", "name")):
        setting = Config()
        setting.custom_reward_function.path = server.url
        setattr(setting.custom_reward_function, key, value)
        with pytest.raises(RewardError, match=rf"custom_reward_function.{what}: custom_reward_function.path=http://.* is "
                                              rf"a reward server \(OpenRLHF's\), which takes no {what}"):
            get_compute_score(setting)
    for path, message in ((f"{server.url},{server.url}", "one reward server URL is taken"),
                          ("localhost:5000/get_reward", "looks like a reward server's address; write it as a URL, "
                                                        "http://localhost:5000/get_reward")):
        config.custom_reward_function.path = path
        with pytest.raises(RewardError, match=message):
            get_compute_score(config)
