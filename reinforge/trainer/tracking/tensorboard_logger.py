"""TensorBoard: scalars and the validation-samples text through torch's SummaryWriter.

The event files go to `$TENSORBOARD_DIR` when set (as in verl), else to `<run_dir>/tensorboard`
(verl's default is `tensorboard_log/<project>/<experiment>` under the working directory; the run
folder keeps a run in one place). A resumed run appends a new event file beside the old ones, which
TensorBoard merges, and hides the events of the steps after the one it resumed from (`purge_step`), so a
step logged before an interruption and again after it is drawn once, as metrics.jsonl keeps it.
"""

from __future__ import annotations

import os
from pathlib import Path

from reinforge.trainer.tracking import generations_markdown


class TensorboardLogger:
    def __init__(self, run_dir: Path, project: str, experiment: str, config: dict, initial_step: int = 0):
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(os.environ.get("TENSORBOARD_DIR") or Path(run_dir) / "tensorboard")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        print(f"reinforge: tensorboard logs in {self.log_dir} (view: tensorboard --logdir {self.log_dir})", flush=True)
        # a resumed run's later steps replace those an interrupted run logged (a fresh one hides nothing: the folder may
        # be a shared $TENSORBOARD_DIR with other runs' curves)
        self.writer = SummaryWriter(str(self.log_dir), purge_step=initial_step + 1 if initial_step > 0 else None)

    def log(self, scalars: dict[str, float], step: int) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)

    def log_generations(self, samples: list[dict], step: int) -> None:
        self.writer.add_text("val/generations", generations_markdown(samples), step)

    def close(self) -> None:
        self.writer.close()
