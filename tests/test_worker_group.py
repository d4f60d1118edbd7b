import pytest
import torch

from reinforge.batch import Batch
from reinforge.distributed import Dispatch, LocalWorkerGroup, register
from reinforge.distributed.layout import dp_order


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


class Recorder:
    def __init__(self):
        self.rows = []

    @register(Dispatch.DP)
    def take(self, batch):
        self.rows.append(batch["x"].tolist())
        return Batch({"y": batch["x"] * 10})


@pytest.mark.parametrize("world_size,mini", [(2, 4), (2, 8), (4, 8), (2, 2)])
def test_each_ranks_kth_mini_batch_is_its_share_of_the_global_kth(world_size, mini):
    """Rank r's local mini-batch k (mini / world_size rows) is a piece of global mini-batch k: together the
    ranks train on the rows one process would, for any mini-batch size that the world size divides."""
    lengths = torch.randint(1, 50, (16,), generator=torch.Generator().manual_seed(world_size * mini)).tolist()
    for balance in (False, True):
        order = dp_order(lengths, world_size, balance)
        assert sorted(order.tolist()) == list(range(16))
        shares = order.reshape(world_size, -1)
        local = mini // world_size
        for k in range(16 // mini):
            rows = sorted(row for rank in range(world_size) for row in shares[rank, k * local:(k + 1) * local].tolist())
            assert rows == list(range(k * mini, (k + 1) * mini))


def test_balance_gives_the_longest_row_of_each_block_to_the_lightest_rank():
    # blocks of 2: (10, 1), (9, 2), (3, 8); by hand: rank0 takes 10 (tie -> rank 0), rank1 takes 1;
    # block 2: rank1 (1 token) takes 9, rank0 takes 2; block 3: rank1 (10) vs rank0 (12): rank1 takes 8, rank0 takes 3
    order = dp_order([10, 1, 9, 2, 3, 8], 2, balance=True)
    assert order.tolist() == [0, 3, 4, 1, 2, 5]
    assert dp_order([10, 1, 9, 2, 3, 8], 2, balance=False).tolist() == [0, 2, 4, 1, 3, 5]


@pytest.mark.parametrize("balance", [False, True])
def test_dp_results_come_back_in_row_order_and_padding_is_dropped(balance):
    group = LocalWorkerGroup(Recorder, world_size=2)
    group.balance_batch = balance
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [0, 0, 1], [1, 1, 1]])
    out = group.take(Batch({"x": torch.arange(5), "attention_mask": mask}))
    assert out["y"].tolist() == [0, 10, 20, 30, 40]
    seen = [rows for worker in group.workers for rows in worker.rows]
    assert [len(rows) for rows in seen] == [3, 3]  # 5 rows padded to 6 by repeating the last one
    assert sorted(sum(seen, [])) == [0, 1, 2, 3, 4, 4]


def test_dp_pads_an_uneven_batch_with_its_first_rows_and_trims_the_result():
    group = LocalWorkerGroup(Doubler, 0, world_size=2)
    out = group.double(Batch({"x": torch.arange(5)}))  # 6 rows sent
    assert out["y"].tolist() == [0, 2, 4, 6, 8]
    assert [w.calls for w in group.workers] == [[3], [3]]
