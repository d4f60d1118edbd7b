import numpy as np
import pytest

from reinforge.algorithm import keep_groups


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
