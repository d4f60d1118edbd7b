"""Where metrics go: metrics.jsonl in the run folder (always) and the console.

The console prints one compact line per step (step, reward, response length, KL, entropy,
step time) above a progress bar with ETA; the bar is shown only on a terminal, so CI logs
hold just the lines.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

from tqdm import tqdm


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class Tracking:
    def __init__(self, run_dir: Path, loggers: list[str], total_steps: int, initial_step: int = 0):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._keep_records_up_to(initial_step)
        self.console = "console" in loggers
        self.total_steps = total_steps
        self.progress = tqdm(total=total_steps, initial=initial_step, unit="step", dynamic_ncols=True,
                             disable=not (self.console and sys.stderr.isatty()), leave=False)

    def _keep_records_up_to(self, step: int) -> None:
        """A resumed run keeps the records of the steps it continues from; a fresh run starts the file anew."""
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text().splitlines() if step > 0 and json.loads(line)["step"] <= step]
        tmp = self.path.with_name(".metrics.jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, self.path)

    def log(self, metrics: dict[str, float], step: int) -> None:
        record = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if not self.console:
            return
        if "timing_s/step" in metrics:
            self.progress.update(1)
            self.write(self.step_line(metrics, step))
        val = {k: v for k, v in metrics.items() if k.startswith("val-core/")}
        if val:
            self.write(f"validation @ step {step}: " + "  ".join(f"{k} {v:.4f}" for k, v in sorted(val.items())))

    def step_line(self, m: dict[str, float], step: int) -> str:
        kl = m.get("actor/kl_loss", m.get("actor/reward_kl_penalty", m.get("actor/ppo_kl", 0.0)))
        width = len(str(self.total_steps))
        return (f"step {step:>{width}}/{self.total_steps} | reward {m['critic/score/mean']:.3f}"
                f" | resp_len {m['response_length/mean']:5.1f} | kl {kl:.4f}"
                f" | entropy {m.get('actor/entropy', float('nan')):.3f} | {m['timing_s/step']:.2f}s")

    def write(self, line: str) -> None:
        self.progress.write(line, file=sys.stdout) if not self.progress.disable else print(line, flush=True)

    def close(self) -> None:
        self.progress.close()
