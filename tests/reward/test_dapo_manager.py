"""The dapo reward manager: naive scoring plus eos stripping and overlong reward shaping.

Responses are prefixes of "abcdefghij": the tiny tokenizer makes one token per letter, so a
response of L letters has L valid tokens.
"""

import pytest
import torch

from reinforge.errors import ConfigError, RewardError
from reinforge.reward import make_reward_manager, reward_manager_names
from reinforge.reward.manager import DAPORewardManager, NaiveRewardManager
from tests.reward.test_reward_manager import make_batch, response_lengths

LETTERS = "abcdefghij"
BUFFER = {"enable": True, "len": 4, "penalty_factor": 1.0}


def length_batch(tokenizer, lengths, extra_info=None):
    rows = [("Q", LETTERS[:n], "d", "x", extra_info) for n in lengths]
    batch = make_batch(tokenizer, rows, response_len=10)
    assert response_lengths(batch) == list(lengths)
    return batch


def dapo(tokenizer, compute_score=lambda **kw: 1.0, **reward_kwargs):
    return make_reward_manager("dapo", tokenizer, compute_score, **reward_kwargs)


def test_dapo_is_registered_and_reuses_naive():
    assert "dapo" in reward_manager_names()
    assert issubclass(DAPORewardManager, NaiveRewardManager)


def test_make_reward_manager_takes_the_reward_kwargs_dict(tokenizer):
    reward_kwargs = {"max_resp_len": 8, "overlong_buffer_cfg": {"enable": True, "len": 4, "penalty_factor": 1.0, "log": False}}
    manager = make_reward_manager(
        "dapo", tokenizer, lambda **kw: 1.0, reward_fn_key="data_source", num_examine=0, **reward_kwargs
    )
    assert isinstance(manager, DAPORewardManager)
    assert manager.overlong_buffer.max_resp_len == 8 and manager.overlong_buffer.len == 4
    # max_resp_len=8, len=4: expected length 4; L=6 exceeds by 2 -> -2/4 = -0.5
    assert manager(length_batch(tokenizer, [6])).sum().item() == 0.5


def test_linear_penalty_inside_the_buffer(tokenizer):
    # max_resp_len=8, len=4, penalty_factor=1: expected = 4; penalty = min(-(L - 4) / 4, 0)
    lengths = [3, 4, 5, 6, 7, 8]
    manager = dapo(tokenizer, max_resp_len=8, overlong_buffer_cfg=dict(BUFFER, log=True))
    result = manager(length_batch(tokenizer, lengths), return_dict=True)
    assert result["reward_extra_info"]["overlong_reward"] == [0.0, 0.0, -0.25, -0.5, -0.75, -1.0]
    rewards = result["reward_tensor"]
    for row, (n, expected) in enumerate(zip(lengths, [1.0, 1.0, 0.75, 0.5, 0.25, 0.0], strict=True)):
        assert rewards[row, n - 1].item() == expected
    # the task score is kept unshaped in the extra info
    assert result["reward_extra_info"]["score"] == [1.0] * 6


def test_response_past_max_resp_len_keeps_growing_penalty(tokenizer):
    # L=10 > max_resp_len=8: exceed = 10 - 4 = 6 -> -6/4 = -1.5 (verl does not cap it)
    result = dapo(tokenizer, max_resp_len=8, overlong_buffer_cfg=dict(BUFFER, log=True))(
        length_batch(tokenizer, [10]), return_dict=True
    )
    assert result["reward_extra_info"]["overlong_reward"] == [-1.5]
    assert result["reward_tensor"][0, 9].item() == -0.5


def test_penalty_factor_scales_the_penalty(tokenizer):
    # L=6: -2/4 * 0.5 = -0.25; L=8: -4/4 * 0.5 = -0.5; L=4: 0
    manager = dapo(tokenizer, max_resp_len=8, overlong_buffer_cfg=dict(BUFFER, penalty_factor=0.5))
    rewards = manager(length_batch(tokenizer, [6, 8, 4]))
    assert rewards[0, 5].item() == 0.75
    assert rewards[1, 7].item() == 0.5
    assert rewards[2, 3].item() == 1.0


def test_log_fills_overlong_reward_and_overlong(tokenizer):
    manager = dapo(tokenizer, max_resp_len=8, overlong_buffer_cfg=dict(BUFFER, log=True))
    info = manager(length_batch(tokenizer, [4, 5, 8]), return_dict=True)["reward_extra_info"]
    assert info["overlong_reward"] == [0.0, -0.25, -1.0]
    assert info["overlong"] == [False, True, True]
    assert all(type(v) is float for v in info["overlong_reward"])
    assert all(type(v) is bool for v in info["overlong"])


def test_without_log_no_overlong_keys(tokenizer):
    manager = dapo(tokenizer, max_resp_len=8, overlong_buffer_cfg=BUFFER)
    info = manager(length_batch(tokenizer, [8]), return_dict=True)["reward_extra_info"]
    assert info == {"score": [1.0], "acc": [1.0]}  # acc: the plain number, as verl's reward loop records it


@pytest.mark.parametrize(
    "reward_kwargs",
    [
        {},
        {"max_resp_len": 8},
        {"max_resp_len": 8, "overlong_buffer_cfg": None},
        {"max_resp_len": 8, "overlong_buffer_cfg": dict(BUFFER, enable=False, log=True)},
        {"overlong_buffer_cfg": {"enable": False, "len": 4096}},  # disabled: len is not checked
    ],
)
def test_disabled_shaping_leaves_scores_unchanged(tokenizer, reward_kwargs):
    batch = length_batch(tokenizer, [3, 8, 10])
    result = dapo(tokenizer, **reward_kwargs)(batch, return_dict=True)
    naive = make_reward_manager("naive", tokenizer, lambda **kw: 1.0)(batch, return_dict=True)
    assert torch.equal(result["reward_tensor"], naive["reward_tensor"])
    assert result["reward_extra_info"] == naive["reward_extra_info"] == {"score": [1.0, 1.0, 1.0], "acc": [1.0, 1.0, 1.0]}


def test_reward_lands_on_the_last_valid_token(tokenizer):
    manager = dapo(tokenizer, lambda **kw: 2.0, max_resp_len=8, overlong_buffer_cfg=BUFFER)
    batch = length_batch(tokenizer, [2, 6, 0])
    rewards = manager(batch)
    expected = torch.zeros_like(rewards)
    expected[0, 1] = 2.0  # L=2: no penalty
    expected[1, 5] = 1.5  # L=6: 2.0 - 0.5
    # L=0: no token to carry a reward
    assert rewards.dtype == torch.float32 and rewards.shape == batch["responses"].shape
    assert torch.equal(rewards, expected)


def test_dict_scores_keep_their_other_keys(tokenizer):
    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": 1.0, "acc": len(solution_str) < 6}

    manager = dapo(tokenizer, compute_score, max_resp_len=8, overlong_buffer_cfg=dict(BUFFER, log=True))
    result = manager(length_batch(tokenizer, [4, 7]), return_dict=True)
    assert result["reward_extra_info"] == {
        "score": [1.0, 1.0],
        "acc": [True, False],
        "overlong_reward": [0.0, -0.75],
        "overlong": [False, True],
    }


def test_raising_compute_score_is_isolated_and_still_penalised(tokenizer, capsys):
    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if len(solution_str) == 6:
            raise ZeroDivisionError("scorer bug")
        return 1.0

    manager = dapo(tokenizer, compute_score, max_resp_len=8, overlong_buffer_cfg=dict(BUFFER, log=True))
    batch = length_batch(tokenizer, [3, 6, 6])
    result = manager(batch, return_dict=True)
    assert result["reward_metrics"] == {"reward/errors": 2, "reward/timeouts": 0}
    assert result["reward_extra_info"]["score"] == [1.0, 0.0, 0.0]
    # a failed row scores 0, the length penalty still applies: 0 - 0.5
    assert result["reward_tensor"][0, 2].item() == 1.0
    assert result["reward_tensor"][1, 5].item() == -0.5
    err = capsys.readouterr().err
    assert err.count("Traceback") == 1 and "row 1" in err and "ZeroDivisionError: scorer bug" in err
    manager(batch)
    assert capsys.readouterr().err == ""


def test_user_error_propagates(tokenizer):
    batch = make_batch(tokenizer, [("Q", "#### 1", "my/dataset", "1", None)])
    with pytest.raises(RewardError, match="custom_reward_function.path="):
        make_reward_manager("dapo", tokenizer, max_resp_len=8, overlong_buffer_cfg=BUFFER)(batch)


def test_async_scorers_are_awaited(tokenizer):
    async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0

    rewards = dapo(tokenizer, compute_score, max_resp_len=8, overlong_buffer_cfg=BUFFER)(length_batch(tokenizer, [4, 8]))
    assert rewards.sum().item() == 1.0  # 1.0 + (1.0 - 1.0)


class PlainEosTokenizer:
    """The tiny tokenizer with an EOS string that is not a special token."""

    def __init__(self, tokenizer, eos_token):
        self._tokenizer = tokenizer
        self.eos_token = eos_token

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)


def test_plain_eos_string_is_stripped_before_scoring(tokenizer):
    plain = PlainEosTokenizer(tokenizer, "</s>")
    seen = []

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        seen.append(solution_str)
        return 1.0

    rows = [("Q", "#### 7</s>", "d", "7", None), ("Q", "a</s>b", "d", "7", None), ("Q", "#### 8", "d", "8", None)]
    make_reward_manager("dapo", plain, compute_score)(make_batch(plain, rows))
    assert seen == ["#### 7", "a</s>b", "#### 8"]
    # naive keeps it
    seen.clear()
    make_reward_manager("naive", plain, compute_score)(make_batch(plain, rows[:1]))
    assert seen == ["#### 7</s>"]


def test_special_eos_is_skipped_by_decoding(tokenizer):
    seen = []

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        seen.append(solution_str)
        return 1.0

    make_reward_manager("dapo", tokenizer, compute_score)(make_batch(tokenizer, [("Q", "#### 8<|im_end|>", "d", "8", None)]))
    assert seen == ["#### 8"]


@pytest.mark.parametrize(
    ("reward_kwargs", "message"),
    [
        (
            {"overlong_buffer_cfg": {"enable": True, "len": 4}},
            r"reward_model\.reward_kwargs\.overlong_buffer_cfg\.enable=true needs reward_model\.reward_kwargs\.max_resp_len",
        ),
        (
            {"max_resp_len": 8, "overlong_buffer_cfg": {"enable": True}},
            r"overlong_buffer_cfg\.enable=true needs reward_model\.reward_kwargs\.overlong_buffer_cfg\.len",
        ),
        (
            {"max_resp_len": 8, "overlong_buffer_cfg": {"enable": True, "len": 0}},
            r"reward_model\.reward_kwargs\.overlong_buffer_cfg\.len=0 must be an integer with 0 < len < "
            r"reward_model\.reward_kwargs\.max_resp_len=8",
        ),
        (
            {"max_resp_len": 8, "overlong_buffer_cfg": {"enable": True, "len": -2}},
            r"overlong_buffer_cfg\.len=-2 must be",
        ),
        ({"max_resp_len": 8, "overlong_buffer_cfg": {"enable": True, "len": 8}}, r"overlong_buffer_cfg\.len=8 must be"),
        ({"max_resp_len": 8, "overlong_buffer_cfg": {"enable": True, "len": 9}}, r"overlong_buffer_cfg\.len=9 must be"),
        ({"max_resp_len": 8, "overlong_buffer_cfg": {"enable": True, "len": 2.5}}, r"overlong_buffer_cfg\.len=2\.5 must be"),
        (
            {"max_resp_len": 8, "overlong_buffer_cfg": {"enable": True, "len": 4, "lenght": 4}},
            r"reward_model\.reward_kwargs\.overlong_buffer_cfg has unknown keys \['lenght'\]; "
            r"the allowed keys are \['enable', 'len', 'penalty_factor', 'log'\]",
        ),
        (
            {"max_resp_len": 8, "overlong_buffer_cfg": {"enable": "yes", "len": 4}},
            r"overlong_buffer_cfg\.enable='yes' must be true or false",
        ),
        (
            {"max_resp_len": 8, "overlong_buffer_cfg": {"enable": True, "len": 4, "log": 1}},
            r"overlong_buffer_cfg\.log=1 must be true or false",
        ),
        (
            {"max_resp_len": 8, "overlong_buffer_cfg": {"enable": True, "len": 4, "penalty_factor": -1.0}},
            r"overlong_buffer_cfg\.penalty_factor=-1\.0 must be a finite number >= 0",
        ),
        (
            {"max_resp_len": 8, "overlong_buffer_cfg": {"enable": True, "len": 4, "penalty_factor": "1"}},
            r"overlong_buffer_cfg\.penalty_factor='1' must be",
        ),
        ({"max_resp_len": 0}, r"reward_model\.reward_kwargs\.max_resp_len=0 must be a positive integer"),
        ({"max_resp_len": "8"}, r"reward_model\.reward_kwargs\.max_resp_len='8' must be a positive integer"),
        ({"overlong_buffer_cfg": True}, r"reward_model\.reward_kwargs\.overlong_buffer_cfg=True must be a dict"),
    ],
)
def test_config_mistakes_fail_at_construction(tokenizer, reward_kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_reward_manager("dapo", tokenizer, **reward_kwargs)


def test_unknown_top_level_kwarg_lists_the_dapo_options(tokenizer):
    with pytest.raises(
        ConfigError,
        match=r"\['max_len'\] are not options of the 'dapo' reward manager; .*"
        r"\['max_concurrency', 'max_resp_len', 'overlong_buffer_cfg', 'timeout_s'\]",
    ):
        make_reward_manager("dapo", tokenizer, max_len=8)


def test_defaults_penalty_factor_one_and_log_off(tokenizer):
    manager = dapo(tokenizer, max_resp_len=8, overlong_buffer_cfg={"enable": True, "len": 4})
    assert manager.overlong_buffer.penalty_factor == 1.0 and manager.overlong_buffer.log is False
    result = manager(length_batch(tokenizer, [8]), return_dict=True)
    assert result["reward_tensor"][0, 7].item() == 0.0
    assert "overlong_reward" not in result["reward_extra_info"]
