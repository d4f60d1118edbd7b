"""PromptLoader: seeded per-epoch order, drop_last, and resume that matches an uninterrupted run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reinforge.environment.dataloader import PromptLoader
from reinforge.environment.dataset import RLDataset, collate_fn
from reinforge.errors import DataError


def _loader(rows: int = 10, batch_size: int = 3, shuffle: bool = True, seed: int = 7, drop_last: bool = True,
            draws_per_epoch: int = 1) -> PromptLoader:
    """A loader over the integers 0..rows-1 whose batches are the lists of dataset indices."""
    return PromptLoader(list(range(rows)), batch_size, list, shuffle=shuffle, seed=seed, drop_last=drop_last,
                        draws_per_epoch=draws_per_epoch)


def _epochs(loader: PromptLoader, epochs: int) -> list[list[int]]:
    return [batch for _ in range(epochs) for batch in loader]


def test_without_shuffle_batches_follow_the_dataset_order():
    assert _epochs(_loader(shuffle=False), 1) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert _epochs(_loader(shuffle=False, drop_last=False), 1) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_len_is_batches_per_epoch():
    assert len(_loader(drop_last=True)) == 3
    assert len(_loader(drop_last=False)) == 4


def test_shuffled_order_is_the_seeded_permutation_of_each_epoch():
    batches = _epochs(_loader(seed=7), 2)
    generator = torch.Generator().manual_seed(7)  # one generator, one permutation per epoch, as verl's sampler draws
    for epoch in range(2):
        order = torch.randperm(10, generator=generator).tolist()
        assert batches[3 * epoch: 3 * epoch + 3] == [order[0:3], order[3:6], order[6:9]]
    assert batches[:3] != batches[3:]
    assert _epochs(_loader(seed=7), 2) == batches
    assert _epochs(_loader(seed=8), 1) != batches[:3]


def test_shuffled_order_is_verls_in_every_epoch():
    # verl 0.9.1's sampler (torchdata's RandomSampler on torch.Generator().manual_seed(42)) over 10 rows, as it printed
    # them: each epoch continues the one generator rather than reseeding it
    verl = [[2, 6, 1, 8, 4, 5, 0, 9, 3, 7], [3, 5, 8, 9, 4, 6, 1, 0, 7, 2], [7, 5, 0, 3, 1, 6, 9, 8, 4, 2]]
    loader = _loader(rows=10, batch_size=10, seed=42)
    assert [loader.order(epoch) for epoch in range(3)] == verl
    assert _epochs(loader, 3) == verl
    # with verl's default data.dataloader_num_workers=8, its StatefulDataLoader builds the sampler's iterator twice at each
    # epoch's start (two permutations drawn, the second served): what verl 0.9.1 printed with num_workers=8
    workers = [[3, 5, 8, 9, 4, 6, 1, 0, 7, 2], [9, 2, 5, 1, 4, 3, 7, 0, 8, 6], [3, 6, 8, 2, 9, 5, 7, 0, 4, 1]]
    loader = _loader(rows=10, batch_size=10, seed=42, draws_per_epoch=2)
    assert [loader.order(epoch) for epoch in range(3)] == workers
    assert _epochs(loader, 3) == workers


def test_epoch_advances_after_each_full_pass():
    loader = _loader()
    seen = []
    for _ in range(2):
        for _batch in loader:
            seen.append(loader.epoch)
    assert seen == [0, 0, 0, 1, 1, 1]
    assert loader.epoch == 2 and loader.state_dict() == {"epoch": 2, "rows_in_epoch": 0, "batch_size": 3}


@pytest.mark.parametrize("stop_after", [1, 2, 3, 4, 6, 7])
def test_resume_from_a_state_saved_while_a_batch_is_in_use(stop_after):
    """The trainer saves the state inside its loop body; a new loader from it serves what the old one would have."""
    expected = _epochs(_loader(), 3)
    loader, served, state = _loader(), [], None
    while state is None:
        for batch in loader:
            served.append(batch)
            if len(served) == stop_after:
                state = loader.state_dict()
                break
    resumed = _loader()
    resumed.load_state_dict(state)
    while len(served) < len(expected):
        served += list(resumed)
    assert served == expected


def test_resume_with_another_batch_size_goes_on_after_the_rows_served(capsys):
    order = _loader(rows=64, batch_size=16, shuffle=False).order(0)
    loader = _loader(rows=64, batch_size=16, shuffle=False)
    served = [batch for _, batch in zip(range(3), loader, strict=False)]
    assert served == [order[0:16], order[16:32], order[32:48]]
    smaller = _loader(rows=64, batch_size=8, shuffle=False)
    smaller.load_state_dict(loader.state_dict())
    assert list(smaller) == [order[48:56], order[56:64]]  # the epoch's last 16 rows, none of the first 48 again
    assert smaller.epoch == 1
    assert ("resumed with data.train_batch_size=8 (the checkpoint's was 16): epoch 0 goes on after the 48 rows it has "
            "served, in batches of 8") in capsys.readouterr().out
    larger = _loader(rows=64, batch_size=32, shuffle=False)
    larger.load_state_dict(loader.state_dict())
    assert next(iter(larger)) == order[0:32]  # 16 rows left: no full batch of 32, so the next epoch begins (drop_last)
    assert ("the rows epoch 0 has left after the 48 it has served are fewer than a batch, so epoch 1 begins"
            in capsys.readouterr().out)
    same = _loader(rows=64, batch_size=16, shuffle=False)
    same.load_state_dict({"epoch": 0, "batch_in_epoch": 3, "epoch_size": 64})  # a checkpoint of an earlier version
    assert next(iter(same)) == order[48:64] and "note" not in capsys.readouterr().out


def test_iterating_again_after_a_break_continues_the_epoch():
    expected = _epochs(_loader(), 1)
    loader = _loader()
    first = next(iter(loader))
    assert [first, *loader] == expected


def test_fewer_rows_than_a_batch_with_drop_last_is_an_error():
    with pytest.raises(DataError, match="The dataset has 4 rows but data.train_batch_size is 8"):
        _loader(rows=4, batch_size=8)
    assert _epochs(_loader(rows=4, batch_size=8, shuffle=False, drop_last=False), 1) == [[0, 1, 2, 3]]


def test_an_item_that_cannot_be_batched_is_named_with_its_file_and_row(tmp_path, tokenizer, data_config, make_rows, write_rows):
    path = write_rows(tmp_path / "d.jsonl", make_rows(10))
    dataset = RLDataset(str(path), tokenizer, data_config(shuffle=True, seed=42), max_samples=3)
    first = np.random.default_rng(42).choice(10, size=3, replace=False)[0]  # item 0 is the first row drawn

    def cannot_batch(items):
        raise ValueError("no pad token")

    with pytest.raises(DataError, match=rf"reading and batching item 0 of the dataset \(RLDataset: .*d\.jsonl, row {first}\) "
                                        r"failed: ValueError: no pad token"):
        PromptLoader(dataset, 1, cannot_batch, shuffle=False, seed=0)


def test_batches_of_an_rl_dataset(tmp_path, tokenizer, data_config, make_rows, write_rows):
    dataset = RLDataset(write_rows(tmp_path / "d.parquet", make_rows(5)), tokenizer, data_config())
    loader = PromptLoader(dataset, 2, collate_fn(tokenizer.pad_token_id), shuffle=False, seed=0)
    batches = list(loader)
    assert len(batches) == 2
    assert batches[0]["input_ids"].shape[0] == 2
    assert [b["index"] for b in batches] == [[100, 101], [102, 103]]


def test_resuming_mid_epoch_on_fewer_rows_is_refused_by_name():
    """The training data shrank between the save and the resume: the saved epoch's order cannot go on (it would index
    past the data)."""
    loader = _loader(rows=10)
    next(iter(loader))
    state = loader.state_dict()
    smaller = _loader(rows=5)
    with pytest.raises(DataError, match="stopped 3 rows into an epoch of 10 training rows, and this run's training data "
                                        "has 5: its order cannot go on"):
        smaller.load_state_dict(state)
    _loader(rows=12).load_state_dict(state)  # more rows (a data generator's, say): the saved epoch goes on
    for _ in range(2):  # the epoch's last batch served (3 x 3 of 10 rows, the last one dropped): the next epoch is new
        next(iter(loader))
    ended = _loader(rows=5)
    ended.load_state_dict(loader.state_dict())
    served = [batch for batch in ended]  # epoch 1 of the 5 rows: one batch of 3 of them, in the seed's order
    assert len(served) == 1 and len(set(served[0])) == 3 and max(served[0]) < 5
