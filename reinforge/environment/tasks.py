"""The built-in synthetic task of the quickstart, written as verl-schema parquet files.

Task `reinforge/add_one`: add one to each digit of a 4-digit string, modulo 10. The prompt is a
chat message "Add 1: 3145" and the answer is "4256". The reward (reward/scorers/digits.py) is
the fraction of digits right, position by position, over the longer of answer and response, so
partial skill earns partial reward and a constant answer scores about 0.1. Validation prompts
are digit strings that never occur in training (10,000 exist), so a rising validation reward
means the model learned the rule, not a table.

The quickstart's model is pretrained on a different task, copying ("Copy: 3145" -> "3145"), so
that it can read digits from its prompt (`pretraining_examples`). It never sees "Add" before
RL, and as a copier it starts at chance or below on add-one: what RL adds is the new skill.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from reinforge.training.tiny_model import cache_root

TASK_VERSION = 2


@dataclass(frozen=True)
class DigitTask:
    data_source: str = "reinforge/add_one"
    summary: str = "add one to each of 4 digits"
    length: int = 4
    train_size: int = 4096
    val_size: int = 128
    seed: int = 1234

    def example(self, rng: random.Random) -> tuple[str, str]:
        """(prompt text, answer) of one random example."""
        digits = "".join(str(rng.randrange(10)) for _ in range(self.length))
        return f"Add 1: {digits}", "".join(str((int(d) + 1) % 10) for d in digits)


TASK = DigitTask()


def pretraining_examples(rng: random.Random, count: int, length: int = 4) -> list[tuple[str, str]]:
    """Copy examples ("Copy: 3145" -> "3145") that teach the tiny model to read its prompt."""
    examples = []
    for _ in range(count):
        digits = "".join(str(rng.randrange(10)) for _ in range(length))
        examples.append((f"Copy: {digits}", digits))
    return examples


def task_rows(task: DigitTask = TASK) -> tuple[list[dict], list[dict]]:
    """Train and validation rows in verl's schema; validation prompts never occur in training."""
    rng = random.Random(task.seed)
    val: list[tuple[str, str]] = []
    seen: set[str] = set()
    while len(val) < task.val_size:
        prompt, answer = task.example(rng)
        if prompt not in seen:
            seen.add(prompt)
            val.append((prompt, answer))
    train: list[tuple[str, str]] = []
    while len(train) < task.train_size:
        prompt, answer = task.example(rng)
        if prompt not in seen:
            train.append((prompt, answer))

    def row(prompt: str, answer: str, split: str, index: int) -> dict:
        return {
            "data_source": task.data_source,
            "prompt": [{"role": "user", "content": prompt}],
            "ability": "symbolic",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": index},
        }

    return ([row(p, a, "train", i) for i, (p, a) in enumerate(train)],
            [row(p, a, "test", i) for i, (p, a) in enumerate(val)])


def task_files(task: DigitTask = TASK) -> tuple[Path, Path]:
    folder = cache_root().parent / "data" / f"{task.data_source.replace('/', '_')}-v{TASK_VERSION}"
    return folder / "train.parquet", folder / "test.parquet"


def write_task_files(task: DigitTask = TASK) -> tuple[Path, Path]:
    """Write the task's parquet files once (atomically); later calls reuse them."""
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
