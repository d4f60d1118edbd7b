"""Reading a run folder for the report: metrics.jsonl, config.yaml and the latest rollout samples.

A run folder is one with a `metrics.jsonl` (written by every `reinforge train`); anything else is a
`UserError` that names the folder. Records that carry `timing_s/step` are training steps; validation
metrics (`val-core/...`, `val-aux/...`) are read from whichever record holds them. Samples come from
`trainer.rollout_data_dir` when the run set it (read from config.yaml, where the trainer writes it as
an absolute path; a relative one, from older runs, is taken from the current folder), else from `<run_dir>/rollouts/`, where the trainer keeps the best
and worst responses of its latest steps (`rollouts.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from reinforge.errors import UserError

NON_FINITE = ("nan", "inf", "-inf")  # how metrics.jsonl writes non-finite values (JSON has no numbers for them)
RECENT_ROLLOUTS = "rollouts"  # <run_dir>/rollouts/<step>.jsonl: the samples a run keeps when rollout_data_dir is unset


@dataclass
class Run:
    """One run's data, as the plots and the page need it."""

    name: str
    path: Path
    records: list[dict]  # every line of metrics.jsonl, in order
    config_text: str = ""  # config.yaml as written by the trainer ("" when missing)
    config: dict = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)  # rollout records of the latest steps (input, output, gts, score, step)

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of `key` over the records that have it, the last record of a step winning. NaN and
        infinities, which metrics.jsonl holds as the strings "nan", "inf" and "-inf", are floats here."""
        by_step: dict[int, float] = {}
        for record in self.records:
            value = record.get(key)
            if value in NON_FINITE:
                value = float(value)
            step = record.get("step")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(step, int):
                by_step[step] = float(value)
        steps = sorted(by_step)
        return steps, [by_step[s] for s in steps]

    def keys(self) -> set[str]:
        return {key for record in self.records for key in record}


def load_run(path: str | Path, sample_steps: int = 3) -> Run:
    """Read the run folder at `path`; a folder without metrics.jsonl is a UserError."""
    folder = Path(path)
    metrics = folder / "metrics.jsonl"
    if not folder.is_dir():
        raise UserError(f"{folder}: no such folder; `reinforge report` takes run folders (trainer.default_local_dir of a run)")
    if not metrics.is_file() and (folder / "config.yaml").is_file():  # a run that stopped before its first step
        raise UserError(f"{folder} is the folder of a run that logged no step (it has config.yaml, no metrics.jsonl); "
                        "report again once it has trained a step")
    if not metrics.is_file():
        raise UserError(f"{folder} is not a run folder: it has no metrics.jsonl. Pass the folder a run wrote "
                        "(trainer.default_local_dir, default checkpoints/<project_name>/<experiment_name>)")
    records = _read_jsonl(metrics)
    if not records:
        raise UserError(f"{metrics} is empty: the run has not finished a step yet; report again after its first step")
    config_file = folder / "config.yaml"
    try:
        config_text = config_file.read_text() if config_file.is_file() else ""
        config = yaml.safe_load(config_text) or {} if config_text else {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UserError(f"{config_file} is not valid YAML ({exc}); it is the resolved config the trainer wrote") from exc
    if not isinstance(config, dict):
        raise UserError(f"{config_file} holds a {type(config).__name__}, not the mapping of config keys the trainer writes")
    run = Run(name=folder.resolve().name, path=folder, records=records, config_text=config_text, config=config)
    run.samples = _latest_samples(_rollout_folder(folder, config), sample_steps)
    return run


def _read_jsonl(path: Path) -> list[dict]:
    records = []
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError as exc:
        raise UserError(f"{path} is not text ({exc}); metrics.jsonl holds one JSON object per line") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):  # a run still writing: its last line may be cut short
                break
            raise UserError(f"{path}, line {number}: not JSON ({exc.msg}); metrics.jsonl holds one JSON object per line") from exc
        if isinstance(record, dict):
            records.append(record)
    return records


def _rollout_folder(run_dir: Path, config: dict) -> Path:
    configured = ((config or {}).get("trainer") or {}).get("rollout_data_dir")
    return Path(configured) if configured else run_dir / RECENT_ROLLOUTS


def _latest_samples(folder: Path, steps: int) -> list[dict]:
    """Records of the latest `steps` step files (<step>.jsonl) in `folder`; [] when there are none."""
    if not folder.is_dir():
        return []
    files = sorted((f for f in folder.glob("*.jsonl") if f.stem.isdigit()), key=lambda f: int(f.stem))
    samples = []
    for file in files[-steps:]:
        samples.extend(r for r in _read_jsonl(file) if isinstance(r.get("score"), (int, float)))
    return samples


def best_and_worst(samples: list[dict], count: int) -> tuple[list[dict], list[dict]]:
    """The `count` highest-scoring samples (best first) and the `count` lowest (worst first), without overlap.

    A prompt and response seen more than once (the same answer at several steps or samples) is shown once,
    from its latest step, so the tables are not one row repeated."""
    ranked = sorted(samples, key=lambda r: (-r["score"], -r.get("step", 0)))
    seen: set[tuple[str, str]] = set()
    distinct = []
    for record in ranked:
        text = (str(record.get("input", "")), str(record.get("output", "")))
        if text not in seen:
            seen.add(text)
            distinct.append(record)
    best = distinct[:count]
    worst = distinct[count:][::-1][:count]
    return best, worst


def unique_names(runs: list[Run]) -> None:
    """Runs that share a folder name are told apart by their parent folders."""
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.name] = seen.get(run.name, 0) + 1
    for run in runs:
        if seen[run.name] > 1:
            run.name = str(run.path)
