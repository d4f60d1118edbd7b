"""Checkpoint folders in verl's layout, written atomically, and finding where to resume.

    <run folder>/latest_checkpointed_iteration.txt    the step of the newest complete checkpoint
    <run folder>/global_step_<N>/actor/               model, optimizer, extra state (worker-written)
    <run folder>/global_step_<N>/critic/              the same for the critic, when there is one
    <run folder>/global_step_<N>/data.pt              the prompt loader's position
    <run folder>/global_step_<N>/trainer_state.json   step counter and KL controller

A checkpoint is written into a hidden temporary folder and renamed into place; only then is the
tracker file replaced (also by rename). A crash at any moment leaves the previous checkpoint and
a tracker that points at it. Saving a step that already exists (after resuming from an earlier
one) first moves the old copy aside; resuming puts it back if the crash came in between.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from reinforge.config.schema import TrainerConfig
from reinforge.errors import ConfigError

TRACKER = "latest_checkpointed_iteration.txt"
STEP_FOLDER = re.compile(r"^global_step_(\d+)$")


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def save_checkpoint(run_dir: Path, step: int, write: Callable[[Path], None], keep: int | None = None,
                    keep_critic: int | None = None) -> Path:
    """Call `write(folder)` into a temporary folder, publish it as global_step_<step>, update the tracker.

    Then only the newest `keep` step folders stay (max_actor_ckpt_to_keep), and only the newest
    `keep_critic` of them keep their critic/ (max_critic_ckpt_to_keep); None or 0 keeps all.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    final = run_dir / f"global_step_{step}"
    tmp = run_dir / f".global_step_{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    write(tmp)
    old = run_dir / f".global_step_{step}.old"  # saving a step again: the previous copy waits here
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    _write_atomic(run_dir / TRACKER, f"{step}\n")
    shutil.rmtree(old, ignore_errors=True)
    steps = sorted(int(m.group(1)) for p in run_dir.iterdir() if (m := STEP_FOLDER.match(p.name)))
    if keep:
        for old_step in steps[:-keep]:
            shutil.rmtree(run_dir / f"global_step_{old_step}", ignore_errors=True)
    if keep_critic:
        for old_step in steps[:-keep_critic]:
            shutil.rmtree(run_dir / f"global_step_{old_step}" / "critic", ignore_errors=True)
    return final


def resume_folder(trainer: TrainerConfig) -> Path | None:
    """The global_step_<N> folder to resume from, or None to start fresh."""
    if trainer.resume_mode == "disable":
        return None
    if trainer.resume_mode == "resume_path":
        folder = Path(trainer.resume_from_path).expanduser()
        if not STEP_FOLDER.match(folder.name) or not folder.is_dir():
            raise ConfigError(f"trainer.resume_from_path={trainer.resume_from_path} is not an existing global_step_<N> folder; name "
                              "one that a run saved under its trainer.default_local_dir, or use trainer.resume_mode=auto")
        return folder
    tracker = Path(trainer.default_local_dir) / TRACKER
    if not tracker.is_file():
        return None
    text = tracker.read_text().strip()
    folder = tracker.parent / f"global_step_{text}"
    old = tracker.parent / f".global_step_{text}.old"
    if text.isdigit() and not folder.is_dir() and old.is_dir():  # a crash while saving that step again
        os.replace(old, folder)
    if not text.isdigit() or not folder.is_dir():
        raise ConfigError(
            f"{tracker} names step {text!r} but {folder} does not exist; fix the file or start fresh with trainer.resume_mode=disable"
        )
    return folder


def step_of(folder: Path) -> int:
    return int(STEP_FOLDER.match(folder.name).group(1))
