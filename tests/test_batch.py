import numpy as np
import pytest
import torch

from reinforge.batch import Batch


def make(n=4):
    return Batch({"x": torch.arange(n * 2).view(n, 2)}, {"uid": [f"u{i}" for i in range(n)]}, {"temperature": 1.0})


def test_repeat_interleave_and_tile():
    b = make(2)
    inter = b.repeat(3, interleave=True)
    assert inter["uid"].tolist() == ["u0", "u0", "u0", "u1", "u1", "u1"]
    assert inter["x"][:, 0].tolist() == [0, 0, 0, 2, 2, 2]
    tiled = b.repeat(2, interleave=False)
    assert tiled["uid"].tolist() == ["u0", "u1", "u0", "u1"]


def test_pop_union_select_keep_rows_aligned():
    b = make()
    popped = b.pop(["x"])
    assert "x" not in b and popped["x"].shape == (4, 2)
    joined = b.union(popped)
    assert joined.keys() == ["x", "uid"] and joined.meta_info["temperature"] == 1.0
    with pytest.raises(ValueError, match="differs"):
        joined.union(Batch({"x": torch.zeros(4, 2, dtype=torch.long)}))


def test_split_chunk_concat_roundtrip():
    b = make(5)
    parts = b.split(2)
    assert [len(p) for p in parts] == [2, 2, 1]
    back = Batch.concat(parts)
    assert torch.equal(back["x"], b["x"]) and back["uid"].tolist() == b["uid"].tolist()
    with pytest.raises(ValueError, match="equal pieces"):
        b.chunk(2)


def test_index_by_mask_and_order():
    b = make()
    picked = b.index(torch.tensor([True, False, True, False]))
    assert picked["uid"].tolist() == ["u0", "u2"]
    reordered = b.reorder([3, 0])
    assert reordered["x"][:, 0].tolist() == [6, 0]


def test_length_mismatch_is_rejected():
    with pytest.raises(ValueError, match="different lengths"):
        Batch({"x": torch.zeros(3)}, {"uid": ["a", "b"]})


def test_object_arrays_hold_dicts():
    b = Batch.from_dict({"reward_model": [{"ground_truth": "1"}, {"ground_truth": "2"}], "x": torch.zeros(2)})
    assert isinstance(b["reward_model"], np.ndarray) and b["reward_model"][1]["ground_truth"] == "2"
