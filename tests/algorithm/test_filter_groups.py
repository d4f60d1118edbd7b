import numpy as np
import pytest
import torch

from reinforge.algorithm import keep_groups, pf_ppo_resample


def test_same_value_drops_groups_without_spread_with_a_tolerance():
    index = ["a", "a", "b", "b", "c", "c", "d"]
    values = [1.0, 0.0, 0.5, 0.5, 0.3, 0.3 + 1e-9, 1.0]  # b: equal; c: equal up to float noise; d: a group of one
    keep = keep_groups(index, values)
    assert keep.tolist() == [True, True, False, False, False, False, False]
    assert keep_groups(index, values, tolerance=0.6).tolist() == [True, True] + [False] * 5  # spread 1.0 > 0.6
    assert not keep_groups(index, values, tolerance=1.0).any()  # spread must exceed the tolerance


def test_band_pass_keeps_groups_whose_mean_is_in_bounds():
    index = np.array([0, 0, 1, 1, 2, 2])
    values = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]  # means 1.0, 0.5, 0.0
    assert keep_groups(index, values, "band_pass", lower_bound=0.1, upper_bound=0.9).tolist() == [False, False, True, True, False, False]
    assert keep_groups(index, values, "band_pass", lower_bound=0.5).tolist() == [True, True, True, True, False, False]
    assert keep_groups(index, values, "band_pass").all()


def test_unknown_filter_type_is_named():
    with pytest.raises(ValueError, match="same_value, band_pass"):
        keep_groups([0], [1.0], "low_pass")


# ------------------------------------------------------------------------------------------ PF-PPO
def draw_fractions(scores, method, weight_pow=2.0, seed=0):
    """The fraction of the redrawn rows that carry each distinct score."""
    picked = scores[pf_ppo_resample(scores, method, weight_pow, torch.Generator().manual_seed(seed))]
    assert len(picked) == len(scores)
    return {value: (picked == value).double().mean().item() for value in scores.unique().tolist()}


def test_pf_ppo_pow_draws_in_proportion_to_the_score_power():
    scores = torch.tensor([0.0, -1.0, 2.0]).repeat(1000)  # |s|^2 = 0, 1, 4: drawn 0, 1/5, 4/5 of the time
    fractions = draw_fractions(scores, "pow")
    assert fractions[0.0] == 0.0
    assert fractions[-1.0] == pytest.approx(0.2, abs=0.03) and fractions[2.0] == pytest.approx(0.8, abs=0.03)
    cubes = draw_fractions(torch.tensor([1.0, 2.0]).repeat(1500), "pow", weight_pow=3.0)  # 1 : 8
    assert cubes[2.0] == pytest.approx(8 / 9, abs=0.03)


def test_pf_ppo_max_min_keeps_only_the_extremes_and_max_random_favours_the_best():
    scores = torch.tensor([0.25, 1.0, 0.5, -0.5, 0.5, 1.0])
    fractions = draw_fractions(scores, "max_min")
    assert fractions[0.25] == fractions[0.5] == 0.0 and fractions[1.0] + fractions[-0.5] == 1.0
    # max_random: 100 rows at the highest score weigh 0.4 each, 900 others 0.1: 40 / 130 of the draws
    best = draw_fractions(torch.cat([torch.ones(100), torch.rand(900, generator=torch.Generator().manual_seed(1))]),
                          "max_random")[1.0]
    assert best == pytest.approx(40 / 130, abs=0.04)


def test_pf_ppo_draw_follows_its_generator():
    scores = torch.rand(64, generator=torch.Generator().manual_seed(2))
    first = pf_ppo_resample(scores, "pow", 2.0, torch.Generator().manual_seed(7))
    assert torch.equal(first, pf_ppo_resample(scores, "pow", 2.0, torch.Generator().manual_seed(7)))
    assert not torch.equal(first, pf_ppo_resample(scores, "pow", 2.0, torch.Generator().manual_seed(8)))
    with pytest.raises(ValueError, match="unknown pf_ppo.reweight_method 'maxmin'; known: pow, max_min, max_random"):
        pf_ppo_resample(scores, "maxmin")


def test_band_pass_bounds_hold_to_within_verls_tolerance():
    """0.7 and 0.1 average to 0.39999999999999997 in floats: on the bound 0.4, as verl's filter counts it (1e-7)."""
    assert keep_groups(["a", "a"], [0.7, 0.1], "band_pass", lower_bound=0.4).tolist() == [True, True]
    assert keep_groups(["a"] * 3, [0.1, 0.2, 0.3], "band_pass", upper_bound=0.2).tolist() == [True] * 3  # 0.20000000000000004
    assert keep_groups(["a", "a"], [0.7, 0.0999], "band_pass", lower_bound=0.4).tolist() == [False, False]
