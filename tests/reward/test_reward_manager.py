"""The naive reward manager on real Batches built with the tiny tokenizer."""

import asyncio
import math
import sys

import numpy as np
import pytest
import torch

from reinforge.batch import Batch
from reinforge.errors import ConfigError, DataError, RewardError
from reinforge.reward import make_reward_manager, reward_manager_names


def make_batch(tokenizer, rows, prompt_len=12, response_len=10):
    """rows: (prompt, response, data_source, ground_truth, extra_info); prompts left-padded,
    responses right-padded, as the rollout produces them."""
    pad = tokenizer.pad_token_id
    prompts = torch.full((len(rows), prompt_len), pad)
    responses = torch.full((len(rows), response_len), pad)
    attention_mask = torch.zeros((len(rows), prompt_len + response_len), dtype=torch.long)
    for i, (prompt, response, *_) in enumerate(rows):
        prompt_ids = tokenizer(prompt)["input_ids"][-prompt_len:]
        response_ids = tokenizer(response)["input_ids"][:response_len]
        prompts[i, prompt_len - len(prompt_ids) :] = torch.tensor(prompt_ids)
        attention_mask[i, prompt_len - len(prompt_ids) : prompt_len] = 1
        if response_ids:
            responses[i, : len(response_ids)] = torch.tensor(response_ids)
        attention_mask[i, prompt_len : prompt_len + len(response_ids)] = 1
    return Batch.from_dict(
        {
            "prompts": prompts,
            "responses": responses,
            "attention_mask": attention_mask,
            "data_source": [row[2] for row in rows],
            "reward_model": [{"ground_truth": row[3], "style": "rule"} for row in rows],
            "extra_info": [row[4] for row in rows],
        }
    )


def response_lengths(batch):
    return batch["attention_mask"][:, batch["prompts"].shape[1] :].sum(-1).tolist()


GSM8K_ROWS = [
    ("Q: 1+1?", "#### 2", "openai/gsm8k", "2", {"index": 0}),
    ("Q: 2+2?", "#### 5", "openai/gsm8k", "4", None),
    ("Q: 3+3?", "it is 6", "openai/gsm8k", "6", {"index": 2}),
]


def test_naive_is_registered():
    assert "naive" in reward_manager_names()


def test_reward_lands_on_last_valid_token(tokenizer):
    batch = make_batch(tokenizer, GSM8K_ROWS)
    manager = make_reward_manager("naive", tokenizer, compute_score=None)
    rewards = manager(batch)
    assert rewards.dtype == torch.float32 and rewards.shape == batch["responses"].shape
    expected = torch.zeros_like(rewards)
    expected[0, response_lengths(batch)[0] - 1] = 1.0
    assert torch.equal(rewards, expected)


def test_solution_str_is_the_decoded_valid_response_without_special_tokens(tokenizer):
    rows = [("Q", "#### 7", "d", "7", None), ("Q", "#### 8<|im_end|>", "d", "8", None)]
    seen = []

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        seen.append((data_source, solution_str, ground_truth, extra_info))
        return 1.0

    make_reward_manager("naive", tokenizer, compute_score)(make_batch(tokenizer, rows))
    single_turn = {"num_turns": 2, "rollout_reward_scores": {}}  # verl 0.9 adds them to every row's extra_info
    assert seen == [("d", "#### 7", "7", single_turn), ("d", "#### 8", "8", single_turn)]


def test_dict_scores_become_extra_info_with_none_for_missing_keys(tokenizer):
    batch = make_batch(tokenizer, GSM8K_ROWS)

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if "index" not in extra_info:
            return 0.25
        return {"score": 0.5, "acc": solution_str.endswith(ground_truth), "index": extra_info["index"]}

    result = make_reward_manager("naive", tokenizer, compute_score)(batch, return_dict=True)
    assert result["reward_extra_info"] == {
        "score": [0.5, 0.25, 0.5],
        "acc": [True, 0.25, True],  # a plain number's acc is the number, as verl's reward loop records it
        "index": [0, None, 2],
    }
    assert result["reward_metrics"] == {"reward/errors": 0, "reward/timeouts": 0}
    assert result["reward_tensor"].sum().item() == pytest.approx(1.25)


def test_a_failed_row_gets_no_acc_when_no_other_row_has_one(tokenizer, capsys):
    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if "index" not in extra_info:
            raise ValueError("no extra_info")
        return {"score": 0.5, "index": extra_info["index"]}

    result = make_reward_manager("naive", tokenizer, compute_score)(make_batch(tokenizer, GSM8K_ROWS), return_dict=True)
    assert result["reward_extra_info"] == {"score": [0.5, 0.0, 0.5], "index": [0, None, 2]}
    assert "ValueError: no extra_info" in capsys.readouterr().err


def test_a_failed_row_gets_acc_0_only_where_its_data_source_records_acc(tokenizer, capsys):
    """Rows of two data sources: one returns plain numbers (acc), the other dicts without acc; a failed row of the
    second gets no acc (its source would otherwise get an acc variable of zeros)."""
    rows = [(*row[:2], source, *row[3:]) for row, source in zip(GSM8K_ROWS, ("plain", "dicts", "dicts"), strict=True)]

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if data_source == "plain":
            return 1.0
        if "index" not in extra_info:
            raise ValueError("no extra_info")
        return {"score": 0.5, "pred": "7"}

    result = make_reward_manager("naive", tokenizer, compute_score)(make_batch(tokenizer, rows), return_dict=True)
    assert result["reward_extra_info"]["acc"] == [1.0, None, None]
    assert result["reward_extra_info"]["pred"] == [None, None, "7"]


def test_zero_length_response_gets_no_token_reward_but_is_recorded(tokenizer):
    batch = make_batch(tokenizer, [("Q", "", "d", "x", None), ("Q", "abc", "d", "x", None)])
    assert response_lengths(batch)[0] == 0
    result = make_reward_manager("naive", tokenizer, lambda **kw: 3.0)(batch, return_dict=True)
    assert result["reward_tensor"][0].abs().sum() == 0
    assert result["reward_tensor"][1].sum() == 3.0
    assert result["reward_extra_info"]["score"] == [3.0, 3.0]


def test_async_scorers_run_concurrently(tokenizer):
    batch = make_batch(tokenizer, GSM8K_ROWS)
    started = []

    async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        started.append(solution_str)
        await asyncio.sleep(0.01)
        assert len(started) == 3, "all rows must be in flight before any finishes"
        return 1.0

    result = make_reward_manager("naive", tokenizer, compute_score)(batch, return_dict=True)
    assert result["reward_metrics"]["reward/errors"] == 0
    assert result["reward_extra_info"]["score"] == [1.0, 1.0, 1.0]


def test_async_scorer_inside_a_running_event_loop(tokenizer):
    batch = make_batch(tokenizer, GSM8K_ROWS)

    async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        await asyncio.sleep(0)
        return 2.0

    manager = make_reward_manager("naive", tokenizer, compute_score)

    async def caller():
        return manager(batch)

    rewards = asyncio.run(caller())
    assert rewards.sum().item() == 6.0


def test_failing_rows_score_zero_are_counted_and_first_traceback_printed_once(tokenizer, capsys):
    batch = make_batch(tokenizer, GSM8K_ROWS)

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if "index" not in extra_info or extra_info["index"] == 2:
            raise ZeroDivisionError("scorer bug")
        return 1.0

    manager = make_reward_manager("naive", tokenizer, compute_score)
    result = manager(batch, return_dict=True)
    assert result["reward_metrics"]["reward/errors"] == 2
    assert result["reward_extra_info"]["score"] == [1.0, 0.0, 0.0]
    assert result["reward_extra_info"]["acc"] == [1.0, 0.0, 0.0]  # a failed row's acc is 0, as its score
    assert result["reward_tensor"].sum().item() == 1.0
    err = capsys.readouterr().err
    assert err.count("Traceback") == 1
    assert "row 1" in err and "data_source='openai/gsm8k'" in err and "ZeroDivisionError: scorer bug" in err

    again = manager(batch, return_dict=True)
    assert again["reward_metrics"]["reward/errors"] == 2
    assert capsys.readouterr().err == ""


def test_failing_async_rows_are_isolated(tokenizer, capsys):
    async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if "index" not in extra_info:
            raise RuntimeError("async bug")
        return 1.0

    result = make_reward_manager("naive", tokenizer, compute_score)(make_batch(tokenizer, GSM8K_ROWS), return_dict=True)
    assert result["reward_extra_info"]["score"] == [1.0, 0.0, 1.0]
    assert result["reward_metrics"]["reward/errors"] == 1
    assert "RuntimeError: async bug" in capsys.readouterr().err


@pytest.mark.parametrize("exit_code", [0, 3])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_sys_exit_in_the_reward_function_fails_its_row_only(tokenizer, capsys, exit_code, is_async):
    def exits(extra_info):
        if "index" not in extra_info:  # the second row
            sys.exit(exit_code)
        return 1.0

    async def async_score(data_source, solution_str, ground_truth, extra_info=None):
        return exits(extra_info)

    def score(data_source, solution_str, ground_truth, extra_info=None):
        return exits(extra_info)

    manager = make_reward_manager("naive", tokenizer, async_score if is_async else score)
    result = manager(make_batch(tokenizer, GSM8K_ROWS), return_dict=True)
    assert result["reward_extra_info"]["score"] == [1.0, 0.0, 1.0]
    assert result["reward_metrics"]["reward/errors"] == 1
    assert f"SystemExit: {exit_code}" in capsys.readouterr().err


@pytest.mark.parametrize("bad, said", [(None, "NoneType None"), ("1.0", "str '1.0'"), ({"acc": 1.0}, "a dict without a 'score'"),
                                       ({"score": "1.0"}, "{'score': str '1.0', ...}"), (math.nan, "a non-finite score nan"),
                                       (math.inf, "a non-finite score inf"), ([1.0], "list [1.0]"),
                                       (10**400, "an int of 1329 bits, too large for a float")])
def test_non_scores_are_errors(tokenizer, capsys, bad, said):
    result = make_reward_manager("naive", tokenizer, lambda **kw: bad)(make_batch(tokenizer, GSM8K_ROWS[:1]), True)
    assert result["reward_metrics"]["reward/errors"] == 1
    assert result["reward_tensor"].sum().item() == 0.0
    assert f"the reward function returned {said}" in capsys.readouterr().err


@pytest.mark.parametrize("good", [True, 1, 0.5, torch.tensor(0.5), {"score": 1}, np.bool_(True), np.float32(0.25),
                                  np.int64(2), np.array(0.75), {"score": np.True_}])
def test_accepted_score_types(tokenizer, good):
    rewards = make_reward_manager("naive", tokenizer, lambda **kw: good)(make_batch(tokenizer, GSM8K_ROWS[:1]))
    assert rewards.sum().item() == float(good["score"] if isinstance(good, dict) else good)


def test_reward_fn_key_picks_the_column(tokenizer):
    batch = make_batch(tokenizer, GSM8K_ROWS[:1])
    batch["task"] = ["openai/gsm8k"]
    batch["data_source"] = ["something/else"]
    rewards = make_reward_manager("naive", tokenizer, reward_fn_key="task")(batch)
    assert rewards.sum().item() == 1.0


def test_num_examine_prints_up_to_n_per_data_source(tokenizer, capsys):
    rows = [*GSM8K_ROWS, ("Q: 9?", r"\boxed{9}", "lighteval/MATH", "9", None)]
    make_reward_manager("naive", tokenizer, num_examine=1)(make_batch(tokenizer, rows))
    out = capsys.readouterr().out
    assert out.count("[prompt]") == 2
    assert "[prompt] Q: 1+1?" in out and "[response] #### 2" in out and "[score] 1.0" in out
    assert "[prompt] Q: 9?" in out and "[ground_truth] 9" in out


def test_missing_batch_field_is_a_data_error(tokenizer):
    batch = make_batch(tokenizer, GSM8K_ROWS)
    batch.pop(["reward_model"])
    with pytest.raises(DataError, match="'reward_model'"):
        make_reward_manager("naive", tokenizer)(batch)


def test_row_without_ground_truth_is_a_data_error(tokenizer):
    batch = make_batch(tokenizer, GSM8K_ROWS)
    batch["reward_model"] = [{"ground_truth": "2"}, {"style": "rule"}, {"ground_truth": "6"}]
    batch["extra_info"] = [{"index": 10}, {"index": 11}, {"index": 12}]
    with pytest.raises(DataError, match=r"extra_info.index=11 .*the reward_model column must hold a dict with a 'ground_truth' key"):
        make_reward_manager("naive", tokenizer)(batch)


def test_managers_take_verls_positional_arguments(tokenizer):
    from reinforge.reward.manager import DAPORewardManager, NaiveRewardManager

    def half(data_source, solution_str, ground_truth, extra_info=None):
        return 0.5

    batch = make_batch(tokenizer, GSM8K_ROWS)
    # verl's order: (tokenizer, num_examine, compute_score, reward_fn_key); compute_score None is the default scorer
    assert NaiveRewardManager(tokenizer, 0, half, "data_source")(batch).sum().item() == 1.5
    assert DAPORewardManager(tokenizer, 0, None)(batch).sum().item() == 1.0  # gsm8k: only the first row is right


def test_unknown_manager_and_unknown_manager_kwargs(tokenizer):
    with pytest.raises(ConfigError, match=r"choose one of \['batch', 'dapo', 'gdpo', 'naive', 'naive_gdpo', 'openrlhf', 'prime', 'remote', 'trl'\]"):
        make_reward_manager("fancy", tokenizer)
    with pytest.raises(ConfigError, match=r"\['max_resp_len'\] are not options of the 'naive'"):
        make_reward_manager("naive", tokenizer, max_resp_len=10)


def test_custom_reward_kwargs_reach_the_function_through_the_manager(tokenizer, tmp_path):
    from reinforge.config.schema import Config
    from reinforge.reward import get_compute_score

    path = tmp_path / "reward.py"
    path.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):\n"
        "    return scale * float(solution_str.endswith(ground_truth))\n"
    )
    config = Config()
    config.custom_reward_function.path = str(path)
    config.custom_reward_function.reward_kwargs = {"scale": 4.0}
    manager = make_reward_manager("naive", tokenizer, get_compute_score(config))
    assert manager(make_batch(tokenizer, GSM8K_ROWS)).sum().item() == 8.0


def test_unknown_data_source_stops_the_call_instead_of_zeroing_rewards(tokenizer):
    batch = make_batch(tokenizer, [("Q", "#### 1", "my/dataset", "1", None)])
    with pytest.raises(RewardError, match="custom_reward_function.path="):
        make_reward_manager("naive", tokenizer)(batch)


def test_a_failed_rows_reason_says_why_where_rows_record_reasons(tokenizer):
    # the code scorer's rows carry a reason for the rollout dumps; a row whose scorer raised gets why it raised
    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if extra_info.get("index") == 2:
            raise ValueError("bad test cases")
        return {"score": 1.0, "reason": "passed all 1 test cases"}

    result = make_reward_manager("naive", tokenizer, compute_score)(make_batch(tokenizer, GSM8K_ROWS), return_dict=True)
    reasons = result["reward_extra_info"]["reason"]
    assert reasons[:2] == ["passed all 1 test cases"] * 2
    assert reasons[2].startswith("the reward function failed: ValueError: bad test cases (raised at ")


def test_a_users_reward_manager_that_raises_is_named_with_its_file(tokenizer):
    from reinforge.errors import ConfigError, RewardError
    from reinforge.reward.manager.base import _MANAGERS, RewardManager, is_users, register_reward_manager

    class NeedsKey(RewardManager):
        def __init__(self, tokenizer, num_examine=0, compute_score=None, reward_fn_key="data_source"):
            raise ValueError("need an API key")

    class Explodes(RewardManager):
        def __init__(self, tokenizer, num_examine=0, compute_score=None, reward_fn_key="data_source"):
            super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, timeout_s=None)

        def _compute(self, samples):
            raise RuntimeError("manager exploded")

    try:
        for cls in (NeedsKey, Explodes):
            cls.__module__ = "users_managers"  # as a class from a file of algorithm.custom_modules
            register_reward_manager(cls.__name__.lower())(cls)
        assert is_users("explodes") and not is_users("naive")
        with pytest.raises(RewardError, match=r"the reward manager 'needskey' \(users_managers\..*NeedsKey\) failed: "
                                              r"ValueError: need an API key"):
            make_reward_manager("needskey", tokenizer)
        manager = make_reward_manager("explodes", tokenizer)
        assert isinstance(manager, Explodes)
        with pytest.raises(RewardError, match=r"the reward manager 'explodes' \(users_managers\..*Explodes\), called on a "
                                              r"batch of 3 rows failed: RuntimeError: manager exploded"):
            manager(make_batch(tokenizer, GSM8K_ROWS))
        with pytest.raises(ConfigError, match=r"@register_reward_manager\('verl_style'\) on 'VerlStyle': a reward manager "
                                              r"here subclasses reinforge.reward.manager.RewardManager"):
            @register_reward_manager("verl_style")
            class VerlStyle:
                def __call__(self, data, return_dict=False):
                    return data.batch["responses"]
    finally:
        for name in ("needskey", "explodes", "verl_style"):
            _MANAGERS.pop(name, None)
