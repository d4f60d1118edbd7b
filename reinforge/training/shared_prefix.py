"""A micro-batch's repeated prompts computed once in the forward passes of the actor.

GRPO samples every prompt `rollout.n` times, so a micro-batch of the update holds groups of rows
whose prompt columns (the first `input_ids` width - `responses` width columns of `input_ids`,
`attention_mask` and `position_ids`) are identical. The plain forward recomputes each prompt in
every row of its group. Here the model runs once on the distinct prompts but their last token,
keeping their keys and values; those are copied to the rows that share them (by indexing, which
back-propagates: the copies' gradients add up in the one prompt computation), and each row's last
prompt token and its responses run on top of them with the whole attention mask. That second pass
gives the logits of every response position in one tensor, as the plain forward does (no copy of
the vocabulary-sized logits to join two passes). The numbers are the plain forward's, up to float
rounding (tests/training/test_shared_prefix.py); the work saved is the prompt part of every row
but one per group, less one token per row (22.5% of the update's tokens with the benchmark's
22-token prompts and 64-token responses, n=8).

The keys and values go through transformers' cache interface with two cache layers of our own,
both safe to run through twice, because gradient checkpointing recomputes each layer in the
backward pass: the prompt's layer keeps the last keys it was given (the recomputation gives the
same), and the responses' layer returns the prompt's keys followed by the new ones without storing
anything. transformers drops the cache inside a checkpointed layer unless the layer says it can
keep it (`_can_checkpoint_with_cache`), which these two passes say for the layers while they run.
Both passes hand the model their cache with `use_cache=False` (no cache of its own to return),
which is also what transformers turns `use_cache` into under checkpointing: one behaviour either way.
A model that does not pass the cache it is given to its attention (a custom architecture) would
compute the responses without their prompt: that is detected after each pass, and named.

The plain forward is kept where sharing gains nothing or is not known to be exact:
- no prompt repeats within the micro-batch (micro-batches of one row, prompts all different), or
  the prompts are one token wide (nothing before their last token to share);
- sliding-window attention layers (only full attention is checked), position_ids other than
  (batch, length) (multimodal rope);
- gradient checkpointing with transformers 4.x, whose checkpointed layers drop any cache.

On several data-parallel ranks (FSDP2) the two forwards of the sharded model before one backward
give the one-process gradients (tests/training/test_shared_prefix.py runs 2 gloo ranks). Each
forward of a sharded model runs collectives, so the ranks agree first: a micro-batch shares only
when it can on every rank.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers.cache_utils import Cache, DynamicLayer
from transformers.modeling_layers import GradientCheckpointingLayer

from reinforge.distributed.process_group import all_reduce
from reinforge.errors import ModelError
from reinforge.inference.hf import cache_keyword
from reinforge.training.packing import attention_pair_cost


def hold(layer: DynamicLayer, keys: torch.Tensor, values: torch.Tensor) -> None:
    """`layer` holds these keys and values (set directly: `lazy_initialization` changed its arguments in transformers 5)."""
    layer.dtype, layer.device, layer.is_initialized = keys.dtype, keys.device, True
    layer.keys, layer.values = keys, values


class PromptLayer(DynamicLayer):
    """A prompt pass's keys and values, returned as given and kept; a recomputation overwrites them with the same."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        hold(self, key_states, value_states)
        return key_states, value_states


class ResponseLayer(DynamicLayer):
    """The distinct prompts' keys and values, read by the response pass (row i's prompt is `owner[i]`), never extended.

    The rows' copies are made inside the layer's forward, so under gradient checkpointing only the distinct
    prompts' keys are held for the backward pass, not one copy per row."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, owner: torch.Tensor):
        super().__init__()
        hold(self, keys, values)
        self.owner, self.read = owner, False

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        self.read = True
        # index_select, not keys[owner]: the backward of advanced indexing adds the rows' gradients with atomic adds
        # on CPU threads when the owners are not in order (shuffled mini-batches), so its sums would vary from run to
        # run; index_select's backward (index_add_) adds them in a fixed order
        keys, values = self.keys.index_select(0, self.owner), self.values.index_select(0, self.owner)
        return torch.cat([keys, key_states], -2), torch.cat([values, value_states], -2)


def prompt_owners(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                  prompt_len: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """For rows whose first `prompt_len` columns repeat: (the first row of each distinct prefix (k,), the index of
    each row's prefix among those (batch,)); None when every prefix is different."""
    columns = [t[:, :prompt_len].to(input_ids.dtype) for t in (input_ids, attention_mask, position_ids)]
    distinct, owner = torch.unique(torch.cat(columns, 1), dim=0, return_inverse=True)
    if len(distinct) == len(input_ids):
        return None
    rows = torch.arange(len(input_ids), device=input_ids.device)
    first = torch.full((len(distinct),), len(input_ids), device=input_ids.device).scatter_reduce(0, owner, rows, "amin")
    return first, owner


def can_share(model: torch.nn.Module, position_ids: torch.Tensor) -> bool:
    """Whether the shared forward is known to compute what the plain one does for this model (module docstring)."""
    config = model.config
    layer_types = getattr(config, "layer_types", None)
    full_attention = set(layer_types) == {"full_attention"} if layer_types else getattr(config, "sliding_window", None) is None
    checkpointing = model.training and any(getattr(module, "gradient_checkpointing", False) for module in model.modules()
                                           if isinstance(module, GradientCheckpointingLayer))
    # before transformers 5, a checkpointed layer always drops the cache it is given
    cache_survives = not checkpointing or hasattr(GradientCheckpointingLayer, "_can_checkpoint_with_cache")
    return full_attention and position_ids.dim() == 2 and cache_survives


@contextmanager
def cache_through_checkpointing(model: torch.nn.Module) -> Iterator[None]:
    """Checkpointed layers of `model` keep the cache they are given (our layers are safe to run through twice)."""
    layers = [module for module in model.modules()
              if isinstance(module, GradientCheckpointingLayer) and "_can_checkpoint_with_cache" not in vars(module)]
    for layer in layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for layer in layers:
            del layer._can_checkpoint_with_cache  # back to the class's value


def shared_prompt_logits(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         position_ids: torch.Tensor, response_len: int, cheaper_than: float | None = None) -> torch.Tensor | None:
    """The logits that predict each response token, (batch, response_len, vocab), with each distinct prompt of the
    batch computed once; None where another forward should run instead (on any rank: see the module docstring):
    the plain one, or the packed one when it costs `cheaper_than` or less (tokens and attention pairs:
    `packing.attention_pair_cost`)."""
    shared_len = input_ids.shape[1] - response_len - 1  # the prompt but its last token, whose logit predicts response 0
    groups = None
    if shared_len > 0 and can_share(model, position_ids):
        groups = prompt_owners(input_ids, attention_mask, position_ids, shared_len)
    if groups is not None and cheaper_than is not None:
        prompts, rows, queries = len(groups[0]), input_ids.shape[0], response_len + 1
        cost = prompts * shared_len + rows * queries + attention_pair_cost(model) * (
            prompts * shared_len ** 2 + rows * queries * input_ids.shape[1])
        groups = groups if cost < cheaper_than else None
    if not all_reduce([float(groups is not None)], "min")[0]:  # every rank runs as many forwards of a sharded model
        return None
    first, owner = groups
    cache_arg = cache_keyword(model)
    prompt_cache = Cache(layer_class_to_replicate=PromptLayer)
    with cache_through_checkpointing(model):
        prompt_out = model(input_ids=input_ids[first, :shared_len], attention_mask=attention_mask[first, :shared_len],
                           position_ids=position_ids[first, :shared_len], use_cache=False, logits_to_keep=1,
                           **{cache_arg: prompt_cache}).logits
        check_cache_used(model, bool(prompt_cache.layers))
        rows_cache = Cache(layers=[ResponseLayer(layer.keys, layer.values, owner) for layer in prompt_cache.layers])
        logits = model(input_ids=input_ids[:, shared_len:-1], attention_mask=attention_mask[:, :-1],
                       position_ids=position_ids[:, shared_len:-1], use_cache=False, **{cache_arg: rows_cache}).logits
        check_cache_used(model, all(layer.read for layer in rows_cache.layers))
    return JoinedTo.apply(logits, prompt_out) if torch.is_grad_enabled() and prompt_out.requires_grad else logits


class JoinedTo(torch.autograd.Function):
    """`logits` unchanged, with the prompt pass's output joined to the autograd graph by a zero gradient.

    The prompt pass's gradient reaches it through the keys and values, not through its output; FSDP2 gathers a
    sharded layer's weights before its backward only when the output of that forward gets a gradient, so the
    prompt pass's (k, 1, vocab) output gets a zero one."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, prompt_out: torch.Tensor) -> torch.Tensor:
        ctx.prompt_shape = prompt_out.shape
        return logits.view_as(logits)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return grad, grad.new_zeros(ctx.prompt_shape)


def check_cache_used(model: torch.nn.Module, used: bool) -> None:
    """ModelError unless `model` used the cache it was given (else the responses would not see their prompt)."""
    if not used:
        raise ModelError(f"{type(model).__name__} does not pass the cache it is given to its attention layers, so its "
                         "responses cannot be computed on a shared prompt; set actor_rollout_ref.model.share_prompt_forward=false")
