"""MLflow: experiment = trainer.project_name, run name = trainer.experiment_name (verl's mapping), config as params.

The tracking URI is `MLFLOW_TRACKING_URI` when set, else a local file store in `<run_dir>/mlruns`
(MLflow 3 keeps file stores behind `MLFLOW_ALLOW_FILE_STORE`, which is set for this process only,
when the store is a file store, ours or a `file:` URI or path in `MLFLOW_TRACKING_URI`; view it with `MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri <that folder>`).
Metric names keep their `/`; characters MLflow forbids are rewritten as in verl (`@` -> `_at_`,
anything else outside letters, digits, `_ - . / : space` -> `_`), so `val-core/x/acc/mean@4`
arrives as `val-core/x/acc/mean_at_4`. The config is flattened to dotted params
(`actor_rollout_ref.actor.optim.lr`). Validation samples go to the run's artifacts as
`val_generations/step_<step>.json` (a list of records).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

_FORBIDDEN = re.compile(r"[^\w\-./: ]")
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
BATCH = 100  # MLflow's limit on params per log_batch call (metrics: 1000)


def mlflow_key(name: str) -> str:
    return _FORBIDDEN.sub("_", re.sub(r"/+", "/", name.replace("@", "_at_")))


def flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[mlflow_key(name)] = str(value)[:MAX_PARAM_CHARS]
    return out


class MlflowLogger:
    def __init__(self, run_dir: Path, project: str, experiment: str, config: dict, initial_step: int = 0):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri and (uri.startswith("file:") or "://" not in uri):  # a file store the user chose, as ours below
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        if not uri:
            uri = (Path(run_dir).resolve() / "mlruns").as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            print(f"reinforge: mlflow runs in {uri} (view: MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {uri}; mlflow 3 reads file stores only with that set)", flush=True)
        self.client = MlflowClient(uri)
        found = self.client.get_experiment_by_name(project)
        experiment_id = found.experiment_id if found else self.client.create_experiment(project)
        self.run_id = self.client.create_run(experiment_id, run_name=experiment).info.run_id
        params = [Param(k, v) for k, v in flatten(config).items()]
        for start in range(0, len(params), BATCH):
            self.client.log_batch(self.run_id, params=params[start:start + BATCH])

    def log(self, scalars: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_key(k), v, now, step) for k, v in scalars.items()]
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])

    def log_generations(self, samples: list[dict], step: int) -> None:
        self.client.log_dict(self.run_id, samples, f"val_generations/step_{step}.json")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)
