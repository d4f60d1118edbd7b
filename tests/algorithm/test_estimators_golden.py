"""Golden numbers for every advantage estimator, worked out from docs/algorithms.md.

Expected values come from hand arithmetic (written next to them) or from the small numpy loops
below, written from the formulas; never from the functions under test.
"""

import math

import numpy as np
import pytest
import torch

from reinforge.algorithm import compute_advantage, get_adv_estimator_fn, register_adv_est
from reinforge.config.algorithm_schema import AlgorithmConfig
from reinforge.errors import ConfigError

EPS = 1e-6
ALL_ESTIMATORS = ["gae", "grpo", "grpo_passk", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
                  "remax", "opo", "gpg", "gdpo"]


# ------------------------------------------------------------------------- independent references
def outcome(scores, lengths, width):
    """Token rewards with each score on the last valid token, and the 0/1 mask (length 0: all masked)."""
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for row, (score, n) in enumerate(zip(scores, lengths, strict=True)):
        mask[row, :n] = 1
        if n:
            rewards[row, n - 1] = score
    return rewards, mask


def np_whiten(x, m):
    """(x - mean) / sqrt(var + 1e-8) over the unmasked entries, Bessel-corrected when n > 1, times the mask."""
    vals = x[m > 0]
    n = vals.size
    mean = vals.mean()
    ss = ((vals - mean) ** 2).sum()
    var = ss / (n - 1) if n > 1 else ss / n
    return (x - mean) / np.sqrt(var + 1e-8) * m


def np_gae(r, v, m, gamma, lam):
    b, t_len = r.shape
    adv = np.zeros_like(r)
    for i in range(b):
        next_v, last_a = 0.0, 0.0
        for t in reversed(range(t_len)):
            delta = r[i, t] + gamma * next_v - v[i, t]
            a_new = delta + gamma * lam * last_a
            next_v = v[i, t] * m[i, t] + (1 - m[i, t]) * next_v
            last_a = a_new * m[i, t] + (1 - m[i, t]) * last_a
            adv[i, t] = last_a
    returns = (adv + v) * m
    return np_whiten(adv, m), returns


def np_rpp_returns(r, m, gamma):
    b, t_len = r.shape
    ret = np.zeros_like(r)
    for i in range(b):
        g = 0.0
        for t in reversed(range(t_len)):
            if m[i, t]:  # a masked token carries g through
                g = r[i, t] + gamma * g
            ret[i, t] = g * m[i, t]
    return ret


def groups_of(index):
    out = {}
    for row, uid in enumerate(index):
        out.setdefault(uid, []).append(row)
    return out


def per_row(adv, mask, values, atol=1e-5):
    """Every unmasked token of row i carries values[i]; masked tokens are exactly 0."""
    assert torch.isfinite(adv).all()
    expected = torch.tensor(values, dtype=adv.dtype).unsqueeze(-1) * mask
    assert torch.allclose(adv, expected, atol=atol), (adv, expected)
    assert torch.all(adv[mask == 0] == 0)


def run(name, **kwargs):
    adv, ret = compute_advantage(name, **kwargs)
    assert adv.shape == kwargs["response_mask"].shape and ret.shape == kwargs["response_mask"].shape
    return adv, ret


# ------------------------------------------------------------------------------------------- gae
def test_gae_by_hand():
    r = torch.tensor([[0.0, 0.0, 1.0]])
    v = torch.tensor([[0.5, 0.2, 0.1]])
    m = torch.ones(1, 3)
    adv, ret = run("gae", token_level_rewards=r, values=v, response_mask=m, gamma=0.9, lam=0.8,
                   index=np.array([0]), config=AlgorithmConfig(gamma=0.9, lam=0.8))
    # t=2: delta = 1 + 0.9*0 - 0.1 = 0.9, A = 0.9
    # t=1: delta = 0 + 0.9*0.1 - 0.2 = -0.11, A = -0.11 + 0.72*0.9 = 0.538
    # t=0: delta = 0 + 0.9*0.2 - 0.5 = -0.32, A = -0.32 + 0.72*0.538 = 0.06736
    raw = np.array([0.06736, 0.538, 0.9])
    assert torch.allclose(ret, torch.tensor([[0.56736, 0.738, 1.0]]), atol=1e-5)
    mean = raw.mean()
    std = math.sqrt(((raw - mean) ** 2).sum() / 2 + 1e-8)
    assert torch.allclose(adv, torch.tensor(np.array([(raw - mean) / std]), dtype=torch.float32), atol=1e-5)


def test_gae_mid_sequence_mask_is_passed_through_by_hand():
    # mask [1, 0, 1]; the reward 7 and value 9 at the masked position must not matter
    r = torch.tensor([[0.0, 7.0, 1.0]])
    v = torch.tensor([[0.5, 9.0, 0.25]])
    m = torch.tensor([[1.0, 0.0, 1.0]])
    adv, ret = run("gae", token_level_rewards=r, values=v, response_mask=m, gamma=1.0, lam=1.0,
                   index=np.array([0]), config=AlgorithmConfig(gamma=1.0, lam=1.0))
    # t=2: delta = 1 - 0.25 = 0.75, A = 0.75; nextV = 0.25, lastA = 0.75
    # t=1 (masked): nextV, lastA unchanged
    # t=0: delta = 0 + 0.25 - 0.5 = -0.25, A = -0.25 + 0.75 = 0.5
    # returns = A + V = [1.0, -, 1.0]; whiten([0.5, 0.75]): mean 0.625, var 2*0.125^2/1 = 0.03125
    assert torch.allclose(ret, torch.tensor([[1.0, 0.0, 1.0]]), atol=1e-6)
    s = math.sqrt(0.03125 + 1e-8)
    assert torch.allclose(adv, torch.tensor([[-0.125 / s, 0.0, 0.125 / s]]), atol=1e-5)


def test_gae_random_with_holes_and_an_all_masked_row():
    rng = np.random.default_rng(0)
    r = rng.normal(size=(4, 6))
    v = rng.normal(size=(4, 6))
    m = np.array([[1, 1, 0, 1, 1, 0],
                  [1, 1, 1, 1, 1, 1],
                  [0, 0, 0, 0, 0, 0],
                  [1, 0, 0, 1, 0, 0]], dtype=np.float64)
    exp_adv, exp_ret = np_gae(r, v, m, 0.95, 0.9)
    adv, ret = run("gae", token_level_rewards=torch.tensor(r), values=torch.tensor(v), response_mask=torch.tensor(m),
                   gamma=0.95, lam=0.9, index=np.arange(4), config=AlgorithmConfig(gamma=0.95, lam=0.9))
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    np.testing.assert_allclose(adv.double().numpy(), exp_adv, atol=1e-5)
    np.testing.assert_allclose(ret.double().numpy(), exp_ret, atol=1e-5)
    assert torch.all(adv[2] == 0) and torch.all(ret[2] == 0)


# ------------------------------------------------------------------------------------------ grpo
def test_grpo_interleaved_groups_by_hand():
    # group a = rows 0, 2, 4 with R = [1, 0, 2]: mean 1, unbiased std = sqrt((0+1+1)/2) = 1
    # group b = rows 1, 3 with R = [3, 5]: mean 4, std = sqrt((1+1)/1) = sqrt(2)
    r, m = outcome([1.0, 3.0, 0.0, 5.0, 2.0], [2, 4, 1, 3, 4], 4)
    adv, _ = run("grpo", token_level_rewards=r, response_mask=m, index=np.array(["a", "b", "a", "b", "a"]))
    s2 = math.sqrt(2)
    per_row(adv, m, [0 / (1 + EPS), -1 / (s2 + EPS), -1 / (1 + EPS), 1 / (s2 + EPS), 1 / (1 + EPS)])


def test_dr_grpo_no_std():
    r, m = outcome([1.0, 3.0, 0.0, 5.0, 2.0], [2, 4, 1, 3, 4], 4)
    adv, _ = run("grpo", token_level_rewards=r, response_mask=m, index=np.array([0, 1, 0, 1, 0]),
                 norm_adv_by_std_in_grpo=False)
    per_row(adv, m, [0.0, -1.0, -1.0, 1.0, 1.0])


def test_grpo_uses_epsilon_kwarg():
    # R = [1, 0]: mean 0.5, std sqrt(0.5); A = +-0.5 / (sqrt(0.5) + 0.5)
    r, m = outcome([1.0, 0.0], [2, 2], 2)
    adv, _ = run("grpo", token_level_rewards=r, response_mask=m, index=np.array([0, 0]), epsilon=0.5)
    a = 0.5 / (math.sqrt(0.5) + 0.5)
    per_row(adv, m, [a, -a])


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_equal_rewards_and_group_of_one(norm):
    # group x: all 2.0 -> 0 (std 0: 0 / eps = 0); group y of one: R (or R / (1 + eps) when normalising)
    r, m = outcome([2.0, 2.0, 2.0, 0.7], [3, 2, 1, 3], 3)
    adv, _ = run("grpo", token_level_rewards=r, response_mask=m, index=np.array(["x", "x", "x", "y"]),
                 norm_adv_by_std_in_grpo=norm)
    per_row(adv, m, [0.0, 0.0, 0.0, 0.7 / (1 + EPS) if norm else 0.7])


# ------------------------------------------------------------------------------------ grpo_passk
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_passk_by_hand(norm):
    # group a: R = [1, 3, 2, 0]: max 3 (row 1), second 2 -> 1; unbiased std: mean 1.5,
    #   squares 0.25 + 2.25 + 0.25 + 2.25 = 5, var 5/3
    # group b: R = [3, 1, 3]: first argmax row 4 gets 3 - 3 = 0
    r, m = outcome([1.0, 3.0, 2.0, 0.0, 3.0, 1.0, 3.0], [3, 2, 3, 1, 3, 3, 2], 3)
    index = np.array(["a", "a", "a", "a", "b", "b", "b"])
    adv, _ = run("grpo_passk", token_level_rewards=r, response_mask=m, index=index, norm_adv_by_std_in_grpo=norm)
    a1 = 1.0 / (math.sqrt(5 / 3) + EPS) if norm else 1.0
    per_row(adv, m, [0.0, a1, 0.0, 0.0, 0.0, 0.0, 0.0])


def test_grpo_passk_group_of_one_raises():
    r, m = outcome([1.0, 0.0, 1.0], [2, 2, 2], 2)
    with pytest.raises(ValueError):
        compute_advantage("grpo_passk", token_level_rewards=r, response_mask=m, index=np.array([0, 0, 1]))


# ------------------------------------------------------------------------------------------ rloo
def test_rloo_by_hand():
    # group a: R = [1, 0, 2]: 1 - (0+2)/2 = 0; 0 - (1+2)/2 = -1.5; 2 - (1+0)/2 = 1.5
    # group b: equal [4, 4] -> 0; group c of one: R = -0.5
    r, m = outcome([1.0, 0.0, 2.0, 4.0, 4.0, -0.5], [1, 3, 2, 3, 3, 2], 3)
    adv, _ = run("rloo", token_level_rewards=r, response_mask=m, index=np.array([7, 7, 7, 8, 8, 9]))
    per_row(adv, m, [0.0, -1.5, 1.5, 0.0, 0.0, -0.5])


# --------------------------------------------------------------------------- reinforce_plus_plus
def test_reinforce_plus_plus_by_hand():
    # gamma 0.5. row 0: r [0, 0, 1], mask [1,1,1] -> G = [0.25, 0.5, 1]
    # row 1: r [0, 2, 0], mask [1,1,0] -> t=2 (padding): G stays 0; t=1: 2; t=0: 1 -> [1, 2, 0]
    r = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = run("reinforce_plus_plus", token_level_rewards=r, response_mask=m, index=np.array([0, 1]),
                   gamma=0.5, config=AlgorithmConfig(gamma=0.5))
    assert torch.allclose(ret, torch.tensor([[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]]), atol=1e-6)
    # whiten [0.25, 0.5, 1, 1, 2]: mean 0.95, sum sq = 0.49+0.2025+0.0025+0.0025+1.1025 = 1.8, var 1.8/4 = 0.45
    s = math.sqrt(0.45 + 1e-8)
    expected = torch.tensor([[-0.7, -0.45, 0.05], [0.05, 1.05, 0.0]]) / s
    assert torch.allclose(adv, expected, atol=1e-5)


def test_reinforce_plus_plus_random_restart_after_eos():
    rng = np.random.default_rng(1)
    r = rng.normal(size=(3, 5))
    m = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=np.float64)
    r[2] = 0.0
    ret_ref = np_rpp_returns(r * m, m, 0.9)
    exp_adv = np_whiten(ret_ref, m)
    adv, ret = run("reinforce_plus_plus", token_level_rewards=torch.tensor(r * m), response_mask=torch.tensor(m),
                   index=np.arange(3), gamma=0.9, config=AlgorithmConfig(gamma=0.9))
    np.testing.assert_allclose(ret.double().numpy() * m, ret_ref * m, atol=1e-5)
    np.testing.assert_allclose(adv.double().numpy(), exp_adv, atol=1e-5)
    assert torch.all(adv[2] == 0) and torch.all(ret[2] == 0)


def test_reinforce_plus_plus_carries_the_return_through_a_tool_span():
    # multi-turn: row 0's middle token is a tool answer (mask 0). gamma 0.5, r [0, 0, 0, 1], mask [1, 0, 1, 1]:
    # t=3: G=1; t=2: 0 + 0.5*1 = 0.5; t=1 masked: G carried (0.5), return 0; t=0: 0 + 0.5*0.5 = 0.25.
    # Restarting at the masked token instead would give t=0 a return of 0: no credit for the first turn.
    # row 1: r [0, 0, 2, 0], mask [1, 1, 1, 0] (trailing padding): [0.5, 1, 2, 0]
    r = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 2.0, 0.0]])
    m = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    adv, ret = run("reinforce_plus_plus", token_level_rewards=r, response_mask=m, index=np.array([0, 1]),
                   config=AlgorithmConfig(gamma=0.5))
    assert torch.allclose(ret, torch.tensor([[0.25, 0.0, 0.5, 1.0], [0.5, 1.0, 2.0, 0.0]]), atol=1e-6)
    # whiten [0.25, 0.5, 1, 0.5, 1, 2]: mean 0.875; squares 0.390625+0.140625+0.015625+0.140625+0.015625+1.265625
    # = 1.96875, unbiased var 1.96875 / 5 = 0.39375
    s = math.sqrt(0.39375 + 1e-8)
    expected = torch.tensor([[-0.625, 0.0, -0.375, 0.125], [-0.375, 0.125, 1.125, 0.0]]) / s
    assert torch.allclose(adv, expected, atol=1e-5)


def test_reinforce_plus_plus_baseline_by_hand():
    # groups: a = rows 0,1 with R [1, 0] -> +0.5, -0.5; b = rows 2,3 with [2, 2] -> 0, 0; c (one) = 3
    # tokens: row0 2x 0.5, row1 3x -0.5, row2 1x 0, row3 2x 0, row4 1x 3 (9 tokens)
    r, m = outcome([1.0, 0.0, 2.0, 2.0, 3.0], [2, 3, 1, 2, 1], 3)
    adv, _ = run("reinforce_plus_plus_baseline", token_level_rewards=r, response_mask=m,
                 index=np.array(["a", "a", "b", "b", "c"]))
    vals = np.array([0.5, 0.5, -0.5, -0.5, -0.5, 0, 0, 0, 3.0])
    mean = vals.mean()  # (1 - 1.5 + 3) / 9 = 2.5/9
    s = math.sqrt(((vals - mean) ** 2).sum() / 8 + 1e-8)
    per_row(adv, m, [(0.5 - mean) / s, (-0.5 - mean) / s, -mean / s, -mean / s, (3.0 - mean) / s])


# ----------------------------------------------------------------------------------------- remax
def test_remax_by_hand():
    # row 0: r [0.5, 0, 1], all valid -> G = [1.5, 1, 1], b = 0.3 -> [1.2, 0.7, 0.7]
    # row 1: r [0, 2, 9] with the 9 masked -> G = [2, 2, 0], b = 1.0 -> [1, 1, 0]
    r = torch.tensor([[0.5, 0.0, 1.0], [0.0, 2.0, 9.0], [0.0, 0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    adv, ret = run("remax", token_level_rewards=r, response_mask=m, reward_baselines=torch.tensor([0.3, 1.0, 5.0]),
                   index=np.arange(3))
    assert torch.allclose(ret, torch.tensor([[1.5, 1.0, 1.0], [2.0, 2.0, 0.0], [0.0, 0.0, 0.0]]), atol=1e-6)
    assert torch.allclose(adv, torch.tensor([[1.2, 0.7, 0.7], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]), atol=1e-6)


# ------------------------------------------------------------------------------------------- opo
def test_opo_by_hand():
    # group a: R [1, 0, 2], L [2, 4, 1]: baseline (2*1 + 4*0 + 1*2) / 7 = 4/7 -> [3/7, -4/7, 10/7]
    # group b equal [1, 1] -> 0; group c of one: R = 0.25
    r, m = outcome([1.0, 0.0, 2.0, 1.0, 1.0, 0.25], [2, 4, 1, 1, 3, 2], 4)
    adv, _ = run("opo", token_level_rewards=r, response_mask=m, index=np.array(["a", "a", "a", "b", "b", "c"]))
    per_row(adv, m, [3 / 7, -4 / 7, 10 / 7, 0.0, 0.0, 0.25])


# ------------------------------------------------------------------------------------------- gpg
def test_gpg_by_hand():
    # scores [1, 0, 0, 2, 0, 0.5], B = 6, nonzero 3 -> alpha 2
    # group a (rows 0-2) mean 1/3: 2*(2/3), 2*(-1/3), 2*(-1/3); group b [2, 0] mean 1: 2, -2
    # group c of one: mean 0 -> 2*0.5 = 1
    r, m = outcome([1.0, 0.0, 0.0, 2.0, 0.0, 0.5], [3, 2, 1, 2, 3, 1], 3)
    adv, _ = run("gpg", token_level_rewards=r, response_mask=m, index=np.array([0, 0, 0, 1, 1, 2]))
    per_row(adv, m, [4 / 3, -2 / 3, -2 / 3, 2.0, -2.0, 1.0])


def test_gpg_all_zero_scores():
    # alpha = 4 / max(0, 1) = 4; all scores 0 -> every advantage 0
    r, m = outcome([0.0, 0.0, 0.0, 0.0], [1, 2, 3, 2], 3)
    adv, _ = run("gpg", token_level_rewards=r, response_mask=m, index=np.array([0, 0, 1, 1]))
    per_row(adv, m, [0.0, 0.0, 0.0, 0.0])


# ----------------------------------------------------------------------------- group estimators
GROUP_RANDOM = ["grpo", "rloo", "opo", "gpg"]


@pytest.mark.parametrize("name", GROUP_RANDOM)
def test_group_estimators_random_against_loops(name):
    rng = np.random.default_rng(2)
    b, width = 9, 5
    scores = np.round(rng.normal(size=b), 3)
    lengths = rng.integers(1, width + 1, size=b)
    index = np.array([2, 0, 1, 0, 2, 1, 0, 3, 2])  # group 3 has one member
    r, m = outcome(scores.tolist(), lengths.tolist(), width)
    expected = np.zeros(b)
    alpha = b / max(np.count_nonzero(scores), 1)
    for _, rows in groups_of(index).items():
        s = scores[rows]
        n = len(rows)
        for k, i in enumerate(rows):
            if name == "grpo":
                mean, std = (s.mean(), s.std(ddof=1)) if n > 1 else (0.0, 1.0)
                expected[i] = (s[k] - mean) / (std + EPS)
            elif name == "rloo":
                expected[i] = s[k] - (s.sum() - s[k]) / (n - 1) if n > 1 else s[k]
            elif name == "opo":
                lens = lengths[rows].astype(float)
                expected[i] = s[k] - (lens * s).sum() / lens.sum() if n > 1 else s[k]
            elif name == "gpg":
                expected[i] = alpha * (s[k] - (s.mean() if n > 1 else 0.0))
    adv, _ = run(name, token_level_rewards=r, response_mask=m, index=index)
    per_row(adv, m, expected.tolist(), atol=1e-4)


# ------------------------------------------------------------------------------------------ gdpo
def test_gdpo_normalises_each_reward_in_its_group_then_whitens_the_weighted_sum():
    index = np.array(["a", "a", "a", "b", "b", "b"])
    lengths = [3, 1, 2, 3, 3, 2]
    fmt, acc = np.array([1.0, 0.0, 1.0, 1.0, 1.0, 0.0]), np.array([0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    r, m = outcome((fmt + acc).tolist(), lengths, 3)  # the score: their sum (GDPO does not use it when given keys)

    def group_normalised(x):  # GRPO within each group of 3: (x - mean) / (unbiased std + eps)
        out = np.zeros_like(x)
        for g in ("a", "b"):
            rows = index == g
            out[rows] = (x[rows] - x[rows].mean()) / (x[rows].std(ddof=1) + EPS)
        return out

    total = 0.3 * group_normalised(fmt) + 0.7 * group_normalised(acc)
    # e.g. group a, fmt [1, 0, 1]: mean 2/3, std sqrt(1/3): [0.577, -1.155, 0.577]
    assert group_normalised(fmt)[:3] == pytest.approx([1 / 3 / math.sqrt(1 / 3), -2 / 3 / math.sqrt(1 / 3), 1 / 3 / math.sqrt(1 / 3)], rel=1e-5)
    mask = m.numpy()
    expected = np_whiten(total[:, None] * mask, mask)  # over response tokens: longer rows weigh more
    config = AlgorithmConfig(gdpo_reward_keys=["format", "accuracy"], gdpo_reward_weights=[0.3, 0.7])
    adv, ret = run("gdpo", token_level_rewards=r, response_mask=m, index=index, config=config,
                   reward_components={"format": fmt.tolist(), "accuracy": acc.tolist(), "other": [9.0] * 6})
    assert torch.allclose(adv, torch.tensor(expected, dtype=adv.dtype), atol=1e-5) and torch.equal(adv, ret)
    config.gdpo_reward_keys = ["format", "missing"]
    with pytest.raises(ConfigError, match=r"algorithm\.gdpo_reward_keys names \['missing'\], which the reward function does "
                                          r"not return \(it returns \['accuracy', 'format', 'other'\]\)"):
        run("gdpo", token_level_rewards=r, response_mask=m, index=index, config=config,
            reward_components={"format": fmt.tolist(), "accuracy": acc.tolist(), "other": [9.0] * 6})


def test_gdpo_leaves_out_the_rewards_a_function_did_not_score_as_trls_normalize_then_sum():
    """None (NaN) values: out of their group's mean and std, 0 in the row's sum; a value alone in its group gives 0; a
    row no reward scored is left out of the whitening and gets 0."""
    index = np.array(["a", "a", "a", "b", "b", "b"])
    nan = math.nan
    fmt, acc = np.array([1.0, nan, 0.0, 1.0, 1.0, 0.0]), np.array([nan, nan, 1.0, 0.0, nan, 1.0])
    r, m = outcome([1.0, 0.0, 1.0, 1.0, 1.0, 1.0], [3, 1, 2, 3, 3, 2], 3)

    def group_normalised(x):  # numpy's nan-functions, group by group
        out = np.zeros_like(x)
        for g in ("a", "b"):
            rows = (index == g) & ~np.isnan(x)
            if rows.sum() > 1:
                out[rows] = (x[rows] - np.nanmean(x[rows])) / (np.nanstd(x[rows], ddof=1) + EPS)
        return out

    total = 0.3 * group_normalised(fmt) + 0.7 * group_normalised(acc)
    assert group_normalised(acc)[:3].tolist() == [0.0, 0.0, 0.0]  # group a: one accuracy scored
    scored = (~np.isnan(fmt) | ~np.isnan(acc)).astype(float)  # row 1: nothing scored
    mask = m.numpy() * scored[:, None]
    expected = np_whiten(total[:, None] * mask, mask)
    config = AlgorithmConfig(gdpo_reward_keys=["format", "accuracy"], gdpo_reward_weights=[0.3, 0.7])
    components = {"format": [None if math.isnan(v) else v for v in fmt], "accuracy": [None if math.isnan(v) else v for v in acc]}
    adv, _ = run("gdpo", token_level_rewards=r, response_mask=m, index=index, config=config, reward_components=components)
    assert not adv.isnan().any() and adv[1].abs().sum() == 0
    assert torch.allclose(adv, torch.tensor(expected, dtype=adv.dtype), atol=1e-5)
    # groups of one (rollout.n=1): a value stands as it is, as in grpo, whether or not another row's value is None
    singles, values = np.arange(4), [0.3, 0.1, 0.2, 0.4]
    r4, m4 = outcome([0.0] * 4, [2, 2, 2, 2], 2)
    config = AlgorithmConfig(gdpo_reward_keys=["a", "b"])
    scored, _ = run("gdpo", token_level_rewards=r4, response_mask=m4, index=singles, config=config,
                    reward_components={"a": values, "b": values})
    one_none, _ = run("gdpo", token_level_rewards=r4, response_mask=m4, index=singles, config=config,
                      reward_components={"a": values, "b": [*values[:3], None]})
    totals = np.array([2 * v for v in values]), np.array([2 * v for v in values[:3]] + [values[3]])
    for adv, total in ((scored, totals[0]), (one_none, totals[1])):
        assert torch.allclose(adv, torch.tensor(np_whiten(total[:, None] * m4.numpy(), m4.numpy()), dtype=adv.dtype), atol=1e-5)


@pytest.mark.parametrize("name", ALL_ESTIMATORS)
def test_all_masked_row_gets_zero_and_no_nan(name):
    r, m = outcome([1.0, 0.0, 0.0, 0.5], [3, 2, 0, 1], 3)
    index = np.array([0, 0, 0, 1]) if name != "grpo_passk" else np.array([0, 0, 0, 0])
    kwargs = dict(token_level_rewards=r, response_mask=m, index=index, gamma=1.0, lam=1.0,
                  values=torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], [1.0, 1.1, 1.2]]),
                  reward_baselines=torch.tensor([0.2, 0.3, 0.4, 0.5]), config=AlgorithmConfig())
    adv, ret = run(name, **kwargs)
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert torch.all(adv[2] == 0) and torch.all(ret[2] == 0)
    assert torch.all(adv[m == 0] == 0) and torch.all(ret[m == 0] == 0)


@pytest.mark.parametrize("name", ["grpo", "rloo", "opo", "gpg", "reinforce_plus_plus_baseline"])
def test_equal_rewards_give_zero_advantage(name):
    r, m = outcome([0.5, 0.5, 0.5, 1.0, 1.0], [1, 2, 3, 3, 2], 3)
    adv, _ = run(name, token_level_rewards=r, response_mask=m, index=np.array(["p", "p", "p", "q", "q"]))
    # gpg: alpha * 0 = 0; rpp baseline: all-zero before whitening -> 0 after
    per_row(adv, m, [0.0] * 5)


# -------------------------------------------------------------------------------------- registry
def test_every_estimator_is_registered_and_unknown_lists_them():
    for name in ALL_ESTIMATORS:
        assert callable(get_adv_estimator_fn(name))
    with pytest.raises(ValueError) as err:
        get_adv_estimator_fn("nope")
    for name in ALL_ESTIMATORS:
        assert name in str(err.value)


def test_compute_advantage_passes_only_accepted_kwargs():
    seen = {}

    @register_adv_est("_golden_probe_estimator")
    def probe(token_level_rewards, response_mask, index):
        seen["index"] = index
        return response_mask * 3.0, response_mask

    try:
        r, m = outcome([1.0, 0.0], [2, 1], 2)
        adv, ret = compute_advantage("_golden_probe_estimator", token_level_rewards=r, response_mask=m,
                                     index=np.array([5, 5]), values=torch.zeros(2, 2), gamma=0.9, lam=0.8,
                                     reward_baselines=torch.zeros(2), epsilon=1e-6, norm_adv_by_std_in_grpo=True,
                                     config=AlgorithmConfig())
        assert torch.equal(adv, m * 3.0) and torch.equal(ret, m)
        assert list(seen["index"]) == [5, 5]
    finally:
        from reinforge.algorithm.advantage import ADV_ESTIMATOR_REGISTRY

        ADV_ESTIMATOR_REGISTRY.pop("_golden_probe_estimator", None)
