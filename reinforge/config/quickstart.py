"""The built-in quickstart: what `reinforge train` runs when given no model and no data.

It trains the tiny model that reinforge builds itself (training/tiny_model.py) on the built-in
synthetic task (environment/tasks.py), whose parquet files are written in verl's schema on first
use. The preset applies only when neither `actor_rollout_ref.model.path` nor `data.train_files`
is given; every other key can still be overridden on top of it.
"""

from __future__ import annotations

from reinforge.environment.tasks import TASK, task_files
from reinforge.training.tiny_model import TinyModelSpec, cache_root

SPEC = TinyModelSpec()
_TRAIN, _VAL = task_files()

DESCRIPTION = (
    f"quickstart: GRPO on the built-in '{TASK.data_source}' task ({TASK.summary}) "
    f"with the tiny model {SPEC.name}, built locally"
)

VALUES = {
    "actor_rollout_ref.model.path": str(cache_root() / SPEC.name),
    "actor_rollout_ref.model.enable_gradient_checkpointing": False,
    "data.train_files": str(_TRAIN),
    "data.val_files": str(_VAL),
    "data.max_prompt_length": 64,
    "data.max_response_length": 16,
    "data.train_batch_size": 32,
    "algorithm.adv_estimator": "grpo",
    "actor_rollout_ref.rollout.n": 8,
    "actor_rollout_ref.actor.optim.lr": 3e-3,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 32,
    "actor_rollout_ref.actor.use_kl_loss": True,
    "actor_rollout_ref.actor.kl_loss_coef": 0.001,
    "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
    "trainer.total_epochs": 1000,
    "trainer.total_training_steps": 100,
    "trainer.test_freq": 25,
    "trainer.save_freq": 100,
    "trainer.project_name": "reinforge",
    "trainer.experiment_name": "quickstart",
}


def applies(user_keys: list[str]) -> bool:
    return not any(key in ("actor_rollout_ref.model.path", "data.train_files") for key in user_keys)


def prepare(config) -> None:
    """Build the tiny model and write the task's data files if they are not cached yet."""
    from pathlib import Path

    from reinforge.environment.tasks import write_task_files
    from reinforge.training.tiny_model import ensure_tiny_model

    ensure_tiny_model(SPEC, Path(config.actor_rollout_ref.model.path).parent)
    write_task_files()
