"""The console logger: one compact, aligned line per training step above a progress bar with ETA.

The line holds step, reward, response length, KL, entropy and step time; validation prints one
line of its `val-core/` metrics. The bar is shown only when stderr is a terminal, so CI logs hold
just the lines. Colour (ANSI) is used only when stdout is a terminal and NO_COLOR is unset
(https://no-color.org).
"""

from __future__ import annotations

import os
import sys

from tqdm import tqdm

BOLD, GREEN, RESET = "\033[1m", "\033[32m", "\033[0m"


def use_colour() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


class ConsoleLogger:
    def __init__(self, total_steps: int, initial_step: int = 0):
        self.total_steps = total_steps
        self.colour = use_colour()
        self.progress = tqdm(total=total_steps, initial=initial_step, unit="step", dynamic_ncols=True,
                             disable=not sys.stderr.isatty(), leave=False)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if "train/loss" in metrics:  # reinforge sft
            self.progress.update(1)
            self.write(f"step {step:>{len(str(self.total_steps))}}/{self.total_steps} | loss {metrics['train/loss']:.4f} | "
                       f"lr {metrics['train/lr']:.2e} | grad_norm {metrics['train/grad_norm']:.3f} | {metrics['train/time(s)']:.2f}s")
        if "val/loss" in metrics:
            self.write(f"validation @ step {step}: val/loss {metrics['val/loss']:.4f}")
        if "timing_s/step" in metrics:
            self.progress.update(1)
            self.write(self.step_line(metrics, step))
        val = {k: v for k, v in metrics.items() if k.startswith("val-core/")}
        if val:
            self.write(f"validation @ step {step}: " + "  ".join(f"{k} {v:.4f}" for k, v in sorted(val.items())))

    def step_line(self, m: dict[str, float], step: int) -> str:
        # KL to the reference (the loss's, or the reward's penalty); without a reference, the update's KL to the old policy
        label, kl = next(((label, m[key]) for key, label in (("actor/kl_loss", "kl"), ("actor/reward_kl_penalty", "kl"),
                                                            ("actor/ppo_kl", "ppo_kl")) if key in m), ("kl", 0.0))
        width = len(str(self.total_steps))
        head = f"step {step:>{width}}/{self.total_steps}"
        reward = f"reward {m['critic/score/mean']:.3f}"
        if self.colour:
            head, reward = f"{BOLD}{head}{RESET}", f"{GREEN}{reward}{RESET}"
        actor = (f"{label} {kl:.4f} | entropy {m['actor/entropy']:.3f}" if "actor/entropy" in m
                 else "actor not updated (trainer.critic_warmup)")  # a warm-up step trains the critic alone
        return f"{head} | {reward} | resp_len {m['response_length/mean']:5.1f} | {actor} | {m['timing_s/step']:.2f}s"

    def write(self, line: str) -> None:
        self.progress.write(line, file=sys.stdout) if not self.progress.disable else print(line, flush=True)

    def close(self) -> None:
        self.progress.close()
