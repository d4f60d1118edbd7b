"""PromptLoader: seeded, resumable batches of prompts, epoch after epoch.

Without a sampler, the order of epoch `e` is a pure function of `(seed, e)` and the number of
rows at the epoch's start: when shuffling, the (e+1)-th permutation drawn from
`torch.Generator().manual_seed(seed)` (verl's sampler; the (2e+2)-th with `draws_per_epoch=2`, as verl's
loader draws them with worker processes), the dataset order otherwise. With a sampler (`data.sampler`, see
`environment/sampler.py`), the sampler yields the indices, drawn lazily: a batch's indices are
taken from it only when that batch is built, so a curriculum's `update` after a step shapes the
next batch.

The loader's position is `{"epoch", "rows_in_epoch", "batch_size"}` (rows, not batches: a run resumed
with another `data.train_batch_size` goes on after the rows served, without serving them twice),
plus `epoch_size` while an epoch is in progress (the dataset may grow during it), the sampler's `state_dict()` when it has one, and the
dataset's `state_dict()` when it has one (rows a data generator added). A loader restored from
`state_dict()` continues with exactly the batch an uninterrupted run would have seen next.

An epoch's length is fixed when it starts: rows a data generator adds during an epoch are served
from the next one. `len(loader)` is the batches per epoch of the current (or next) epoch.

Iterating yields the remaining batches of the current epoch, then moves to the next epoch, so
`for epoch in ...: for batch in loader:` walks epochs, and breaking out mid-epoch and iterating
again continues where it stopped. Batches are built in-process (no worker processes): prompt
items are pre-tokenized, so collation is cheap next to generation. A batch that collates to a
dict also gets `dataset_index`, the dataset position of each row, which curriculum samplers use
to attribute rewards to rows.

`on_batch_end(batch)` is the trainer's hook after each step: it calls the sampler's
`update(batch)` and the dataset's `on_batch_end(batch)` where they exist (verl calls both from
its fit loop).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from reinforge.environment.dataset import RLDataset
from reinforge.errors import ConfigError, DataError
from reinforge.user_code import user_call


class PromptLoader:
    """Batches of `dataset` items, collated by `collate_fn`, in a seeded per-epoch order or a sampler's.

    Args:
        dataset: a map-style dataset (`len` and `[i]`).
        batch_size: items per batch.
        collate_fn: turns a list of items into a batch (see `reinforge.environment.dataset.collate_fn`).
        shuffle: draw a fresh permutation each epoch; otherwise the dataset order. Unused with a sampler.
        seed: epoch `e` is the (e+1)-th permutation of `torch.Generator().manual_seed(seed)`, or with
            `draws_per_epoch=2` the (2e+2)-th (see `order`).
        drop_last: skip the last, smaller batch of an epoch.
        batch_key: the config key that set `batch_size`, for error messages.
        sampler: yields the dataset indices of each epoch instead (see `environment/sampler.py`).
    """

    def __init__(self, dataset: Any, batch_size: int, collate_fn: Callable[[list[Any]], Any],
                 shuffle: bool, seed: int, drop_last: bool = True, batch_key: str = "data.train_batch_size",
                 sampler: Any = None, draws_per_epoch: int = 1):
        if batch_size <= 0:
            raise ConfigError(f"{batch_key}={batch_size}: the batch size must be positive.")
        rows = len(dataset)
        if drop_last and rows < batch_size:
            raise DataError(
                f"The dataset has {rows} rows but {batch_key} is {batch_size}, so not one full batch can be "
                f"made. Lower {batch_key} or use more data."
            )
        if sampler is not None and drop_last and len(sampler) < batch_size:
            raise DataError(
                f"The sampler (data.sampler) yields {len(sampler)} dataset indices per epoch but {batch_key} is "
                f"{batch_size}, so not one full batch can be made. Lower {batch_key} or make the sampler yield more."
            )
        if rows:
            _probe(dataset, collate_fn)
        self.dataset = dataset
        self.batch_size = batch_size
        self.collate_fn = collate_fn
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_key = batch_key
        self.draws_per_epoch = draws_per_epoch
        self._epoch = 0
        self._served = 0  # rows of the current epoch served so far
        self._epoch_size: int | None = None  # indices of the current epoch, fixed when it starts
        self._indices: Iterator[int] | None = None  # what is left of the current epoch's indices

    @property
    def epoch(self) -> int:
        """The epoch that the next (or current) batch belongs to, counted from 0."""
        return self._epoch

    def __len__(self) -> int:
        """Batches per epoch (of the current epoch once it has started)."""
        return self._batches(self._size_now() if self._epoch_size is None else self._epoch_size)

    def _size_now(self) -> int:
        return len(self.sampler) if self.sampler is not None else len(self.dataset)

    def _batches(self, size: int) -> int:
        return size // self.batch_size if self.drop_last else -(-size // self.batch_size)

    def order(self, epoch: int, rows: int | None = None) -> list[int]:
        """Dataset indices of `epoch` in the order they are served without a sampler (`rows`: the dataset's length).

        Shuffled, epoch e is the last of the first (e+1) x draws_per_epoch permutations of one generator seeded with
        data.seed, as verl's sampler draws them: torchdata's RandomSampler draws one torch.randperm per epoch from the
        generator it was given, and its StatefulDataLoader with worker processes (verl's data.dataloader_num_workers,
        8 by default) builds the sampler's iterator twice at each epoch's start, so there epoch e is the (2e+2)-th
        (draws_per_epoch=2). A seed gives verl's order in every epoch; computed from the seed and the epoch alone, so
        a resumed run needs no generator state."""
        rows = len(self.dataset) if rows is None else rows
        if not self.shuffle:
            return list(range(rows))
        generator = torch.Generator().manual_seed(self.seed)
        for _ in range((epoch + 1) * self.draws_per_epoch - 1):
            torch.randperm(rows, generator=generator)
        return torch.randperm(rows, generator=generator).tolist()

    def __iter__(self) -> Iterator[Any]:
        self._skip_finished_epoch()
        if self._indices is None:
            self._open_epoch()
        while self._batches_left() > 0:
            indices = list(itertools.islice(self._indices, self.batch_size))
            if not indices or (self.drop_last and len(indices) < self.batch_size):  # a sampler that ran out early
                self._served = self._epoch_size
                break
            batch = self.collate_fn([self.dataset[i] for i in indices])
            if isinstance(batch, dict):
                batch["dataset_index"] = indices
            self._served += len(indices)  # counted before the yield: a state saved while the batch is in use resumes after it
            yield batch
        self._skip_finished_epoch()

    def _batches_left(self) -> int:
        """Batches still to come in the current epoch (its rows not served yet, in batches of batch_size)."""
        size = self._size_now() if self._epoch_size is None else self._epoch_size
        return self._batches(max(0, size - self._served))

    def _open_epoch(self) -> None:
        """Fix the epoch's size and start its indices; a restored mid-epoch position skips what was served."""
        served = self._served
        stateful = hasattr(self.sampler, "state_dict")  # a restored stateful sampler continues its epoch by itself
        if hasattr(self.sampler, "set_epoch") and (served == 0 or not stateful):
            self.sampler.set_epoch(self._epoch)
        if self._epoch_size is None:
            self._epoch_size = self._size_now()
        if self.sampler is None:
            self._indices = iter(self.order(self._epoch, self._epoch_size)[served:])
            return
        self._indices = iter(self.sampler)
        if served and not stateful:  # iterated afresh: skip what was served before the checkpoint
            for _ in itertools.islice(self._indices, served):
                pass

    def _skip_finished_epoch(self) -> None:
        if len(self) > 0 and self._batches_left() == 0:
            self._epoch += 1
            self._served = 0
            self._epoch_size = None
            self._indices = None

    def on_batch_end(self, batch: Any) -> None:
        """After a training step: the sampler's `update(batch)`, then the dataset's `on_batch_end(batch)`, where they exist."""
        if callable(getattr(self.sampler, "update", None)):
            self.sampler.update(batch)
        if callable(getattr(self.dataset, "on_batch_end", None)):
            self.dataset.on_batch_end(batch)

    def state_dict(self) -> dict[str, Any]:
        """The position of the loader (epoch, rows served in it, and the batch size they were served in), with the
        sampler's and dataset's state when they have one."""
        state: dict[str, Any] = {"epoch": self._epoch, "rows_in_epoch": self._served, "batch_size": self.batch_size}
        if self._served > 0:
            state["epoch_size"] = self._epoch_size
        for name, part in (("sampler", self.sampler), ("dataset", self.dataset)):
            if callable(getattr(part, "state_dict", None)):
                state[name] = part.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a `state_dict()`: the next batch is the one that followed it.

        The dataset's state is restored first (a grown dataset gets its added rows back), then the sampler's.
        """
        for name, part in (("dataset", self.dataset), ("sampler", self.sampler)):
            if name in state:
                if not callable(getattr(part, "load_state_dict", None)):
                    raise DataError(f"The checkpoint holds a {name} state but this run's {name} ({type(part).__name__}) "
                                    "cannot load one; resume with the data settings of the run that saved it.")
                part.load_state_dict(state[name])
        self._epoch = int(state["epoch"])
        saved_batch = int(state.get("batch_size", self.batch_size))  # loaders before the rows count: the same batch size
        self._served = int(state["rows_in_epoch"]) if "rows_in_epoch" in state else int(state["batch_in_epoch"]) * saved_batch
        self._epoch_size = state.get("epoch_size")
        if self._epoch_size is not None and self._epoch_size > self._size_now() and self._batches_left() > 0:
            raise DataError(f"The checkpoint stopped {self._served} rows into an epoch of {self._epoch_size} training rows, "
                            f"and this run's training data has {self._size_now()}: its order cannot go on. Resume with the "
                            "data of the run that saved it (data.train_files, data.max_samples), or start afresh "
                            "(trainer.resume_mode=disable)")
        if saved_batch != self.batch_size and self._served:
            then = (f"epoch {self._epoch} goes on after the {self._served} rows it has served, in batches of {self.batch_size}"
                    if self._batches_left() else f"the rows epoch {self._epoch} has left after the {self._served} it has "
                    f"served are fewer than a batch, so epoch {self._epoch + 1} begins")
            print(f"reinforge: note: resumed with {self.batch_key}={self.batch_size} (the checkpoint's was {saved_batch}): {then}",
                  flush=True)
        self._indices = None
        self._skip_finished_epoch()


def _probe(dataset: Any, collate_fn: Callable[[list[Any]], Any]) -> None:
    """Collate the first item alone, so that a Dataset whose items cannot be batched fails before any model loads.

    The message names the item's file and row when the dataset knows them (`RLDataset.origin`)."""
    where = f"item 0 of the dataset ({type(dataset).__name__})"
    if isinstance(dataset, RLDataset):
        file, row = dataset.origin(0)
        where = f"item 0 of the dataset ({type(dataset).__name__}: {file}, row {row})"
    with user_call(f"reading and batching {where}", DataError):
        collate_fn([dataset[0]])
