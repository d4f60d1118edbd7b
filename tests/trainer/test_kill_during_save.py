"""SIGKILL during a checkpoint save never costs the last complete checkpoint (tests/trainer/save_under_kill.py).

A real training process (tiny model, real optimizer state, the trainer's own `_save_checkpoint`,
max_actor_ckpt_to_keep=2) saves steps in forked children that are SIGKILLed: just before chosen
filesystem operations of the save (deterministic: before anything, among the actor's files, before
publishing the folder, before and at the tracker update, during retention's deletion), and at
times spread over the measured length of a save (anywhere, inside a file write too). After every
kill: the tracker names the newest complete checkpoint (the killed step's exactly when the kill
came after the tracker update), every visible global_step_<N> folder is complete and holds step
N's weights, and the resume path picks the tracker's. Finally a save and a resume still work and
no hidden leftovers remain.
"""

import json
import subprocess
import sys
from pathlib import Path

import torch

from reinforge.config.schema import TrainerConfig
from reinforge.trainer.checkpoint import STEP_FOLDER, TRACKER, resume_folder
from reinforge.trainer.run_folder import LOCK

REPO = Path(__file__).resolve().parents[2]


class Child:
    def __init__(self, overrides: list[str]):
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.trainer.save_under_kill", json.dumps(overrides)], cwd=REPO,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def answer(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("KILLTEST "):
                return json.loads(line[len("KILLTEST "):])
        raise AssertionError(f"the child exited with status {self.proc.wait()}")

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.answer()


def assert_complete(folder: Path, step: int) -> None:
    """`folder` holds a whole checkpoint of `step`: every file loads and the weights are step's."""
    actor = folder / "actor"
    model = torch.load(actor / "model_world_size_1_rank_0.pt")
    assert all(torch.all(t == step) for t in model.values() if t.is_floating_point()), folder
    assert torch.load(actor / "optim_world_size_1_rank_0.pt")["state"]
    assert "rng" in torch.load(actor / "extra_state_world_size_1_rank_0.pt", weights_only=False)
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= {p.name for p in (actor / "huggingface").iterdir()}
    assert json.loads((folder / "trainer_state.json").read_text())["global_steps"] == step
    assert "epoch" in torch.load(folder / "data.pt")


def assert_resumable(run_dir: Path, step: int) -> None:
    assert (run_dir / TRACKER).read_text().strip() == str(step)
    for folder in run_dir.iterdir():
        if found := STEP_FOLDER.match(folder.name):  # no visible step folder is ever partial
            assert_complete(folder, int(found.group(1)))
    assert resume_folder(TrainerConfig(default_local_dir=str(run_dir))) == run_dir / f"global_step_{step}"


def kill_points(events: list[str]) -> list[int]:
    """Indices of the operations to be killed before: spread over the save, each at a different stage."""
    def first(prefix: str) -> int:
        return next(i for i, e in enumerate(events) if e.startswith(prefix))

    deleting = first("os.rename global_step_")  # retention: the oldest folder renamed to .global_step_N.deleting
    removes = [i for i, e in enumerate(events) if e.startswith("os.remove") and i > deleting]
    return [0, first("open config.json"), first("open trainer_state.json"), first("os.rename .global_step_"),
            first("open .latest_checkpointed_iteration.txt.tmp"), first("os.rename .latest_checkpointed_iteration.txt.tmp"),
            deleting, removes[len(removes) // 2]]


def test_sigkill_at_any_moment_of_a_save_leaves_the_last_complete_checkpoint(small_run, tmp_path):
    run_dir = tmp_path / "run"
    # on the CPU also where a GPU is: the saves run in forked children, where CUDA cannot be used
    child = Child([*small_run, f"trainer.default_local_dir={run_dir}", "trainer.max_actor_ckpt_to_keep=2",
                   "trainer.logger=[console]", "trainer.device=cpu"])
    try:
        assert child.answer() == {"ready": True}
        assert_resumable(run_dir, 2)
        counted = child.ask("count 3")
        assert_resumable(run_dir, 3)
        events = counted["events"]
        tracker_update = events.index(next(e for e in events if e.startswith("os.rename .latest_checkpointed_iteration")))
        latest = step = 3
        for point in kill_points(events):
            step += 1
            assert child.ask(f"event {step} {point}") == {"killed": True}
            latest = step if point > tracker_update else latest
            assert_resumable(run_dir, latest)
        for fraction in (0.3, 0.7):  # timed kills: anywhere in the save, inside a file write too
            step += 1
            child.ask(f"after {step} {fraction * counted['seconds']}")
            previous, latest = latest, int((run_dir / TRACKER).read_text())
            assert latest in (previous, step)
            assert_resumable(run_dir, latest)
        step += 1
        assert child.ask(f"save {step}") == {"saved": True}
        assert_resumable(run_dir, step)
        assert [p.name for p in run_dir.glob(".*")] == [LOCK]  # the save removed what the killed ones left
        kept = [p.name for p in run_dir.glob("global_step_*")]
        assert len(kept) == 2 and f"global_step_{step}" in kept  # max_actor_ckpt_to_keep=2
        assert child.ask("resume") == {"global_steps": step, "weight": float(step)}
    finally:
        child.proc.stdin.close()
        child.proc.wait(timeout=60)
