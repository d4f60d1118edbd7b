"""Batch: the one container that flows between the four components.

A Batch holds three things about the same N samples:

- `tensors`: a dict of torch tensors whose first dimension is N (`input_ids`, `attention_mask`,
  `responses`, `response_mask`, `old_log_probs`, `advantages`, ...);
- `non_tensors`: a dict of per-sample Python objects, each a numpy object array of length N
  (`data_source`, `reward_model`, `extra_info`, `uid`, `raw_prompt`, ...);
- `meta_info`: a dict of values about the whole batch (temperature, step, metrics...).

Every operation keeps the rows of the three aligned. Operations return new Batches; the
tensors themselves are shared, not copied, unless the operation must index them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


def _object_array(values: Sequence[Any]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array


@dataclass
class Batch:
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    non_tensors: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.non_tensors = {
            key: value if isinstance(value, np.ndarray) and value.dtype == object else _object_array(value)
            for key, value in self.non_tensors.items()
        }
        self._check_lengths()

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any], meta_info: dict[str, Any] | None = None) -> Batch:
        """Tensors go to `tensors`, everything else (lists, arrays) to `non_tensors`."""
        tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
        non_tensors = {k: v for k, v in data.items() if not isinstance(v, torch.Tensor)}
        return cls(tensors, non_tensors, dict(meta_info or {}))

    def _check_lengths(self) -> None:
        lengths = {k: v.shape[0] for k, v in self.tensors.items()}
        lengths.update({k: len(v) for k, v in self.non_tensors.items()})
        if len(set(lengths.values())) > 1:
            raise ValueError(f"Batch fields have different lengths: {lengths}")

    def __len__(self) -> int:
        for value in self.tensors.values():
            return value.shape[0]
        for value in self.non_tensors.values():
            return len(value)
        return 0

    # ---- access -------------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        if key in self.tensors:
            return self.tensors[key]
        if key in self.non_tensors:
            return self.non_tensors[key]
        raise KeyError(f"Batch has no field {key!r}; it has {sorted(self.keys())}")

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.non_tensors

    def get(self, key: str, default: Any = None) -> Any:
        """The field `key`, or `default` when the Batch has none."""
        return self[key] if key in self else default

    def keys(self) -> list[str]:
        return [*self.tensors, *self.non_tensors]

    def __setitem__(self, key: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            self.tensors[key] = value
        else:
            self.non_tensors[key] = value if isinstance(value, np.ndarray) and value.dtype == object else _object_array(value)
        self._check_lengths()

    # ---- selection ----------------------------------------------------------------------------
    def select(self, keys: Iterable[str] | None = None, meta_info: bool = True) -> Batch:
        """A Batch holding only `keys` (all when None); tensors are shared."""
        keys = set(self.keys() if keys is None else keys)
        return Batch(
            {k: v for k, v in self.tensors.items() if k in keys},
            {k: v for k, v in self.non_tensors.items() if k in keys},
            dict(self.meta_info) if meta_info else {},
        )

    def pop(self, keys: Iterable[str]) -> Batch:
        """Remove `keys` from this Batch and return them as a new Batch (meta_info copied)."""
        keys = list(keys)
        missing = [k for k in keys if k not in self]
        if missing:
            raise KeyError(f"Batch has no field(s) {missing}; it has {sorted(self.keys())}")
        return Batch(
            {k: self.tensors.pop(k) for k in keys if k in self.tensors},
            {k: self.non_tensors.pop(k) for k in keys if k in self.non_tensors},
            dict(self.meta_info),
        )

    def union(self, other: Batch) -> Batch:
        """Fields of both; a field present in both must be equal. meta_info of `other` wins."""
        if len(self) and len(other) and len(self) != len(other):
            raise ValueError(f"cannot union batches of {len(self)} and {len(other)} rows")
        tensors = dict(self.tensors)
        for key, value in other.tensors.items():
            if key in tensors and not torch.equal(tensors[key], value):
                raise ValueError(f"union: field {key!r} differs between the two batches")
            tensors[key] = value
        non_tensors = dict(self.non_tensors)
        for key, value in other.non_tensors.items():
            if key in non_tensors and not _objects_equal(non_tensors[key], value):
                raise ValueError(f"union: field {key!r} differs between the two batches")
            non_tensors[key] = value
        return Batch(tensors, non_tensors, {**self.meta_info, **other.meta_info})

    def index(self, indices: torch.Tensor | np.ndarray | Sequence[int] | slice) -> Batch:
        """Rows picked by an index list, boolean mask or slice, in that order."""
        if isinstance(indices, slice):
            return Batch(
                {k: v[indices] for k, v in self.tensors.items()},
                {k: v[indices] for k, v in self.non_tensors.items()},
                dict(self.meta_info),
            )
        idx = torch.as_tensor(np.asarray(indices))
        if idx.dtype == torch.bool:
            idx = idx.nonzero(as_tuple=True)[0]
        idx_np = idx.cpu().numpy()
        return Batch(
            {k: v[idx.to(v.device)] for k, v in self.tensors.items()},
            {k: v[idx_np] for k, v in self.non_tensors.items()},
            dict(self.meta_info),
        )

    def reorder(self, indices: torch.Tensor | Sequence[int]) -> Batch:
        return self.index(indices)

    def repeat(self, repeat_times: int, interleave: bool = True) -> Batch:
        """Each row `repeat_times` times: interleaved (a a b b) or tiled (a b a b)."""
        n = len(self)
        if interleave:
            order = np.repeat(np.arange(n), repeat_times)
        else:
            order = np.tile(np.arange(n), repeat_times)
        return self.index(order)

    def split(self, size: int) -> list[Batch]:
        """Consecutive pieces of `size` rows (the last may be shorter)."""
        if size <= 0:
            raise ValueError(f"split size must be positive, got {size}")
        return [self.index(slice(start, start + size)) for start in range(0, len(self), size)]

    def chunk(self, chunks: int) -> list[Batch]:
        """`chunks` pieces of equal size; the length must divide evenly."""
        if len(self) % chunks:
            raise ValueError(f"cannot chunk {len(self)} rows into {chunks} equal pieces")
        return self.split(len(self) // chunks)

    @staticmethod
    def concat(batches: Sequence[Batch]) -> Batch:
        """Rows of all batches in order; meta_info of the first."""
        if not batches:
            return Batch()
        first = batches[0]
        tensors = {k: torch.cat([b.tensors[k] for b in batches]) for k in first.tensors}
        non_tensors = {k: np.concatenate([b.non_tensors[k] for b in batches]) for k in first.non_tensors}
        return Batch(tensors, non_tensors, dict(first.meta_info))

    def to(self, device: torch.device | str) -> Batch:
        return Batch({k: v.to(device) for k, v in self.tensors.items()}, dict(self.non_tensors), dict(self.meta_info))

    def __repr__(self) -> str:
        fields = [f"{k}: {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}" for k, v in self.tensors.items()]
        fields += [f"{k}: objects" for k in self.non_tensors]
        return f"Batch({len(self)} rows; " + ", ".join(fields) + ")"


def _objects_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if len(a) != len(b):
        return False
    return all(x is y or x == y for x, y in zip(a, b, strict=True))
