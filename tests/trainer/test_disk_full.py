"""A full disk skips checkpoints with a warning and the run goes on; the last good checkpoint stays the resume point.

The disk is made "full" for real: the training process runs with a file-size limit
(RLIMIT_FSIZE, SIGXFSZ ignored) below the size of the model file, so writing it fails with EFBIG,
as a full disk fails with ENOSPC, inside torch's native writer.
"""

import os
import resource
import signal
import subprocess
import sys

from reinforge.config import load_config
from reinforge.trainer.checkpoint import TRACKER
from reinforge.trainer.main import run
from reinforge.trainer.run_folder import LOCK
from tests.trainer.conftest import train_steps

FILE_SIZE_LIMIT = 256 * 1024  # the tiny model's weights are about 0.5 MB, its optimizer state 1 MB


def limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


def test_a_full_disk_skips_the_save_keeps_the_last_checkpoint_and_trains_on(small_run, tmp_path):
    run_dir = tmp_path / "run"
    command = [*small_run, f"trainer.default_local_dir={run_dir}", "trainer.save_freq=1", "trainer.max_actor_ckpt_to_keep=1",
               "trainer.logger=[console]"]
    config, keys = load_config([*command, "trainer.total_training_steps=2"])
    run(config, keys)
    assert (run_dir / TRACKER).read_text().strip() == "2"
    before = sorted(p.relative_to(run_dir) for p in (run_dir / "global_step_2").rglob("*"))

    full = subprocess.run([sys.executable, "-m", "reinforge", "train", *command, "trainer.total_training_steps=4"],
                          capture_output=True, text=True, preexec_fn=limit_file_size, timeout=300,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert full.returncode == 0, full.stderr
    warnings = [line for line in full.stderr.splitlines() if "checkpoint not saved" in line]
    assert len(warnings) == 2 and warnings[0].startswith("reinforge: warning: step 3: checkpoint not saved, a file went over this process's file size limit")
    assert "File too large" in warnings[0] and "the latest checkpoint stays global_step_2" in warnings[0]
    steps = train_steps(run_dir)
    assert sorted(steps) == [1, 2, 3, 4]  # trained on after both failures
    assert [steps[s]["checkpoint/save_failed"] for s in (1, 2, 3, 4)] == [0, 0, 1, 1]
    # max_actor_ckpt_to_keep=1 deleted nothing: the previous checkpoint, whole, is still the resume point
    assert {p.name for p in run_dir.iterdir()} == {TRACKER, "global_step_2", "metrics.jsonl", "config.yaml", "rollouts",
                                                  LOCK}
    assert (run_dir / TRACKER).read_text().strip() == "2"
    assert sorted(p.relative_to(run_dir) for p in (run_dir / "global_step_2").rglob("*")) == before

    config, keys = load_config([*command, "trainer.total_training_steps=4"])  # space again: resumes after step 2
    run(config, keys)
    assert sorted(train_steps(run_dir)) == [1, 2, 3, 4]
    assert (run_dir / TRACKER).read_text().strip() == "4" and (run_dir / "global_step_4").is_dir()
    assert not (run_dir / "global_step_2").exists()
