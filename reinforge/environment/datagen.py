"""Data generation during training: a training set that grows after every step (verl's DynamicGenDataset).

`data.datagen.path` / `name` name a subclass of `AbstractDataGenerator`, constructed with the
`data.datagen` section. The training set is then a `DynamicGenDataset`: the files are loaded as
by `RLDataset`, and after every training step the trainer's hook (`PromptLoader.on_batch_end`)
calls `on_batch_end(batch)`, which calls `generator.generate(dataset)` and appends the rows it
returns. They are in the schema of the data files and are rendered, tokenized and length-checked
like them; errors name the generator and the row. Because an epoch's length is fixed when it
starts, new rows are served from the next epoch on.

`generate` may return a list of row dicts, a pyarrow Table, a Hugging Face `datasets.Dataset` or
a pandas DataFrame (verl's generators return a `datasets.Dataset`), or nothing. Rows must be
JSON-serialisable (numpy values are converted): they are kept as their JSON round trip and saved
in the checkpoint's `data.pt`, so that a resumed run has exactly the rows an uninterrupted one
had. A generator with `state_dict()` / `load_state_dict()` has its state saved there as well.

Not generated: validation data (verl likewise only grows the training set), and rows of a user
Dataset class (`data.custom_cls`); such a class can grow itself in its own `on_batch_end(batch)`.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from reinforge.environment.dataset import RLDataset
from reinforge.errors import DataError
from reinforge.user_code import load_user_class, user_call


class AbstractDataGenerator(ABC):
    """Base of data generators (verl's name): `generate(dataset)` returns new training rows."""

    def __init__(self, config: Any):
        self.config = config  # the data.datagen section

    @abstractmethod
    def generate(self, dataset: RLDataset) -> Any:
        """New rows in the data files' schema, to be appended to `dataset`."""


class DynamicGenDataset(RLDataset):
    """An `RLDataset` that appends `generator.generate(self)` after every training step.

    Attributes:
        data_generator: the `data.datagen` generator.
        generated_rows: every row added so far, in order (as JSON round trips).
    """

    def __init__(self, data_files: str | Path | Sequence[str | Path], tokenizer: Any, config: Any,
                 processor: Any = None, max_samples: int = -1):
        super().__init__(data_files, tokenizer, config, processor, max_samples)
        ref = config.datagen
        cls = load_user_class(ref.path, ref.name, "data.datagen.path", "data.datagen.name")
        if not issubclass(cls, AbstractDataGenerator):
            raise DataError(f"data.datagen.path={ref.path!r}: {ref.name!r} is not a subclass of "
                            "reinforge.environment.datagen.AbstractDataGenerator.")
        self.data_generator = cls(ref)
        self.generated_rows: list[dict[str, Any]] = []
        self._rounds = 0

    def on_batch_end(self, batch: Any = None) -> int:
        """Append the rows the generator returns now; returns how many were kept (overlong ones may be dropped)."""
        self._rounds += 1
        where = f"data.datagen ({type(self.data_generator).__name__}.generate, round {self._rounds})"
        with user_call(where, DataError):
            generated = self.data_generator.generate(self)
        rows = _plain_rows(generated, where)
        kept = self.append_rows(rows, where)
        self.generated_rows += rows
        return kept

    def state_dict(self) -> dict[str, Any]:
        """The rows generated so far and the generator's own state (when it has one)."""
        state: dict[str, Any] = {"rows": json.dumps(self.generated_rows), "rounds": self._rounds}
        if callable(getattr(self.data_generator, "state_dict", None)):
            state["generator"] = self.data_generator.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Append the saved rows to a dataset fresh from its files, and restore the generator."""
        if self.generated_rows:
            raise DataError("A DynamicGenDataset's state can only be loaded before it generates rows.")
        self.generated_rows = json.loads(state["rows"])
        self._rounds = int(state["rounds"])
        self.append_rows(self.generated_rows, "data.datagen (rows restored from the checkpoint)")
        if "generator" in state:
            self.data_generator.load_state_dict(state["generator"])


def _plain_rows(result: Any, where: str) -> list[dict[str, Any]]:
    """The generator's result as a list of row dicts made of JSON values."""
    if result is None:
        return []
    if hasattr(result, "to_pylist"):  # pyarrow Table
        result = result.to_pylist()
    elif hasattr(result, "to_list"):  # Hugging Face datasets.Dataset
        result = result.to_list()
    elif hasattr(result, "to_dict") and hasattr(result, "columns"):  # pandas DataFrame
        result = result.to_dict(orient="records")
    rows = list(result)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{where}: row {i} is a {type(row).__name__}, not a dict of columns.")
    try:
        return json.loads(json.dumps(rows, default=_numpy_to_json))
    except (TypeError, ValueError) as err:
        raise DataError(f"{where}: the rows must be JSON-serialisable to be saved in checkpoints ({err}).") from err


def _numpy_to_json(value: Any) -> Any:
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} {value!r} is not JSON-serialisable")
