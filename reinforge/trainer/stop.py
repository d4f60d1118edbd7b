"""How a training run stops short: gracefully on SIGINT (Ctrl-C) or SIGTERM, and with an error when its steps stop
training (`stop_if_nonfinite`) or its reward function fails on every response (`stop_if_every_reward_failed`).

Decided behaviour (`RLTrainer.fit` installs `StopSignals` for the length of the run):

- The first SIGINT or SIGTERM only records the request and prints a notice; the step in progress
  (with its validation and scheduled checkpoint) finishes. Before the next step starts the trainer
  writes a checkpoint of the last finished step (unless `trainer.save_on_stop=false`, or that step
  is already saved), closes the trackers and raises `RunStopped`. A request during the last step
  changes nothing: the run finishes normally.
- A second SIGINT abandons the step in progress (a KeyboardInterrupt at that point). Nothing is
  saved, because the model may be half updated; the latest earlier checkpoint stays the resume point.
  A second SIGTERM is ignored: SIGKILL is the way to stop a run at once.
- `RunStopped.exit_status` is 128 + the signal number (130 for SIGINT, 143 for SIGTERM), which
  the `reinforge` command exits with after printing the message, which says how to resume.
- Handlers are installed only in the main thread (Python allows no other); elsewhere signals keep
  their previous behaviour. The previous handlers are restored when the run ends, however it ends.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from reinforge.errors import RewardError, TrainingError
from reinforge.trainer.checkpoint import TRACKER

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunStopped(BaseException):
    """A run stopped on a signal. A BaseException, like KeyboardInterrupt, so `except Exception` does not swallow it.

    `step` is the last finished step, or the abandoned one when `abandoned`; `checkpoint` the resume point (or None).
    """

    def __init__(self, signum: int, step: int, checkpoint: Path | None, abandoned: bool, resume_hint: str):
        self.signum = signum
        self.step = step
        self.checkpoint = checkpoint
        self.abandoned = abandoned
        self.exit_status = 128 + signum
        name = signal.Signals(signum).name
        if abandoned:
            what = f"stopped by {name}: step {step} abandoned (nothing saved for it)"
        else:
            what = f"stopped by {name} after step {step}"
        if checkpoint is not None:
            where = f"; resume point: {checkpoint}. {resume_hint}"
        else:
            where = "; no checkpoint to resume from (none saved yet), so the same command starts afresh."
        super().__init__(what + where)


class StopSignals:
    """Context manager: records the first SIGINT/SIGTERM in `requested`; a second SIGINT raises KeyboardInterrupt."""

    def __init__(self, saving: bool = True) -> None:
        self.requested: int | None = None
        self.saving = saving  # whether a stop saves the last finished step (trainer.save_on_stop), for the notice
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested is None:
            self.requested = signum
            again = "; Ctrl-C again abandons the step" if signum == signal.SIGINT else ""
            then = "then saving and stopping" if self.saving else "then stopping (trainer.save_on_stop=false: nothing saved)"
            print(f"\nreinforge: {name} received: finishing the current step, {then}{again}", file=sys.stderr, flush=True)
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            print(f"reinforge: {name} received again: still finishing the current step (SIGKILL stops at once)",
                  file=sys.stderr, flush=True)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The global_step_<N> folder the run folder's tracker file names, or None when there is none."""
    tracker = run_dir / TRACKER
    if not tracker.is_file():
        return None
    folder = run_dir / f"global_step_{tracker.read_text().strip()}"
    return folder if folder.is_dir() else None


def count_nonfinite_step(count: int, metrics: dict[str, float]) -> int:
    """Training steps in a row that trained nothing, with this step's `metrics`: a step counts when every optimizer step of
    every update that ran (actor, critic) was skipped for a NaN/inf loss or gradient; a good step resets the count."""
    roles = [role for role in ("actor", "critic") if f"{role}/optimizer_steps" in metrics]
    all_skipped = bool(roles) and all(metrics[f"{r}/nonfinite_skipped"] == metrics[f"{r}/optimizer_steps"] for r in roles)
    return count + 1 if all_skipped else 0


def stop_if_nonfinite(count: int, step: int, limit: int) -> None:
    """A TrainingError when `count` steps up to `step` trained nothing and trainer.max_nonfinite_steps=`limit` (0: never)."""
    if limit and count >= limit:
        raise TrainingError(
            f"steps {step - count + 1} to {step}: {count} training steps in a row had a NaN/inf loss or gradient in every "
            f"optimizer step, so nothing trained (trainer.max_nonfinite_steps={limit}). Lower the learning rate "
            "(actor_rollout_ref.actor.optim.lr, critic.optim.lr), check the reward function and any custom loss or estimator "
            "for NaN/inf, or set trainer.max_nonfinite_steps=0 to keep going.")


def stop_if_every_reward_failed(step: int, responses: int, counts: dict, reward_fn) -> None:
    """A RewardError when the reward function failed on every response of a training batch: a broken function
    (always raising, returning a string or NaN, hanging past its timeout_s), not an unlucky row; or when no verdict of
    the reward judge parsed."""
    errors, timeouts = counts.get("reward/errors", 0), counts.get("reward/timeouts", 0)
    if responses and counts.get("reward/judge_parse_failures", 0) >= responses:
        raise RewardError(
            f"step {step}: the reward judge's verdict parsed on none of the {responses} responses, so every reward would "
            "be 0; the run stops before this step updates or saves anything. Its first verdict is printed above: make "
            "reward_model.judge.score_pattern match what the judge writes, or the prompt ask for that form (docs/rewards.md)")
    if responses == 0 or errors + timeouts < responses:
        return
    summary = getattr(reward_fn, "failure_summary", None)
    raise RewardError(
        f"step {step}: the reward function failed on all {responses} responses ({errors} errors, "
        f"{timeouts} timeouts), so every reward would be 0; the run stops before this step updates or saves anything. "
        + (f"It is {summary()}. " if summary else "")
        + "Fix the function (or its reward_model.reward_kwargs.timeout_s) and run again; a function that fails only "
        "on some responses scores those 0 and counts them in reward/errors and reward/timeouts."
    )
