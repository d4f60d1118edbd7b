"""The PPO update machinery the actor and the critic share: epochs of mini-batches, the optimizer step.

A step's batch is passed over `epochs` times, each time (optionally shuffled and) split into
mini-batches of `mini_size` trajectories; each mini-batch is one optimizer step whose loss is
normalised by the mini-batch's totals (`global_batch_info`), so micro-batches only decide how
the work is split. Metrics are averaged over the optimizer steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from reinforge.batch import Batch

FORWARD_KEYS = ("input_ids", "attention_mask", "position_ids", "responses")  # what a model forward reads


def global_batch_info(response_mask: torch.Tensor, loss_scale_factor: float | None, dp_size: int = 1) -> dict:
    """The mini-batch totals that `agg_loss` normalises by (verl's `config.global_batch_info`)."""
    return {"dp_size": dp_size, "batch_num_tokens": int(response_mask.sum()),
            "global_batch_size": int((response_mask.sum(-1) > 0).sum()), "loss_scale_factor": loss_scale_factor}


def run_epochs(batch: Batch, keys: list[str], mini_size: int, epochs: int, shuffle: bool,
               optimizer_step: Callable[[Batch], dict[str, float]]) -> dict[str, float]:
    """`optimizer_step(mini_batch)` for every mini-batch of every epoch; its metrics averaged over the steps."""
    totals: dict[str, float] = {}
    steps = 0
    for _ in range(epochs):
        data = batch.select(keys)
        if shuffle:
            data = data.index(torch.randperm(len(data)))
        for mini in data.split(mini_size):
            for key, value in optimizer_step(mini).items():
                totals[key] = totals.get(key, 0.0) + value
            steps += 1
    return {key: value / steps for key, value in totals.items()}


def clip_and_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float) -> tuple[float, bool]:
    """Clip the accumulated gradient and step; a non-finite gradient skips the step. Returns (pre-clip norm, stepped)."""
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip).item()
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
