"""Exact resume, checked: N steps straight equal k steps, a stop, a resume and N-k more steps.

`assert_resumes_exactly(overrides, tmp_path, stop_after=k, total=N)` trains three times from the
same overrides (a full command line, e.g. the `small_run` fixture plus a case's keys):

1. straight: `trainer.total_training_steps=N` in one go;
2. stopped: the same command, stopped after step k the way a user stops it (a SIGTERM during step
   k: the step, its validation and its scheduled checkpoint finish, the stop saves step k, the run
   raises RunStopped);
3. resumed: the same command again (`trainer.resume_mode=auto`), which must train steps k+1..N.

Then it asserts, with exact equality:
- every record of metrics.jsonl, step by step (validation records included), every key except the
  wall-clock ones listed in WALL_CLOCK;
- every file of the final checkpoint global_step_N, loaded and compared value by value: model,
  optimizer, scheduler, every RNG (torch, numpy, python, the engine's sampler), the data loader's
  position and sampler state, trainer_state.json (step, KL controller, counters), and whatever
  else a checkpoint holds.

For later issues: state that you add to a checkpoint is compared without any change here (every
file is). A feature with state of its own gets a case in tests/trainer/test_exact_resume.py with
the overrides that turn it on. A new metric that depends on wall-clock time or the machine's load
goes into WALL_CLOCK, with the reason, never by dropping a family of keys wholesale.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch

from reinforge.config import load_config
from reinforge.trainer.checkpoint import CHECKSUMS, STEP_RECORD
from reinforge.trainer.main import run
from reinforge.trainer.ppo_trainer import RLTrainer
from reinforge.trainer.stop import RunStopped

# Metric keys (exact names, or prefixes ending in "/") that measure time or the machine, not training.
WALL_CLOCK = (
    "timing_s/",                       # seconds per phase
    "timing_per_token_ms/",            # the same per token
    "perf/time_per_step",              # = timing_s/step
    "perf/throughput",                 # tokens per second
    "perf/mfu/",                       # FLOPs per second over the peak
    "perf/cpu_memory_used_gb",         # the process's RSS, which a resumed process does not share
    "perf/max_memory_allocated_gb",    # GPU peaks since the process started
    "perf/max_memory_reserved_gb",
)


def is_wall_clock(key: str) -> bool:
    return any(key.startswith(p) if p.endswith("/") else key == p for p in WALL_CLOCK)


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _train(overrides: list[str], run_dir: Path, total: int) -> None:
    # the last step is always saved when save_freq > 0; a case may save more often
    config, keys = load_config([f"trainer.save_freq={total}", *overrides, f"trainer.default_local_dir={run_dir}",
                                f"trainer.total_training_steps={total}"])
    run(config, keys)


def stop_after_step(k: int):
    """A patch of RLTrainer.train_step that sends this process SIGTERM at the end of step k (a graceful stop)."""
    original = RLTrainer.train_step

    def train_step(self, prompts):
        metrics = original(self, prompts)
        if self.global_steps == k:
            os.kill(os.getpid(), signal.SIGTERM)
        return metrics

    return mock.patch.object(RLTrainer, "train_step", train_step)


def assert_resumes_exactly(overrides: list[str], tmp_path: Path, stop_after: int, total: int) -> list[dict]:
    """Train straight and stopped-then-resumed (see the module docstring); returns the straight run's records."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _train(overrides, straight, total)
    with stop_after_step(stop_after), pytest.raises(RunStopped) as stopped:
        _train(overrides, resumed, total)
    assert stopped.value.step == stop_after and not stopped.value.abandoned
    assert [r["step"] for r in records(resumed)][-1] == stop_after
    _train(overrides, resumed, total)

    a, b = records(straight), records(resumed)
    assert [r["step"] for r in b] == [r["step"] for r in a]
    assert max(r["step"] for r in a) == total
    for ra, rb in zip(a, b, strict=True):
        kept_a = {k: v for k, v in ra.items() if not is_wall_clock(k)}
        kept_b = {k: v for k, v in rb.items() if not is_wall_clock(k)}
        assert sorted(kept_a) == sorted(kept_b), ra["step"]
        differ = {k: (kept_a[k], kept_b[k]) for k in kept_a if kept_a[k] != kept_b[k]}
        assert not differ, f"step {ra['step']}: {differ}"
    assert_same_folder(straight / f"global_step_{total}", resumed / f"global_step_{total}")
    return a


def assert_same_folder(a: Path, b: Path) -> None:
    """Every file under `a` and `b` holds the same content: .pt files compared as loaded objects, others byte by byte."""
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files_a, f"{a} holds no files"
    assert files_a == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files_a:
        if rel.suffix == ".pt":
            assert_same_state(torch.load(a / rel, weights_only=False), torch.load(b / rel, weights_only=False), str(rel))
        elif rel.name == CHECKSUMS:  # the same files; a .pt file's bytes may differ where its loaded objects do not, and
            # the step record's timings are the clock's
            listed_a, listed_b = (json.loads((root / rel).read_text()) for root in (a, b))
            assert sorted(listed_a) == sorted(listed_b), str(rel)
            assert {k: v for k, v in listed_a.items() if not k.endswith(".pt") and k != STEP_RECORD} == \
                {k: v for k, v in listed_b.items() if not k.endswith(".pt") and k != STEP_RECORD}, str(rel)
        elif rel.name == STEP_RECORD:  # the step's metrics at the save: its timings are the clock's
            saved_a, saved_b = (json.loads((root / rel).read_text()) for root in (a, b))
            assert {k: v for k, v in saved_a.items() if not is_wall_clock(k)} == \
                {k: v for k, v in saved_b.items() if not is_wall_clock(k)}, str(rel)
        else:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), str(rel)


def assert_same_state(x, y, where: str) -> None:
    """Exact equality of nested dicts, lists and tuples of tensors, arrays and plain values; `where` names a difference."""
    assert type(x) is type(y), f"{where}: {type(x).__name__} vs {type(y).__name__}"
    if isinstance(x, torch.Tensor):
        assert x.dtype == y.dtype and torch.equal(x, y), where
    elif isinstance(x, np.ndarray):
        assert x.dtype == y.dtype and np.array_equal(x, y), where
    elif isinstance(x, dict):
        assert list(x) == list(y), f"{where}: keys {list(x)} vs {list(y)}"
        for key in x:
            assert_same_state(x[key], y[key], f"{where}/{key}")
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), where
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            assert_same_state(u, v, f"{where}[{i}]")
    else:
        assert x == y, f"{where}: {x!r} vs {y!r}"
