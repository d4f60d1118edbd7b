"""A run with verl's token-budget keys (use_dynamic_bsz, *_max_token_len_per_gpu) set on the command line."""

import math

import pytest

from reinforge.config import load_config, unused_settings
from reinforge.errors import ConfigError

DYNAMIC = [
    "actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=64",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true", "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=64",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true", "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=64",
    "critic.use_dynamic_bsz=true", "critic.ppo_max_token_len_per_gpu=64", "critic.forward_max_token_len_per_gpu=64",
]


def test_a_run_with_token_budgets_trains_the_actor_and_the_critic(run_steps):
    steps = run_steps(*DYNAMIC, "algorithm.adv_estimator=gae", "critic.enable=true", "actor_rollout_ref.actor.ppo_epochs=2",
                      "actor_rollout_ref.actor.use_kl_loss=true")
    assert sorted(steps) == [1, 2]
    for metrics in steps.values():
        assert metrics["actor/optimizer_steps"] == 2.0 and metrics["actor/nonfinite_skipped"] == 0.0
        assert math.isfinite(metrics["actor/grad_norm"]) and metrics["actor/grad_norm"] > 0
        assert math.isfinite(metrics["critic/grad_norm"]) and metrics["critic/grad_norm"] > 0
        assert math.isfinite(metrics["actor/kl_loss"])


def test_token_budget_keys_are_reported_only_when_they_do_nothing(tiny_model_path):
    base = [f"actor_rollout_ref.model.path={tiny_model_path}", "data.train_files=/x.parquet", "algorithm.adv_estimator=gae"]
    assert unused_settings(*load_config([*base, *DYNAMIC, "actor_rollout_ref.actor.use_kl_loss=true"])) == []
    # without a KL there is no reference model, so its pass's token budget does nothing
    assert unused_settings(*load_config([*base, *DYNAMIC])) == [
        f"{key}: no reference model in this run (it is used by actor_rollout_ref.actor.use_kl_loss or algorithm.use_kl_in_reward)"
        for key in ("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu")]
    notes = "\n".join(unused_settings(*load_config([*base, "critic.forward_max_token_len_per_gpu=64"])))
    assert "critic.forward_max_token_len_per_gpu: a token budget acts only with critic.use_dynamic_bsz=true" in notes
    notes = "\n".join(unused_settings(*load_config([*base, "actor_rollout_ref.actor.use_dynamic_bsz=true",
                                                    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"])))
    assert ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: actor_rollout_ref.actor.use_dynamic_bsz=true forms "
            "micro-batches by token budget instead") in notes


def test_the_passes_follow_the_actors_switch_as_in_verl(tiny_model_path):
    config, _ = load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "data.train_files=/x.parquet",
                             "actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1000",
                             "critic.ppo_max_token_len_per_gpu=3000", "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=false"])
    arr = config.actor_rollout_ref
    assert (arr.rollout.log_prob_use_dynamic_bsz, arr.rollout.log_prob_max_token_len_per_gpu) == (True, 1000)
    assert (arr.ref.log_prob_use_dynamic_bsz, arr.ref.log_prob_max_token_len_per_gpu) == (False, 1000)
    assert (config.critic.use_dynamic_bsz, config.critic.forward_max_token_len_per_gpu) == (True, 3000)
    assert (config.reward_model.use_dynamic_bsz, config.reward_model.forward_max_token_len_per_gpu) == (True, 3000)


def test_a_token_budget_must_be_positive(tiny_model_path):
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.ppo_max_token_len_per_gpu=0 must be > 0"):
        load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "data.train_files=/x.parquet",
                     "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=0"])
