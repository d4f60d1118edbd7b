"""Geometry3K (hiyouga/geometry3k: a diagram, a question, an answer) as verl-schema RL data with images, like verl's
`geo3k.py`.

Input rows have `images` (a list of one diagram: {bytes, path} dicts in the hub's parquet files, or PIL images when
loaded with the `datasets` library), `problem` (which places its diagram with `<image>`) and `answer`. Output rows:

- `data_source`: "hiyouga/geometry3k" (the built-in Geometry3K scorer: format 0.1, answer 0.9);
- `prompt`: one user message, the problem + " " + INSTRUCTION (an `<image>` put first for each image the problem does
  not place, so every image has its place);
- `images`: the diagrams as {bytes, path} (PNG bytes for a PIL image), the column `data.image_key` reads;
- `ability`: "math";
- `reward_model`: `{"style": "rule", "ground_truth": <answer>}`;
- `extra_info`: `{"split", "index", "answer", "question"}`.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from reinforge.environment.preprocess.splits import HubDataset, preprocess_splits

DATA_SOURCE = "hiyouga/geometry3k"
HUB = HubDataset(DATA_SOURCE, "default", "data")
INSTRUCTION = ("You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
               "The reasoning process MUST BE enclosed within <think> </think> tags. The final answer MUST BE put in \\boxed{}.")
REQUIRED_COLUMNS = ("images", "problem", "answer")


def stored_image(image: Any) -> Any:
    """An image as parquet stores it: {bytes, path} as given; a PIL image as its PNG bytes."""
    if hasattr(image, "save") and hasattr(image, "size"):
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return {"bytes": buffer.getvalue(), "path": None}
    return image


def make_row(raw: dict[str, Any], split: str, index: int) -> dict[str, Any]:
    images = [stored_image(image) for image in (raw["images"] or [])]
    problem = str(raw["problem"])
    problem = "<image>" * max(0, len(images) - problem.count("<image>")) + problem
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{problem} {INSTRUCTION}"}],
        "images": images,
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(raw["answer"])},
        "extra_info": {"split": split, "index": index, "answer": str(raw["answer"]), "question": str(raw["problem"])},
    }


def preprocess(inputs: list[str] | None, local_dir: str | Path, max_train: int | None = None,
               max_test: int | None = None) -> dict[str, Path]:
    """Write `local_dir/train.parquet` and `test.parquet` from a local copy (`inputs`) or the hub."""
    return preprocess_splits(inputs, HUB, make_row, REQUIRED_COLUMNS, local_dir, {"train": max_train, "test": max_test})
