"""What a reward model reads from a trajectory Batch, row by row, and where its score goes.

A trajectory Batch (see `inference/rollout.py`) holds `prompts` (B, P) left-padded, `responses`
(B, R) right-padded and `attention_mask` (B, P + R). The chat messages of each prompt are the
non-tensor field `raw_prompt` (the built-in dataset adds it with `data.return_raw_chat`, which
`reward_model.enable` turns on). A row's score lands on its last valid response token, as the
reward managers place theirs; a row with an empty response gets none.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from reinforge.batch import Batch
from reinforge.errors import DataError


def chat_messages(batch: Batch, row: int) -> list[dict[str, Any]]:
    """The prompt of `row` as a list of chat messages (copies, safe to extend)."""
    if "raw_prompt" not in batch:
        raise DataError(
            "the reward model rebuilds each conversation from its chat messages, but the batch has no 'raw_prompt' field; "
            "the built-in dataset adds it with data.return_raw_chat=true (set by reward_model.enable), and a Dataset class "
            "of data.custom_cls must return it too"
        )
    messages = batch["raw_prompt"][row]
    if isinstance(messages, np.ndarray):
        messages = messages.tolist()
    return [{**dict(message), "content": _text_of(dict(message).get("content"))} for message in messages]


def _text_of(content: Any) -> Any:
    """A message's content as text: the text parts of a content list (a row with images: [{"type": "image"}, {"type":
    "text", "text": ...}]) joined, its images left out, as a reward model reads a prompt (docs/data.md); other content
    as it is."""
    if isinstance(content, np.ndarray):
        content = content.tolist()
    if not isinstance(content, list):
        return content
    return "".join(str(part.get("text") or "") for part in content if isinstance(part, dict) and part.get("type") == "text")


def response_lengths(batch: Batch) -> torch.Tensor:
    """Valid response tokens per row, (batch,)."""
    response_len = batch["responses"].shape[1]
    return batch["attention_mask"][:, -response_len:].sum(dim=-1)


def response_texts(batch: Batch, tokenizer: Any, keep_special: bool = False) -> list[str]:
    """Each row's valid response tokens decoded without special tokens (the reward manager's solution_str); with
    `keep_special`, as verl decodes a response for its reward model: special tokens kept, but the EOS string removed."""
    responses = batch["responses"]  # (batch, response_len)
    texts = [tokenizer.decode(responses[row, :length].tolist(), skip_special_tokens=not keep_special)
             for row, length in enumerate(response_lengths(batch).tolist())]
    eos = getattr(tokenizer, "eos_token", None)
    return [text.replace(eos, "") for text in texts] if keep_special and eos else texts


def ground_truth(batch: Batch, row: int) -> Any:
    """reward_model.ground_truth of `row` (verl's schema)."""
    reward_model = batch["reward_model"][row] if "reward_model" in batch else None
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise DataError(f"reward_model.judge.prompt_template uses {{ground_truth}}, but row {row} has reward_model={reward_model!r}; "
                        "the reward_model column must hold a dict with a 'ground_truth' key")
    return reward_model["ground_truth"]


def on_last_response_token(scores: torch.Tensor, batch: Batch) -> torch.Tensor:
    """(batch, response_len) float32 zeros with each row's score on its last valid response token."""
    placed = torch.zeros(batch["responses"].shape, dtype=torch.float32)
    lengths = response_lengths(batch).cpu()
    rows = torch.nonzero(lengths > 0).squeeze(-1)
    placed[rows, lengths[rows] - 1] = scores.detach().float().cpu()[rows]
    return placed
