"""GSM8K (grade-school maths word problems) as verl-schema RL data, like verl's `gsm8k.py`.

Input rows have `question` and `answer`, where the answer is a worked solution ending in
`#### <number>`. Output rows:

- `data_source`: "openai/gsm8k" (the built-in GSM8K scorer);
- `prompt`: one user message, the question + " " + INSTRUCTION;
- `ability`: "math";
- `reward_model`: `{"style": "rule", "ground_truth": <the number after the first "####", commas removed>}`;
- `extra_info`: `{"split", "index" (position in the raw split), "answer" (the worked solution), "question"}`.

A row whose answer has no `#### <number>` is dropped and counted (verl stops with an assertion).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from reinforge.environment.preprocess.splits import HubDataset, preprocess_splits

DATA_SOURCE = "openai/gsm8k"
HUB = HubDataset("openai/gsm8k", "main")
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
REQUIRED_COLUMNS = ("question", "answer")

_FINAL_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")


def extract_answer(solution: str) -> str | None:
    """The number after the first `#### ` of a GSM8K solution, without thousands commas; None when absent."""
    match = _FINAL_ANSWER.search(solution)
    return match.group(1).replace(",", "") if match else None


def make_row(raw: dict[str, Any], split: str, index: int) -> dict[str, Any] | None:
    """The verl-schema row of one GSM8K example, or None when its answer has no `#### <number>`."""
    question, solution = str(raw["question"]), str(raw["answer"])
    ground_truth = extract_answer(solution)
    if ground_truth is None:
        return None
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, "answer": solution, "question": question},
    }


def preprocess(inputs: list[str] | None, local_dir: str | Path, max_train: int | None = None,
               max_test: int | None = None) -> dict[str, Path]:
    """Write `local_dir/train.parquet` and `test.parquet` from a local copy (`inputs`) or the hub."""
    return preprocess_splits(inputs, HUB, make_row, REQUIRED_COLUMNS, local_dir, {"train": max_train, "test": max_test})
