"""MATH (Hendrycks et al., competition mathematics) as verl-schema RL data, like verl's `math_dataset.py`.

Input rows have `problem` and `solution` (and usually `level`, `type`), as in the original tree
of JSON files (`train/<subject>/<n>.json`, `test/...`), the hub's DigitalLearningGmbH/MATH-lighteval
parquet files, or JSON lines / parquet exports of either. Output rows:

- `data_source`: "DigitalLearningGmbH/MATH-lighteval" (verl's current name; the built-in MATH scorer);
- `prompt`: one user message, the problem + " " + INSTRUCTION;
- `ability`: "math";
- `reward_model`: `{"style": "rule", "ground_truth": <the content of the solution's last \\boxed{}>}`;
- `extra_info`: `{"split", "index" (position in the raw split)}`;
- `level` and `type`, when the input has them: verl's `.map` keeps the raw columns it does not use, so a
  curriculum or filter by difficulty finds them where verl's files have them.

A row whose solution has no `\\boxed{}` (or `\\fbox{}`) answer is dropped and counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reinforge.environment.preprocess.splits import HubDataset, preprocess_splits
from reinforge.reward.scorers.math import last_boxed_answer

DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
HUB = HubDataset(DATA_SOURCE, "default", "data")  # the repository also has a folder per subject (algebra/, ...): the same rows again
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
REQUIRED_COLUMNS = ("problem", "solution")
KEPT_COLUMNS = ("level", "type")  # raw columns verl's script leaves in its rows


def make_row(raw: dict[str, Any], split: str, index: int) -> dict[str, Any] | None:
    """The verl-schema row of one MATH problem, or None when its solution has no boxed answer."""
    ground_truth = last_boxed_answer(str(raw["solution"]))
    if ground_truth is None:
        return None
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{raw['problem']} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index},
        **{key: raw[key] for key in KEPT_COLUMNS if key in raw},
    }


def preprocess(inputs: list[str] | None, local_dir: str | Path, max_train: int | None = None,
               max_test: int | None = None) -> dict[str, Path]:
    """Write `local_dir/train.parquet` and `test.parquet` from a local copy (`inputs`) or the hub."""
    return preprocess_splits(inputs, HUB, make_row, REQUIRED_COLUMNS, local_dir, {"train": max_train, "test": max_test})
