"""What a final config makes one training step do: the batch arithmetic in verl's units (`batch_arithmetic`), the
batches the training loader draws (`generation_batch`) and what a step trains (`step_batch`), and whether the old-log-prob pass adds sum_pi_squared.

`validate.py` fills in and checks the config these read.
"""

from __future__ import annotations

from reinforge.config.schema import Config


def wants_sum_pi_squared(config: Config) -> bool:
    """Whether the old-log-prob pass adds sum_pi_squared: the advantage estimator takes it, or the user asked for it."""
    from reinforge.algorithm import needs_sum_pi_squared

    return config.actor_rollout_ref.actor.calculate_sum_pi_squared or needs_sum_pi_squared(config.algorithm.adv_estimator)


def generation_batch(config: Config) -> tuple[str, int]:
    """(the key, the prompts) of a batch the training loader draws: data.gen_batch_size under algorithm.filter_groups
    (DAPO draws batches until enough groups are kept) or when it is set apart from data.train_batch_size (verl's trainer
    builds its loader with gen_batch_size and trains every prompt drawn), else data.train_batch_size."""
    data = config.data
    if config.algorithm.filter_groups.enable or data.gen_batch_size not in (None, data.train_batch_size):
        return "data.gen_batch_size", data.gen_batch_size
    return "data.train_batch_size", data.train_batch_size


def step_batch(config: Config) -> tuple[str, int]:
    """(the key, the prompts) of what one step trains: data.train_batch_size groups kept under algorithm.filter_groups,
    else every prompt the loader draws (`generation_batch`)."""
    if config.algorithm.filter_groups.enable:
        return "data.train_batch_size", config.data.train_batch_size
    return generation_batch(config)


def batch_arithmetic(config: Config) -> dict[str, int | bool]:
    """The derived quantities that decide what one training step does."""
    from reinforge.distributed.process_group import world_size_of

    data, actor, rollout = config.data, config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    ranks = world_size_of(config)
    mini = actor.ppo_mini_batch_size * rollout.n
    micro = actor.ppo_micro_batch_size_per_gpu or mini // ranks
    prompts = step_batch(config)[1]
    mini_batches = prompts // actor.ppo_mini_batch_size
    if actor.use_dynamic_bsz:  # micro-batches formed per step from the rows' lengths: only their budget is known
        micro_batching = {"max_tokens_per_micro_batch": actor.ppo_max_token_len_per_gpu}
    else:
        micro_batching = {"trajectories_per_micro_batch": micro, "gradient_accumulation": mini // ranks // micro,
                          "max_tokens_per_micro_batch": micro * (data.max_prompt_length + rollout.response_length)}
    return {
        "prompts_per_step": prompts,
        "trajectories_per_step": prompts * rollout.n,
        "trajectories_per_mini_batch": mini,
        "data_parallel_ranks": ranks,
        "trajectories_per_rank_mini_batch": mini // ranks,
        "mini_batches_per_epoch": mini_batches,
        "optimizer_steps_per_step": mini_batches * actor.ppo_epochs,
        **micro_batching,
        "on_policy_single_update": mini_batches * actor.ppo_epochs == 1,
    }
