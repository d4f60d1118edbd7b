"""Trackio (Hugging Face's local-first tracker): project/run names from trainer.project_name / trainer.experiment_name,
the resolved config logged, as verl's `trainer.logger=[trackio]` does.

Runs are written where trackio keeps them (`$TRACKIO_DIR`, by default ~/.cache/huggingface/trackio) and shown with
`trackio show --project <project_name>`; nothing is sent anywhere unless trackio is configured to (a Space). Validation
samples go to `val/generations` as a trackio.Table with verl's wandb layout (a row per validation: step, input_1,
output_1, score_1, input_2, ...), the earlier validations' rows included.
"""

from __future__ import annotations

from pathlib import Path

from reinforge.trainer.tracking import add_generations_row


class TrackioLogger:
    def __init__(self, run_dir: Path, project: str, experiment: str, config: dict, initial_step: int = 0):
        import trackio

        self.trackio = trackio
        self.run = trackio.init(project=project, name=experiment, config=config)
        self.rows: list[list] = []

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.trackio.log(scalars, step=step)

    def log_generations(self, samples: list[dict], step: int) -> None:
        columns = add_generations_row(self.rows, samples, step)
        self.trackio.log({"val/generations": self.trackio.Table(columns=columns, data=self.rows)}, step=step)

    def close(self) -> None:
        self.trackio.finish()
