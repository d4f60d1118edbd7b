"""Generations as JSON records (verl's rollout/validation dump format): input, output, gts, score, step."""

from __future__ import annotations

import json
from pathlib import Path

from reinforge.batch import Batch


def generation_records(batch: Batch, scores: list[float], tokenizer, step: int) -> list[dict]:
    """One record per row: decoded prompt (with its template) and response, ground truth, score."""
    prompts = batch["prompts"]
    prompt_mask = batch["attention_mask"][:, : prompts.shape[1]].bool()
    out = []
    for row in range(len(batch)):
        response = batch["responses"][row][batch["response_mask"][row].bool()]
        reward_model = batch["reward_model"][row] if "reward_model" in batch else {}
        out.append({
            "input": tokenizer.decode(prompts[row][prompt_mask[row]], skip_special_tokens=False),
            "output": tokenizer.decode(response, skip_special_tokens=True),
            "gts": (reward_model or {}).get("ground_truth"),
            "score": scores[row],
            "step": step,
        })
    return out


def write_generations(folder: str | Path, step: int, records: list[dict]) -> Path:
    """Write `records` to <folder>/<step>.jsonl, one JSON object per line."""
    path = Path(folder) / f"{step}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for record in records:
            f.write(json.dumps(record, default=str) + "\n")
    return path
