"""Several training files mixed into one dataset: every file's rows are served, each keeps its data_source, errors name the file."""

from __future__ import annotations

import re

import pytest

from reinforge.config.data_schema import DataConfig
from reinforge.environment.dataloader import PromptLoader
from reinforge.environment.dataset import RLDataset, collate_fn
from reinforge.errors import DataError, RewardError
from reinforge.reward import default_compute_score
from reinforge.trainer.main import _check_reward_data


def _custom_reward(data_source, solution_str, ground_truth, extra_info=None):
    return 0.0


def _rows_of(make_rows, source: str, n: int, start: int) -> list[dict]:
    rows = make_rows(n, start=start)
    for row in rows:
        row["data_source"] = source
    return rows


@pytest.fixture
def mixed(tmp_path, make_rows, write_rows):
    """A parquet file of 3 'openai/gsm8k' rows (indices 100-102) and a JSONL file of 4 'lab/puzzles' rows (103-106)."""
    return (write_rows(tmp_path / "a.parquet", _rows_of(make_rows, "openai/gsm8k", 3, 0)),
            write_rows(tmp_path / "b.jsonl", _rows_of(make_rows, "lab/puzzles", 4, 3)))


def test_every_row_of_every_file_is_served_once_per_epoch_with_its_own_data_source(mixed, tokenizer, data_config):
    first, second = mixed
    dataset = RLDataset([str(first), str(second)], tokenizer, data_config())
    loader = PromptLoader(dataset, 2, collate_fn(tokenizer.pad_token_id), shuffle=True, seed=5, drop_last=False)
    for _ in range(2):
        served = [(index, source) for batch in loader for index, source in zip(batch["index"], batch["data_source"], strict=True)]
        assert sorted(served) == [(100, "openai/gsm8k"), (101, "openai/gsm8k"), (102, "openai/gsm8k"),
                                  (103, "lab/puzzles"), (104, "lab/puzzles"), (105, "lab/puzzles"), (106, "lab/puzzles")]
    assert dataset.data_source_files() == {"openai/gsm8k": [str(first)], "lab/puzzles": [str(second)]}


def test_an_error_in_the_second_file_names_that_file_and_its_own_row(mixed, tmp_path, tokenizer, data_config, make_rows,
                                                                      write_rows):
    first, _ = mixed
    rows = _rows_of(make_rows, "lab/puzzles", 3, 3)
    rows[2]["prompt"] = 42
    bad = write_rows(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError, match=rf"^{re.escape(str(bad))}: row 2, column 'prompt'"):
        RLDataset([str(first), str(bad)], tokenizer, data_config())


def test_a_data_source_without_a_scorer_is_reported_with_its_file(mixed, tokenizer, data_config):
    first, second = mixed
    config = DataConfig(train_files=[str(first), str(second)])
    dataset = RLDataset(config.train_files, tokenizer, data_config())
    with pytest.raises(RewardError, match=rf"^{re.escape(str(second))}: no reward function for data_source 'lab/puzzles'"):
        _check_reward_data(config, default_compute_score, False, dataset, None)
    _check_reward_data(config, default_compute_score, True, dataset, None)  # a manager of the user's may score it itself


def test_max_samples_that_leaves_a_file_out_says_so(mixed, tokenizer, data_config, capsys):
    first, second = mixed
    dataset = RLDataset([str(first), str(second)], tokenizer, data_config(shuffle=False), max_samples=3)
    assert dataset.data_source_files() == {"openai/gsm8k": [str(first)]}
    assert f"keeps the first 3 rows of {first}, {second}; no rows come from {second}" in capsys.readouterr().err


def test_files_with_and_without_an_ability_column_collate_together(mixed, tmp_path, tokenizer, data_config, make_rows,
                                                                   write_rows):
    first, _ = mixed
    rows = _rows_of(make_rows, "lab/puzzles", 2, 3)
    for row in rows:
        del row["ability"]
    plain = write_rows(tmp_path / "plain.jsonl", rows)
    dataset = RLDataset([str(first), str(plain)], tokenizer, data_config())
    batch = collate_fn(tokenizer.pad_token_id)([dataset[i] for i in range(len(dataset))])
    assert batch["ability"] == ["digits", "digits", "digits", None, None]


def test_reward_fn_key_names_the_column_that_picks_the_scorer(mixed, tmp_path, tokenizer, make_rows, write_rows):
    first, _ = mixed
    rows = _rows_of(make_rows, "lab/puzzles", 2, 3)
    for row in rows:
        row["task"] = "openai/gsm8k"  # data_source has no scorer; the column reward_fn_key names does
    second = write_rows(tmp_path / "keyed.jsonl", rows)
    config = DataConfig(train_files=[str(second)], reward_fn_key="task")
    dataset = RLDataset(config.train_files, tokenizer, config)
    _check_reward_data(config, default_compute_score, False, dataset, None)  # passes: 'task' is scored by the gsm8k scorer
    assert dataset.data_source_files("task") == {"openai/gsm8k": [str(second)]}
    assert [dataset[i]["task"] for i in range(2)] == ["openai/gsm8k", "openai/gsm8k"]  # the items carry it to the reward
    with pytest.raises(RewardError, match=rf"^{re.escape(str(second))}: no reward function for data_source 'lab/puzzles'"):
        _check_reward_data(DataConfig(train_files=[str(second)]), default_compute_score, False, dataset, None)
    config = DataConfig(train_files=[str(first), str(second)], reward_fn_key="task")
    with pytest.raises(DataError, match=rf"^{re.escape(str(first))}: row 0: no value in column 'task', which "
                                        "data.reward_fn_key='task' names"):
        _check_reward_data(config, _custom_reward, False, RLDataset(config.train_files, tokenizer, config), None)


@pytest.mark.parametrize("reward_model", [None, {"style": "rule"}], ids=["no column", "no ground_truth"])
def test_rows_without_a_ground_truth_are_named_before_training(mixed, tmp_path, tokenizer, make_rows, write_rows,
                                                               reward_model):
    first, _ = mixed
    rows = _rows_of(make_rows, "lab/puzzles", 3, 3)
    if reward_model is None:
        del rows[1]["reward_model"]
    else:
        rows[1]["reward_model"] = reward_model
    bad = write_rows(tmp_path / "bad.jsonl", rows)
    config = DataConfig(train_files=[str(first), str(bad)])
    dataset = RLDataset(config.train_files, tokenizer, config)
    what = "there is no such column" if reward_model is None else "it holds dict {'style': 'rule'}, without a 'ground_truth' key"
    with pytest.raises(DataError, match=rf"^{re.escape(str(bad))}: row 1, column 'reward_model': {re.escape(what)}\. "):
        _check_reward_data(config, _custom_reward, False, dataset, None)  # a custom reward function is called with the ground truth too
