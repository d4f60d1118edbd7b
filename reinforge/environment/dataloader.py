"""PromptLoader: seeded, resumable batches of prompts, epoch after epoch.

The order of epoch `e` is a pure function of `(seed, e)`: a permutation drawn from
`torch.Generator().manual_seed(seed + e)` when shuffling, the dataset order otherwise. The loader's
whole position is therefore two integers, `{"epoch", "batch_in_epoch"}`, and a loader restored
from them continues with exactly the batch an uninterrupted run would have seen next.

Iterating yields the remaining batches of the current epoch, then moves to the next epoch, so
`for epoch in ...: for batch in loader:` walks epochs, and breaking out mid-epoch and iterating
again continues where it stopped. Batches are built in-process (no worker processes): prompt
items are pre-tokenized, so collation is cheap next to generation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from reinforge.errors import ConfigError, DataError


class PromptLoader:
    """Batches of `dataset` items, collated by `collate_fn`, in a seeded per-epoch order.

    Args:
        dataset: a map-style dataset (`len` and `[i]`).
        batch_size: items per batch.
        collate_fn: turns a list of items into a batch (see `reinforge.environment.dataset.collate_fn`).
        shuffle: draw a fresh permutation each epoch; otherwise the dataset order.
        seed: epoch `e` is shuffled by `torch.Generator().manual_seed(seed + e)`.
        drop_last: skip the last, smaller batch of an epoch.
        batch_key: the config key that set `batch_size`, for error messages.
    """

    def __init__(self, dataset: Any, batch_size: int, collate_fn: Callable[[list[Any]], Any],
                 shuffle: bool, seed: int, drop_last: bool = True, batch_key: str = "data.train_batch_size"):
        if batch_size <= 0:
            raise ConfigError(f"{batch_key}={batch_size}: the batch size must be positive.")
        rows = len(dataset)
        if drop_last and rows < batch_size:
            raise DataError(
                f"The dataset has {rows} rows but {batch_key} is {batch_size}, so not one full batch can be "
                f"made. Lower {batch_key} or use more data."
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.collate_fn = collate_fn
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self._epoch = 0
        self._batch_in_epoch = 0

    @property
    def epoch(self) -> int:
        """The epoch that the next (or current) batch belongs to, counted from 0."""
        return self._epoch

    def __len__(self) -> int:
        """Batches per epoch."""
        rows = len(self.dataset)
        return rows // self.batch_size if self.drop_last else -(-rows // self.batch_size)

    def order(self, epoch: int) -> list[int]:
        """Dataset indices of `epoch` in the order they are served."""
        rows = len(self.dataset)
        if not self.shuffle:
            return list(range(rows))
        return torch.randperm(rows, generator=torch.Generator().manual_seed(self.seed + epoch)).tolist()

    def __iter__(self) -> Iterator[Any]:
        self._skip_finished_epoch()
        order = self.order(self._epoch)
        while self._batch_in_epoch < len(self):
            start = self._batch_in_epoch * self.batch_size
            items = [self.dataset[i] for i in order[start:start + self.batch_size]]
            self._batch_in_epoch += 1  # counted before the yield: a state saved while the batch is in use resumes after it
            yield self.collate_fn(items)
        self._skip_finished_epoch()

    def _skip_finished_epoch(self) -> None:
        if len(self) > 0 and self._batch_in_epoch >= len(self):
            self._epoch += 1
            self._batch_in_epoch = 0

    def state_dict(self) -> dict[str, int]:
        """The position of the loader: the epoch and how many of its batches were served."""
        return {"epoch": self._epoch, "batch_in_epoch": self._batch_in_epoch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a `state_dict()`: the next batch is the one that followed it."""
        self._epoch = int(state["epoch"])
        self._batch_in_epoch = int(state["batch_in_epoch"])
        self._skip_finished_epoch()
