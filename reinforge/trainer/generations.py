"""Generations as JSON records (verl's rollout/validation dump format): input, output, gts, score,
step, and one field per extra value the reward function returned (`acc`, `pred`, ...)."""

from __future__ import annotations

import json
from pathlib import Path

from reinforge.batch import Batch
from reinforge.errors import writing

EXTRA = "reward_extra_info/"  # batch columns of the per-row values a reward function returns besides the score


def reward_extra_info(batch: Batch) -> dict[str, list]:
    """The per-row values the reward function returned besides the score, by key."""
    return {key[len(EXTRA):]: list(batch[key]) for key in batch.keys() if key.startswith(EXTRA)}


def generation_records(batch: Batch, scores: list[float], tokenizer, step: int, extra: dict[str, list] | None = None) -> list[dict]:
    """One record per row: decoded prompt and response (without special tokens, as verl), ground truth, score, and
    the reward's extra values (`extra`, by default the batch's `reward_extra_info/` columns)."""
    extra = reward_extra_info(batch) if extra is None else extra
    prompts = batch["prompts"]
    prompt_mask = batch["attention_mask"][:, : prompts.shape[1]].bool()
    out = []
    for row in range(len(batch)):
        response = batch["responses"][row][batch["attention_mask"][row, prompts.shape[1]:].bool()]  # multi-turn: tool turns too
        reward_model = batch["reward_model"][row] if "reward_model" in batch else {}
        out.append({
            "input": tokenizer.decode(prompts[row][prompt_mask[row]], skip_special_tokens=True),
            "output": tokenizer.decode(response, skip_special_tokens=True),
            "gts": (reward_model or {}).get("ground_truth"),
            "score": scores[row],
            "step": step,
            **{key: values[row] for key, values in extra.items() if key not in ("score", "step")},
        })
    return out


def write_generations(folder: str | Path, step: int, records: list[dict]) -> Path:
    """Write `records` to <folder>/<step>.jsonl, one JSON object per line."""
    path = Path(folder) / f"{step}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with writing(path), path.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
    return path
