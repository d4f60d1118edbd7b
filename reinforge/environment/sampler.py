"""Samplers: the order in which the PromptLoader serves training rows, and curricula that learn from rewards.

Contract (verl's `data.sampler.class_path` / `class_name`). The class is called as
`cls(data_source=dataset, data_config=config.data)`; iterating it yields the dataset indices of
one epoch and `len()` is how many it yields. Any torch `Sampler` fits. Beyond that:

- A curriculum sampler (`AbstractCurriculumSampler`) has `update(batch)`. After every training
  step the trainer hands it that step's scored Batch: `token_level_scores`, the reward's extra
  values as `reward_extra_info/<key>`, and `dataset_index`, the dataset row of every trajectory
  (set by the PromptLoader). The loader draws a batch's indices only when that batch is needed,
  so an update shapes the very next batch. (verl requires `data.dataloader_num_workers=0` for
  this; reinforge always prepares batches in-process.)
- When the sampler has `set_epoch(epoch)`, the loader calls it before each epoch.
- Resume: when the sampler has `state_dict()` / `load_state_dict(state)`, its state is saved in
  the checkpoint's `data.pt` and restored, and it must include the sampler's position in the
  current epoch: after `load_state_dict`, iterating yields the rest of the interrupted epoch. A
  sampler without them is iterated afresh (after `set_epoch` of the interrupted epoch) and the
  indices already served this epoch are skipped, which is exact only when its order depends on
  nothing but its constructor arguments and that epoch.

Built in: `LearnabilitySampler`, a curriculum that draws prompts the model sometimes solves.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import defaultdict, deque
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import Sampler

from reinforge.errors import DataError
from reinforge.user_code import check_keywords, load_user_class, user_call


class AbstractSampler(Sampler[int]):
    """Base of user samplers (verl's name): constructed with the dataset and the `data` config section."""

    @abstractmethod
    def __init__(self, data_source: Sized, data_config: Any):
        ...


class AbstractCurriculumSampler(AbstractSampler):
    """A sampler that learns from training: `update(batch)` is called with every trained batch (verl's name)."""

    @abstractmethod
    def update(self, batch: Any) -> None:
        ...


class LearnabilitySampler(AbstractCurriculumSampler):
    """Draw prompts in proportion to how learnable they are now: most often those solved about half the time.

    A response succeeds when its summed score is at least `success_threshold` (1.0: full marks on
    the built-in 0/1 and -1/1 scorers). After each step, every prompt of the batch gets weight
    `max(min_weight, 4 p (1 - p))`, p its success rate among that batch's responses: 1 at p = 1/2,
    `min_weight` for prompts always or never solved (which GRPO-style advantages learn nothing
    from), so those are still revisited now and then. Prompts not yet seen weigh 1.

    An epoch is `len(dataset)` draws with replacement, seeded by `data.seed`. Draws are made in
    one go for the rest of the epoch and redrawn after each `update`, so every batch follows the
    latest weights. Rows a data generator adds later weigh 1. Subclass to change
    `success_threshold` or `min_weight`.
    """

    success_threshold = 1.0
    min_weight = 0.05

    def __init__(self, data_source: Sized, data_config: Any):
        self.data_source = data_source
        seed = data_config.get("seed")
        self.generator = torch.Generator().manual_seed(0 if seed is None else int(seed))
        self.weights = torch.ones(len(data_source), dtype=torch.float64)  # one per dataset row
        self._pending: deque[int] = deque()  # indices drawn for the rest of the epoch, not yet served
        self._served = 0  # indices served in the current epoch

    def __len__(self) -> int:
        return len(self.data_source)

    def set_epoch(self, epoch: int) -> None:
        """Start a new epoch (the loader calls this at each epoch's start)."""
        self._restart()

    def _restart(self) -> None:
        self._served = 0
        self._pending.clear()

    def __iter__(self) -> Iterator[int]:
        if self._served >= len(self):  # the last epoch was served to the end: this is a new one
            self._restart()
        while self._served < len(self):
            if not self._pending:
                self._pending.extend(torch.multinomial(self._current_weights(), len(self) - self._served,
                                                       replacement=True, generator=self.generator).tolist())
            self._served += 1
            yield self._pending.popleft()

    def _current_weights(self) -> torch.Tensor:
        grown = len(self) - len(self.weights)
        if grown > 0:  # rows added by a data generator
            self.weights = torch.cat([self.weights, torch.ones(grown, dtype=self.weights.dtype)])
        return self.weights

    def update(self, batch: Any) -> None:
        """Re-weigh the prompts of `batch` by their success rate in it, and redraw the rest of the epoch."""
        if "dataset_index" not in batch:
            raise DataError("LearnabilitySampler needs `dataset_index` in the training batch (the dataset row of each "
                            "trajectory, which the PromptLoader adds); batches built another way must carry it.")
        scores = batch["token_level_scores"].sum(-1).tolist()
        outcomes: dict[int, list[bool]] = defaultdict(list)
        for row, score in zip(batch["dataset_index"], scores, strict=True):
            outcomes[int(row)].append(score >= self.success_threshold)
        weights = self._current_weights()
        for row, successes in outcomes.items():
            p = sum(successes) / len(successes)
            weights[row] = max(self.min_weight, 4 * p * (1 - p))
        self._pending.clear()

    def state_dict(self) -> dict[str, Any]:
        """Weights, the random generator, and the position in the current epoch."""
        return {"weights": self._current_weights().clone(), "generator": self.generator.get_state(),
                "pending": list(self._pending), "served": self._served}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.weights = state["weights"].clone()
        self.generator.set_state(state["generator"])
        self._pending = deque(state["pending"])
        self._served = int(state["served"])


def create_rl_sampler(data_config: Any, dataset: Sized) -> Sampler | None:
    """The sampler named by `data.sampler.class_path` / `class_name`, built on `dataset`; None when unset.

    None means the PromptLoader's own order (`data.shuffle`, `data.seed`).
    """
    ref = data_config.sampler
    if not ref.class_path:
        if ref.class_name:
            raise DataError(f"data.sampler.class_name={ref.class_name!r} is set but data.sampler.class_path is not; set "
                            "it to the file or module that defines the class (reinforge.environment.sampler for the built-in).")
        return None
    cls = load_user_class(ref.class_path, ref.class_name, "data.sampler.class_path", "data.sampler.class_name")
    where = f"data.sampler: {ref.class_name}"
    kwargs = {"data_source": dataset, "data_config": data_config}
    check_keywords(cls, kwargs, where, DataError)
    with user_call(f"{where}(data_source=..., data_config=...)", DataError):
        sampler = cls(**kwargs)
    missing = [name for name in ("__iter__", "__len__") if not callable(getattr(sampler, name, None))]
    if missing:
        raise DataError(f"{where} has no {' or '.join(missing)}; a sampler yields the dataset indices of an epoch and "
                        "has a length (subclass torch.utils.data.Sampler or reinforge.environment.sampler.AbstractSampler).")
    return sampler
