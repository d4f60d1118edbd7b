"""Short end-to-end runs on the tiny model and the built-in task, for the trainer tests."""

import json
from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.environment.tasks import write_task_files
from reinforge.trainer.main import run

SMALL_RUN = [
    "data.max_samples=32", "data.max_val_samples=4", "data.train_batch_size=2", "data.max_prompt_length=48",
    "data.max_response_length=4", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
    "critic.model.enable_gradient_checkpointing=false", "critic.optim.lr=1e-3", "trainer.total_training_steps=2",
    "trainer.val_before_train=false", "trainer.test_freq=-1", "algorithm.adv_estimator=grpo",
]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def train_steps(run_dir: Path) -> dict[int, dict]:
    return {r["step"]: r for r in records(run_dir) if "timing_s/step" in r}


@pytest.fixture(scope="session")
def task_files(cache_dir):
    return write_task_files()


# The untrained tiny model never answers the task, so its task reward is always 0 and every advantage
# would be 0. This reward varies with the response text, so the updates have something to follow.
VARIED_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return sum(map(ord, solution_str)) % 7 / 7
"""


@pytest.fixture
def small_run(tiny_model_path, task_files, tmp_path) -> list[str]:
    """The overrides of a SMALL_RUN on the tiny model and the built-in task, with VARIED_REWARD (no run folder)."""
    reward = tmp_path / "varied_reward.py"
    reward.write_text(VARIED_REWARD)
    train, val = task_files
    return [f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={train}", f"data.val_files={val}",
            f"custom_reward_function.path={reward}", *SMALL_RUN]


@pytest.fixture
def run_steps(small_run, tmp_path):
    """run_steps(*overrides, run_dir=...) trains a few steps of SMALL_RUN and returns {step: metrics}."""

    def run_steps(*extra: str, run_dir: Path | None = None) -> dict[int, dict]:
        run_dir = run_dir or tmp_path / "run"
        config, keys = load_config([*small_run, f"trainer.default_local_dir={run_dir}", *extra])
        run(config, keys)
        return train_steps(run_dir)

    return run_steps
