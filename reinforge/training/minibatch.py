"""The PPO update machinery the actor and the critic share: epochs of mini-batches, the optimizer step.

A step's batch is passed over `epochs` times, each time (optionally shuffled and) split into
mini-batches of `mini_size` trajectories; each mini-batch is one optimizer step whose loss is
normalised by the mini-batch's totals (`global_batch_info`), so micro-batches only decide how
the work is split. Metrics are averaged over the optimizer steps.

Numerical faults: a micro-batch whose loss is NaN/inf is not back-propagated, and a mini-batch
with such a loss or with a non-finite gradient norm skips its optimizer step (the gradient is
dropped, the parameters and optimizer state stay as they were). A mini-batch is all or nothing:
the finite micro-batches of a faulty mini-batch are not stepped alone, since their sum is not the
mini-batch's gradient. `run_epochs` reports `<role>/optimizer_steps` and `<role>/nonfinite_skipped`
as counts over the whole update (not averages), so the trainer can tell an update in which every
step was skipped.

Micro-batches hold `*_micro_batch_size_per_gpu` consecutive rows, or with `use_dynamic_bsz` (verl's
token-budget micro-batches, `micro_batch_rows`) ceil(real tokens / `*_max_token_len_per_gpu`) groups
of rows with balanced token totals: more groups while a group of several rows is over the budget;
a single row longer than the budget gets a micro-batch of its own (verl asserts instead). Every
micro-batch is trimmed before its forward (`trim_padding`): the leading columns that are padding
in all of its rows (left-padded prompts) and the trailing response columns that are padding in all
of its rows are dropped. This is exact (no real token attends to a padded one, and position ids are
sliced, not recomputed), and the per-token outputs are put back at the full response width, zero
where the attention mask is 0, so every loss sees the shapes it would without the trim.

On several data-parallel ranks (`distributed/process_group.py`), the mini-batch totals are summed
over the ranks, a NaN loss on any rank skips the backward on all of them (a sharded model's
backward runs collectives that every rank must join), and every rank runs the same number of
micro-batches (the largest count of any rank).
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from reinforge.batch import Batch
from reinforge.distributed.process_group import all_reduce, full_tensor, gather_rows, world_size
from reinforge.environment.multimodal import MM_KEY

FORWARD_KEYS = ("input_ids", "attention_mask", "position_ids", "responses", MM_KEY)  # what a model forward reads (the
# rows' images' inputs when they have images)


def global_batch_info(response_mask: torch.Tensor, loss_scale_factor: float | None) -> dict:
    """The mini-batch totals that `agg_loss` normalises by (verl's `config.global_batch_info`): tokens and
    sequences summed over the data-parallel ranks (each holds its share of the mini-batch), and their number.
    As verl's trainer, the sequences are all the mini-batch's rows (ppo_mini_batch_size x rollout.n), those that
    rejection sampling emptied included, and the tokens those of the response mask after rejection."""
    tokens, sequences = all_reduce([int(response_mask.sum()), int(response_mask.shape[0])])
    return {"dp_size": world_size(), "batch_num_tokens": int(tokens), "global_batch_size": int(sequences),
            "loss_scale_factor": loss_scale_factor}


@dataclass
class Trimmed:
    """A micro-batch's forward inputs without the columns that are padding in all its rows (`trim_padding`)."""

    batch: Batch  # FORWARD_KEYS, (rows, kept columns); responses (rows, kept response columns)
    attends: torch.Tensor  # (rows, full response width) bool: the response tokens the attention mask keeps

    def widen(self, values: torch.Tensor | None) -> torch.Tensor | None:
        """Per-token outputs (rows, kept response columns, ...) at the full response width, zero where the mask is 0."""
        if values is None:
            return None
        trailing = values.dim() - 2
        full = torch.nn.functional.pad(values, (0, 0) * trailing + (0, self.attends.shape[1] - values.shape[1]))
        return full.masked_fill(~self.attends.to(full.device).view(*self.attends.shape, *(1,) * trailing), 0)


def used_columns(attention_mask: torch.Tensor) -> tuple[int, int]:
    """[start, end) of the columns that some row's attention mask keeps; (0, 0) when none does."""
    used = attention_mask.bool().any(0).nonzero().flatten().tolist()
    return (used[0], used[-1] + 1) if used else (0, 0)


def trim_padding(micro: Batch) -> Trimmed:
    """`micro`'s forward inputs cut to the columns its rows use; at least the last prompt column (it predicts the
    first response token) and one response column stay, so the forward's shapes stay valid."""
    width = micro["responses"].shape[1]
    prompt = micro["input_ids"].shape[1] - width
    start, end = used_columns(micro["attention_mask"])
    start, end = max(0, min(start if end else prompt, prompt - 1)), max(end, prompt + 1)
    inputs = {key: micro[key][:, start:end] for key in ("input_ids", "attention_mask", "position_ids")}
    inputs["responses"] = micro["responses"][:, :end - prompt]
    images = {MM_KEY: micro[MM_KEY]} if MM_KEY in micro else {}
    return Trimmed(Batch(inputs, images), micro["attention_mask"][:, prompt:].bool())


def balanced_groups(lengths: list[int], count: int) -> list[list[int]]:
    """Row indices in at most `count` non-empty groups of balanced token totals: each row, longest first, joins the
    group with the fewest tokens so far (then the fewest rows), so `count` rows or more fill every group."""
    groups: list[list[int]] = [[] for _ in range(count)]
    lightest = [(0, 0, g) for g in range(count)]  # a heap of (tokens, rows, group)
    for row in sorted(range(len(lengths)), key=lambda r: -lengths[r]):
        tokens, rows, group = heapq.heappop(lightest)
        groups[group].append(row)
        heapq.heappush(lightest, (tokens + lengths[row], rows + 1, group))
    return [sorted(group) for group in groups if group]


def token_budget_count(lengths: list[int], max_tokens: int) -> int:
    """How many micro-batches `lengths` need under a budget of `max_tokens` real tokens each: ceil(total / budget),
    more while groups of several rows are over it (a lone row over it is its own micro-batch), at most one per row."""
    count = max(1, math.ceil(sum(lengths) / max_tokens))
    while count < len(lengths):
        over = sum(len(group) > 1 and sum(lengths[r] for r in group) > max_tokens for group in balanced_groups(lengths, count))
        if not over:
            break
        count += over
    return min(count, max(1, len(lengths)))


def micro_batch_rows(batch: Batch, size: int | None, max_tokens: int | None) -> list[torch.Tensor]:
    """The rows of each micro-batch: `size` consecutive rows (None: all), or with `max_tokens` (use_dynamic_bsz)
    token-budget groups, as many on this rank as on the rank that needs the most (a sharded model's forward and
    backward run collectives that every rank must join)."""
    rows = len(batch)
    if max_tokens is None:
        step = size or rows or 1
        return [torch.arange(start, min(start + step, rows)) for start in range(0, rows, step)]
    lengths = batch["attention_mask"].sum(-1).tolist()
    count = int(all_reduce([token_budget_count(lengths, max_tokens)], "max")[0])
    return [torch.tensor(group) for group in balanced_groups(lengths, count)]


def forward_in_micro_batches(batch: Batch, size: int | None, max_tokens: int | None, device: torch.device | str,
                             forward: Callable[[Batch], tuple[torch.Tensor | None, ...]]) -> tuple[torch.Tensor | None, ...]:
    """`forward(trimmed micro-batch)`'s per-token outputs for every row of `batch`, in its row order, at full
    response width on the CPU (a None output stays None).

    A rank with fewer micro-batches than another repeats its last one (its results are dropped), so the
    collectives of a sharded model's forward stay in step."""
    groups = micro_batch_rows(batch, size, max_tokens)
    most = int(all_reduce([len(groups)], "max")[0])
    if most > len(groups) and not groups:
        raise ValueError("a data-parallel rank got no rows for a forward pass; the batch must split evenly over ranks")
    inputs = batch.select(FORWARD_KEYS)
    outputs = []
    for rows in groups + groups[-1:] * (most - len(groups)):
        trimmed = trim_padding(inputs.index(rows).to(device))
        outputs.append([None if out is None else trimmed.widen(out).cpu() for out in forward(trimmed.batch)])
    order = torch.cat(groups).argsort()  # position of each original row in the concatenated groups
    return tuple(None if parts[0] is None else torch.cat(parts)[order] for parts in zip(*outputs[:len(groups)], strict=True))


def run_epochs(batch: Batch, keys: list[str], mini_size: int, epochs: int, shuffle: bool, role: str,
               optimizer_step: Callable[[Batch], tuple[dict[str, float], bool]]) -> dict[str, float]:
    """`optimizer_step(mini_batch) -> (metrics, stepped)` for every mini-batch of every epoch.

    Returns its metrics averaged over the steps (a `*_min` or `*_max` metric: the smallest or largest, as verl's
    reduce_metrics), plus the counts `<role>/optimizer_steps` and `<role>/nonfinite_skipped` (steps skipped for a
    non-finite loss or gradient)."""
    totals: dict[str, float] = {}
    steps = skipped = 0
    for _ in range(epochs):
        data = batch.select(keys)
        if shuffle:
            data = data.index(torch.randperm(len(data)))
        for mini in data.split(mini_size):
            metrics, stepped = optimizer_step(mini)
            for key, value in metrics.items():
                reduce = min if key.endswith("_min") else max if key.endswith("_max") else operator.add
                totals[key] = reduce(totals[key], value) if key in totals else value
            steps += 1
            skipped += not stepped
    means = {key: value if key.endswith(("_min", "_max")) else value / steps for key, value in totals.items()}
    return {**means, f"{role}/optimizer_steps": float(steps), f"{role}/nonfinite_skipped": float(skipped)}


def micro_batch_mean(per_micro: list[dict[str, float]], dp_size: int) -> dict[str, float]:
    """Each metric's unweighted mean over this rank's micro-batches, as verl averages its ratio metrics (clip fractions,
    ppo_kl, vpred_mean), divided by `dp_size` so that the sum over ranks is the mean over all micro-batches."""
    return {key: sum(values[key] for values in per_micro) / len(per_micro) / dp_size for key in (per_micro or [{}])[0]}


def gathered_rows(parts: list[tuple[torch.Tensor, ...]]) -> list[torch.Tensor]:
    """Per-micro-batch tuples of row tensors, concatenated field by field, with every rank's rows."""
    return gather_rows([torch.cat(field) for field in zip(*parts, strict=True)])


def backward_if_finite(loss: torch.Tensor) -> bool:
    """Back-propagate `loss` unless it is NaN/inf (a NaN would poison every gradient); returns whether it was finite."""
    if not all_reduce([float(torch.isfinite(loss).all())], "min")[0]:  # every rank must run the same backwards
        return False
    loss.backward()
    return True


def clip_and_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float,
                  loss_finite: bool = True) -> tuple[float, bool]:
    """Clip the accumulated gradient and step; a non-finite loss or gradient norm skips the step and drops the gradient.

    Returns (pre-clip gradient norm, stepped); the norm is NaN when a non-finite loss left the gradient incomplete."""
    grad_norm = full_tensor(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)).item() if loss_finite else math.nan
    if math.isfinite(grad_norm):
        optimizer.step()
        return grad_norm, True
    optimizer.zero_grad(set_to_none=True)
    return grad_norm, False


@contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """The model in eval mode (no dropout) for a forward-only pass, then each of its modules back to its own previous
    mode (a wrapper's flag need not be its inner model's: the reference `WithoutAdapters` around the training policy)."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training
