"""Reward functions written for TRL's GRPOTrainer, called as it calls them (reward/manager/trl.py): the arguments each
function is given, the weighted sum with None left out, what log_extra and log_metric record, what a failing function
costs, the checks, and TRL's own reward functions giving through reinforge what they give called directly."""

import textwrap

import pytest
import torch

from reinforge.config.schema import Config
from reinforge.config.validate import finalize
from reinforge.errors import ConfigError, DataError, RewardError
from reinforge.reward import get_compute_score, make_reward_manager
from reinforge.reward.manager.trl import TrainerState, TRLRewardFunctions, check_rows, is_trl_reward
from tests.reward.test_reward_manager import make_batch

CHAT = [{"role": "user", "content": "Q1"}]


def trl_batch(tokenizer, responses, prompts, columns, response_len=10):
    """A batch as the trainer hands it over: each row's file columns in row_columns, the prompt under 'prompt'."""
    rows = [("Q", response, "unknown", None, {"index": i}) for i, response in enumerate(responses)]
    batch = make_batch(tokenizer, rows, response_len=response_len)
    batch.pop(["reward_model"])
    batch["row_columns"] = [{"prompt": prompt, **{key: values[i] for key, values in columns.items()}}
                            for i, prompt in enumerate(prompts)]
    batch.meta_info["trainer_state"] = TrainerState.at(4, 10, 4)  # epoch 4/4 = 1.0; num_train_epochs ceil(10/4) = 3
    return batch


def load(tmp_path, source, names, weights=None, manager_name="naive", **reward_kwargs):
    path = tmp_path / f"trl_rewards_{abs(hash(source))}.py"  # one file per source: a loaded file is not read again
    path.write_text(textwrap.dedent(source))
    config = Config()
    config.custom_reward_function.path = str(path)
    config.custom_reward_function.name = names
    config.custom_reward_function.reward_weights = weights
    config.custom_reward_function.reward_kwargs = reward_kwargs
    config.reward_model.reward_manager = manager_name
    return get_compute_score(config)


def manager(tokenizer, functions, **options):
    return make_reward_manager("trl", tokenizer, functions, **options)


def last_tokens(batch, rewards):
    last = batch["attention_mask"][:, batch["prompts"].shape[1]:].sum(-1) - 1
    return rewards[torch.arange(len(batch)), last].tolist()


def test_trl_functions_are_told_from_verl_ones_by_their_parameters():
    def accuracy(completions, solution, **kwargs): ...
    def by_ids(completion_ids, **kwargs): ...
    def by_prompts(prompts, **kwargs): ...
    def verl(data_source, solution_str, ground_truth, extra_info=None): ...
    def verl_batch(data_sources, solution_strs, ground_truths, extra_infos): ...
    def anything(**kwargs): ...

    assert all(is_trl_reward(fn) for fn in (accuracy, by_ids, by_prompts))
    assert not any(is_trl_reward(fn) for fn in (verl, verl_batch, anything))


SEEN = """
    CALLS = []

    def record(prompts, completions, completion_ids, trainer_state, solution, **kwargs):
        CALLS.append({"prompts": prompts, "completions": completions, "completion_ids": completion_ids,
                      "state": (trainer_state.global_step, trainer_state.max_steps, trainer_state.epoch,
                                trainer_state.num_train_epochs),
                      "solution": solution, "other": sorted(kwargs)})
        return [float(len(ids)) for ids in completion_ids]

    def names_only(completions, level):  # no **kwargs: given only what it names
        return [float(level_ == "hard") for level_ in level]
"""


def test_each_function_gets_prompts_completions_ids_columns_and_state_as_trl_gives_them(tokenizer, tmp_path):
    functions = load(tmp_path, SEEN, ["record", "names_only"])
    batch = trl_batch(tokenizer, ["7", "8 9"], ["plain text prompt", CHAT],
                      {"solution": ["7", "9"], "level": ["easy", "hard"], "completion": ["x", "y"]})
    result = manager(tokenizer, functions)(batch, return_dict=True)
    [call] = functions.functions[0].__globals__["CALLS"]
    assert call["prompts"] == ["plain text prompt", CHAT]
    # a text prompt's completion is the text (TRL's standard format), a chat prompt's one assistant message
    assert call["completions"] == ["7", [{"role": "assistant", "content": "8 9"}]]
    responses, lengths = batch["responses"], batch["attention_mask"][:, batch["prompts"].shape[1]:].sum(-1).tolist()
    assert call["completion_ids"] == [responses[i, :n].tolist() for i, n in enumerate(lengths)]
    assert call["state"] == (4, 10, 1.0, 3) and call["solution"] == ["7", "9"]
    # the prompt column reaches `prompts` and a `completion` column nothing, as in TRL
    assert call["other"] == ["level", "log_extra", "log_metric"]
    info = result["reward_extra_info"]
    assert info["record"] == [float(n) for n in lengths] and info["names_only"] == [0.0, 1.0]
    assert info["score"] == [lengths[0] + 0.0, lengths[1] + 1.0]
    assert result["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 0, "reward/function_errors": 0,
                                        "reward/unscored": 0}


MUTATES = """
    SEEN = []

    def grabby(prompts, completions, meta, **kwargs):
        SEEN.append((repr(prompts), repr(meta)))
        for prompt, extra in zip(prompts, meta):
            prompt.append({"role": "assistant", "content": "added"})
            extra["count"] = extra.get("count", 0) + 1
        return [float(len(prompt)) for prompt in prompts]
"""


def test_each_row_gets_its_own_copy_so_a_function_that_changes_it_changes_neither_the_data_nor_a_sibling(tokenizer,
                                                                                                         tmp_path):
    functions = load(tmp_path, MUTATES, "grabby")
    shared_prompt, shared_meta = [{"role": "user", "content": "Q"}], {"k": 1}
    batch = trl_batch(tokenizer, ["a", "b"], [shared_prompt, shared_prompt], {"meta": [shared_meta, shared_meta]})
    scorer = manager(tokenizer, functions)
    first = scorer(batch, return_dict=True)["reward_extra_info"]["score"]
    second = scorer(batch, return_dict=True)["reward_extra_info"]["score"]
    assert first == second == [2.0, 2.0]  # the one user message, plus what the function added to its own copy
    assert shared_prompt == [{"role": "user", "content": "Q"}] and shared_meta == {"k": 1}
    seen = functions.functions[0].__globals__["SEEN"]
    assert seen[0] == seen[1]


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
    # worked by hand: 1*1.0; nothing scored; 1*0.5 + 0.5*2.0; NaN is "not scored" as None is, 0.5*3.0
    assert last_tokens(batch, result["reward_tensor"]) == [1.0, 0.0, 1.5, 1.5]
    assert result["reward_tensor"].sum().item() == 4.0
    assert result["reward_extra_info"]["first"] == [1.0, None, 0.5, None]
    assert result["reward_extra_info"]["second"] == [None, None, 2.0, 3.0]
    assert result["reward_metrics"]["reward/unscored"] == 1 and result["reward_metrics"]["reward/errors"] == 0
    assert "no TRL reward function scored 1 of 4 responses" in capsys.readouterr().err


LOGGING = """
    def logs(completions, log_extra, log_metric, **kwargs):
        log_extra("parsed", [c.upper() for c in completions])
        log_metric("batch_size", len(completions))
        log_metric("batch_size", len(completions) + 2)
        return [0.0] * len(completions)

    def clashes(completions, log_extra, **kwargs):
        log_extra("acc", [1] * len(completions))
        return [0.0] * len(completions)

    def short_column(completions, log_extra, **kwargs):
        log_extra("parsed", [1])
        return [0.0] * len(completions)

    def text_metric(completions, log_metric, **kwargs):
        log_metric("level", "high")
        return [0.0] * len(completions)
"""


def test_log_extra_and_log_metric_become_extra_keys_and_their_misuse_is_named(tokenizer, tmp_path, capsys):
    batch = trl_batch(tokenizer, ["a", "b"], ["p", "q"], {})
    info = manager(tokenizer, load(tmp_path, LOGGING, "logs"))(batch, return_dict=True)["reward_extra_info"]
    assert info["parsed"] == ["A", "B"]
    assert info["batch_size"] == [3.0, 3.0]  # the mean of what the call logged, on every row
    with pytest.raises(RewardError, match="'acc': clashes .* logged it with log_extra, but it is already the name of .* one "
                                          "reinforge records"):
        manager(tokenizer, load(tmp_path, LOGGING, "clashes"))(batch)
    for name, message in (("short_column", "short_column .* called log_extra\\('parsed', ...\\) with 1 values; the batch has 2"),
                          ("text_metric", "text_metric .* called log_metric\\('level', 'high'\\); it takes a finite number")):
        result = manager(tokenizer, load(tmp_path, LOGGING, name))(batch, return_dict=True)
        assert result["reward_metrics"]["reward/errors"] == 2  # its only function failed: every row
        assert any(__import__("re").search(message, line) for line in capsys.readouterr().err.splitlines())


BROKEN = """
    CALLS = []

    def too_few(completions, **kwargs):
        return [1.0]

    def text(completions, **kwargs):
        return ["high"] * len(completions)

    def not_a_list(completions, **kwargs):
        return torch.zeros(len(completions), 2)

    def huge(completions, **kwargs):
        return [10 ** 400] * len(completions)

    def raises(completions, **kwargs):
        raise KeyError("reward bug")

    def raises_every_other_call(completions, **kwargs):
        CALLS.append(1)
        if len(CALLS) % 2 == 0:
            raise ValueError("second call")
        return [3.0] * len(completions)

    def fine(completions, **kwargs):
        return [1.0] * len(completions)

    async def later(completions, **kwargs):
        return [2.0] * len(completions)
"""


def test_a_broken_result_names_the_function(tokenizer, tmp_path):
    batch = trl_batch(tokenizer, ["a", "b"], ["p", "q"], {})
    source = "import torch\n" + textwrap.dedent(BROKEN)
    for name, message in (("too_few", "too_few .* returned 1 rewards for 2 completions"),
                          ("text", "text .* returned str 'high' for completion 0"),
                          ("not_a_list", r"not_a_list .* returned Tensor of shape \(2, 2\); it must return a list"),
                          ("huge", "huge .* returned an int of 1329 bits, too large for a float for completion 0")):
        with pytest.raises(RewardError, match=message):
            manager(tokenizer, load(tmp_path, source, name))(batch)


def test_a_function_that_raises_costs_its_own_rewards_and_when_all_raise_every_row(tokenizer, tmp_path, capsys):
    batch = trl_batch(tokenizer, ["a", "b"], ["p", "q"], {})
    scorer = manager(tokenizer, load(tmp_path, BROKEN, ["raises_every_other_call", "fine"]))
    results = [scorer(batch, return_dict=True) for _ in range(3)]
    assert [r["reward_extra_info"]["score"] for r in results] == [[4.0, 4.0], [1.0, 1.0], [4.0, 4.0]]
    assert [r["reward_metrics"]["reward/function_errors"] for r in results] == [0, 1, 0]
    assert all(r["reward_metrics"]["reward/errors"] == 0 for r in results)
    assert results[1]["reward_extra_info"]["raises_every_other_call"] == [None, None]
    err = capsys.readouterr().err
    assert err.count("the TRL reward function raises_every_other_call failed") == 1 and "ValueError: second call" in err
    alone = manager(tokenizer, load(tmp_path, BROKEN, "raises"))
    result = alone(batch, return_dict=True)
    assert result["reward_tensor"].sum().item() == 0.0 and result["reward_metrics"]["reward/errors"] == 2
    err = capsys.readouterr().err
    assert "in its call for the whole batch; every row scores 0.0" in err and "KeyError: 'reward bug'" in err
    assert alone.failure_summary().startswith("the reward function raises (")  # the user's function, not reinforge's
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


CHECKED = WEIGHTED + """
    def verl(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0

    def anything(**kwargs):
        return [1.0] * len(kwargs["completions"])

    def positional(completions, solution, /, **kwargs):
        return [1.0] * len(completions)

    def score(completions, **kwargs):
        return [1.0] * len(completions)

    def get_penalty(max_len):
        return first
"""


def test_loading_checks_names_weights_kinds_and_signatures(tmp_path):
    for names, weights, message in (
            (["first", "verl"], None, r"verl in .* is taken for a verl reward function .* all be TRL reward functions\. A TRL "
                                      r"reward function is told by a completions, completion_ids or prompts parameter"),
            (["first", "second"], [1.0], r"reward_weights=\[1.0\] must be a list of 2 numbers, one per function"),
            ("verl", [1.0], "reward_weights weighs TRL reward functions; verl in .* is a verl reward function"),
            (["first", "first"], None, r"name=\['first', 'first'\]: first is listed twice"),
            (["first", "score"], None, "score is the name of a value reinforge records itself"),
            ("positional", None, r"positional .* has positional-only parameters \(completions, solution, before '/'\)"),
            (["first", "get_penalty"], None, "get_penalty looks like one of TRL's factories, which return the reward function"),
            ("get_penalty", None, "get_penalty takes neither completions nor completion_ids nor prompts; get_penalty looks like"),
            (["verl"], None, None)):
        if message is None:  # verl's own function, asked for by reward_model.reward_manager=trl
            with pytest.raises(RewardError, match="verl takes solution_str: it is a verl reward function, and reward_model."
                                                  "reward_manager=trl calls TRL's"):
                load(tmp_path, CHECKED, names, manager_name="trl")
            continue
        with pytest.raises(RewardError, match=message):
            load(tmp_path, CHECKED, names, weights=weights)
    assert isinstance(load(tmp_path, CHECKED, "first"), TRLRewardFunctions)
    assert not isinstance(load(tmp_path, CHECKED, "anything"), TRLRewardFunctions)  # **kwargs alone: verl's, unless
    assert isinstance(load(tmp_path, CHECKED, "anything", manager_name="trl"), TRLRewardFunctions)
    config = Config()
    config.custom_reward_function.name = ["first", 3]
    with pytest.raises(ConfigError, match=r"custom_reward_function.name=\['first', 3\] must be a function's name, or a list"):
        finalize(config)


def test_a_verl_function_given_to_the_trl_manager_and_a_trl_one_to_another_manager_are_refused(tokenizer, tmp_path):
    from reinforge.trainer.main import _manager_for

    def verl(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0

    with pytest.raises(ConfigError, match=r"reward_manager=trl calls reward functions written for TRL.*\.verl \(.*\) is not one\."):
        make_reward_manager("trl", tokenizer, verl)
    with pytest.raises(ConfigError, match="reward_manager=trl calls .*; none is named"):
        make_reward_manager("trl", tokenizer, None)
    from reinforge.config.data_schema import DataConfig

    functions = load(tmp_path, WEIGHTED, ["first", "second"])
    data = DataConfig(prompt_key="question", image_key="image")
    assert _manager_for(functions, "naive", data, {}) == ("trl", {"prompt_key": "question", "image_key": "image"})
    with pytest.raises(ConfigError, match=r"reward_manager=dapo: .* names TRL reward functions \(first, second\)"):
        _manager_for(functions, "dapo", data, {})
    with pytest.raises(ConfigError, match="reward_kwargs.prompt_key: the trl reward manager reads .* data.prompt_key"):
        _manager_for(functions, "naive", data, {"prompt_key": "question"})


def test_rows_are_checked_before_training_for_the_columns_functions_take_and_argument_names(tmp_path):
    functions = load(tmp_path, SEEN, ["record", "names_only"])
    rows = [({"prompt": "p", "solution": "1", "level": "easy"}, "a.parquet", 0),
            ({"prompt": "p", "solution": "2"}, "a.parquet", 1)]
    with pytest.raises(DataError, match=r"^a.parquet: row 1: no column 'level', which the TRL reward function names_only "
                                        r"takes .* The row's columns: prompt, solution"):
        check_rows(functions, iter(rows), "prompt")
    check_rows(functions, iter(rows[:1]), "prompt")
    clash = [({"prompt": "p", "solution": "1", "level": "easy", "completions": "reference"}, "b.parquet", 3)]
    with pytest.raises(DataError, match=r"^b.parquet: row 3: the column 'completions' has the name of an argument every TRL"):
        check_rows(functions, iter(clash), "prompt")
    takes_question = load(tmp_path, "def f(completions, question, **kwargs):\n    return [0.0] * len(completions)\n", "f")
    asked = [({"question": "What?", "answer": "1"}, "q.jsonl", 0)]
    with pytest.raises(DataError, match=r"the TRL reward function f takes 'question', a column that does not reach reward "
                                        r"functions \(the prompt column, data.prompt_key, reaches them as prompts"):
        check_rows(takes_question, iter(asked), "question")
    optional = load(tmp_path, "def g(completions, question=None, **kwargs):\n    return [0.0] * len(completions)\n", "g")
    with pytest.raises(DataError, match=r"the TRL reward function g takes 'question', a column that does not reach reward "
                                        r"functions \(the prompt column, data.prompt_key, reaches them as prompts"):
        check_rows(optional, iter(asked), "question")  # with a default it would stay None
    mixed = [({"prompt": "p", "solution": "1", "level": "easy"}, "a.jsonl", 0),
             ({"prompt": CHAT, "solution": "2", "level": "hard"}, "b.jsonl", 4)]
    with pytest.raises(DataError, match=r"^b.jsonl: row 4, column 'prompt': the prompt is chat messages, but in a.jsonl row 0 "
                                        r"it is a string; TRL reward functions take one format per run"):
        check_rows(functions, iter(mixed), "prompt")


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
    with pytest.raises(RewardError, match="the TRL reward function record .* takes 'solution', which the batch's rows do not "
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
