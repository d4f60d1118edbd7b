"""Weights & Biases: project/run names from trainer.project_name / trainer.experiment_name, the resolved config logged.

Never asks for a login: without an API key (`WANDB_API_KEY`, or a `wandb login` entry in ~/.netrc)
the run is offline, and so is it with `WANDB_MODE=offline` (`WANDB_MODE=disabled` writes nothing); the offline run lives in
`<run_dir>/wandb/` (`$WANDB_DIR/wandb/` when set) and `wandb sync <that folder>` uploads it later. `WANDB_ENTITY` and the other
`WANDB_*` variables work as wandb documents them. wandb's capture of stdout is off, so the
console lines stay ours. Validation samples go to `val/generations` as verl's wandb.Table: a row per
validation with the columns step, input_1, output_1, score_1, input_2, ...; it grows with every
validation (wandb tables cannot be appended to, so each is logged anew with the earlier rows).
"""

from __future__ import annotations

import netrc
import os
from pathlib import Path
from urllib.parse import urlparse

from reinforge.trainer.tracking import add_generations_row


def has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class WandbLogger:
    def __init__(self, run_dir: Path, project: str, experiment: str, config: dict, initial_step: int = 0):
        import wandb

        self.wandb = wandb
        disabled = os.environ.get("WANDB_MODE") == "disabled"  # wandb's own off switch: wandb.init then writes nothing
        offline = not disabled and (os.environ.get("WANDB_MODE") == "offline" or not has_api_key())
        self.run = wandb.init(project=project, name=experiment, config=config, dir=os.environ.get("WANDB_DIR") or str(run_dir),
                              mode="offline" if offline else None, settings=wandb.Settings(console="off"))
        self.rows: list[list] = []
        if disabled:
            print("reinforge: wandb is disabled (WANDB_MODE=disabled): nothing is written for it", flush=True)
        elif offline:
            print(f"reinforge: wandb is offline (no API key or WANDB_MODE=offline); upload later with "
                  f"`wandb sync {Path(self.run.dir).parent}`", flush=True)

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def log_generations(self, samples: list[dict], step: int) -> None:
        columns = add_generations_row(self.rows, samples, step)
        self.run.log({"val/generations": self.wandb.Table(columns=columns, data=self.rows)}, step=step)

    def close(self) -> None:
        self.run.finish()
