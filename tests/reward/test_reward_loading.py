"""Loading custom_reward_function from a file: success, kwargs binding, and every error."""

import textwrap
from pathlib import Path

import pytest

from reinforge.config.schema import Config
from reinforge.errors import RewardError
from reinforge.reward import default_compute_score, get_compute_score, load_reward_function


def _config(path=None, name="compute_score", reward_kwargs=None) -> Config:
    config = Config()
    config.custom_reward_function.path = None if path is None else str(path)
    config.custom_reward_function.name = name
    config.custom_reward_function.reward_kwargs = dict(reward_kwargs or {})
    return config


def _write(folder: Path, source: str, name: str = "reward.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


GOOD = """
    def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
        return float(solution_str == ground_truth) + bonus

    def helper():
        return 1

    NOT_A_FUNCTION = 3
"""


def test_no_path_means_default(tmp_path):
    assert load_reward_function(_config()) is None
    assert get_compute_score(_config()) is default_compute_score


def test_loads_function_by_name(tmp_path):
    fn = get_compute_score(_config(_write(tmp_path, GOOD)))
    assert fn("d", "a", "a") == 1.0
    assert load_reward_function(_config(_write(tmp_path, GOOD), name="helper"))() == 1


def test_reward_kwargs_are_bound(tmp_path):
    fn = load_reward_function(_config(_write(tmp_path, GOOD), reward_kwargs={"bonus": 0.5}))
    assert fn(data_source="d", solution_str="a", ground_truth="a") == 1.5


def test_reward_kwargs_the_function_does_not_take(tmp_path):
    path = _write(tmp_path, GOOD)
    with pytest.raises(RewardError, match="reward_kwargs") as info:
        load_reward_function(_config(path, reward_kwargs={"bonsu": 0.5}))
    assert str(path) in str(info.value)


def test_file_may_import_its_siblings(tmp_path):
    _write(tmp_path, "WEIGHT = 2.0\n", name="my_helpers.py")
    path = _write(
        tmp_path,
        """
        from my_helpers import WEIGHT

        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            return WEIGHT
    """,
    )
    assert load_reward_function(_config(path))("d", "a", "b") == 2.0


def test_two_files_with_the_same_name_do_not_collide(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _write(tmp_path / "a", "def compute_score(*args, **kwargs):\n    return 1\n")
    second = _write(tmp_path / "b", "def compute_score(*args, **kwargs):\n    return 2\n")
    assert load_reward_function(_config(first))() == 1
    assert load_reward_function(_config(second))() == 2


def test_missing_file(tmp_path):
    path = tmp_path / "nope.py"
    with pytest.raises(RewardError, match="does not exist") as info:
        load_reward_function(_config(path))
    assert str(path) in str(info.value)


def test_folder_instead_of_file(tmp_path):
    with pytest.raises(RewardError, match="is a folder"):
        load_reward_function(_config(tmp_path))


def test_syntax_error_names_file_and_line(tmp_path):
    path = _write(tmp_path, "def compute_score(:\n    return 1\n")
    with pytest.raises(RewardError) as info:
        load_reward_function(_config(path))
    message = str(info.value)
    assert str(path) in message and "SyntaxError" in message
    assert "line 1: def compute_score(:" in message


def test_import_error_names_file_and_line(tmp_path):
    path = _write(tmp_path, "import os\nimport package_that_does_not_exist\n")
    with pytest.raises(RewardError) as info:
        load_reward_function(_config(path))
    message = str(info.value)
    assert str(path) in message
    assert "line 2: import package_that_does_not_exist" in message
    assert "ModuleNotFoundError" in message


def test_error_raised_at_import_time(tmp_path):
    path = _write(tmp_path, "TABLE = {}\nLIMIT = TABLE['limit']\n")
    with pytest.raises(RewardError, match=r"line 2: LIMIT = TABLE\['limit'\] -> KeyError"):
        load_reward_function(_config(path))


def test_missing_function_lists_what_the_file_defines(tmp_path):
    path = _write(tmp_path, GOOD)
    with pytest.raises(RewardError) as info:
        load_reward_function(_config(path, name="reward_fn"))
    message = str(info.value)
    assert str(path) in message and "'reward_fn'" in message
    assert "['compute_score', 'helper']" in message


def test_name_that_is_not_callable(tmp_path):
    path = _write(tmp_path, GOOD)
    with pytest.raises(RewardError, match="'NOT_A_FUNCTION' .* is a int, not a function") as info:
        load_reward_function(_config(path, name="NOT_A_FUNCTION"))
    assert str(path) in str(info.value)
