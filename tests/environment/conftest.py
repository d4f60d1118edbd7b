"""Helpers of the environment tests: verl-schema rows and writers for each data file format."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reinforge.config.data_schema import DataConfig


def _make_rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    """`n` rows in verl's RL schema; row i asks to reverse the digits of i and has extra_info.index 100 + i."""
    return [
        {
            "data_source": "test/reverse",
            "prompt": [{"role": "user", "content": f"Reverse the digits: {' '.join(str(i))}"}],
            "ability": "digits",
            "reward_model": {"ground_truth": str(i)[::-1], "style": "rule"},
            "extra_info": {"index": 100 + i, "split": "train"},
        }
        for i in range(start, start + n)
    ]


def _write_rows(path: Path, rows: list[dict[str, Any]], json_array: bool | None = None) -> Path:
    """Write rows as parquet, a JSON array (.json) or JSON lines (.jsonl, or .json with json_array=False)."""
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".json" and json_array is not False:
        path.write_text(json.dumps(rows))
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def data_config() -> Callable[..., DataConfig]:
    """A DataConfig with the given fields set (max_prompt_length 64 unless given)."""

    def build(**fields: Any) -> DataConfig:
        fields.setdefault("max_prompt_length", 64)
        return DataConfig(**fields)

    return build


@pytest.fixture
def make_rows() -> Callable[..., list[dict[str, Any]]]:
    return _make_rows


@pytest.fixture
def write_rows() -> Callable[..., Path]:
    return _write_rows
