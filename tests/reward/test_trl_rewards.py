"""Reward functions written for TRL's GRPOTrainer, called as it calls them (reward/manager/trl.py): the arguments each
function is given, the weighted sum with None left out, what log_extra and log_metric record, the checks, and TRL's own
reward functions giving through reinforge what they give called directly."""

import textwrap

import pytest
import torch

from reinforge.config.schema import Config
from reinforge.config.validate import finalize
from reinforge.errors import ConfigError, DataError, RewardError
from reinforge.reward import get_compute_score, make_reward_manager
from reinforge.reward.manager.trl import TRLRewardFunctions, check_required_columns, is_trl_reward
from tests.reward.test_reward_manager import make_batch

CHAT = [{"role": "user", "content": "Q1"}]


def trl_batch(tokenizer, responses, prompts, columns, state=None, response_len=10):
    """A scored batch as the trainer hands it over: each row's file columns in row_columns (the prompt under 'prompt')."""
    rows = [("Q", response, "unknown", None, {"index": i}) for i, response in enumerate(responses)]
    batch = make_batch(tokenizer, rows, response_len=response_len)
    batch.pop(["reward_model"])
    batch["row_columns"] = [{"prompt": prompt, **{key: values[i] for key, values in columns.items()}}
                            for i, prompt in enumerate(prompts)]
    batch.meta_info["trainer_state"] = state or {"global_step": 4, "max_steps": 10, "epoch": 1.0}
    return batch


def load(tmp_path, source, names, weights=None, **reward_kwargs):
    path = tmp_path / f"trl_rewards_{abs(hash(source))}.py"  # one file per source: a loaded file is not read again
    path.write_text(textwrap.dedent(source))
    config = Config()
    config.custom_reward_function.path = str(path)
    config.custom_reward_function.name = names
    config.custom_reward_function.reward_weights = weights
    config.custom_reward_function.reward_kwargs = reward_kwargs
    return get_compute_score(config)


def manager(tokenizer, functions, **options):
    return make_reward_manager("trl", tokenizer, functions, **options)


def test_trl_functions_are_told_from_verl_ones_by_their_parameters():
    def accuracy(completions, solution, **kwargs): ...
    def by_ids(completion_ids, **kwargs): ...
    def verl(data_source, solution_str, ground_truth, extra_info=None): ...
    def verl_batch(data_sources, solution_strs, ground_truths, extra_infos): ...
    def anything(**kwargs): ...

    assert is_trl_reward(accuracy) and is_trl_reward(by_ids)
    assert not any(is_trl_reward(fn) for fn in (verl, verl_batch, anything))


SEEN = """
    CALLS = []

    def record(prompts, completions, completion_ids, trainer_state, solution, **kwargs):
        CALLS.append({"prompts": prompts, "completions": completions, "completion_ids": completion_ids,
                      "state": (trainer_state.global_step, trainer_state.max_steps, trainer_state.epoch),
                      "solution": solution, "other": sorted(kwargs)})
        return [float(len(ids)) for ids in completion_ids]

    def names_only(completions, level):  # no **kwargs: given only what it names
        return [float(level_ == "hard") for level_ in level]
"""


def test_each_function_gets_prompts_completions_ids_columns_and_state_as_trl_gives_them(tokenizer, tmp_path):
    functions = load(tmp_path, SEEN, ["record", "names_only"])
    batch = trl_batch(tokenizer, ["7", "8 9"], ["plain text prompt", CHAT],
                      {"solution": ["7", "9"], "level": ["easy", "hard"]})
    result = manager(tokenizer, functions)(batch, return_dict=True)
    [call] = functions.functions[0].__globals__["CALLS"]
    assert call["prompts"] == ["plain text prompt", CHAT]
    # a text prompt's completion is the text (TRL's standard format), a chat prompt's one assistant message
    assert call["completions"] == ["7", [{"role": "assistant", "content": "8 9"}]]
    responses, lengths = batch["responses"], batch["attention_mask"][:, batch["prompts"].shape[1]:].sum(-1).tolist()
    assert call["completion_ids"] == [responses[i, :n].tolist() for i, n in enumerate(lengths)]
    assert call["state"] == (4, 10, 1.0) and call["solution"] == ["7", "9"]
    assert call["other"] == ["level", "log_extra", "log_metric"]  # the prompt column is `prompts`, not a column
    info = result["reward_extra_info"]
    assert info["record"] == [float(n) for n in lengths] and info["names_only"] == [0.0, 1.0]
    assert info["score"] == [lengths[0] + 0.0, lengths[1] + 1.0]


WEIGHTED = """
    def first(completions, **kwargs):
        return [1.0, None, 0.5, float("nan")]

    def second(completions, **kwargs):
        return [None, None, 2.0, 3.0]
"""


def test_the_score_is_the_weighted_sum_leaving_out_none_and_a_row_no_function_scored_is_zero(tokenizer, tmp_path, capsys):
    functions = load(tmp_path, WEIGHTED, ["first", "second"], weights=[1.0, 0.5])
    batch = trl_batch(tokenizer, ["a", "b", "c", "d"], ["p"] * 4, {})
    result = manager(tokenizer, functions)(batch, return_dict=True)
    rows = torch.arange(4)
    last = batch["attention_mask"][:, batch["prompts"].shape[1]:].sum(-1) - 1
    # worked by hand: 1*1.0; nothing scored; 1*0.5 + 0.5*2.0; NaN is "not scored" as None is, 0.5*3.0
    assert result["reward_tensor"][rows, last].tolist() == [1.0, 0.0, 1.5, 1.5]
    assert result["reward_tensor"].sum().item() == 4.0
    assert result["reward_extra_info"]["first"] == [1.0, None, 0.5, None]
    assert result["reward_extra_info"]["second"] == [None, None, 2.0, 3.0]
    assert result["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 0}
    assert "every TRL reward function returned None for row 1" in capsys.readouterr().err


LOGGING = """
    def logs(completions, log_extra, log_metric, **kwargs):
        log_extra("parsed", [c.upper() for c in completions])
        log_metric("batch_size", len(completions))
        log_metric("batch_size", len(completions) + 2)
        return [0.0] * len(completions)

    def clashes(completions, log_extra, **kwargs):
        log_extra("score", [1] * len(completions))
        return [0.0] * len(completions)

    def short_column(completions, log_extra, **kwargs):
        log_extra("parsed", [1])
        return [0.0] * len(completions)
"""


def test_log_extra_and_log_metric_become_extra_keys(tokenizer, tmp_path):
    batch = trl_batch(tokenizer, ["a", "b"], ["p", "q"], {})
    info = manager(tokenizer, load(tmp_path, LOGGING, "logs"))(batch, return_dict=True)["reward_extra_info"]
    assert info["parsed"] == ["A", "B"]
    assert info["batch_size"] == [3.0, 3.0]  # the mean of what the call logged, on every row
    with pytest.raises(RewardError, match="logged 'score' with log_extra, which is already the name of a reward function or"):
        manager(tokenizer, load(tmp_path, LOGGING, "clashes"))(batch)
    with pytest.raises(RewardError, match="logged column 'parsed' with log_extra for 1 rows; the batch has 2"):
        manager(tokenizer, load(tmp_path, LOGGING, "short_column"))(batch)


BROKEN = """
    def too_few(completions, **kwargs):
        return [1.0]

    def text(completions, **kwargs):
        return ["high"] * len(completions)

    def not_a_list(completions, **kwargs):
        return 1.0

    def raises(completions, **kwargs):
        raise KeyError("reward bug")

    async def later(completions, **kwargs):
        return [2.0] * len(completions)
"""


def test_a_broken_result_names_the_function_and_a_raising_call_scores_every_row_zero(tokenizer, tmp_path, capsys):
    batch = trl_batch(tokenizer, ["a", "b"], ["p", "q"], {})
    for name, message in (("too_few", "too_few .* returned 1 rewards for 2 completions"),
                          ("text", "text .* returned str 'high' for completion 0"),
                          ("not_a_list", "not_a_list .* returned float; it must return a list")):
        with pytest.raises(RewardError, match=message):
            manager(tokenizer, load(tmp_path, BROKEN, name))(batch)
    result = manager(tokenizer, load(tmp_path, BROKEN, "raises"))(batch, return_dict=True)
    assert result["reward_tensor"].sum().item() == 0.0 and result["reward_metrics"]["reward/errors"] == 2
    err = capsys.readouterr().err
    assert "in its call for the whole batch; every row scores 0.0" in err and "KeyError: 'reward bug'" in err
    async_result = manager(tokenizer, load(tmp_path, BROKEN, "later"))(batch, return_dict=True)
    assert async_result["reward_extra_info"]["score"] == [2.0, 2.0]


def test_with_a_time_limit_the_call_runs_in_a_worker_process(tokenizer, tmp_path):
    functions = load(tmp_path, SEEN, ["record", "names_only"])
    batch = trl_batch(tokenizer, ["7", "8 9"], ["p", CHAT], {"solution": ["7", "9"], "level": ["hard", "easy"]})
    scorer = manager(tokenizer, functions, timeout_s=60)
    try:
        info = scorer(batch, return_dict=True)["reward_extra_info"]
    finally:
        scorer.close()
    assert info["names_only"] == [1.0, 0.0]
    assert functions.functions[0].__globals__["CALLS"] == []  # called in the worker, not here


def test_loading_checks_names_weights_and_kinds(tmp_path):
    verl_and_trl = WEIGHTED + "\n    def verl(data_source, solution_str, ground_truth, extra_info=None):\n        return 1.0\n"
    with pytest.raises(RewardError, match=r"verl in .* is a verl reward function .* several functions must all be TRL"):
        load(tmp_path, verl_and_trl, ["first", "verl"])
    with pytest.raises(RewardError, match=r"reward_weights=\[1.0\] must be a list of 2 numbers, one per function"):
        load(tmp_path, WEIGHTED, ["first", "second"], weights=[1.0])
    with pytest.raises(RewardError, match="reward_weights weighs TRL reward functions; verl in .* is a verl reward function"):
        load(tmp_path, verl_and_trl, "verl", weights=[1.0])
    assert isinstance(load(tmp_path, WEIGHTED, "first"), TRLRewardFunctions)
    config = Config()
    config.custom_reward_function.name = ["first", 3]
    with pytest.raises(ConfigError, match=r"custom_reward_function.name=\['first', 3\] must be a function's name, or a list"):
        finalize(config)


def test_a_verl_function_given_to_the_trl_manager_and_a_trl_one_to_another_manager_are_refused(tokenizer, tmp_path):
    from reinforge.trainer.main import _manager_for

    def verl(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0

    with pytest.raises(ConfigError, match="reward_manager=trl calls reward functions written for TRL"):
        make_reward_manager("trl", tokenizer, verl)
    functions = load(tmp_path, WEIGHTED, ["first", "second"])
    assert _manager_for(functions, "naive", "question") == ("trl", {"prompt_key": "question"})
    with pytest.raises(ConfigError, match=r"reward_manager=dapo: .* names TRL reward functions \(first, second\)"):
        _manager_for(functions, "dapo", "prompt")


def test_a_row_without_a_column_a_function_takes_is_named_before_training(tmp_path):
    functions = load(tmp_path, SEEN, ["record", "names_only"])
    rows = [({"prompt": "p", "solution": "1", "level": "easy"}, "a.parquet", 0),
            ({"prompt": "p", "solution": "2"}, "a.parquet", 1)]
    with pytest.raises(DataError, match=r"^a.parquet: row 1: no column 'level', which the TRL reward function names_only "
                                        r"takes .* The row's columns: prompt, solution"):
        check_required_columns(functions, iter(rows), "prompt")
    check_required_columns(functions, iter(rows[:1]), "prompt")


ANY_COLUMNS = """
    CALLS = []

    def columns(prompts, completions, **kwargs):
        CALLS.append((prompts, kwargs))
        return [1.0] * len(completions)
"""


def test_rows_of_a_dataset_class_give_verls_fields_and_the_chat_messages(tokenizer, tmp_path):
    functions = load(tmp_path, ANY_COLUMNS, "columns")
    batch = make_batch(tokenizer, [("Q", "7", "lab/x", "7", {"index": 0})])
    batch["raw_prompt"] = [CHAT]
    batch["solution"] = ["7"]  # not a field of verl's schema: not given
    manager(tokenizer, functions)(batch)
    [(prompts, kwargs)] = functions.functions[0].__globals__["CALLS"]
    assert prompts == [CHAT]
    assert sorted(kwargs) == ["completion_ids", "data_source", "extra_info", "log_extra", "log_metric", "reward_model",
                             "trainer_state"]
    assert kwargs["data_source"] == ["lab/x"] and kwargs["reward_model"] == [{"ground_truth": "7", "style": "rule"}]
    with pytest.raises(RewardError, match="the TRL reward function record takes 'solution', which the batch's rows do not "
                                          "have; their columns are data_source, reward_model, extra_info"):
        manager(tokenizer, load(tmp_path, SEEN, "record"))(batch)


def test_trls_own_reward_functions_score_as_when_trl_calls_them(tokenizer, tmp_path):
    rewards = pytest.importorskip("trl.rewards")
    config = Config()  # TRL's own functions, named by their module (no file)
    config.custom_reward_function.path = "trl.rewards"
    config.custom_reward_function.name = ["accuracy_reward", "think_format_reward"]
    config.custom_reward_function.reward_weights = [1.0, 0.25]
    functions = get_compute_score(config)
    responses = [r"<think>x</think>The answer is \boxed{\frac{1}{3}}", r"so \boxed{\frac{1}{2}}",
                 r"<think>x</think>\boxed{4}", "no answer"]
    solutions = [r"$\frac{1}{3}$", r"$\frac{1}{3}$", "$4$", "not latex at all {"]
    assert max(len(tokenizer(r)["input_ids"]) for r in responses) <= 64
    batch = trl_batch(tokenizer, responses, [CHAT] * 4, {"solution": solutions}, response_len=64)
    info = manager(tokenizer, functions)(batch, return_dict=True)["reward_extra_info"]
    completions = [[{"role": "assistant", "content": r}] for r in responses]
    direct_accuracy = rewards.accuracy_reward(completions, solutions)
    direct_format = rewards.think_format_reward(completions)
    assert info["accuracy_reward"] == direct_accuracy and info["think_format_reward"] == direct_format
    assert info["score"] == [(a or 0.0) + 0.25 * f for a, f in zip(direct_accuracy, direct_format, strict=True)]
    assert info["solution"] == solutions  # what accuracy_reward logs with log_extra


def test_the_dataset_carries_each_rows_columns_as_read(tokenizer, tmp_path):
    from reinforge.config.data_schema import DataConfig
    from reinforge.environment.dataset import RLDataset

    path = tmp_path / "trl.jsonl"
    path.write_text('{"prompt": [{"role": "user", "content": "Q1"}], "solution": "7"}\n{"prompt": "text", "solution": "8"}\n')
    dataset = RLDataset(str(path), tokenizer, DataConfig(train_files=str(path)))
    assert [dataset[i]["row_columns"] for i in range(2)] == [{"prompt": CHAT, "solution": "7"}, {"prompt": "text", "solution": "8"}]
