import pytest
import torch

from reinforge.batch import Batch
from reinforge.distributed import Dispatch, LocalWorkerGroup, register


class Doubler:
    def __init__(self, offset):
        self.offset, self.calls = offset, []

    @register(Dispatch.DP)
    def double(self, batch):
        self.calls.append(len(batch))
        return Batch({"y": batch["x"] * 2 + self.offset})

    @register(Dispatch.ALL)
    def name(self, prefix):
        return f"{prefix}{self.offset}"

    def private(self):
        return "not registered"


def test_dp_splits_by_rank_and_concatenates_in_order():
    group = LocalWorkerGroup(Doubler, 0, world_size=2)
    out = group.double(Batch({"x": torch.arange(6)}))
    assert out["y"].tolist() == [0, 2, 4, 6, 8, 10]
    assert [w.calls for w in group.workers] == [[3], [3]]


def test_all_broadcasts_and_returns_rank_zero():
    group = LocalWorkerGroup(Doubler, 7)
    assert group.name("rank-") == "rank-7"


def test_unregistered_methods_are_not_callable_through_the_group():
    with pytest.raises(AttributeError, match="not a registered worker method"):
        LocalWorkerGroup(Doubler, 0).private()


def test_dp_pads_an_uneven_batch_with_its_first_rows_and_trims_the_result():
    group = LocalWorkerGroup(Doubler, 0, world_size=2)
    out = group.double(Batch({"x": torch.arange(5)}))  # 6 rows sent: 0 1 2 | 3 4 0
    assert out["y"].tolist() == [0, 2, 4, 6, 8]
    assert [w.calls for w in group.workers] == [[3], [3]]
