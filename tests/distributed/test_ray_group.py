"""RayWorkerGroup on 2 CPU ranks (one Ray started for the module): dispatch, environment, colocation, failures, hangs."""

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("RAY_DEDUP_LOGS", "0")  # as open_worker_pool sets it: each rank's stack dump printed in full
ray = pytest.importorskip("ray")

from reinforge.algorithm.advantage import ADV_ESTIMATOR_REGISTRY  # noqa: E402
from reinforge.batch import Batch  # noqa: E402
from reinforge.config import load_config  # noqa: E402
from reinforge.errors import ConfigError, RankError  # noqa: E402
from reinforge.trainer.checkpoint import os_error_in  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import dummy_workers  # noqa: E402

ray.cloudpickle.register_pickle_by_value(dummy_workers)  # Ray's worker processes cannot import tests/


USER_ESTIMATOR = """
from reinforge.algorithm import register_adv_est


@register_adv_est("estimator_from_a_user_file")
def estimator(token_level_rewards, response_mask, **kwargs):
    return token_level_rewards, token_level_rewards
"""


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    from reinforge.distributed.ray_group import RayPool

    module = tmp_path_factory.mktemp("user") / "my_estimator.py"
    module.write_text(USER_ESTIMATOR)
    ray.init(address="local", num_cpus=2)
    saved = dict(ADV_ESTIMATOR_REGISTRY)  # loading the config registers the user's estimator here too: not for later tests
    config, _ = load_config(["trainer.device=cpu", "trainer.n_gpus_per_node=2", f"algorithm.custom_modules=[{module}]"])
    pool = RayPool(config)
    pool.hang_dump_s = 0
    yield pool
    pool.close()
    ray.shutdown()
    ADV_ESTIMATOR_REGISTRY.clear()
    ADV_ESTIMATOR_REGISTRY.update(saved)


@pytest.fixture(scope="module")
def probe(pool):
    return pool.group("probe", dummy_workers.Probe, "first")


def rows(n: int) -> Batch:
    return Batch({"x": torch.arange(n)}, {"name": [f"row{i}" for i in range(n)]})


def test_dp_splits_by_rank_in_order_and_trims_the_padding(probe):
    out = probe.describe(rows(5))  # padded to 6 (row 4 twice): rank 0 gets rows 0, 2, 4 and rank 1 rows 1, 3, 4
    assert out["x"].tolist() == [0, 1, 2, 3, 4]
    assert list(out["name"]) == ["row0", "row1", "row2", "row3", "row4"]
    assert list(out["RANK"]) == ["0", "1", "0", "1", "0"]
    even = probe.describe(rows(4))
    assert list(even["RANK"]) == ["0", "1", "0", "1"] and even["x"].tolist() == [0, 1, 2, 3]


def test_each_rank_gets_the_torch_distributed_environment_and_can_all_reduce(probe):
    out = probe.describe(rows(2))
    assert list(out["RANK"]) == ["0", "1"] and list(out["LOCAL_RANK"]) == ["0", "1"]
    assert list(out["WORLD_SIZE"]) == ["2", "2"]
    assert len(set(out["MASTER_ADDR"])) == 1 and len(set(out["MASTER_PORT"])) == 1 and int(out["MASTER_PORT"][0]) > 0
    assert probe.all_reduce(1.5) == 1.5 * 1 + 1.5 * 2  # gloo across the two actors: rank r contributes 1.5 x (r + 1)


def test_roles_of_a_pool_share_each_ranks_process(pool, probe):
    other = pool.group("other", dummy_workers.Probe, "second")
    first, second = probe.describe(rows(2)), other.describe(rows(2))
    assert first["pid"].tolist() == second["pid"].tolist()
    assert first["pid"][0] != first["pid"][1]
    assert list(first["tag"]) == ["first", "first"] and list(second["tag"]) == ["second", "second"]


def test_the_users_algorithm_modules_are_imported_in_every_rank(probe):
    per_rank = probe.adv_estimators(rows(2))["estimators"]  # one row per rank
    assert all("estimator_from_a_user_file" in names and "grpo" in names for names in per_rank)


def test_a_failing_rank_names_itself_the_method_and_shows_its_traceback(probe):
    with pytest.raises(RankError) as caught:
        probe.fail_on(1, ValueError("boom in rank 1"))
    message = str(caught.value)
    assert message.startswith("rank 1, probe.fail_on raised ValueError: boom in rank 1")
    traceback = message[message.index("Traceback (most recent call last):"):]
    assert re.search(r'dummy_workers\.py", line \d+, in fail_on\n\s+raise error', traceback)
    assert traceback.rstrip().endswith("ValueError: boom in rank 1")


def test_a_user_error_in_a_worker_reaches_the_driver_as_that_error(probe):
    with pytest.raises(ConfigError, match="^data.foo=3 is wrong$") as caught:
        probe.fail_on(0, ConfigError("data.foo=3 is wrong"))
    assert type(caught.value) is ConfigError
    # --debug shows where it was raised in the worker (the user's code), which the driver's traceback does not reach
    assert re.search(r'^rank 0, probe.fail_on: Traceback[\s\S]*dummy_workers\.py", line \d+, in fail_on',
                     caught.value.worker_traceback)


def test_a_full_disk_in_a_worker_reaches_the_driver_as_the_os_error(probe):
    """torch wraps a failed write in a RuntimeError whose cause would not survive the trip to the driver: the worker's
    host sends the OSError itself, the cause of the driver's RankError, whose errno tells the driver's checkpoint code
    to skip the save (trainer/checkpoint.py). Both ranks fail; the driver names whichever answered first."""
    with pytest.raises(RankError, match=r"^rank [01], probe.write_fails raised OSError: \[Errno 28\]") as caught:
        probe.write_fails(errno.ENOSPC)
    found = os_error_in(caught.value)
    assert found.errno == errno.ENOSPC and found.filename.endswith("model_world_size_2_rank_0.pt")
    assert "ray::WorkerHost.call()" in str(caught.value) and "\x1b" not in str(caught.value)  # Ray's colour codes removed


def test_hang_watchdog_dumps_every_ranks_stack_and_names_the_late_ranks():
    """A driver of its own (drivers.py hang) whose ranks sleep 3.5 s past trainer.hang_dump_s=2: its console shows the
    driver's warning naming both ranks, and each rank's faulthandler dump, prefixed with that rank's pid by Ray."""
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    result = subprocess.run([sys.executable, str(Path(__file__).parent / "drivers.py"), "hang"], capture_output=True,
                            text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stderr
    assert "slept" in result.stdout
    console = result.stdout + result.stderr
    warning = re.search(r"probe\.sleep has not returned after 2s on ranks 0 \(pid (\d+) on [\d.]+\), 1 \(pid (\d+)", console)
    assert warning, console
    for pid in warning.groups():
        dump = [line for line in console.splitlines() if f"pid={pid})" in line]
        assert any("Timeout (0:00:02)!" in line for line in dump), console
        assert any(re.search(r'dummy_workers\.py", line \d+ in sleep', line) for line in dump), console
