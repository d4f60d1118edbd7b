"""What the tests of verl's keys share: a minimal verl command line, two ranks, and reading the start notes."""

from reinforge.config import load_config, unused_settings
from reinforge.config.fields import node_at

VERL = ["algorithm.adv_estimator=grpo", "data.train_files=/d/train.parquet", "actor_rollout_ref.model.path=/m"]
TWO_RANKS = [*VERL, "trainer.device=cpu", "trainer.n_gpus_per_node=2", "data.train_batch_size=4",
             "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
WITH_REF = ["actor_rollout_ref.actor.use_kl_loss=true"]
IN_USE = [*WITH_REF, "critic.enable=true", "reward_model.enable=true", "reward_model.model.path=/rm"]


def notes(config, keys) -> str:
    """The start notes (settings that do nothing in this run) of a loaded config, one per line."""
    return "\n".join(unused_settings(config, keys))


def default(key: str):
    """The value `key` has on the minimal verl command line."""
    section, _, name = key.rpartition(".")
    return getattr(node_at(load_config(VERL)[0], section), name)
