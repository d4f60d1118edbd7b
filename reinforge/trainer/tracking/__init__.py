"""Where metrics go: `trainer.logger` picks the trackers; metrics.jsonl in the run folder is always written.

Names are verl's: `console`, `file` (here also `jsonl`; both name the metrics.jsonl that is written
anyway), `tensorboard`, `wandb` (also as `tracking`, verl's deprecated alias, with a note), `mlflow`,
`swanlab`, `trackio`. Like verl, `trainer.logger` may be a list or a bare string. Each tracker's package is
imported only when that tracker is asked for, and a missing one fails at config time
(`check_loggers`) with the pip command that installs it.

Every tracker gets the numeric metrics under their own names (`/` kept: trackers group by it;
MLflow alone rewrites characters it forbids, see mlflow_logger.py). NaN and inf are passed on as
they are (each of the trackers stores them; a diverging loss must show); non-numeric values
stay in metrics.jsonl only, where non-finite floats are written as strings ("nan") so every line
is strict JSON. `log_generations` hands the validation samples of `trainer.log_val_generations`
to the trackers that show tables or text.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path

from reinforge.errors import ConfigError, writing
from reinforge.trainer.tracking.console import ConsoleLogger

# tracker name -> (module that must be importable, what `pip install` needs, our module, its class)
OPTIONAL_TRACKERS = {
    "tensorboard": ("tensorboard", "tensorboard", "tensorboard_logger", "TensorboardLogger"),
    "wandb": ("wandb", "wandb", "wandb_logger", "WandbLogger"),
    "mlflow": ("mlflow", "mlflow-skinny", "mlflow_logger", "MlflowLogger"),
    "swanlab": ("swanlab", "swanlab", "swanlab_logger", "SwanlabLogger"),
    "trackio": ("trackio", "trackio", "trackio_logger", "TrackioLogger"),
}
BUILTIN_LOGGERS = ("console", "file", "jsonl")
LOGGER_NAMES = BUILTIN_LOGGERS + tuple(OPTIONAL_TRACKERS)
LOGGER_ALIASES = {"tracking": "wandb"}  # verl's deprecated name: it warns and uses wandb


def logger_names(value: str | list | tuple | None) -> list[str]:
    """`trainer.logger` as a list: verl accepts a bare string (`trainer.logger=console`) as well as a list; verl's
    deprecated `tracking` is read as `wandb`, with a note."""
    if value is None:
        return []
    names = [value] if isinstance(value, str) else [str(name) for name in value]
    aliases = dict.fromkeys(n for n in names if n in LOGGER_ALIASES) if os.environ.get("RANK", "0") == "0" else {}
    for alias in aliases:  # the note once per run: every torchrun rank of `reinforge sft` reads the config
        print(f"reinforge: note: trainer.logger: {alias!r} is deprecated (as in verl); it means {LOGGER_ALIASES[alias]!r}, "
              f"use {LOGGER_ALIASES[alias]!r} instead", flush=True)
    return [LOGGER_ALIASES.get(name, name) for name in names]


# what a tracker refuses in a project name (wandb: these characters, 128 at most; swanlab: a pattern, 100 at most)
PROJECT_NAME_RULES = {"wandb": (re.compile(r"[^/\\#?%:]{0,128}"), "no / \\ # ? % : and at most 128 characters"),
                      "swanlab": (re.compile(r"[0-9a-zA-Z_\-+.]{1,100}"), "letters, digits, _ - + . and at most 100 characters")}


def check_loggers(names: list[str], project: str | None = None) -> None:
    """Fail at start for an unknown tracker name, a tracker whose package is not installed, or a trainer.project_name
    the tracker would refuse once the models are loaded."""
    for name in names:
        rule = PROJECT_NAME_RULES.get(name)
        if rule and project is not None and not rule[0].fullmatch(str(project)):
            raise ConfigError(f"trainer.project_name={project!r} is not a project name {name} takes ({rule[1]}); "
                              f"rename it, or remove {name!r} from trainer.logger")
        if name not in LOGGER_NAMES:
            raise ConfigError(f"trainer.logger: {name!r} is not a logger; choose from {', '.join(LOGGER_NAMES)} "
                              "(metrics.jsonl in the run folder is always written)")
        if name in OPTIONAL_TRACKERS:
            module, package, _, _ = OPTIONAL_TRACKERS[name]
            if find_spec(module) is None:
                raise ConfigError(f"trainer.logger: {name!r} needs the {package!r} package, which is not installed; "
                                  f"run `pip install {package}` (or `pip install \"reinforge[{name}]\"`), "
                                  f"or remove {name!r} from trainer.logger")


def _record_step(line: str) -> float:
    """The step of a metrics.jsonl line; inf for a blank line or one cut short when a run was killed, so it is dropped."""
    try:
        return float(json.loads(line)["step"])
    except (ValueError, TypeError, KeyError):
        return math.inf


def logged_step(run_dir: Path, step: int) -> bool:
    """Whether the run folder's metrics.jsonl holds a record of `step`."""
    path = Path(run_dir) / "metrics.jsonl"
    return path.is_file() and any(_record_step(line) == step for line in path.read_text().splitlines())


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _scalars(metrics: dict) -> dict[str, float]:
    """The numeric metrics as floats (bools and strings left out)."""
    return {k: float(v) for k, v in metrics.items() if isinstance(v, numbers.Real) and not isinstance(v, bool)}


def _open_tracker(name: str, run_dir: Path, project: str, experiment: str, config: dict, initial_step: int):
    """Import the tracker's module (and so its package) only now, and start its run; a tracker that refuses to start
    (a name it does not take, a server it cannot reach) is a ConfigError naming it."""
    _, _, module, cls = OPTIONAL_TRACKERS[name]
    tracker = getattr(import_module(f"{__name__}.{module}"), cls)
    try:
        return tracker(run_dir, project, experiment, config, initial_step)
    except Exception as error:  # noqa: BLE001  (the tracker library's own errors: wandb's UsageError, pydantic's, ...)
        raise ConfigError(f"trainer.logger: {name} could not start its run (trainer.project_name={project!r}, "
                          f"trainer.experiment_name={experiment!r}): {type(error).__name__}: {error}") from error


class Tracking:
    """metrics.jsonl, the console line, and the trackers named in `trainer.logger`, behind one `log`."""

    def __init__(self, run_dir: Path, loggers: str | list[str], total_steps: int, initial_step: int = 0,
                 config=None):
        names = logger_names(loggers)
        check_loggers(names)
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._keep_records_up_to(initial_step)
        self.console = ConsoleLogger(total_steps, initial_step) if "console" in names else None
        project, experiment, config_dict = _run_identity(config)
        self.trackers = {}
        try:
            for name in dict.fromkeys(n for n in names if n in OPTIONAL_TRACKERS):
                self.trackers[name] = _open_tracker(name, Path(run_dir), project, experiment, config_dict, initial_step)
        except BaseException:
            self.close()  # the trackers already started (a wandb process, an open event file) end with the failed start
            raise

    def _keep_records_up_to(self, step: int) -> None:
        """A resumed run keeps the records of the steps it continues from; a fresh run starts the file anew."""
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text().splitlines() if step > 0 and _record_step(line) <= step]
        tmp = self.path.with_name(".metrics.jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, self.path)

    def log(self, metrics: dict[str, float], step: int) -> None:
        record = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        with writing(self.path), self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self.console is not None:
            self.console.log(metrics, step)
        scalars = _scalars(metrics)
        for tracker in self.trackers.values():
            tracker.log(scalars, step)

    def log_generations(self, samples: list[dict], step: int) -> None:
        """Validation samples (records with input, output, gts, score, step) as a table or text in each tracker."""
        if not samples:
            return
        for tracker in self.trackers.values():
            tracker.log_generations(samples, step)

    def close(self) -> None:
        if self.console is not None:
            self.console.close()
        for tracker in self.trackers.values():
            tracker.close()
        self.trackers = {}


def _run_identity(config) -> tuple[str, str, dict]:
    """(project, experiment, resolved config as a dict) for the trackers; defaults when no config is given."""
    if config is None:
        return "reinforge", "run", {}
    from reinforge.config.loading import to_dict
    return config.trainer.project_name, config.trainer.experiment_name, to_dict(config)


def add_generations_row(rows: list[list], samples: list[dict], step: int) -> list[str]:
    """verl's validation-samples table (wandb, trackio): append this validation's row (step, then each sample's input,
    output and score) to `rows`, the earlier validations' rows; returns the columns (step, input_1, output_1, score_1, ...)."""
    names = ("input", "output", "score")
    rows.append([step, *(sample[name] for sample in samples for name in names)])
    return ["step", *(f"{name}_{i + 1}" for i in range(len(samples)) for name in names)]


def generations_markdown(samples: list[dict]) -> str:
    """The samples as a Markdown table (step, input, output, ground truth, score) for text-only trackers."""
    def cell(value) -> str:
        return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")
    lines = ["| step | input | output | ground truth | score |", "|---|---|---|---|---|"]
    for s in samples:
        lines.append(f"| {s['step']} | {cell(s['input'])} | {cell(s['output'])} | {cell(s['gts'])} | {s['score']:.4f} |")
    return "\n".join(lines)
