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

On several data-parallel ranks (`distributed/process_group.py`), the mini-batch totals are summed
over the ranks, a NaN loss on any rank skips the backward on all of them (a sharded model's
backward runs collectives that every rank must join), and forward-only passes run the same number
of micro-batches on every rank.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from reinforge.batch import Batch
from reinforge.distributed.process_group import all_reduce, full_tensor, world_size

FORWARD_KEYS = ("input_ids", "attention_mask", "position_ids", "responses")  # what a model forward reads


def global_batch_info(response_mask: torch.Tensor, loss_scale_factor: float | None) -> dict:
    """The mini-batch totals that `agg_loss` normalises by (verl's `config.global_batch_info`): tokens and
    sequences summed over the data-parallel ranks (each holds its share of the mini-batch), and their number."""
    tokens, sequences = all_reduce([int(response_mask.sum()), int((response_mask.sum(-1) > 0).sum())])
    return {"dp_size": world_size(), "batch_num_tokens": int(tokens), "global_batch_size": int(sequences),
            "loss_scale_factor": loss_scale_factor}


def forward_micro_batches(batch: Batch, size: int | None) -> tuple[list[Batch], int]:
    """`batch` split into micro-batches of `size` rows for a forward-only pass, and how many of them are real.

    A sharded model runs collectives in every forward, so every rank must run as many as the others: a rank with
    fewer micro-batches repeats its last one (the caller drops the results past the real count)."""
    micros = batch.split(size or len(batch))
    most = int(all_reduce([len(micros)], "max")[0])
    if most > len(micros) and not micros:
        raise ValueError("a data-parallel rank got no rows for a forward pass; the batch must split evenly over ranks")
    return micros + micros[-1:] * (most - len(micros)), len(micros)


def run_epochs(batch: Batch, keys: list[str], mini_size: int, epochs: int, shuffle: bool, role: str,
               optimizer_step: Callable[[Batch], tuple[dict[str, float], bool]]) -> dict[str, float]:
    """`optimizer_step(mini_batch) -> (metrics, stepped)` for every mini-batch of every epoch.

    Returns its metrics averaged over the steps, plus the counts `<role>/optimizer_steps` and
    `<role>/nonfinite_skipped` (steps skipped for a non-finite loss or gradient)."""
    totals: dict[str, float] = {}
    steps = skipped = 0
    for _ in range(epochs):
        data = batch.select(keys)
        if shuffle:
            data = data.index(torch.randperm(len(data)))
        for mini in data.split(mini_size):
            metrics, stepped = optimizer_step(mini)
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value
            steps += 1
            skipped += not stepped
    means = {key: value / steps for key, value in totals.items()}
    return {**means, f"{role}/optimizer_steps": float(steps), f"{role}/nonfinite_skipped": float(skipped)}


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
    """The model in eval mode (no dropout) for a forward-only pass, then back to its previous mode."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
