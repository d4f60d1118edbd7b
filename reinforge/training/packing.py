"""Packed forwards without padding (verl's `use_remove_padding`): a micro-batch's sequences laid end to end.

A micro-batch is padded to its longest sequence, so rows of different lengths compute padding: in
a GRPO batch whose responses run from a few tokens to the limit, often half of the tokens. Here
each row's real tokens (those of its attention mask) are packed into rows of one capacity (first
fit, longest first), and the model runs on those rows with each sequence's own position ids and no
attention mask; transformers (5.x) reads where a sequence starts from its position ids jumping back
and gives every token an attention to its own sequence only (`masking_utils.find_packed_sequence_indices`,
for every attention kind). The vocabulary head then runs only on the positions that predict a
response token (a pre-hook on the output embeddings gathers them), so the logits are
(1, response tokens, vocab), without padding either. `ResponseLogits.unpack` puts per-token results
back at their (row, response column).

The capacity: rows as long as the longest sequence save padding at no extra attention; longer rows
(up to all tokens in one, verl's layout, at most MAX_CAPACITY) save more padding, but the masked
attention still computes every (query, key) pair of a row. Each capacity from the longest sequence
up, doubling, is costed as tokens + `pair_cost` x pairs (what a pair costs against a token through
the linear layers, from the model's sizes) and the cheapest is taken; none cheaper than the padded
rows: no packing. When the prompts repeat (GRPO) and the shared-prompt forward (`shared_prefix.py`)
costs less, that one runs instead. The numbers are those of the padded forward up to float rounding
(tests/training/test_packing.py).

Under flash attention (`attn_implementation=flash_attention_2`, verl's usual setting on GPUs) packed
sequences attend only within themselves, as verl's varlen layout, but transformers reads packed
sequences only from a batch of one row: all of a micro-batch's sequences then go in one row.

Before the first packed forward of a model, a probe checks that the model honours packed position
ids (four short sequences packed as they will be, against each alone); a model that does not (a custom architecture
with its own masks) keeps the padded forward, said once. Rows whose position ids do not start at 0 and
count up by one (multimodal rope, offsets) are not packed. On several data-parallel ranks each rank packs its own rows;
a packed and a padded forward are one forward each, so the ranks' collectives still pair up.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass

import torch

from reinforge.batch import Batch
from reinforge.distributed.process_group import all_reduce
from reinforge.training.minibatch import eval_mode
from reinforge.training.perf import config_field, model_shape

MAX_CAPACITY = 8192  # tokens of one packed row
_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> whether packed position ids work


@dataclass
class Packed:
    """Sequences laid end to end in rows of one capacity: where each sequence's tokens went."""

    input_ids: torch.Tensor  # (packed rows, capacity)
    position_ids: torch.Tensor  # each sequence's own positions; 0 on the tail padding (each tail token alone)
    offset: torch.Tensor  # (rows,) flat index into the packed rows of each sequence's first token
    rank: torch.Tensor  # (rows, length) a kept token's index within its sequence
    cost: float  # tokens + pair cost x attention pairs (`pair_cost`), to compare with other forwards


@dataclass
class Packing(Packed):
    """A micro-batch packed (`Packed`), and where its response tokens come back."""

    predict: torch.Tensor  # (n,) flat index into the packed rows of the position that predicts each response token
    rows: torch.Tensor  # (n,) that token's row in the micro-batch
    cols: torch.Tensor  # (n,) and its response column
    shape: tuple[int, int]  # (rows, response width) of the micro-batch


@dataclass
class ResponseLogits:
    """The logits that predict a micro-batch's response tokens and the tokens they predict: (rows, width, vocab) and
    (rows, width) padded, or (1, n, vocab) and (1, n) packed; `unpack` gives a per-token result (rows, width)."""

    logits: torch.Tensor
    tokens: torch.Tensor
    packing: Packing | None = None

    def unpack(self, values: torch.Tensor | None) -> torch.Tensor | None:
        """Per-token `values` (the logits' leading shape, then any) at (rows, response width, ...); 0 where no token is."""
        if values is None or self.packing is None:
            return values
        p, trailing = self.packing, values.shape[2:]
        return values.new_zeros((*p.shape, *trailing)).index_put((p.rows, p.cols), values.reshape(-1, *trailing))

    def lay_out(self, values: torch.Tensor) -> torch.Tensor:
        """Per-token `values` (rows, response width, ...) laid out as the logits' leading shape (`unpack`'s inverse)."""
        if self.packing is None:
            return values[:, :self.tokens.shape[1]]
        return values[self.packing.rows, self.packing.cols][None]


def _first_fit(lengths: list[int], capacity: int) -> list[list[int]]:
    """Rows into bins of `capacity` tokens, longest first, each into the first bin it fits."""
    bins: list[list[int]] = []
    room: list[int] = []
    for row in sorted(range(len(lengths)), key=lambda r: -lengths[r]):
        for b, free in enumerate(room):
            if lengths[row] <= free:
                bins[b].append(row)
                room[b] -= lengths[row]
                break
        else:
            bins.append([row])
            room.append(capacity - lengths[row])
    return bins


def pair_cost(config) -> float:
    """What one (query, key) pair of attention costs, in tokens through the linear layers: 4 x heads x head_dim
    multiply-adds per layer against 2 x the layer's weights (`perf.model_shape`; where the config does not say,
    that of a layer of 12 x hidden^2 weights and 64-wide heads, or 1e-4)."""
    shape = model_shape(config)
    if shape is not None:
        return 2 * shape.heads * shape.head_dim / shape.layer_weights
    hidden = config_field(config, "hidden_size")
    return 1 / (6 * hidden) if hidden else 1e-4


def varlen_attention(model: torch.nn.Module) -> bool:
    """Whether the model attends through flash attention: its packed sequences attend within themselves without
    computing the other pairs of the row, but transformers packs them only in a batch of one row."""
    return "flash" in str(getattr(model.config, "_attn_implementation", None) or "")


def attention_pair_cost(model: torch.nn.Module) -> float:
    """`pair_cost` of the model's config; 0 under flash attention, which computes only the pairs within a sequence."""
    return 0.0 if varlen_attention(model) else pair_cost(model.config)


def _cheapest_bins(lengths: list[int], width: int, pair: float,
                   one_row: bool = False) -> tuple[list[list[int]], int, float] | None:
    """The bins and capacity that cost least (tokens + pair x capacity^2 per packed row), trying capacities from the
    longest sequence up by doubling to all tokens in one row (at most MAX_CAPACITY, whose mask alone is 64 MB; with
    `one_row`, all tokens in one row whatever their number); None when the padded rows (`width` wide) cost no more."""
    longest, total = max(lengths), sum(lengths)
    best, best_cost = None, len(lengths) * (width + pair * width * width)
    if one_row:
        cost = total + pair * total * total
        return ([list(range(len(lengths)))], total, cost) if cost < best_cost else None
    capacity = longest
    while True:
        bins = _first_fit(lengths, capacity)
        cost = len(bins) * (capacity + pair * capacity * capacity)
        if cost < best_cost and len(bins) < len(lengths):
            best, best_cost = (bins, capacity, cost), cost
        if len(bins) == 1 or capacity >= min(total, MAX_CAPACITY):
            return best
        capacity = max(longest, min(2 * capacity, total, MAX_CAPACITY))


def pack_sequences(input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, pair: float = 0.0,
                   one_row: bool = False) -> Packed | None:
    """The real tokens of (rows, length) `input_ids` (where `mask` is true) packed in the rows that cost least (`pair`:
    an attention pair's cost in tokens, `pair_cost`; `one_row`: all sequences in one row), or None when padded rows
    cost no more or the rows cannot be packed exactly (an empty row; position ids that do not start at 0 and count up
    by one, as multimodal rope or offsets)."""
    rows, length = mask.shape
    lengths = mask.sum(1)
    if rows < 2 or positions.dim() != 2 or bool((lengths == 0).any()):
        return None
    chosen = _cheapest_bins(lengths.tolist(), length, pair, one_row)
    if chosen is None:
        return None
    bins, capacity, cost = chosen
    kept = positions[mask]
    starts = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)[:-1]])
    steps = kept.diff(prepend=kept[:1] - 1)
    steps[starts] = 1  # each sequence starts at 0 (so no two merge) and counts up by one
    if not bool((steps == 1).all()) or bool(kept[starts].any()):
        return None
    offset = torch.empty(rows, dtype=torch.long)
    for b, members in enumerate(bins):
        at = b * capacity
        for row in members:
            offset[row] = at
            at += int(lengths[row])
    offset = offset.to(mask.device)
    rank = mask.long().cumsum(1) - 1
    flat = (offset[:, None] + rank)[mask]
    packed_ids = input_ids.new_zeros(len(bins) * capacity)
    packed_ids[flat] = input_ids[mask]
    packed_positions = positions.new_zeros(len(bins) * capacity)
    packed_positions[flat] = kept
    return Packed(packed_ids.view(len(bins), capacity), packed_positions.view(len(bins), capacity), offset, rank, cost)


def plan_packing(batch: Batch, pair: float = 0.0, one_row: bool = False) -> Packing | None:
    """The packing of `batch` (FORWARD_KEYS) that costs least (`pack_sequences`), with the positions that predict its
    response tokens; None when padded rows cost no more, the rows cannot be packed exactly, or a row has no prompt."""
    mask = batch["attention_mask"].bool()
    length, width = mask.shape[1], batch["responses"].shape[1]
    if bool((mask[:, : length - width].sum(1) == 0).any()):
        return None
    packed = pack_sequences(batch["input_ids"], mask, batch["position_ids"], pair, one_row)
    if packed is None:
        return None
    r, c = mask[:, length - width:].nonzero(as_tuple=True)
    predict = packed.offset[r] + packed.rank[:, length - width:][r, c] - 1
    return Packing(**vars(packed), predict=predict, rows=r, cols=c, shape=(mask.shape[0], width))


def packing_for(model: torch.nn.Module, batch: Batch, pack: bool) -> Packing | None:
    """How to pack `batch` for `model`'s forward, or None for the padded forward (`pack` off, the model fails the
    probe, or padding costs no more)."""
    if not pack or not packing_works(model, batch["input_ids"].device):
        return None
    return plan_packing(batch, attention_pair_cost(model), one_row=varlen_attention(model))


def _forward(model: torch.nn.Module, packing: Packing, head: bool) -> torch.Tensor:
    """The model's output at each predicting position, (1, n, out): the vocabulary head run only there (`head`,
    through a pre-hook on the output embeddings), else gathered from every position's output."""
    module = model.get_output_embeddings() if head and hasattr(model, "get_output_embeddings") else None
    handle = None
    if module is not None:
        def gather(_module, args):
            hidden = args[0]
            return (hidden.reshape(-1, hidden.shape[-1])[packing.predict].unsqueeze(0), *args[1:])
        handle = module.register_forward_pre_hook(gather)
    try:
        out = model(input_ids=packing.input_ids, position_ids=packing.position_ids, attention_mask=None,
                    use_cache=False).logits
    finally:
        if handle is not None:
            handle.remove()
    if out.shape[:2] != (1, len(packing.predict)):  # the head was not reached through the hook
        out = out.reshape(-1, out.shape[-1])[packing.predict].unsqueeze(0)
    return out


def packed_logits(model: torch.nn.Module, batch: Batch, packing: Packing) -> ResponseLogits:
    return ResponseLogits(_forward(model, packing, head=True), batch["responses"][packing.rows, packing.cols][None],
                          packing)


def packed_values(model: torch.nn.Module, packing: Packing) -> torch.Tensor:
    """A value model's output (…, 1) at each predicting position, (rows, response width), 0 where no token is."""
    out = _forward(model, packing, head=False)
    return ResponseLogits(out, out, packing).unpack(out[..., 0].float())


def packing_works(model: torch.nn.Module, device: torch.device, outputs=None) -> bool:
    """Whether `model` computes packed sequences as it computes them alone: probed once per model (two forwards of 16
    fixed tokens: four sequences packed as the planner packs for this model, two rows of two or under flash attention
    one row, and the four alone; every rank runs them at the same call), agreed by all ranks. `outputs(input_ids,
    position_ids)` gives the per-position outputs compared (default: the logits)."""
    if model in _PROBED:
        return _PROBED[model]
    if outputs is None:
        def outputs(ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            return model(input_ids=ids, position_ids=positions, attention_mask=None, use_cache=False).logits
    shape = model_shape(model.config)
    vocab = shape.vocab if shape is not None else model.get_input_embeddings().num_embeddings
    ids = (torch.arange(16, device=device) * 7 + 3) % vocab
    positions = torch.arange(4, device=device).repeat(4)
    rows = 1 if varlen_attention(model) else 2
    with torch.no_grad(), eval_mode(model):
        packed = outputs(ids.view(rows, -1), positions.view(rows, -1))
        alone = outputs(ids.view(4, 4), positions.view(4, 4)).reshape(16, -1).float()
    # bf16 outputs (bf16 weights, or fp32 ones computing in bf16 on CUDA) differ by a rounding step or two between the
    # two layouts: the tolerance follows the dtype the outputs were computed in, not the weights'
    dtype = packed.dtype
    packed = packed.reshape(16, -1).float()
    tolerance = max(1e-3, 8 * torch.finfo(dtype).eps) if dtype.is_floating_point else 1e-3
    ok = float(torch.allclose(packed, alone, rtol=tolerance, atol=tolerance * float(alone.abs().max()) + 1e-5))
    works = bool(all_reduce([ok], "min")[0])
    _PROBED[model] = works
    if not works:
        print(f"reinforge: {type(model).__name__} does not compute sequences packed by their position ids as it computes "
              "them alone; its micro-batches stay padded (use_remove_padding without effect for it)", file=sys.stderr)
    return works
