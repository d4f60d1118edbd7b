"""Config checks and notes for data-parallel (FSDP2) runs: batch sizes that split over the ranks, strategies, fsdp_config."""

import pytest

from reinforge.config import batch_arithmetic, load_config, unused_settings
from reinforge.distributed.process_group import world_size_of
from reinforge.errors import ConfigError

BASE = ["algorithm.adv_estimator=grpo", "data.train_files=/d/train.parquet", "actor_rollout_ref.model.path=/m",
        "trainer.device=cpu", "data.train_batch_size=4", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2"]


def test_world_size_is_nodes_times_gpus_per_node_with_null_as_one():
    assert world_size_of(load_config(BASE)[0]) == 1
    assert world_size_of(load_config([*BASE, "trainer.n_gpus_per_node=2"])[0]) == 2
    assert world_size_of(load_config([*BASE, "trainer.n_gpus_per_node=4"])[0]) == 4


@pytest.mark.parametrize("overrides, message", [
    (["trainer.n_gpus_per_node=3"],
     "data.train_batch_size=4 x rollout.n=2 = 8 trajectories do not split evenly over the 3 data-parallel ranks "
     "(trainer.nnodes=1 x trainer.n_gpus_per_node=3)"),
    (["trainer.n_gpus_per_node=8"],
     "actor_rollout_ref.actor.ppo_mini_batch_size=2 x rollout.n=2 = 4 trajectories do not split evenly over the 8 "
     "data-parallel ranks"),
    (["trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"],
     "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 does not divide the mini-batch of 4 trajectories "
     "(2 on each of 2 ranks)"),
    (["trainer.n_gpus_per_node=4", "critic.enable=true", "critic.ppo_mini_batch_size=1"],
     "critic.ppo_mini_batch_size=1 x rollout.n=2 = 2 trajectories do not split evenly over the 4 data-parallel ranks"),
    (["actor_rollout_ref.ref.strategy=megatron"], "actor_rollout_ref.ref.strategy='megatron' is not one of: fsdp, fsdp2"),
    (["critic.strategy=ddp"], "critic.strategy='ddp' is not one of: fsdp, fsdp2"),
    (["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16"],
     "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype='fp16' is not one of: fp32, bf16, float32, bfloat16"),
    (["critic.model.fsdp_config.mixed_precision.param_type=bf16"],
     "critic.model.fsdp_config.mixed_precision.param_type: unknown; known: param_dtype, reduce_dtype, buffer_dtype"),
])
def test_batches_that_do_not_split_over_the_ranks_are_refused(overrides, message):
    with pytest.raises(ConfigError) as error:
        load_config([*BASE, *overrides])
    assert message in str(error.value)


def test_sizes_that_split_over_the_ranks_pass_and_the_arithmetic_is_per_rank():
    config, _ = load_config([*BASE, "trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
                             "actor_rollout_ref.actor.strategy=fsdp2"])
    arithmetic = batch_arithmetic(config)  # mini-batches of 2 prompts x 2 samples, a quarter on each rank
    assert (arithmetic["data_parallel_ranks"], arithmetic["trajectories_per_rank_mini_batch"]) == (4, 1)
    assert (arithmetic["trajectories_per_micro_batch"], arithmetic["gradient_accumulation"]) == (1, 1)
    config, _ = load_config([*BASE, "trainer.n_gpus_per_node=2"])
    assert (batch_arithmetic(config)["trajectories_per_micro_batch"], batch_arithmetic(config)["gradient_accumulation"]) == (2, 1)


def notes(*overrides: str) -> str:
    config, keys = load_config([*BASE, *overrides])
    return "\n".join(unused_settings(config, keys))


def test_fsdp_settings_are_reported_where_they_do_nothing():
    one_rank = notes("actor_rollout_ref.actor.fsdp_config.param_offload=true")
    assert "actor_rollout_ref.actor.fsdp_config.param_offload: one data-parallel rank" in one_rank
    on_cpu = notes("trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
                   "critic.enable=true", "critic.model.fsdp_config.mixed_precision.param_dtype=bf16")
    assert "actor_rollout_ref.actor.fsdp_config.optimizer_offload: acts on CUDA only" in on_cpu
    assert "critic.model.fsdp_config.mixed_precision.param_dtype: acts on CUDA only" in on_cpu
    sharded = notes("trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.use_kl_loss=true",
                    "actor_rollout_ref.actor.fsdp_config.reshard_after_forward=false",
                    "actor_rollout_ref.ref.fsdp_config.wrap_policy.min_num_params=0", "actor_rollout_ref.actor.fsdp_config.model_dtype=bf16")
    assert "reshard_after_forward" not in sharded and "model_dtype" not in sharded
    assert "actor_rollout_ref.ref.fsdp_config.wrap_policy.min_num_params: FSDP2 shards over all ranks" in sharded
