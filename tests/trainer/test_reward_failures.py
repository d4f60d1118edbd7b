"""A reward function that breaks mid-run stops it cleanly: the step it broke in is neither trained nor saved,
and what was saved before stays."""

import pytest

from reinforge.errors import RewardError
from reinforge.trainer.checkpoint import TRACKER
from tests.trainer.conftest import records, train_steps

BREAKS_AFTER_STEP_1 = """
calls = 0


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    global calls
    calls += 1
    if calls > 4:  # step 1 scores 2 prompts x 2 responses; from step 2 on, every response fails
        return "broken"
    return sum(map(ord, solution_str)) % 7 / 7
"""


def test_a_step_whose_every_reward_fails_stops_the_run_keeping_earlier_checkpoints(run_steps, tmp_path):
    reward = tmp_path / "breaks.py"
    reward.write_text(BREAKS_AFTER_STEP_1)
    run_dir = tmp_path / "run"
    with pytest.raises(RewardError) as stopped:
        run_steps(f"custom_reward_function.path={reward}", "trainer.total_training_steps=3", "trainer.save_freq=1",
                  run_dir=run_dir)
    message = str(stopped.value)
    assert message.startswith("step 2: the reward function failed on all 4 responses (4 errors, 0 timeouts)")
    assert f"compute_score ({reward})" in message and "data_source='reinforge/add_one'" in message
    assert "returned str 'broken'" in message
    assert (run_dir / TRACKER).read_text().strip() == "1"
    assert sorted(p.name for p in run_dir.glob("global_step_*")) == ["global_step_1"]
    assert list(train_steps(run_dir)) == [1]  # step 2 logged nothing


FAILS_ON_VALIDATION = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if extra_info["split"] == "test":
        raise ValueError("no scorer for the test split")
    return sum(map(ord, solution_str)) % 7 / 7
"""


def test_validation_rewards_that_fail_are_counted_and_warned_about(run_steps, tmp_path, capsys):
    reward = tmp_path / "fails_on_validation.py"
    reward.write_text(FAILS_ON_VALIDATION)
    run_dir = tmp_path / "run"
    steps = run_steps(f"custom_reward_function.path={reward}", "trainer.total_training_steps=1", "trainer.test_freq=1",
                      "actor_rollout_ref.rollout.val_kwargs.n=2", run_dir=run_dir)
    assert steps[1]["reward/errors"] == 0  # training rows score
    validation = next(r for r in records(run_dir) if "val-aux/reward/errors" in r)
    assert validation["step"] == 1 and validation["val-aux/reward/errors"] == 8  # 4 prompts x 2 responses
    assert validation["val-aux/reward/timeouts"] == 0
    err = capsys.readouterr().err
    assert "warning: validation @ step 1: the reward function failed on all 8 responses (8 errors, 0 timeouts)" in err
    assert "ValueError: no scorer for the test split" in err
