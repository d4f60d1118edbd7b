import math

import numpy as np
import pytest
import torch

from reinforge.algorithm import compute_advantage, get_adv_estimator_fn, register_adv_est
from reinforge.algorithm.advantage import ADV_ESTIMATOR_REGISTRY


def outcome(scores, length=3, lengths=None):
    """Token rewards with each score on the last valid token, and the mask."""
    lengths = lengths or [length] * len(scores)
    rewards = torch.zeros(len(scores), length)
    mask = torch.zeros(len(scores), length)
    for row, (score, n) in enumerate(zip(scores, lengths, strict=False)):
        mask[row, :n] = 1
        rewards[row, n - 1] = score
    return rewards, mask


def test_grpo_normalises_within_each_group():
    rewards, mask = outcome([1.0, 0.0, 0.0, 2.0, 4.0], lengths=[3, 2, 1, 3, 3])
    index = np.array(["a", "a", "a", "b", "b"])
    adv, ret = compute_advantage("grpo", token_level_rewards=rewards, response_mask=mask, index=index)
    # group a: mean 1/3, unbiased std sqrt(1/3); group b: mean 3, std sqrt(2)
    std_a, std_b = math.sqrt(1 / 3), math.sqrt(2)
    expected = [(1 - 1 / 3) / (std_a + 1e-6), (0 - 1 / 3) / (std_a + 1e-6), (0 - 1 / 3) / (std_a + 1e-6),
                (2 - 3) / (std_b + 1e-6), (4 - 3) / (std_b + 1e-6)]
    for row, value in enumerate(expected):
        n = int(mask[row].sum())
        assert torch.allclose(adv[row, :n], torch.full((n,), value), atol=1e-5)
        assert torch.all(adv[row, n:] == 0)
    assert torch.equal(adv, ret)


def test_dr_grpo_only_centres():
    rewards, mask = outcome([1.0, 0.0, 0.5, 0.5])
    adv, _ = compute_advantage("grpo", token_level_rewards=rewards, response_mask=mask,
                               index=np.array([0, 0, 1, 1]), norm_adv_by_std_in_grpo=False)
    assert torch.allclose(adv[:, 0], torch.tensor([0.5, -0.5, 0.0, 0.0]))


def test_group_of_one_keeps_raw_score():
    rewards, mask = outcome([0.7])
    adv, _ = compute_advantage("grpo", token_level_rewards=rewards, response_mask=mask, index=np.array(["x"]))
    assert torch.allclose(adv, torch.full((1, 3), 0.7 / (1 + 1e-6)))


def test_registry_lookup_and_user_registration():
    with pytest.raises(ValueError, match="registered: .*grpo"):
        get_adv_estimator_fn("nope")

    @register_adv_est("test_constant")
    def constant(token_level_rewards, response_mask, config=None):
        return response_mask * 2.0, response_mask

    try:
        rewards, mask = outcome([1.0, 0.0])
        adv, _ = compute_advantage("test_constant", token_level_rewards=rewards, response_mask=mask,
                                   index=np.array([0, 0]), gamma=1.0)
        assert torch.equal(adv, mask * 2.0)
    finally:
        ADV_ESTIMATOR_REGISTRY.pop("test_constant")


def test_a_name_cannot_be_taken_twice():
    with pytest.raises(ValueError, match="advantage estimator 'grpo' is already registered"):
        register_adv_est("grpo")(lambda token_level_rewards, response_mask: (response_mask, response_mask))
