"""A KV cache that grows in place, for the `hf` engine.

transformers' `DynamicCache` grows each layer's keys and values by `torch.cat` at every decoding
step, which copies the whole cache once per token: quadratic in the response length. Here each
full-attention layer keeps its keys and values in buffers with room reserved ahead, as a Python
list does: a step writes its token in place and the model attends to a view of the filled part; a
full buffer grows by half its length (never past the prompt + response length the engine gives),
so the copies add up to about twice the final length instead of its square, and the room held in
reserve is at most half of what is filled. The attention sees the same numbers, so the tokens and
log-probs are the same; 512-token responses of the 4M-parameter benchmark model decode 13-28% faster
(benchmarks/README.md).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose `keys` and `values` are views of the filled positions of larger buffers. A full
    buffer is replaced by one half as long again, up to `limit` positions (past it, only as long as needed).
    Whatever replaces `keys` with another tensor (transformers' own methods: offload, repeat, reset) is copied
    into fresh buffers at the next update."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit
        self.key_buffer: torch.Tensor | None = None
        self.value_buffer: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        new = key_states.shape[-2]
        if not self._room_for(new):
            self._rebuffer(key_states, value_states, new)
        length = self.keys.shape[-2]
        self.key_buffer[:, :, length:length + new] = key_states
        self.value_buffer[:, :, length:length + new] = value_states
        self._view(length + new)
        return self.keys, self.values

    def _room_for(self, new: int) -> bool:
        """`keys` is still the view of this layer's buffer, with `new` positions free after it."""
        buffer, keys = self.key_buffer, self.keys
        return (buffer is not None and isinstance(keys, torch.Tensor) and keys.data_ptr() == buffer.data_ptr()
                and keys.shape[0] == buffer.shape[0] and keys.stride() == buffer.stride()
                and keys.shape[-2] + new <= buffer.shape[-2])

    def _rebuffer(self, key_states: torch.Tensor, value_states: torch.Tensor, new: int) -> None:
        has_entries = self.is_initialized and isinstance(self.keys, torch.Tensor) and self.keys.numel() > 0
        length = self.keys.shape[-2] if has_entries else 0
        needed = length + new
        capacity = max(needed, min(self.limit, needed + needed // 2))
        self.dtype, self.device, self.is_initialized = key_states.dtype, key_states.device, True
        filled = (self.keys, self.values) if has_entries else (key_states[:, :, :0], value_states[:, :, :0])
        self._fill(*filled, capacity)

    def _fill(self, keys: torch.Tensor, values: torch.Tensor, capacity: int) -> None:
        """New buffers of `capacity` positions holding `keys` and `values` at their start."""
        length = keys.shape[-2]
        self.key_buffer = keys.new_empty((*keys.shape[:2], capacity, keys.shape[-1]))
        self.value_buffer = values.new_empty((*values.shape[:2], capacity, values.shape[-1]))
        self.key_buffer[:, :, :length] = keys
        self.value_buffer[:, :, :length] = values
        self._view(length)

    def _view(self, length: int) -> None:
        self.keys, self.values = self.key_buffer[:, :, :length], self.value_buffer[:, :, :length]

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        self.batch_select_indices(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep (or repeat) the rows `indices`: their filled positions are copied into buffers of the same length."""
        if self.get_seq_length() == 0:
            return
        capacity = self.key_buffer.shape[-2] if self._room_for(0) else self.keys.shape[-2]
        indices = indices.to(self.keys.device)
        self._fill(self.keys.index_select(0, indices), self.values.index_select(0, indices), capacity)


def growing_cache(config, limit: int) -> DynamicCache:
    """The cache the model would make for itself (`DynamicCache(config=...)`), its full-attention layers growing in
    place up to `limit` positions (prompt + response); sliding-window and other layer kinds are left as they are."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer(limit) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
