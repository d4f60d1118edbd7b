"""SwanLab: project/experiment names from trainer.project_name / trainer.experiment_name, the resolved config logged.

Never asks for a login: the mode is `SWANLAB_MODE` when set, else `cloud` when `SWANLAB_API_KEY`
is set (logged in with it, as verl does) and `offline` otherwise; offline runs are written to
`$SWANLAB_LOG_DIR` or `<run_dir>/swanlog` and uploaded later with `swanlab sync <run folder>`.
Validation samples go to `val/generations` as a Markdown-table swanlab.Text.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from reinforge.trainer.tracking import generations_markdown


class SwanlabLogger:
    def __init__(self, run_dir: Path, project: str, experiment: str, config: dict, initial_step: int = 0):
        import swanlab

        self.swanlab = swanlab
        api_key = os.environ.get("SWANLAB_API_KEY")
        mode = os.environ.get("SWANLAB_MODE") or ("cloud" if api_key else "offline")
        if api_key and mode == "cloud":
            swanlab.login(api_key)
        logdir = os.environ.get("SWANLAB_LOG_DIR") or str(Path(run_dir) / "swanlog")
        sigint = signal.getsignal(signal.SIGINT)
        self.run = swanlab.init(project=project, experiment_name=experiment, config={"FRAMEWORK": "reinforge", **config},
                                logdir=logdir, mode=mode)
        if threading.current_thread() is threading.main_thread():  # swanlab.init's SIGINT handler ends the SwanLab run
            signal.signal(signal.SIGINT, sigint)  # at Ctrl-C, under the step that goes on to finish: the trainer's instead

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.swanlab.log(scalars, step=step)

    def log_generations(self, samples: list[dict], step: int) -> None:
        text = self.swanlab.Text(generations_markdown(samples), caption=f"validation samples @ step {step}")
        self.swanlab.log({"val/generations": text}, step=step)

    def close(self) -> None:
        self.swanlab.finish()
