"""AdamW and the learning-rate schedule (linear warmup, then constant or cosine).

AdamW runs its fused kernel where torch has one (CPU and CUDA, floating-point parameters): one
pass over each parameter instead of a chain of whole-model temporaries (measured on 2 CPU cores,
4M parameters: 33 ms and 18 MB less peak memory per step, against 93 ms for the default).
The schedule advances once per training step (not per mini-batch), as verl's does.
"""

from __future__ import annotations

import math
import warnings

import torch

from reinforge.config.schema import OptimConfig

FUSED_DEVICES = ("cpu", "cuda")


def make_optimizer(params, optim: OptimConfig) -> torch.optim.AdamW:
    params = [p for p in params if p.requires_grad]
    fused = bool(params) and all(p.device.type in FUSED_DEVICES and p.is_floating_point() for p in params)
    return torch.optim.AdamW(params, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps,
                             weight_decay=optim.weight_decay, fused=fused or None)


def warmup_steps(optim: OptimConfig, total_steps: int) -> int:
    """lr_warmup_steps when >= 0, else lr_warmup_steps_ratio of the total."""
    return optim.lr_warmup_steps if optim.lr_warmup_steps >= 0 else int(optim.lr_warmup_steps_ratio * total_steps)


def lr_factor(step: int, optim: OptimConfig, total_steps: int) -> float:
    """The multiplier of the peak lr after `step` scheduler steps."""
    warmup = warmup_steps(optim, total_steps)
    if step < warmup:
        return step / warmup  # the first warmup step has lr 0, as in transformers' schedules
    if optim.lr_scheduler_type == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total_steps - warmup)
    cosine = 0.5 * (1.0 + math.cos(math.pi * 2.0 * optim.num_cycles * progress))
    return optim.min_lr_ratio + (1.0 - optim.min_lr_ratio) * max(0.0, cosine)


def make_scheduler(optimizer: torch.optim.Optimizer, optim: OptimConfig, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, optim, total_steps))


def advance_schedule(scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
    """One training step of the schedule, whether or not the optimizer stepped: a step skipped for a non-finite
    gradient still counts (the schedule follows the training step, as verl's does). torch warns about a scheduler
    stepped before its optimizer, which here is that skip, reported in `*/nonfinite_skipped`: not repeated."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`")
        scheduler.step()
