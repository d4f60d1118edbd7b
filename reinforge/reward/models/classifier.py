"""A sequence-classification reward model: its inputs and its scores.

The model is an `AutoModelForSequenceClassification` with one label (verl's discriminative
reward model), or an `AutoModelForTokenClassification` when the checkpoint is one (as verl's model
merger saves value models), read at the same position. Its score of a sequence is what its own forward returns: the logit at the last
token that is not the pad token (`config.pad_token_id`). So when pad and EOS share an id, a
response ending in EOS is scored at the token before it, exactly as a direct forward of the same
text would score it. Padding positions are filled with the model's pad id before the forward. With
`reward_model.model.use_remove_padding` (default) a micro-batch's sequences are packed end to end
without padding where that costs less (`training/packing.py`), and the score head's output is read at
the position the padded forward would pool: the same scores up to float rounding.

Inputs come one of two ways (`classifier_inputs`):

- the policy's token ids as they are, when the reward model's tokenizer is the policy's (same
  vocabulary and chat template);
- otherwise rebuilt as verl's `_switch_chat_template` does: the response is decoded with the
  policy's tokenizer (special tokens skipped), appended to the prompt's chat messages as the
  assistant's turn, rendered with the reward model's chat template and tokenized with its
  tokenizer, right-padded. A rebuilt input longer than `reward_model.max_length` keeps its first
  max_length tokens (verl's right truncation) and is counted in `reward/rm_truncated`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from reinforge.batch import Batch
from reinforge.reward.models.rows import chat_messages, response_texts
from reinforge.training.minibatch import balanced_groups, token_budget_count, used_columns
from reinforge.training.packing import attention_pair_cost, pack_sequences, packing_works, varlen_attention


@dataclass
class ClassifierInputs:
    """What the reward model reads: (batch, length) tensors, the rebuilt texts (None: the policy's ids) and truncation flags."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    texts: list[str] | None
    truncated: list[bool]
    unscored: int = 0  # rows cut to max_length before their first response token: the model reads their prompt only


def same_tokenizer(a: Any, b: Any) -> bool:
    """True when token ids and chat rendering of `a` mean the same for `b`."""
    return a.get_vocab() == b.get_vocab() and a.chat_template == b.chat_template


def classifier_inputs(batch: Batch, input_tokenizer: Any, rm_tokenizer: Any | None, pad_id: int,
                      max_length: int | None = None) -> ClassifierInputs:
    """The policy's ids (`rm_tokenizer` None) or each conversation rebuilt in the reward model's chat template."""
    if rm_tokenizer is None:
        attention_mask = batch["attention_mask"].long()
        return ClassifierInputs(batch["input_ids"].masked_fill(attention_mask == 0, pad_id), attention_mask,
                                batch["position_ids"], None, [False] * len(batch))
    texts = []
    for row, response in enumerate(response_texts(batch, input_tokenizer, keep_special=True)):
        chat = chat_messages(batch, row) + [{"role": "assistant", "content": response}]
        texts.append(rm_tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=False))
    rows = [rm_tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    truncated = [max_length is not None and len(ids) > max_length for ids in rows]
    unscored = sum(len(rm_tokenizer(rm_tokenizer.apply_chat_template(chat_messages(batch, row), tokenize=False,
                                                                       add_generation_prompt=True),
                                    add_special_tokens=False)["input_ids"]) >= max_length
                   for row, cut in enumerate(truncated) if cut)
    rows = [ids[:max_length] for ids in rows]
    input_ids, attention_mask = right_padded(rows, pad_id)
    return ClassifierInputs(input_ids, attention_mask, (attention_mask.cumsum(-1) - 1).clamp(min=0), texts, truncated,
                            unscored)


def right_padded(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), each (batch, longest row), padded on the right."""
    width = max([1, *(len(ids) for ids in rows)])
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, ids in enumerate(rows):
        input_ids[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, :len(ids)] = 1
    return input_ids, attention_mask


@torch.no_grad()
def sequence_scores(model: torch.nn.Module, inputs: ClassifierInputs, micro_batch_size: int | None = None,
                    max_tokens: int | None = None, pack: bool = False) -> torch.Tensor:
    """The model's score of each row, (batch,) float32 on CPU, `micro_batch_size` rows per forward (None: all), or
    with `max_tokens` (reward_model.use_dynamic_bsz) token-budget micro-batches; `pack`: each micro-batch packed
    without padding where that costs less and the model computes packed sequences as it computes them alone.

    Each forward reads only the columns some row of its micro-batch uses: the others are padding in every row,
    which no token attends to and the score (at the last token that is not the pad id) never lands on."""
    device = next(model.parameters()).device
    rows = inputs.input_ids.shape[0]
    if max_tokens is None:
        size = micro_batch_size or rows or 1
        groups = [torch.arange(start, min(start + size, rows)) for start in range(0, rows, size)]
    else:
        lengths = inputs.attention_mask.sum(-1).tolist()
        groups = [torch.tensor(group) for group in balanced_groups(lengths, token_budget_count(lengths, max_tokens))]
    head = score_head(model)
    pack = pack and head is not None and packing_works(model, device, lambda ids, positions: _head_outputs(
        model, head, ids, positions, None))
    scores = torch.zeros(rows)
    for group in groups:
        start, end = used_columns(inputs.attention_mask[group])
        cols = slice(start, max(end, start + 1))
        input_ids, attention_mask, position_ids = (t[group, cols].to(device) for t in
                                                   (inputs.input_ids, inputs.attention_mask, inputs.position_ids))
        found = _packed_scores(model, head, input_ids, attention_mask.bool(), position_ids) if pack else None
        if found is None:  # the padded forward
            logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False).logits
            if logits.dim() == 3:  # a token classifier: read where a sequence classifier pools, the last token not the pad id
                scored = attention_mask.bool() & (input_ids != model.config.pad_token_id)
                last = (torch.arange(scored.shape[1], device=device) * scored).argmax(-1)
                logits = logits[torch.arange(len(last), device=device), last]
            found = logits[:, 0]  # (micro,): one label
        scores[group] = found.float().cpu()
    return scores


def score_head(model: torch.nn.Module) -> torch.nn.Module | None:
    """The linear layer that turns every position's hidden state into scores (transformers' `score`, which the
    classifier then reads at the last token that is not the pad id); None for a model built otherwise."""
    head = getattr(model, "score", None)
    return head if isinstance(head, torch.nn.Module) and model.config.pad_token_id is not None else None


def _head_outputs(model: torch.nn.Module, head: torch.nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor,
                  attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The score head's output at every position, (rows, length, labels)."""
    seen = []
    handle = head.register_forward_hook(lambda _module, _args, output: seen.append(output))
    try:
        model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    finally:
        handle.remove()
    return seen[0]


def _packed_scores(model: torch.nn.Module, head: torch.nn.Module, input_ids: torch.Tensor, mask: torch.Tensor,
                   position_ids: torch.Tensor) -> torch.Tensor | None:
    """Each row's score from a packed forward (the first label at its last token that is not the pad id, where the
    padded forward pools), or None when packing costs no more, cannot be exact, or a row has only pad ids."""
    scored = mask & (input_ids != model.config.pad_token_id)
    if not bool(scored.any(1).all()):
        return None
    packed = pack_sequences(input_ids, mask, position_ids, attention_pair_cost(model), one_row=varlen_attention(model))
    if packed is None:
        return None
    last = torch.where(scored, packed.rank, -1).amax(1)
    out = _head_outputs(model, head, packed.input_ids, packed.position_ids, None)
    return out.reshape(-1, out.shape[-1])[packed.offset + last, 0]
