"""The built-in synthetic task of the quickstart, written as verl-schema parquet files.

Task: reverse a short string of digits. The prompt is a chat message such as
"Reverse the digits: 3 1 4 5"; the answer is "5 4 1 3". The reward (reward/scorers/digits.py) is the
fraction of the expected digits the response gets right position by position, so it rises as the policy learns
and a constant answer scores about 0.1 (one digit in ten by chance). Validation prompts are
digit strings that never occur in training, so a rising validation reward means the model
learned to reverse, not to recall.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from reinforge.training.tiny_model import cache_root

TASK_VERSION = 1


@dataclass(frozen=True)
class DigitTask:
    data_source: str = "reinforge/reverse_digits"
    summary: str = "reverse 4 digits"
    length: int = 4
    train_size: int = 4096
    val_size: int = 128
    seed: int = 1234

    def prompt(self, digits: list[int]) -> str:
        return "Reverse the digits: " + " ".join(map(str, digits))

    def answer(self, digits: list[int]) -> str:
        return " ".join(map(str, reversed(digits)))


TASK = DigitTask()


def task_rows(task: DigitTask = TASK) -> tuple[list[dict], list[dict]]:
    """Train and validation rows in verl's schema; validation digit strings never occur in training."""
    rng = random.Random(task.seed)
    seen: set[tuple[int, ...]] = set()
    examples = []
    while len(examples) < task.train_size + task.val_size:
        digits = tuple(rng.randrange(10) for _ in range(task.length))
        if digits not in seen:
            seen.add(digits)
            examples.append(list(digits))

    def row(digits: list[int], split: str, index: int) -> dict:
        return {
            "data_source": task.data_source,
            "prompt": [{"role": "user", "content": task.prompt(digits)}],
            "ability": "symbolic",
            "reward_model": {"style": "rule", "ground_truth": task.answer(digits)},
            "extra_info": {"split": split, "index": index},
        }

    val = [row(d, "test", i) for i, d in enumerate(examples[: task.val_size])]
    train = [row(d, "train", i) for i, d in enumerate(examples[task.val_size:])]
    return train, val


def task_files(task: DigitTask = TASK) -> tuple[Path, Path]:
    folder = cache_root().parent / "data" / f"{task.data_source.replace('/', '_')}-v{TASK_VERSION}"
    return folder / "train.parquet", folder / "test.parquet"


def write_task_files(task: DigitTask = TASK) -> tuple[Path, Path]:
    """Write the task's parquet files once (atomically); later calls reuse them."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    train_path, val_path = task_files(task)
    if train_path.exists() and val_path.exists():
        return train_path, val_path
    train_path.parent.mkdir(parents=True, exist_ok=True)
    for path, rows in zip((train_path, val_path), task_rows(task), strict=True):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        os.replace(tmp, path)
    return train_path, val_path
