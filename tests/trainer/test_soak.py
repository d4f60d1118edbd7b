"""Soak: 300 steps of the tiny task with a checkpoint every 10 steps stay flat in memory and file handles.

The run is in-process; its own metrics are the measurements: `perf/cpu_memory_used_gb` (the
process's RSS after each update) and, from the reward function, the number of open file
descriptors (`/proc/self/fd`) as an extra reward value (`reward/open_fds/mean`). After a warm-up
of WARMUP steps RSS may not grow by 10% or more, and the descriptor count may not grow at all.
The run folder ends with exactly the kept checkpoints, whole, and nothing half-written.
"""

import json
import sys

import pytest

from reinforge.config import load_config
from reinforge.trainer.checkpoint import TRACKER
from reinforge.trainer.main import run
from reinforge.trainer.run_folder import LOCK
from tests.trainer.conftest import train_steps

STEPS, WARMUP, SAVE_FREQ, KEEP = 300, 50, 10, 3

FD_COUNTING_REWARD = """
import os

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": sum(map(ord, solution_str)) % 7 / 7, "open_fds": len(os.listdir("/proc/self/fd"))}
"""


@pytest.mark.soak
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_300_steps_with_checkpoints_keep_memory_and_file_handles_flat(small_run, tmp_path):
    reward = tmp_path / "fd_reward.py"
    reward.write_text(FD_COUNTING_REWARD)
    run_dir = tmp_path / "run"
    config, keys = load_config([*small_run, f"custom_reward_function.path={reward}", f"trainer.default_local_dir={run_dir}",
                                f"trainer.total_training_steps={STEPS}", "trainer.total_epochs=1000",
                                f"trainer.save_freq={SAVE_FREQ}", f"trainer.max_actor_ckpt_to_keep={KEEP}", "trainer.logger=[console]"])
    run(config, keys)

    steps = train_steps(run_dir)
    assert sorted(steps) == list(range(1, STEPS + 1))
    rss_mb = [steps[s]["perf/cpu_memory_used_gb"] * 1024 for s in sorted(steps)]
    fds = [steps[s]["reward/open_fds/mean"] for s in sorted(steps)]
    warm_rss, warm_fds = rss_mb[WARMUP - 1], fds[WARMUP - 1]
    print(f"\nsoak RSS MB: first {rss_mb[0]:.1f}, after warm-up (step {WARMUP}) {warm_rss:.1f}, last {rss_mb[-1]:.1f}, "
          f"max {max(rss_mb):.1f}; open fds: after warm-up {warm_fds:.0f}, last {fds[-1]:.0f}, max {max(fds):.0f}")
    assert max(rss_mb[WARMUP:]) < 1.1 * warm_rss
    assert max(fds[WARMUP:]) <= warm_fds
    assert all(steps[s]["checkpoint/save_failed"] == 0 for s in steps if s % SAVE_FREQ == 0)

    kept = [STEPS - SAVE_FREQ * i for i in reversed(range(KEEP))]
    assert sorted(p.name for p in run_dir.glob("*global_step_*")) == sorted(f"global_step_{s}" for s in kept)
    assert [p.name for p in run_dir.glob(".*")] == [LOCK]  # no temporary, old or half-deleted folder left
    assert (run_dir / TRACKER).read_text().strip() == str(STEPS)
    for step in kept:
        folder = run_dir / f"global_step_{step}"
        assert json.loads((folder / "trainer_state.json").read_text())["global_steps"] == step
        assert (folder / "data.pt").is_file() and (folder / "actor" / "model_world_size_1_rank_0.pt").is_file()
