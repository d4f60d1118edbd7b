"""A micro-batch's repeated prompts computed once in the forward passes of the actor.

GRPO samples every prompt `rollout.n` times, so a micro-batch of the update holds groups of rows
whose prompt columns (the first `input_ids` width - `responses` width columns of `input_ids`,
`attention_mask` and `position_ids`) are identical. The plain forward recomputes each prompt in
every row of its group. Here the model runs once on the distinct prompts with a KV cache, the
cache's rows are copied to the rows that share them (`index_select`, which back-propagates: the
copies' gradients add up in the one prompt computation), and the response columns run on top of it
with the whole attention mask. The logit that predicts response token 0 is the prompt's
last-position logit; the others come from response positions 0..R-2. The numbers are the plain
forward's, up to float rounding (tests/training/test_shared_prefix.py); the work saved is the
prompt part of every row but one per group (22% of the update's tokens with the benchmark's
22-token prompts and 64-token responses, n=8).

The plain forward is kept where sharing cannot work or gains nothing:
- no prompt repeats within the micro-batch (micro-batches of one row, prompts all different), or
  the responses are one token wide;
- the model is training with gradient checkpointing: transformers drops the KV cache inside a
  checkpointed layer (`GradientCheckpointingLayer` sets `past_key_values=None`), so the response
  pass would not see the prompt; forward-only passes (eval mode) still share;
- position_ids other than (batch, length) (multimodal rope).

On several data-parallel ranks (FSDP2) the two forwards of the sharded model before one backward
give the one-process gradients (tests/training/test_shared_prefix.py runs 2 gloo ranks). Each
forward of a sharded model runs collectives, so the ranks agree first: a micro-batch shares only
when it can on every rank.
"""

from __future__ import annotations

import torch

from reinforge.distributed.process_group import all_reduce


def prompt_owners(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                  prompt_len: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """For rows whose first `prompt_len` columns repeat: (the first row of each distinct prompt (k,), the index of
    each row's prompt among those (batch,)); None when every prompt is different."""
    columns = [t[:, :prompt_len].to(input_ids.dtype) for t in (input_ids, attention_mask, position_ids)]
    distinct, owner = torch.unique(torch.cat(columns, 1), dim=0, return_inverse=True)
    if len(distinct) == len(input_ids):
        return None
    rows = torch.arange(len(input_ids), device=input_ids.device)
    first = torch.full((len(distinct),), len(input_ids), device=input_ids.device).scatter_reduce(0, owner, rows, "amin")
    return first, owner


def can_share(model: torch.nn.Module, position_ids: torch.Tensor) -> bool:
    """Whether the cache-based forward computes what the plain one does for this model (see the module docstring)."""
    if position_ids.dim() != 2:
        return False
    checkpointing = any(getattr(module, "gradient_checkpointing", False) for module in model.modules())
    return not (model.training and checkpointing)


def shared_prompt_logits(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         position_ids: torch.Tensor, response_len: int) -> torch.Tensor | None:
    """The logits that predict each response token, (batch, response_len, vocab), with each distinct prompt of the
    batch computed once; None where the plain forward should run instead (on any rank: see the module docstring)."""
    prompt_len = input_ids.shape[1] - response_len
    groups = None
    if response_len > 1 and can_share(model, position_ids):
        groups = prompt_owners(input_ids, attention_mask, position_ids, prompt_len)
    if not all_reduce([float(groups is not None)], "min")[0]:  # every rank runs as many forwards of a sharded model
        return None
    first, owner = groups
    out = model(input_ids=input_ids[first, :prompt_len], attention_mask=attention_mask[first, :prompt_len],
                position_ids=position_ids[first, :prompt_len], use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    cache.reorder_cache(owner)  # each row's copy of its prompt's keys and values, still in the autograd graph
    rest = model(input_ids=input_ids[:, prompt_len:-1], attention_mask=attention_mask[:, :-1],
                 position_ids=position_ids[:, prompt_len:-1], past_key_values=cache, use_cache=True).logits
    return torch.cat([out.logits[owner], rest], 1)  # the prompt's last position predicts response token 0
