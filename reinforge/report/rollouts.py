"""Samples a default run keeps for its report: the best and worst responses of its latest steps.

When `trainer.rollout_data_dir` is unset, the trainer writes `<run_dir>/rollouts/<step>.jsonl` each step
with only the `KEEP_ROWS` highest- and `KEEP_ROWS` lowest-scoring responses (verl's rollout record:
input, output, gts, score, step), and keeps the files of the latest `KEEP_STEPS` steps. Decoding 16
responses a step is cheap and the folder stays a few kilobytes. Files of steps after the current one
are left over from an earlier run in the same folder and are removed too, so a fresh or resumed run
never shows another run's samples.
"""

from __future__ import annotations

from pathlib import Path

from reinforge.batch import Batch
from reinforge.report.runs import RECENT_ROLLOUTS
from reinforge.trainer.generations import generation_records, write_generations

KEEP_ROWS = 8  # best and worst responses kept per step
KEEP_STEPS = 3  # step files kept


def keep_recent_rollouts(run_dir: str | Path, batch: Batch, scores: list[float], tokenizer, step: int) -> Path:
    """Write this step's best and worst responses to <run_dir>/rollouts/<step>.jsonl and prune older and stale steps."""
    order = sorted(range(len(scores)), key=lambda row: scores[row], reverse=True)
    rows = sorted(set(order[:KEEP_ROWS]) | set(order[-KEEP_ROWS:]))
    kept = batch.index(rows)
    folder = Path(run_dir) / RECENT_ROLLOUTS
    path = write_generations(folder, step, generation_records(kept, [scores[row] for row in rows], tokenizer, step))
    steps = sorted(int(f.stem) for f in folder.glob("*.jsonl") if f.stem.isdigit())
    for old in steps:
        if old > step or old <= step - KEEP_STEPS:
            (folder / f"{old}.jsonl").unlink(missing_ok=True)
    return path
