"""algorithm.rollout_correction on a batch worked out by hand: weights, rejection, the mismatch metrics, bypass loss.

The batch: two responses, the second one token shorter. Per token, p_old / p_rollout is
    response 0: 0.5/0.25 = 2,  0.2/0.4 = 0.5,  0.9/0.9 = 1
    response 1: 0.4/0.4 = 1,   0.3/0.1 = 3,    (padding)
so the sequence ratios (products) are 1 and 3. Every expected number below follows from these.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from reinforge.algorithm.rollout_correction import (
    bypass_policy_loss,
    compute_rollout_correction,
    mismatch_metrics,
    parse_is_threshold,
    parse_rs_thresholds,
    rollout_is_weights,
    rollout_rejection_mask,
)
from reinforge.config import load_config
from reinforge.errors import ConfigError

P_OLD = [[0.5, 0.2, 0.9], [0.4, 0.3, 1.0]]
P_ROLLOUT = [[0.25, 0.4, 0.9], [0.4, 0.1, 1.0]]
OLD = torch.tensor(P_OLD, dtype=torch.float64).log()
ROLLOUT = torch.tensor(P_ROLLOUT, dtype=torch.float64).log()
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
LOG_RATIO = OLD - ROLLOUT


def rows(tensor: torch.Tensor) -> list[list[float]]:
    return [[round(v, 6) for v in row] for row in tensor.tolist()]


def test_token_weights_truncated_and_their_metrics():
    weights, m = rollout_is_weights(LOG_RATIO, MASK, "token", 2.5)
    assert rows(weights) == [[2.0, 0.5, 1.0], [1.0, 2.5, 0.0]]  # 3 truncated to 2.5, padding 0
    applied = [2.0, 0.5, 1.0, 1.0, 2.5]
    mean = sum(applied) / 5  # 1.4
    assert m["rollout_is_mean"] == pytest.approx(1.4)
    assert m["rollout_is_max"] == pytest.approx(2.5) and m["rollout_is_min"] == pytest.approx(0.5)
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 5)  # only the raw 3 is above 2.5
    assert m["rollout_is_ratio_fraction_low"] == 0.0  # nothing below 1/2.5
    assert m["rollout_is_std"] == pytest.approx(math.sqrt(sum((w - mean) ** 2 for w in applied) / 5))
    assert m["rollout_is_eff_sample_size"] == pytest.approx(1 / (sum((w / mean) ** 2 for w in applied) / 5), rel=1e-6)
    assert m["rollout_is_seq_mean"] == pytest.approx((3.5 / 3 + 3.5 / 2) / 2)
    assert m["rollout_is_seq_max_deviation"] == pytest.approx(0.75)  # response 1's mean weight 1.75


def test_sequence_weights_are_the_truncated_product():
    weights, m = rollout_is_weights(LOG_RATIO, MASK, "sequence", 2.5)
    assert rows(weights) == [[1.0, 1.0, 1.0], [2.5, 2.5, 0.0]]  # products 1 and 3 (-> 2.5)
    assert m["rollout_is_max"] == pytest.approx(3.0) and m["rollout_is_min"] == pytest.approx(1.0)  # the raw products
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(0.5)


def test_icepop_zeroes_weights_outside_the_bounds_and_batch_normalize():
    weights, m = rollout_is_weights(LOG_RATIO, MASK, "token", "0.6_2.5")
    assert rows(weights) == [[2.0, 0.0, 1.0], [1.0, 0.0, 0.0]]  # 0.5 < 0.6 and 3 > 2.5 become 0
    assert m["rollout_is_oob_ratio"] == pytest.approx(2 / 5)
    normalized, m = rollout_is_weights(LOG_RATIO, MASK, "token", 2.5, batch_normalize=True)
    assert m["rollout_is_batch_norm_factor"] == pytest.approx(1.4)
    assert rows(normalized) == rows(torch.tensor([[2.0, 0.5, 1.0], [1.0, 2.5, 0.0]]) / 1.4)


def test_icepop_rejecting_every_token_reports_an_effective_sample_size_of_0():
    """Sequence ratios 1 and 3, a band of [1.5, 2]: every weight is 0 (verl divides by zero there)."""
    weights, m = rollout_is_weights(LOG_RATIO, MASK, "sequence", "1.5_2.0")
    assert rows(weights) == [[0.0] * 3, [0.0] * 3]
    assert m["rollout_is_eff_sample_size"] == 0.0 and m["rollout_is_mean"] == 0.0


@pytest.mark.parametrize(("option", "threshold", "kept"), [
    ("token_k1", 2.5, [[1, 1, 1], [1, 0, 0]]),  # ratios in [0.4, 2.5]: the 3 is out
    ("token_k3", 0.3, [[0, 1, 1], [1, 0, 0]]),  # r - 1 - log r: 0.307 (r=2) and 0.901 (r=3) are above 0.3
    ("seq_sum_k1", 2.5, [[1, 1, 1], [0, 0, 0]]),  # products 1 and 3
    ("seq_mean_k1", 1.5, [[1, 1, 1], [0, 0, 0]]),  # geometric means 1 and sqrt(3) = 1.73 > 1.5
    ("seq_max_k2", 0.5, [[1, 1, 1], [0, 0, 0]]),  # max (log r)^2 / 2: 0.240 and 0.603
    ("token_k1,token_k3", "2.5,0.3", [[0, 1, 1], [1, 0, 0]]),  # both must keep a token
    ("binary_kl", 0.15, [[1, 1, 1], [1, 0, 0]]),  # two-way Bernoulli KL: 0.144, 0.105, 0, 0, 0.154 (test_binary_kl)
])
def test_rejection_masks(option, threshold, kept):
    mask, m = rollout_rejection_mask(OLD, ROLLOUT, MASK, option, threshold)
    assert rows(mask) == rows(torch.tensor(kept, dtype=torch.float64) * MASK)
    rejected = sum(1 for r, row in enumerate(kept) for t, k in enumerate(row) if MASK[r, t] and not k)
    assert m["rollout_rs_masked_fraction"] == pytest.approx(rejected / 5)
    assert m["rollout_rs_seq_masked_fraction"] == pytest.approx(sum(0 in row[: int(MASK[r].sum())] for r, row in enumerate(kept)) / 2)


def test_rejection_statistics():
    _, m = rollout_rejection_mask(OLD, ROLLOUT, MASK, "token_k3", 0.3)
    k3 = [2 - 1 - math.log(2), 0.5 - 1 - math.log(0.5), 0.0, 0.0, 3 - 1 - math.log(3)]
    assert m["rollout_rs_token_k3_mean"] == pytest.approx(sum(k3) / 5)
    assert m["rollout_rs_token_k3_max"] == pytest.approx(max(k3)) and m["rollout_rs_token_k3_min"] == pytest.approx(0.0)
    assert m["rollout_rs_token_k3_fraction_high"] == pytest.approx(2 / 5)
    clipped = [min(v, 0.3) for v in k3]
    mean = sum(clipped) / 5
    assert m["rollout_rs_token_k3_std"] == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in clipped) / 5))
    per_response = [sum(k3[:3]) / 3, (k3[3] + k3[4]) / 2]
    assert m["rollout_rs_token_k3_seq_mean"] == pytest.approx(sum(per_response) / 2)
    assert m["rollout_rs_token_k3_seq_max"] == pytest.approx(max(per_response))
    assert m["rollout_rs_token_k3_seq_max_deviation"] == pytest.approx(max(per_response))
    assert m["rollout_rs_token_k3_seq_fraction_high"] == pytest.approx(1 / 2)  # 0.45 > 0.3, 0.17 is not
    assert "rollout_rs_token_k3_seq_fraction_low" not in m  # a lower bound only for k1

    _, m = rollout_rejection_mask(OLD, ROLLOUT, MASK, "seq_sum_k1", 2.5)
    assert m["rollout_rs_seq_sum_k1_seq_min"] == pytest.approx(-math.log(3))  # -sum log r of response 1
    assert m["rollout_rs_seq_sum_k1_seq_fraction_low"] == pytest.approx(1 / 2)  # below log(1/2.5)
    assert m["rollout_rs_seq_sum_k1_seq_max_deviation"] == pytest.approx(math.log(3))


def bernoulli_kl(p: float, q: float) -> float:
    return p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))


def test_binary_kl():
    _, m = rollout_rejection_mask(OLD, ROLLOUT, MASK, "binary_kl", 0.15)
    pairs = [(0.5, 0.25), (0.2, 0.4), (0.9, 0.9), (0.4, 0.4), (0.3, 0.1)]
    two_way = [max(bernoulli_kl(p, q), bernoulli_kl(q, p)) for p, q in pairs]
    assert [round(v, 3) for v in two_way] == [0.144, 0.105, 0.0, 0.0, 0.154]
    assert m["rollout_rs_binary_kl_max"] == pytest.approx(max(two_way), rel=1e-5)
    assert m["rollout_rs_binary_kl_mean"] == pytest.approx(sum(two_way) / 5, rel=1e-5)
    assert m["rollout_rs_binary_kl_fraction_high"] == pytest.approx(1 / 5)


def test_mismatch_metrics():
    m = mismatch_metrics(OLD, ROLLOUT, MASK)
    diffs = [0.25, 0.2, 0.0, 0.0, 0.2]  # |p_old - p_rollout| on the five response tokens
    mean = sum(diffs) / 5
    assert m["training/rollout_probs_diff_mean"] == pytest.approx(0.13)
    assert m["training/rollout_probs_diff_max"] == pytest.approx(0.25)
    assert m["training/rollout_probs_diff_std"] == pytest.approx(math.sqrt(sum((d - mean) ** 2 for d in diffs) / 4))
    old, new = [0.5, 0.2, 0.9, 0.4, 0.3], [0.25, 0.4, 0.9, 0.4, 0.1]
    mo, mn = sum(old) / 5, sum(new) / 5
    cov = sum((a - mo) * (b - mn) for a, b in zip(old, new, strict=True))
    pearson = cov / math.sqrt(sum((a - mo) ** 2 for a in old) * sum((b - mn) ** 2 for b in new))
    assert m["training/rollout_actor_probs_pearson_corr"] == pytest.approx(pearson)
    assert m["rollout_corr/kl"] == pytest.approx(-math.log(3) / 5)  # mean of log p_rollout - log p_old
    assert m["rollout_corr/k3_kl"] == pytest.approx((1 - math.log(2) - 0.5 + math.log(2) + 2 - math.log(3)) / 5)
    assert m["rollout_corr/chi2_token"] == pytest.approx((4 + 0.25 + 1 + 1 + 9) / 5 - 1)
    assert m["rollout_corr/chi2_seq"] == pytest.approx((1 + 9) / 2 - 1)
    assert m["rollout_corr/training_ppl"] == pytest.approx((0.09 ** (-1 / 3) + 0.12 ** (-1 / 2)) / 2)
    assert m["rollout_corr/rollout_ppl"] == pytest.approx((0.09 ** (-1 / 3) + 0.04 ** (-1 / 2)) / 2)
    # mean log p_rollout - mean log p_old per response: 0 (the products are both 0.09), and (log 0.04 - log 0.12) / 2
    assert m["rollout_corr/log_ppl_diff_max"] == pytest.approx(0.0, abs=1e-12)
    assert m["rollout_corr/log_ppl_diff_min"] == pytest.approx(-math.log(3) / 2)
    assert mismatch_metrics(OLD, ROLLOUT, torch.zeros_like(MASK)) == {}


def test_decoupled_correction_and_bypass_loss():
    config = SimpleNamespace(rollout_is="token", rollout_is_threshold=2.5, rollout_is_batch_normalize=False,
                             rollout_rs="token_k1", rollout_rs_threshold=2.5, loss_type="reinforce")
    weights, mask, m = compute_rollout_correction(OLD, ROLLOUT, MASK, config)
    assert rows(weights) == [[2.0, 0.5, 1.0], [1.0, 2.5, 0.0]] and rows(mask) == [[1, 1, 1], [1, 0, 0]]
    assert all(key.startswith("rollout_corr/") for key in m) and "rollout_corr/rollout_rs_masked_fraction" in m

    # bypass, reinforce: -w A log pi over the kept tokens, token-mean over the kept tokens
    log_prob = OLD.clone().requires_grad_(True)
    advantages = torch.tensor([[1.0, -1.0, 2.0], [0.5, 3.0, 7.0]], dtype=torch.float64)
    actor = SimpleNamespace(global_batch_info={})
    loss, metrics = bypass_policy_loss(log_prob, ROLLOUT, advantages, MASK, "token-mean", actor, config)
    expected = -(2.0 * 1.0 * math.log(0.5) + 0.5 * -1.0 * math.log(0.2) + 1.0 * 2.0 * math.log(0.9) + 1.0 * 0.5 * math.log(0.4)) / 4
    assert loss.item() == pytest.approx(expected)
    loss.backward()  # the weights carry no gradient: d loss / d log pi = -w A / 4 on kept tokens
    assert rows(log_prob.grad) == rows(torch.tensor([[-0.5, 0.125, -0.5], [-0.125, 0.0, 0.0]], dtype=torch.float64))


def test_threshold_parsing():
    assert parse_is_threshold(2.0) == (2.0, None) and parse_is_threshold("0.5_5.0") == (5.0, 0.5)
    assert parse_rs_thresholds(["token_k1", "seq_mean_k3"], "0.5_2.0,0.01") == {"token_k1": (0.5, 2.0), "seq_mean_k3": (None, 0.01)}
    assert parse_rs_thresholds(["token_k1"], 4) == {"token_k1": (0.25, 4.0)}


@pytest.mark.parametrize(("override", "named"), [
    ("algorithm.rollout_correction.rollout_is=tokens", "rollout_is='tokens'"),
    ("algorithm.rollout_correction.rollout_is_threshold=-1", "rollout_is_threshold=-1"),
    ("algorithm.rollout_correction.rollout_rs=token_k4", "token_k4 is not one"),
    ("algorithm.rollout_correction.loss_type=ppo", "loss_type='ppo'"),
])
def test_config_errors_name_the_key(override, named):
    extra = ["algorithm.rollout_correction.rollout_is=token"] if "threshold" in override else []
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
        load_config([*extra, override])


def test_config_errors_for_rejection_without_threshold_and_bypass_with_another_loss():
    with pytest.raises(ConfigError, match="rollout_rs_threshold=None"):
        load_config(["algorithm.rollout_correction.rollout_rs=seq_sum_k3"])
    with pytest.raises(ConfigError, match="loss_mode=gspo"):
        load_config(["algorithm.rollout_correction.bypass_mode=true", "actor_rollout_ref.actor.policy_loss.loss_mode=gspo"])


def test_settings_that_do_nothing_are_reported():
    from reinforge.config.unused import unused_settings

    config, keys = load_config(["algorithm.rollout_correction.rollout_is_threshold=3",
                                "algorithm.rollout_correction.loss_type=reinforce",
                                'algorithm.rollout_correction.rollout_rs="token_k1,seq_mean_k3"',  # quoted: not a sweep
                                "algorithm.rollout_correction.rollout_rs_threshold='0.5_2.0,0.01'"])
    assert config.algorithm.rollout_correction.rollout_rs == "token_k1,seq_mean_k3"
    assert unused_settings(config, keys) == [
        "algorithm.rollout_correction.rollout_is_threshold: algorithm.rollout_correction.rollout_is is null (no importance weights)",
        "algorithm.rollout_correction.loss_type: acts only with algorithm.rollout_correction.bypass_mode=true"]
