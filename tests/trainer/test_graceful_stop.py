"""Graceful stop: SIGTERM/SIGINT finish (or abandon) the step, save it, exit 143/130 with a resume hint."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from reinforge.trainer.checkpoint import TRACKER
from reinforge.trainer.stop import RunStopped, StopSignals
from tests.trainer.conftest import SMALL_RUN, train_steps

# Sends SIGTERM to the training process from inside step 2's scoring, so the stop lands mid-step at a known step.
SIGTERM_IN_STEP_2 = """
import os, signal
calls = 0
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    global calls
    calls += 1
    if calls == 5:  # 2 prompts x n=2 responses per step: call 5 is the first score of step 2
        os.kill(os.getpid(), signal.SIGTERM)
    return sum(map(ord, solution_str)) % 7 / 7
"""


def overrides(tiny_model_path, task_files, run_dir: Path, reward: Path, steps: int) -> list[str]:
    train, val = task_files
    return [f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={train}", f"data.val_files={val}",
            f"trainer.default_local_dir={run_dir}", f"custom_reward_function.path={reward}", *SMALL_RUN,
            f"trainer.total_training_steps={steps}", "trainer.logger=[console]"]


def assert_complete_checkpoint(run_dir: Path, step: int) -> None:
    folder = run_dir / f"global_step_{step}"
    assert (run_dir / TRACKER).read_text().strip() == str(step)
    assert json.loads((folder / "trainer_state.json").read_text())["global_steps"] == step
    assert (folder / "data.pt").is_file() and (folder / "actor").is_dir() and any((folder / "actor").iterdir())
    assert not list(run_dir.glob(".global_step_*"))  # no temporary or half-written folder left behind


def test_stop_signals_first_records_second_sigint_raises_then_restores():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM is ignored
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # a second signal that is SIGINT abandons
    assert {s: signal.getsignal(s) for s in before} == before


def test_run_stopped_exit_status_and_message(tmp_path):
    term = RunStopped(signal.SIGTERM, 7, tmp_path / "global_step_7", False, "Run the same command again.")
    assert term.exit_status == 143 and str(term).startswith("stopped by SIGTERM after step 7; resume point: ")
    sigint = RunStopped(signal.SIGINT, 8, None, True, "unused")
    assert sigint.exit_status == 130 and "step 8 abandoned" in str(sigint) and "no checkpoint" in str(sigint)


@pytest.mark.parametrize("save_on_stop", [True, False])
def test_fit_finishes_the_step_then_saves_and_raises(tiny_model_path, task_files, tmp_path, save_on_stop, capsys):
    from reinforge.config import load_config
    from reinforge.trainer.main import run

    reward = tmp_path / "reward.py"
    reward.write_text(SIGTERM_IN_STEP_2)
    run_dir = tmp_path / "run"
    config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, reward, 50)
                               + [f"trainer.save_on_stop={save_on_stop}"])
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunStopped) as stopped:
        run(config, keys)
    assert signal.getsignal(signal.SIGTERM) is handler
    assert stopped.value.step == 2 and stopped.value.exit_status == 143 and not stopped.value.abandoned
    assert sorted(train_steps(run_dir)) == [1, 2]  # step 2 finished and was logged; step 3 never started
    notice = capsys.readouterr().err
    if save_on_stop:
        assert_complete_checkpoint(run_dir, 2)
        assert stopped.value.checkpoint == run_dir / "global_step_2"
        assert "SIGTERM received: finishing the current step, then saving and stopping" in notice
    else:
        assert stopped.value.checkpoint is None and not list(run_dir.glob("*global_step_*"))
        assert "SIGTERM received: finishing the current step, then stopping (trainer.save_on_stop=false: nothing saved)" in notice


def test_a_tracker_that_takes_sigint_for_itself_does_not_stop_the_run_short(tiny_model_path, task_files, tmp_path,
                                                                             monkeypatch):
    """swanlab.init installs a SIGINT handler that ends its run: Ctrl-C must still finish the step and save it."""
    for name in ("SWANLAB_API_KEY", "SWANLAB_MODE", "SWANLAB_LOG_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    from reinforge.config import load_config
    from reinforge.trainer.main import run

    reward = tmp_path / "reward.py"
    reward.write_text(SIGTERM_IN_STEP_2.replace("SIGTERM", "SIGINT"))
    run_dir = tmp_path / "run"
    config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, reward, 50)
                               + ["trainer.logger=[console,swanlab]"])
    with pytest.raises(RunStopped) as stopped:
        run(config, keys)
    assert stopped.value.step == 2 and stopped.value.exit_status == 130 and not stopped.value.abandoned
    assert_complete_checkpoint(run_dir, 2)


def test_cli_sigterm_saves_exits_143_and_the_same_command_resumes(tiny_model_path, task_files, tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.5\n")
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "reinforge", "train", *overrides(tiny_model_path, task_files, run_dir, reward, 200)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in proc.stdout:
            if re.match(r"step +1/200", line):
                proc.send_signal(signal.SIGTERM)
                break
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    found = re.search(r"stopped by SIGTERM after step (\d+); resume point: (\S+)\. Run the same command again", err)
    assert found, err
    step = int(found.group(1))
    assert Path(found.group(2)) == run_dir / f"global_step_{step}"
    assert max(train_steps(run_dir)) == step
    assert_complete_checkpoint(run_dir, step)

    # The same command (with a nearer end so the test stays short) continues at the next step.
    again = [arg if not arg.startswith("trainer.total_training_steps=") else f"trainer.total_training_steps={step + 1}"
             for arg in command]
    resumed = subprocess.run(again, capture_output=True, text=True, env=env, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    assert f"(step {step}); continuing at step {step + 1}" in resumed.stdout
    assert sorted(train_steps(run_dir)) == list(range(1, step + 2))


# Ctrl-C twice from inside step 3's scoring: the second SIGINT abandons step 3.
SIGINT_TWICE_IN_STEP_3 = """
import os, signal
calls = 0
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    global calls
    calls += 1
    if calls == 9:  # the first score of step 3
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    return 0.5
"""


def test_second_sigint_abandons_the_step_and_points_at_the_previous_checkpoint(tiny_model_path, task_files, tmp_path):
    from reinforge.config import load_config
    from reinforge.trainer.main import run

    reward = tmp_path / "reward.py"
    reward.write_text(SIGINT_TWICE_IN_STEP_3)
    run_dir = tmp_path / "run"
    config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, reward, 50) + ["trainer.save_freq=2"])
    with pytest.raises(RunStopped) as stopped:
        run(config, keys)
    assert stopped.value.abandoned and stopped.value.step == 3 and stopped.value.exit_status == 130
    assert stopped.value.checkpoint == run_dir / "global_step_2"
    assert sorted(train_steps(run_dir)) == [1, 2]  # step 3 never logged
    assert_complete_checkpoint(run_dir, 2)
    assert not (run_dir / "global_step_3").exists()
