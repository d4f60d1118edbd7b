"""verl's newest config layout (its group files and top-level sections): keys accepted with verl's defaults, reported
when they do nothing here, refused when they would change what is trained; settings at verl's newer places set the keys
reinforge reads, and two values at the two places are an error."""

import re
import shutil

import pytest

from reinforge.config import load_config
from reinforge.config.fields import node_at
from reinforge.errors import ConfigError
from tests.config.verl_keys import IN_USE, TWO_RANKS, VERL, notes

# ------------------------------------------------------------------------------ newest verl: its group files and top-level sections
CRITIC = ["algorithm.adv_estimator=gae"]


@pytest.mark.parametrize("override, default_value", [
    ("actor_rollout_ref.actor.fsdp_config.per_layer_optimizer_step=true", False),
    ("actor_rollout_ref.ref.fsdp_config.optimizer_step_prefetch_layers=2", 1),
    ("actor_rollout_ref.actor.fsdp_config.offload.param.target=cpu", {}),
    ("actor_rollout_ref.actor.fsdp_config.offload.disk.path=/nvme", {}),
    ("actor_rollout_ref.actor.truncate_padding=true", False), ("actor_rollout_ref.model.truncate_padding=true", False),
    ("critic.model.truncate_padding=true", False), ("actor_rollout_ref.model.lora.dropout=0.1", {}),
    ("critic.model.lora.merge=true", {}), ("actor_rollout_ref.rollout.use_preprocessed_multimodal_input=false", True),
    ("critic.model.custom_chat_template=x", None), ("critic.model.use_liger=true", False),
    ("critic.model.use_fused_kernels=true", False), ("critic.model.fused_kernel_options.impl_backend=triton", {}),
    ("critic.model.tiled_mlp.enabled=true", {}), ("critic.model.mtp.enable=true", {}),
    ("critic.fsdp.param_offload=true", False), ("critic.fsdp.seed=7", 42), ("critic.fsdp.offload.optimizer.target=cpu", {}),
    ("reward_model.num_workers=4", None), ("reward_model.use_reward_loop=false", True),
    ("reward_model.rollout.gpu_memory_utilization=0.3", {}), ("reward_model.inference.tensor_model_parallel_size=2", {}), ("reward_model.reward_loop_source=register", "register"),
    ("reward.num_workers=4", 8), ("reward.reward_model.enable_resource_pool=true", False), ("reward.reward_model.nnodes=1", 0),
    ("reward.reward_model.rollout.name=vllm", {}), ("reward_manager.source=register", "register"),
    ("algorithm.filter_groups.max_inflight_gen_batches=2", 1), ("data.sampler.group_key=extra_info.task", None),
    ("data.sampler.group_ratios=[1,2]", None), ("actor_rollout_ref.actor.optim.lr_wsd_stable_steps_ratio=0.8", 0.9),
    ("trainer.balance_keep_minibatch=true", False), ("trainer.checkpoint_callback_class=pkg.Callback", None),
    ("trainer.use_v1=false", True), ("trainer.v1.trainer_mode=sync", {}), ("trainer.v1.sampler.max_off_policy_threshold=4", {}),
    ("transfer_queue.enable=true", {}), ("actor_rollout_ref.rollout.router_config_path=/r.yaml", None),
    ("transfer_queue.backend.storage_backend=MooncakeStore", {}), ("skip.rollout.enable=false", False),
    ("skip.rollout_tq.enable=true", False), ("skip.async_rollout.steps=[1,2]", []),
])
def test_newest_verl_keys_that_change_only_speed_memory_or_logging_are_accepted_and_reported(override, default_value):
    key = override.split("=")[0].lstrip("+")
    parts, config = key.split("."), load_config(VERL)[0]
    field = next(".".join(parts[:i]) for i in range(1, len(parts) + 1)  # a free-form mapping's key: the mapping's field
                 if i == len(parts) or isinstance(node_at(config, ".".join(parts[:i])), (dict, type(None))))
    assert node_at(config, field) == default_value  # verl's default (a free-form mapping: empty)
    config, keys = load_config([*TWO_RANKS, *IN_USE, *CRITIC, override])
    assert f"{key}: " in notes(config, keys)


@pytest.mark.parametrize("override, message", [
    ("reward.compute_score_kwargs.method=flexible", "passing keyword arguments to the built-in scorers is not supported"),
    ("reward.reward_manager.source=module", "a reward manager class from a module is not supported"),
    ("reward_manager.module.path=/m.py", "a reward manager class from a module is not supported"),
    ("reward_model.reward_loop_module_path=/m.py", "a reward loop manager class from a module is not supported"),
    ("critic.model.lora_adapter_path=/a", "starting the critic's LoRA adapters from a saved adapter is not supported"),
    ("skip.rollout.enable=true", "use actor_rollout_ref.rollout.skip.enable=true"),
    ("trainer.v1.trainer_mode=separate_async", "an asynchronous trainer (rollouts of older policies) is not supported"),
    ("actor_rollout_ref.model.lora.rank=8", "reinforge's LoRA is actor_rollout_ref.model.lora_rank (with lora_alpha, "
     "target_modules): set actor_rollout_ref.model.lora_rank=8"),
    ("critic.model.lora.rank=8", "set critic.model.lora_rank=8"),
    ("critic.model.mtp.enable_train=true", "training multi-token-prediction layers is not supported"),
    ("critic.fsdp.qat.enable=true", "quantization-aware training is not supported"),
    ("actor_rollout_ref.actor.optim.lr_wsd_stable_steps_ratio=0.8", "another constant part of the wsd schedule"),
])
def test_newest_verl_keys_that_change_training_are_refused_unless_at_verls_default(override, message):
    schedule = ["actor_rollout_ref.actor.optim.lr_scheduler_type=wsd"] if "wsd" in override else []
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config([*TWO_RANKS, *CRITIC, *schedule, override])


@pytest.mark.parametrize("override", [
    "reward.custom_reward_function.path=null", "reward.reward_manager.name=naive", "reward.reward_model.enable=false",
    "reward.compute_score_kwargs={}", "reward.reward_manager.source=register", "reward_model.reward_loop_source=null",
    "critic.fsdp.model_dtype=fp32", "critic.model.lora_adapter_path=null", "skip.rollout.enable=false",
    "distillation.enabled=false", "trainer.v1.trainer_mode=sync", "actor_rollout_ref.model.lora.rank=0",
    "actor_rollout_ref.actor.optim.lr_wsd_stable_steps_ratio=0.9",
])
def test_newest_verl_keys_that_change_training_are_accepted_at_verls_default(override):
    load_config([*TWO_RANKS, *CRITIC, "actor_rollout_ref.actor.optim.lr_scheduler_type=wsd", override])


@pytest.mark.parametrize("override, ours, value", [
    ("reward.custom_reward_function.path=/r.py", "custom_reward_function.path", "/r.py"),
    ("reward.custom_reward_function.name=my_score", "custom_reward_function.name", "my_score"),
    ("reward.reward_manager.name=dapo", "reward_model.reward_manager", "dapo"),
    ("+reward.reward_kwargs.max_resp_len=32 +reward.reward_kwargs.overlong_buffer_cfg.len=4",  # verl's DPPO and FAPO scripts
     "reward_model.reward_kwargs", {"max_resp_len": 32, "overlong_buffer_cfg": {"len": 4}}),
    ("reward.reward_model.enable=true reward.reward_model.model_path=/rm", "reward_model.enable", True),
    ("reward.reward_model.model_path=/rm", "reward_model.model.path", "/rm"),
    ("reward_model.model_path=/rm", "reward_model.model.path", "/rm"),
    ("reward.sandbox_fusion.url=http://h/run_code", "reward_model.sandbox_fusion.url", "http://h/run_code"),
    ("reward.sandbox_fusion.memory_limit_mb=512", "reward_model.sandbox_fusion.memory_limit_mb", 512),
    ("reward_manager.name=prime", "reward_model.reward_manager", "prime"),
    ("sandbox_fusion.max_concurrent=8", "reward_model.sandbox_fusion.max_concurrent", 8),
    ("critic.fsdp.model_dtype=bf16", "critic.model.fsdp_config.model_dtype", "bf16"),
    ("critic.fsdp.param_offload=true", "critic.model.fsdp_config.param_offload", True),
    ("critic.fsdp.mixed_precision.param_dtype=bf16", "critic.model.fsdp_config.mixed_precision", {"param_dtype": "bf16"}),
    ("actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=4096",
     "actor_rollout_ref.rollout.update_weights_bucket_megabytes", 4096),
])
def test_verls_newer_places_set_the_keys_reinforge_reads(override, ours, value):
    """verl's current examples set reward.custom_reward_function.path, reward.reward_manager.name, critic.fsdp.*, ...:
    they run as they are, and are not reported as ignored."""
    key = override.split("=")[0].lstrip("+")
    config, keys = load_config([*TWO_RANKS, *CRITIC, *override.split()])
    section, _, name = ours.rpartition(".")
    assert getattr(node_at(config, section) if section else config, name) == value
    # not reported as ignored (on this CPU, an offload or mixed-precision setting is reported as acting on CUDA only)
    reported = [line for line in notes(config, keys).splitlines() if line.startswith(f"{key}: ")]
    assert all("CUDA" in line for line in reported), reported


def test_a_newer_place_and_the_earlier_one_with_two_values_is_an_error():
    config, _ = load_config([*VERL, "reward_model.reward_manager=dapo", "reward.reward_manager.name=dapo",
                             "reward_manager.name=dapo"])  # alike: accepted
    assert config.reward_model.reward_manager == "dapo"
    with pytest.raises(ConfigError, match=re.escape("reward.custom_reward_function.path=/a.py and custom_reward_function.path="
                                                    "/b.py are the same setting (verl's newer and earlier place of it) with "
                                                    "two values; set one of them")):
        load_config([*VERL, "custom_reward_function.path=/b.py", "reward.custom_reward_function.path=/a.py"])


@pytest.mark.parametrize(("override", "given"), [
    ("sandbox_fusion.url=ftp://x", "reward_model.sandbox_fusion.url was given as sandbox_fusion.url"),
    ("reward.sandbox_fusion.max_concurrent=-1",
     "reward_model.sandbox_fusion.max_concurrent was given as reward.sandbox_fusion.max_concurrent"),
])
def test_an_error_about_a_value_given_at_verls_other_place_names_that_place(override, given):
    with pytest.raises(ConfigError, match=re.escape(f"({given}, verl's other place of it)")):
        load_config([*VERL, override])
    with pytest.raises(ConfigError) as error:  # given at reinforge's own place: no note
        load_config([*VERL, "reward_model." + override.removeprefix("reward.")])
    assert "other place" not in str(error.value)


def test_verls_legacy_reward_keys_at_null_keep_the_defaults_and_the_newer_places_decide(tmp_path):
    """verl's newest config has every legacy reward key at null ("not given"): such a command line, or a config file
    with verl's legacy section, loads; the reward section's values are the ones used."""
    nulls = ["reward_model.reward_manager=null", "reward_model.enable=null", "reward_model.enable_resource_pool=null",
             "reward_model.n_gpus_per_node=null", "reward_model.nnodes=null", "reward_model.model.trust_remote_code=null",
             "custom_reward_function.name=null", "custom_reward_function.path=null"]
    config, keys = load_config([*VERL, *nulls, "reward.reward_manager.name=dapo"])
    assert config.reward_model.reward_manager == "dapo" and config.reward_model.enable is False
    assert config.custom_reward_function.name == "compute_score" and config.reward_model.nnodes == 0
    assert not [key for key in keys if key.startswith(("reward_model.", "custom_reward_function."))]
    file = tmp_path / "verl.yaml"
    file.write_text("reward_model:\n  reward_manager: null\n  enable: null\n  num_workers: null\n"
                    "  model: {path: null, external_lib: null, trust_remote_code: null}\n"
                    "custom_reward_function: {path: null, name: null}\nreward:\n  reward_manager: {name: batch}\n")
    config, _ = load_config(VERL, str(file))
    assert config.reward_model.reward_manager == "batch" and config.custom_reward_function.name == "compute_score"
    with pytest.raises(ConfigError, match="'algorithm.gamma' must be a number, got None"):  # elsewhere null is no default
        load_config([*VERL, "algorithm.gamma=null"])


def test_a_verl_config_dump_with_target_lines_and_null_defaults_loads(tmp_path):
    """verl's generated config names a class per section (`_target_`, Hydra's, no setting) and has some defaults at null
    (the newest filter_groups.metric, older versions' min_lr_ratio): such a file loads, those keys at reinforge's defaults."""
    file = tmp_path / "verl_dump.yaml"
    file.write_text("actor_rollout_ref:\n  actor:\n    _target_: verl.workers.config.FSDPActorConfig\n"
                    "    optim: {_target_: verl.workers.config.FSDPOptimizerConfig, lr: 2.0e-06, min_lr_ratio: null}\n"
                    "algorithm:\n  _target_: verl.trainer.config.AlgoConfig\n"
                    "  filter_groups: {_target_: verl.trainer.config.FilterGroupsConfig, enable: false, metric: null}\n"
                    "critic:\n  optim: {min_lr_ratio: null}\n")
    config, keys = load_config(VERL, str(file))
    assert config.actor_rollout_ref.actor.optim.lr == 2e-6 and config.algorithm.filter_groups.metric == "seq_reward"
    assert config.actor_rollout_ref.actor.optim.min_lr_ratio == config.critic.optim.min_lr_ratio == 0.0
    assert not [key for key in keys if key.endswith("_target_")]


def test_critic_settings_of_verls_newer_layout_do_nothing_without_a_critic():
    config, keys = load_config([*VERL, "critic.fsdp.model_dtype=bf16", "critic.model.lora.rank=8"])
    assert "critic.fsdp.model_dtype: no critic in this run" in notes(config, keys)
    config, keys = load_config([*VERL, *CRITIC, "critic.fsdp.reshard_after_forward=false"])
    assert config.critic.model.fsdp_config.reshard_after_forward is False


def test_critic_hf_config_path_and_exclude_modules_are_read_as_the_actors(tiny_model_path, tmp_path):
    import torch

    from reinforge.training.model import load_value_model

    weights, hf_config = tmp_path / "weights", tmp_path / "hf_config"
    for folder, names in ((weights, ["model.safetensors"]), (hf_config, ["config.json"])):
        folder.mkdir()
        for name in names:
            shutil.copy(tiny_model_path / name, folder / name)
    split, _ = load_config([*VERL[:2], *CRITIC, f"actor_rollout_ref.model.path={tiny_model_path}",
                            f"critic.model.path={weights}", f"critic.model.hf_config_path={hf_config}"])
    whole, _ = load_config([*VERL[:2], *CRITIC, f"actor_rollout_ref.model.path={tiny_model_path}"])
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        torch.manual_seed(0)
        from_split = load_value_model(split, "cpu")(ids).logits
        torch.manual_seed(0)
        from_whole = load_value_model(whole, "cpu")(ids).logits
    assert torch.equal(from_split, from_whole)
    from reinforge.training.lora import add_lora

    lora, _ = load_config([*VERL[:2], *CRITIC, f"actor_rollout_ref.model.path={tiny_model_path}", "critic.model.lora_rank=4",
                           "critic.model.exclude_modules=[q_proj]"])
    adapted = {name.rsplit(".", 1)[-1] for name, module in add_lora(load_value_model(lora, "cpu"), lora.critic.model,
                                                                      "critic.model").named_modules() if hasattr(module, "lora_A")}
    assert "k_proj" in adapted and "q_proj" not in adapted
