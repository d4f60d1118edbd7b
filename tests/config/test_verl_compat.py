"""verl's config files and keys as verl users write them: defaults lists, hydra sections, renamed and deprecated keys."""

import dataclasses

import pytest

from reinforge.config import batch_arithmetic, load_config, unused_settings
from reinforge.config.derived import generation_batch
from reinforge.config.fields import node_at
from reinforge.errors import ConfigError

VERL = ["algorithm.adv_estimator=grpo", "data.train_files=/d/train.parquet", "actor_rollout_ref.model.path=/m"]
TWO_RANKS = [*VERL, "trainer.device=cpu", "trainer.n_gpus_per_node=2", "data.train_batch_size=4",
             "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
CRITIC_AND_RM = ["critic.enable=true", "reward_model.enable=true", "reward_model.model.path=/rm"]
KEYS = "data:\n  train_batch_size: 16\n  max_response_length: 32\nactor_rollout_ref:\n  rollout:\n    n: 4\n"


def notes(config, keys) -> str:
    return "\n".join(unused_settings(config, keys))


# ------------------------------------------------------------------------------ defaults and hydra
def test_a_verl_style_file_loads_as_if_its_defaults_and_hydra_lines_were_absent(tmp_path):
    plain, verl_style = tmp_path / "plain.yaml", tmp_path / "my_cfg.yaml"
    plain.write_text(KEYS)
    verl_style.write_text("hydra:\n  searchpath:\n    - file://verl/trainer/config\n  run:\n    dir: outputs/x\n"
                          "defaults:\n  - ppo_trainer\n  - _self_\n" + KEYS)
    args = [*VERL, "actor_rollout_ref.actor.ppo_mini_batch_size=16"]
    expected, expected_keys = load_config(args, str(plain))
    config, keys = load_config(args, str(verl_style))
    assert dataclasses.asdict(config) == dataclasses.asdict(expected)
    assert [key for key in keys if not key.startswith("hydra")] == expected_keys
    reported = notes(config, keys)
    assert "hydra.run: Hydra's own setting" in reported and "searchpath" not in reported


@pytest.mark.parametrize("defaults", ["[_self_]", "[ppo_trainer]", "\n  - ppo_trainer\n  - _self_\n  - override hydra/job_logging: disabled"])
def test_defaults_lists_that_mean_the_base_config_under_the_file_are_accepted(tmp_path, defaults):
    file = tmp_path / "cfg.yaml"
    file.write_text(f"defaults: {defaults}\n" + KEYS)
    config, _ = load_config([*VERL, "actor_rollout_ref.actor.ppo_mini_batch_size=16"], str(file))
    assert (config.data.train_batch_size, config.actor_rollout_ref.rollout.n) == (16, 4)


@pytest.mark.parametrize("head, message", [
    ("defaults:\n  - ppo_trainer\n  - actor@actor_rollout_ref.actor: megatron_actor\n  - _self_\n",
     "cfg.yaml: the defaults entry 'actor@actor_rollout_ref.actor: megatron_actor' cannot be loaded"),
    ("defaults:\n  - ppo_megatron_trainer\n  - _self_\n", "cfg.yaml: the defaults entry 'ppo_megatron_trainer' cannot be loaded"),
    ("defaults:\n  - _self_\n  - ppo_trainer\n", "cfg.yaml: the defaults list puts _self_ before ppo_trainer"),
    ("defaults: ppo_trainer\n", "cfg.yaml: 'defaults' must be a list"),
    ("hydra:\n  job:\n    chdir: true\n", "cfg.yaml: hydra.job cannot be honoured"),
    ("hydra:\n  launcher:\n    n_jobs: 2\n", "cfg.yaml: hydra.launcher cannot be honoured"),
])
def test_defaults_and_hydra_settings_reinforge_cannot_honour_name_the_file_and_the_entry(tmp_path, head, message):
    file = tmp_path / "cfg.yaml"
    file.write_text(head + KEYS)
    with pytest.raises(ConfigError) as error:
        load_config(VERL, str(file))
    assert message in str(error.value)


def test_hydras_own_settings_on_the_command_line_are_listed_as_without_effect_or_refused():
    """verl's main_ppo is a Hydra app, so its command line may carry Hydra's settings: those of its outputs and logs
    change nothing here (listed, as from a file's hydra section); one that changes how the job runs is refused."""
    args = [*VERL, "hydra.run.dir=outputs/x", "hydra.verbose=true", "hydra/job_logging=disabled", "hydra.job.name=x",
            "hydra.searchpath=[file://verl/trainer/config]"]
    config, keys = load_config(args)
    assert dataclasses.asdict(config) == dataclasses.asdict(load_config(VERL)[0])
    reported = notes(config, keys)
    for name in ("hydra.run", "hydra.verbose", "hydra/job_logging", "hydra.job"):
        assert f"{name}: Hydra's own setting" in reported
    assert "searchpath" not in reported
    for override, message in (("hydra.job.chdir=true", "hydra.job.chdir=true: hydra.job cannot be honoured"),
                              ("hydra/launcher=submitit", "hydra/launcher=submitit: Hydra's config group hydra/launcher "
                                                          "cannot be honoured")):
        with pytest.raises(ConfigError, match=message):
            load_config([*VERL, override])


# ------------------------------------------------------------------------------ verl's key names
def test_verl_sample_limits_set_the_rows_used():
    config, _ = load_config([*VERL, "data.train_max_samples=64", "data.val_max_samples=8"])
    assert (config.data.max_samples, config.data.max_val_samples) == (64, 8)
    with pytest.raises(ConfigError, match="data.train_max_samples=64 and data.max_samples=32 are the same setting"):
        load_config([*VERL, "data.train_max_samples=64", "data.max_samples=32"])


@pytest.mark.parametrize("override", [
    "actor_rollout_ref.model.use_fused_kernels=true", "trainer.use_legacy_worker_impl=disable",
    "actor_rollout_ref.rollout.enable_prefix_caching=false", "data.filter_overlong_prompts_workers=16",
    "actor_rollout_ref.nccl_timeout=1200", "actor_rollout_ref.actor.checkpoint.async_save=true", "data.use_shm=true",
    "trainer.ray_wait_register_center_timeout=600", "actor_rollout_ref.model.use_liger=true",
    "actor_rollout_ref.model.enable_activation_offload=true", "actor_rollout_ref.actor.entropy_checkpointing=true",
    "actor_rollout_ref.actor.entropy_from_logits_with_chunking=true",
    "actor_rollout_ref.actor.fsdp_config.forward_prefetch=true",
])
def test_verl_infrastructure_switches_are_accepted_and_reported_as_without_effect(override):
    config, keys = load_config([*TWO_RANKS, override])
    assert f"{override.split('=')[0]}: " in notes(config, keys)


def test_critic_rollout_n_is_the_rollout_n():
    config, keys = load_config([*VERL, "critic.enable=true", "actor_rollout_ref.rollout.n=4", "critic.rollout_n=4"])
    assert "critic.rollout_n: " in notes(config, keys)
    with pytest.raises(ConfigError, match="critic.rollout_n=2 differs from actor_rollout_ref.rollout.n=4"):
        load_config([*VERL, "critic.enable=true", "actor_rollout_ref.rollout.n=4", "critic.rollout_n=2"])


def test_gen_batch_size_without_group_filtering_is_the_prompts_of_a_step_as_in_verl():
    """verl's trainer builds its loader with data.gen_batch_size (else train_batch_size) and trains every prompt it draws;
    only DAPO's dynamic sampling (algorithm.filter_groups) trains train_batch_size of the gen_batch_size drawn."""
    config, keys = load_config([*VERL, "data.train_batch_size=16", "+data.gen_batch_size=20",
                                "actor_rollout_ref.actor.ppo_mini_batch_size=4"])
    assert (config.data.train_batch_size, config.data.gen_batch_size) == (16, 20)  # as given, in config.yaml too
    assert batch_arithmetic(config)["prompts_per_step"] == 20 and generation_batch(config) == ("data.gen_batch_size", 20)
    assert ("data.train_batch_size: without algorithm.filter_groups.enable each step draws and trains "
            "data.gen_batch_size=20 prompts, as verl's trainer does") in notes(config, keys)
    for same in ("data.gen_batch_size=null", "data.gen_batch_size=16"):  # nothing set apart: nothing to note
        config, keys = load_config([*VERL, "data.train_batch_size=16", same, "actor_rollout_ref.actor.ppo_mini_batch_size=4"])
        assert generation_batch(config) == ("data.train_batch_size", 16) and "data.train_batch_size" not in notes(config, keys)
    config, keys = load_config([*VERL, "data.train_batch_size=16", "+data.gen_batch_size=20",
                                "algorithm.filter_groups.enable=true", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                                "actor_rollout_ref.rollout.n=2"])
    assert (config.data.train_batch_size, config.data.gen_batch_size) == (16, 20)
    assert "data.train_batch_size" not in notes(config, keys)
    assert generation_batch(config) == ("data.gen_batch_size", 20) and batch_arithmetic(config)["prompts_per_step"] == 16
    with pytest.raises(ConfigError, match=r"^data.gen_batch_size=20 is not a multiple of actor_rollout_ref.actor.ppo_mini_batch_"):
        load_config([*VERL, "data.train_batch_size=16", "+data.gen_batch_size=20", "actor_rollout_ref.actor.ppo_mini_batch_size=8"])


# ------------------------------------------------------------------------------ deprecated global micro-batches
def test_deprecated_global_micro_batches_are_split_over_the_ranks():
    config, _ = load_config([*TWO_RANKS, *CRITIC_AND_RM, "actor_rollout_ref.actor.ppo_micro_batch_size=4",
                             "actor_rollout_ref.rollout.log_prob_micro_batch_size=4",
                             "actor_rollout_ref.ref.log_prob_micro_batch_size=6", "critic.ppo_micro_batch_size=4",
                             "critic.forward_micro_batch_size=8", "reward_model.micro_batch_size=5"])
    arr = config.actor_rollout_ref
    assert (arr.actor.ppo_micro_batch_size_per_gpu, arr.rollout.log_prob_micro_batch_size_per_gpu) == (2, 2)
    assert arr.ref.log_prob_micro_batch_size_per_gpu == 3
    assert (config.critic.ppo_micro_batch_size_per_gpu, config.critic.forward_micro_batch_size_per_gpu) == (2, 4)
    assert config.reward_model.micro_batch_size_per_gpu == 2  # rounded down, as verl's workers do
    one_rank, _ = load_config([*VERL, "actor_rollout_ref.rollout.log_prob_micro_batch_size=8"])
    assert one_rank.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu == 8  # the reference follows the rollout's


def test_global_micro_batches_of_a_critic_or_reward_model_that_is_off_are_only_reported():
    config, keys = load_config([*TWO_RANKS, "critic.ppo_micro_batch_size=1", "critic.ppo_micro_batch_size_per_gpu=1",
                                "reward_model.micro_batch_size=1"])
    reported = notes(config, keys)
    assert "critic.ppo_micro_batch_size: no critic in this run" in reported
    assert "reward_model.micro_batch_size: no reward model in this run" in reported


@pytest.mark.parametrize("section, name", [
    ("actor_rollout_ref.actor", "ppo_micro_batch_size"), ("actor_rollout_ref.rollout", "log_prob_micro_batch_size"),
    ("actor_rollout_ref.ref", "log_prob_micro_batch_size"), ("critic", "ppo_micro_batch_size"),
    ("critic", "forward_micro_batch_size"), ("reward_model", "micro_batch_size"),
])
def test_a_global_micro_batch_and_its_per_gpu_key_together_are_refused(section, name):
    with pytest.raises(ConfigError) as error:
        load_config([*TWO_RANKS, *CRITIC_AND_RM, f"{section}.{name}=4", f"{section}.{name}_per_gpu=2"])
    assert (f"{section}.{name}=4 and {section}.{name}_per_gpu=2 are both set; {section}.{name} is verl's deprecated "
            f"global micro-batch") in str(error.value)


@pytest.mark.parametrize("override, message", [
    ("actor_rollout_ref.actor.ppo_micro_batch_size=1",
     "actor_rollout_ref.actor.ppo_micro_batch_size=1 is verl's deprecated global micro-batch, split over the 2 "
     "data-parallel ranks (trainer.nnodes=1 x trainer.n_gpus_per_node=2): less than one trajectory per rank"),
    ("actor_rollout_ref.actor.ppo_micro_batch_size=6",
     "actor_rollout_ref.actor.ppo_micro_batch_size=6 (3 per rank over 2 ranks) does not divide the mini-batch of 4 "
     "trajectories (2 on each of 2 ranks)"),
    ("reward_model.micro_batch_size=0", "reward_model.micro_batch_size=0 must be > 0"),
])
def test_global_micro_batch_errors_name_the_key_the_user_set(override, message):
    with pytest.raises(ConfigError) as error:
        load_config([*TWO_RANKS, *CRITIC_AND_RM, override])
    assert message in str(error.value)


# ------------------------------------------------------------------------------ errors name the key set
@pytest.mark.parametrize("override, message", [
    ("actor_rollout_ref.actor.clip_ratio=-0.1", "actor_rollout_ref.actor.clip_ratio=-0.1 must be >= 0"),
    ("actor_rollout_ref.actor.clip_ratio_high=-0.1", "actor_rollout_ref.actor.clip_ratio_high=-0.1 must be >= 0"),
    ("actor_rollout_ref.actor.optim.warmup_style=polynomial",
     "actor_rollout_ref.actor.optim.warmup_style='polynomial' is not one of: constant, cosine"),
    ("critic.optim.warmup_style=polynomial", "critic.optim.warmup_style='polynomial' is not one of: constant, cosine"),
    ("actor_rollout_ref.actor.optim.clip_grad=-1", "actor_rollout_ref.actor.optim.clip_grad=-1.0 must be > 0"),
    ("critic.optim.clip_grad=-1", "critic.optim.clip_grad=-1.0 must be > 0"),
])
def test_errors_name_the_key_the_user_set(override, message):
    with pytest.raises(ConfigError) as error:
        load_config([*VERL, override])
    assert message in str(error.value)


# ------------------------------------------------------------------------------ multi-turn and agent keys
@pytest.mark.parametrize("override, default", [
    ("actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode=disable", "strict"),
    ("actor_rollout_ref.rollout.multi_turn.use_inference_chat_template=true", False),
    ("actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts=2", None),
    ("actor_rollout_ref.rollout.agent.custom_async_server.path=server.py", None),
    ("actor_rollout_ref.rollout.agent.custom_async_server.name=AsyncServer", None),
])
def test_verl_multi_turn_and_agent_keys_are_accepted_with_verls_defaults_and_reported_as_without_effect(override, default):
    key = override.split("=")[0]
    section, _, name = key.rpartition(".")
    assert getattr(node_at(load_config(VERL)[0], section), name) == default
    config, keys = load_config([*VERL, "actor_rollout_ref.rollout.multi_turn.enable=true", override])
    assert f"{key}: " in notes(config, keys)


@pytest.mark.parametrize("override", [
    "actor_rollout_ref.rollout.multi_turn.tool_config_path=missing_tools.yaml",
    "actor_rollout_ref.rollout.multi_turn.interaction_config_path=missing_interaction.yaml",
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4",
    "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
])
def test_multi_turn_settings_with_multi_turn_off_are_reported_not_refused(override):
    config, keys = load_config([*VERL, override])
    assert (f"{override.split('=')[0]}: multi-turn rollouts are off (actor_rollout_ref.rollout.multi_turn.enable=true runs an "
            "agent loop per row)") in notes(config, keys)
    config, keys = load_config([*VERL, "actor_rollout_ref.rollout.multi_turn.enable=true",
                                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4"])
    assert "multi-turn rollouts are off" not in notes(config, keys)


def test_max_assistant_turns_zero_means_no_limit_as_in_verl():
    base = ["actor_rollout_ref.rollout.multi_turn.enable=true"]
    config, _ = load_config([*base, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=0"])
    assert config.actor_rollout_ref.rollout.multi_turn.max_assistant_turns == 0  # falsy: no limit, as verl reads it
    with pytest.raises(ConfigError, match="max_assistant_turns=-1 must be >= 0"):
        load_config([*base, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=-1"])
