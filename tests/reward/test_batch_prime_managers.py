"""The batch and prime managers, time limits in every manager, and async concurrency.

Reward functions live in files written to tmp_path and loaded as `reinforge train` loads them
(`custom_reward_function.path`), so the process-based paths are tested with user files as well
as with the built-in scorers.
"""

import asyncio
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from reinforge.config.schema import Config
from reinforge.errors import ConfigError, RewardError
from reinforge.reward import default_compute_score, get_compute_score, make_reward_manager
from tests.reward.test_reward_manager import GSM8K_ROWS, make_batch

BATCH_REWARD = """
    import math

    CALLS = []

    def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, scale=1.0):
        CALLS.append(len(solution_strs))
        scores = []
        for solution, truth in zip(solution_strs, ground_truths):
            if solution == "nan":
                scores.append(math.nan)
            elif solution == "text":
                scores.append("high")
            elif solution == "dict":
                scores.append({"score": 0.5, "acc": True})
            else:
                scores.append(scale * float(solution == truth))
        return scores

    def too_few(data_sources, solution_strs, ground_truths, extra_infos):
        return [1.0] * (len(solution_strs) - 1)

    def not_a_list(data_sources, solution_strs, ground_truths, extra_infos):
        return 1.0

    def raises(data_sources, solution_strs, ground_truths, extra_infos):
        raise KeyError("batch scorer bug")

    def per_sample(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0

    def hangs(data_sources, solution_strs, ground_truths, extra_infos):
        while True:
            pass
"""

# Each row's solution_str says what the scorer does with it; "hang" writes the worker's pid (and
# that of a child process it starts) to files next to this one, then never returns.
ROW_REWARD = """
    import math
    import os
    import signal
    import subprocess
    import time
    from pathlib import Path

    HERE = Path(__file__).parent

    def compute_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
        if solution_str == "hang":
            child = subprocess.Popen(["sleep", "60"])
            (HERE / "child.pid").write_text(str(child.pid))
            (HERE / "worker.pid").write_text(str(os.getpid()))
            time.sleep(600)
        if solution_str == "raise":
            raise ZeroDivisionError("scorer bug")
        if solution_str == "nan":
            return math.nan
        if solution_str == "text":
            return "1.0"
        if solution_str == "exit":
            os._exit(3)
        if solution_str == "dict":
            return {"score": 0.25, "pid": os.getpid()}
        if solution_str == "sigint":  # as Ctrl-C in a terminal, which signals every process of the foreground group
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            return 1.0
        return scale * float(solution_str == ground_truth)

    async def compute_score_async(data_source, solution_str, ground_truth, extra_info=None):
        import asyncio
        await asyncio.sleep(0)
        return float(solution_str == ground_truth)
"""


def load(tmp_path: Path, source: str, name: str = "compute_score", **reward_kwargs):
    """The reward function `name` of a file holding `source`, loaded as the trainer loads it."""
    path = tmp_path / "reward.py"
    path.write_text(textwrap.dedent(source))
    config = Config()
    config.custom_reward_function.path = str(path)
    config.custom_reward_function.name = name
    config.custom_reward_function.reward_kwargs = reward_kwargs
    return get_compute_score(config)


def rows(*solutions: str, truth: str = "a") -> list[tuple]:
    return [("Q", solution, "d", truth, {"index": i}) for i, solution in enumerate(solutions)]


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


# ---- batch ----------------------------------------------------------------------------------------
def test_batch_calls_the_function_once_with_lists_and_passes_reward_kwargs(tokenizer, tmp_path):
    fn = load(tmp_path, BATCH_REWARD, "compute_score_batch")
    manager = make_reward_manager("batch", tokenizer, fn, scale=3.0)
    batch = make_batch(tokenizer, rows("a", "b", "dict", "a"))
    result = manager(batch, return_dict=True)
    assert fn.__globals__["CALLS"] == [4]
    # a plain number's acc is the number (verl's reward loop), a dict's acc its own
    assert result["reward_extra_info"] == {"score": [3.0, 0.0, 0.5, 3.0], "acc": [3.0, 0.0, True, 3.0]}
    assert result["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 0}
    assert result["reward_tensor"].sum(-1).tolist() == [3.0, 0.0, 0.5, 3.0]
    assert result["reward_tensor"][0, 0].item() == 3.0  # the one-letter response's only token


def test_batch_rows_that_are_not_scores_fail_alone(tokenizer, tmp_path, capsys):
    manager = make_reward_manager("batch", tokenizer, load(tmp_path, BATCH_REWARD, "compute_score_batch"))
    result = manager(make_batch(tokenizer, rows("a", "nan", "text")), return_dict=True)
    assert result["reward_extra_info"]["score"] == [1.0, 0.0, 0.0]
    assert result["reward_metrics"] == {"reward/errors": 2, "reward/timeouts": 0}
    err = capsys.readouterr().err
    assert "row 1 (data_source='d')" in err and "non-finite score nan" in err


def test_batch_call_that_raises_zeroes_every_row_and_prints_once(tokenizer, tmp_path, capsys):
    manager = make_reward_manager("batch", tokenizer, load(tmp_path, BATCH_REWARD, "raises"))
    batch = make_batch(tokenizer, rows("a", "a", "a"))
    result = manager(batch, return_dict=True)
    assert result["reward_tensor"].abs().sum().item() == 0.0
    assert result["reward_metrics"] == {"reward/errors": 3, "reward/timeouts": 0}
    err = capsys.readouterr().err
    assert err.count("Traceback") == 1 and "KeyError: 'batch scorer bug'" in err
    assert "in its call for the whole batch; every row scores 0.0" in err
    assert manager(batch, return_dict=True)["reward_metrics"]["reward/errors"] == 3
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("name", "message"), [
    ("too_few", r"too_few \(.*reward.py\) returned 2 scores for 3 responses"),
    ("not_a_list", r"not_a_list \(.*reward.py\) returned float 1.0; it must return a list"),
])
def test_batch_function_breaking_the_list_contract_is_a_reward_error(tokenizer, tmp_path, name, message):
    manager = make_reward_manager("batch", tokenizer, load(tmp_path, BATCH_REWARD, name))
    with pytest.raises(RewardError, match=message):
        manager(make_batch(tokenizer, rows("a", "a", "a")))


def test_batch_needs_a_batch_function(tokenizer, tmp_path):
    with pytest.raises(ConfigError, match="set custom_reward_function.path"):
        make_reward_manager("batch", tokenizer)
    with pytest.raises(ConfigError, match=r"per_sample .* \(data_source, solution_str.*do not accept that: missing .*'data_source'"):
        make_reward_manager("batch", tokenizer, load(tmp_path, BATCH_REWARD, "per_sample"))
    with pytest.raises(ConfigError, match=r"\['bonus'\].*unexpected keyword argument 'bonus'"):
        make_reward_manager("batch", tokenizer, load(tmp_path, BATCH_REWARD, "compute_score_batch"), bonus=1)


def test_batch_timeout_kills_the_call_and_zeroes_every_row(tokenizer, tmp_path, capsys):
    manager = make_reward_manager("batch", tokenizer, load(tmp_path, BATCH_REWARD, "hangs"), timeout_s=0.5)
    start = time.perf_counter()
    result = manager(make_batch(tokenizer, rows("a", "a")), return_dict=True)
    assert time.perf_counter() - start < 60  # worker start (a few s) + 0.5 s, never the endless loop
    assert result["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 2}
    assert "did not finish in time in its call for the whole batch" in capsys.readouterr().err
    manager.close()


# ---- prime ----------------------------------------------------------------------------------------
def test_prime_scores_with_the_built_in_scorers(tokenizer):
    manager = make_reward_manager("prime", tokenizer, num_processes=2)
    try:
        result = manager(make_batch(tokenizer, GSM8K_ROWS), return_dict=True)
        assert result["reward_extra_info"]["score"] == [1.0, 0.0, 0.0]
        assert result["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 0}
        with pytest.raises(RewardError, match="no reward function for data_source 'my/dataset'"):
            manager(make_batch(tokenizer, [("Q", "#### 1", "my/dataset", "1", None)]))
    finally:
        manager.close()


def test_prime_runs_a_user_file_in_worker_processes(tokenizer, tmp_path, capsys):
    manager = make_reward_manager("prime", tokenizer, load(tmp_path, ROW_REWARD, scale=2.0), num_processes=2)
    try:
        result = manager(make_batch(tokenizer, rows("a", "b", "raise", "nan", "text", "dict", "a")), return_dict=True)
        assert result["reward_extra_info"]["score"] == [2.0, 0.0, 0.0, 0.0, 0.0, 0.25, 2.0]
        assert result["reward_metrics"] == {"reward/errors": 3, "reward/timeouts": 0}
        worker_pids = set(manager._pool.pids)
        assert result["reward_extra_info"]["pid"][5] in worker_pids and os.getpid() not in worker_pids
        err = capsys.readouterr().err
        assert err.count("Traceback") == 1 and "row 2 (data_source='d')" in err and "ZeroDivisionError: scorer bug" in err
    finally:
        manager.close()
    assert not any(alive(pid) for pid in worker_pids)


def test_closing_kills_workers_that_multiprocessing_reports_as_exited(tokenizer, tmp_path, monkeypatch):
    """A SIGTERM to the trainer's process group kills the forkserver, after which multiprocessing reports living workers
    as exited (code 255): closing must not trust that, or they live on, reparented to init."""
    from multiprocessing.process import BaseProcess

    manager = make_reward_manager("prime", tokenizer, load(tmp_path, ROW_REWARD), num_processes=2)
    try:
        manager(make_batch(tokenizer, rows("a", "b")))
        pids = manager._pool.pids
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        monkeypatch.setattr(BaseProcess, "is_alive", lambda self: False)
    finally:
        manager.close()
    monkeypatch.undo()
    assert not any(alive(pid) for pid in pids)


def test_prime_kills_a_hung_scorer_and_its_children_and_scores_the_rest(tokenizer, tmp_path, capsys):
    manager = make_reward_manager("prime", tokenizer, load(tmp_path, ROW_REWARD), num_processes=2, timeout_s=1.0)
    batch = make_batch(tokenizer, rows("a", "hang", "b", "a", "a", "b"))
    try:
        manager(make_batch(tokenizer, rows("a", "a")))  # workers started, so the time below is scoring time
        start = time.perf_counter()
        result = manager(batch, return_dict=True)
        elapsed = time.perf_counter() - start
        assert result["reward_extra_info"]["score"] == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
        assert result["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 1}
        assert elapsed < 30  # 1 s limit + starting one replacement worker, never the 600 s sleep
        hung, child = (int((tmp_path / name).read_text()) for name in ("worker.pid", "child.pid"))
        assert not alive(hung) and not alive(child)
        assert hung not in manager._pool.pids and len(manager._pool.pids) == 2
        err = capsys.readouterr().err
        assert "did not finish in time on row 1 (data_source='d')" in err and "reward/timeouts" in err
        assert manager(batch, return_dict=True)["reward_metrics"]["reward/timeouts"] == 1  # the pool keeps working
    finally:
        pids = manager._pool.pids
        manager.close()
    assert not any(alive(pid) for pid in pids)


def test_prime_replaces_a_worker_that_dies(tokenizer, tmp_path, capsys):
    manager = make_reward_manager("prime", tokenizer, load(tmp_path, ROW_REWARD), num_processes=1)
    try:
        result = manager(make_batch(tokenizer, rows("exit", "a")), return_dict=True)
        assert result["reward_extra_info"]["score"] == [0.0, 1.0]
        assert result["reward_metrics"] == {"reward/errors": 1, "reward/timeouts": 0}
        assert "exited (exit code 3) during the call" in capsys.readouterr().err
    finally:
        manager.close()


def test_prime_workers_ignore_sigint_so_the_trainer_alone_decides_how_to_stop(tokenizer, tmp_path):
    manager = make_reward_manager("prime", tokenizer, load(tmp_path, ROW_REWARD), num_processes=1)
    try:
        result = manager(make_batch(tokenizer, rows("sigint", "a")), return_dict=True)  # SIGINT during a call
        assert result["reward_extra_info"]["score"] == [1.0, 1.0]
        assert result["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 0}
        pids = manager._pool.pids
        for pid in pids:  # SIGINT while the worker waits for its next call
            os.kill(pid, signal.SIGINT)
        time.sleep(0.2)
        result = manager(make_batch(tokenizer, rows("a")), return_dict=True)
        assert result["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 0}
        assert manager._pool.pids == pids and all(alive(pid) for pid in pids)
    finally:
        manager.close()


def test_a_worker_that_cannot_load_the_function_is_a_reward_error(tokenizer, tmp_path):
    manager = make_reward_manager("prime", tokenizer, load(tmp_path, ROW_REWARD), num_processes=1)
    (tmp_path / "reward.py").write_text("raise RuntimeError('broken on purpose')\n")  # what a worker will import
    with pytest.raises(RewardError, match=r"(?s)could not load the reward function:.*RuntimeError: broken on purpose"):
        manager(make_batch(tokenizer, rows("a")))
    assert manager._pool.pids == []


def test_prime_awaits_async_functions_in_the_workers(tokenizer, tmp_path):
    manager = make_reward_manager("prime", tokenizer, load(tmp_path, ROW_REWARD, "compute_score_async"), num_processes=1)
    try:
        assert manager(make_batch(tokenizer, rows("a", "b"))).sum().item() == 1.0
    finally:
        manager.close()


def test_functions_that_cannot_reach_a_worker_are_refused_up_front(tokenizer):
    with pytest.raises(RewardError, match=r"The PrimeRewardManager calls .*<lambda>.* Define it at the top level"):
        make_reward_manager("prime", tokenizer, lambda **kw: 1.0)
    with pytest.raises(RewardError, match=r"The NaiveRewardManager with reward_model.reward_kwargs.timeout_s set calls .*<lambda>"):
        make_reward_manager("naive", tokenizer, lambda **kw: 1.0, timeout_s=1)
    with pytest.raises(RewardError, match=r"The BatchRewardManager with reward_model.reward_kwargs.timeout_s set calls"):
        make_reward_manager("batch", tokenizer, lambda data_sources, solution_strs, ground_truths, extra_infos: [], timeout_s=1)


@pytest.mark.parametrize(("name", "reward_kwargs", "message"), [
    ("prime", {"num_processes": 0}, r"num_processes=0 must be a positive integer"),
    ("prime", {"timeout_s": 0}, r"timeout_s=0 must be a positive number of seconds, or null"),
    ("naive", {"timeout_s": "1"}, r"timeout_s='1' must be a positive number"),
    ("dapo", {"max_concurrency": 0}, r"max_concurrency=0 must be a positive integer"),
    ("prime", {"max_concurrency": 4}, r"\['max_concurrency'\] are not options of the 'prime' reward manager"),
])
def test_option_mistakes_are_config_errors(tokenizer, name, reward_kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_reward_manager(name, tokenizer, default_compute_score, **reward_kwargs)


# ---- time limits and concurrency in naive and dapo ---------------------------------------------------
def test_naive_timeout_runs_a_sync_function_in_a_worker_it_can_kill(tokenizer, tmp_path):
    manager = make_reward_manager("dapo", tokenizer, load(tmp_path, ROW_REWARD), timeout_s=1.0)
    try:
        result = manager(make_batch(tokenizer, rows("a", "hang", "b")), return_dict=True)
        assert result["reward_extra_info"]["score"] == [1.0, 0.0, 0.0]
        assert result["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 1}
        assert not alive(int((tmp_path / "worker.pid").read_text()))
    finally:
        manager.close()


def test_async_scorers_run_concurrently_under_a_cap_and_time_limit(tokenizer):
    in_flight, peak = 0, 0

    async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(30 if solution_str == "slow" else 0.2)
        in_flight -= 1
        return 1.0

    eight = make_batch(tokenizer, rows(*"abcdefgh"))
    start = time.perf_counter()
    assert make_reward_manager("naive", tokenizer, compute_score)(eight).sum().item() == 8.0
    assert time.perf_counter() - start < 0.8  # concurrently: about 0.2 s, one after another 1.6 s
    assert peak == 8

    peak = 0
    start = time.perf_counter()
    assert make_reward_manager("naive", tokenizer, compute_score, max_concurrency=2)(eight).sum().item() == 8.0
    assert peak == 2 and time.perf_counter() - start >= 0.8  # four waves of two

    start = time.perf_counter()
    result = make_reward_manager("naive", tokenizer, compute_score, timeout_s=0.5)(
        make_batch(tokenizer, rows("a", "slow", "b")), return_dict=True)
    assert time.perf_counter() - start < 5
    assert result["reward_extra_info"]["score"] == [1.0, 0.0, 1.0]
    assert result["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 1}


def test_remote_scores_in_reward_num_workers_processes_without_a_time_limit(tokenizer, tmp_path):
    """verl 0.9's `remote` manager: prime's worker processes, reward.num_workers of them (what the trainer passes)."""
    manager = make_reward_manager("remote", tokenizer, load(tmp_path, ROW_REWARD), reward_workers=3)
    try:
        assert manager.num_processes == 3 and manager.timeout_s is None
        result = manager(make_batch(tokenizer, rows("a", "dict")), return_dict=True)
        assert result["reward_extra_info"]["score"] == [1.0, 0.25]
        assert result["reward_extra_info"]["pid"][1] in set(manager._pool.pids) and os.getpid() not in manager._pool.pids
    finally:
        manager.close()
    given = make_reward_manager("remote", tokenizer, load(tmp_path, ROW_REWARD), reward_workers=3, num_workers=2)
    assert given.num_processes == 2  # reward_model.reward_kwargs.num_workers wins over reward.num_workers
    given.close()
    other = make_reward_manager("prime", tokenizer, load(tmp_path, ROW_REWARD), reward_workers=3)  # not a prime option: not given
    other.close()
    with pytest.raises(ConfigError, match=r"num_workers=0 must be a positive integer"):
        make_reward_manager("remote", tokenizer, load(tmp_path, ROW_REWARD), num_workers=0)
