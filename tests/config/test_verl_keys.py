"""verl keys from verl's example scripts and config files: accepted with verl's defaults, reported when they do nothing
here, refused when they would change what is trained; old names get the replacement suggested. The keys of verl's
newest layout (its group files, top-level sections, newer places) are in test_verl_newer_layout.py."""

import dataclasses
import shutil

import pytest

from reinforge.config import load_config
from reinforge.config.fields import node_at
from reinforge.errors import ConfigError
from tests.config.verl_keys import IN_USE, TWO_RANKS, VERL, default, notes

SP_REASON = "sequences are not split across ranks in this version: each rank computes whole sequences"


# ------------------------------------------------------------------------------ sequence parallelism
SP_KEYS = ["actor_rollout_ref.actor.ulysses_sequence_parallel_size", "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
           "critic.ulysses_sequence_parallel_size", "reward_model.ulysses_sequence_parallel_size",
           "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size",
           "critic.model.fsdp_config.ulysses_sequence_parallel_size"]


@pytest.mark.parametrize("key", SP_KEYS)
def test_ulysses_sequence_parallelism_is_accepted_and_a_size_above_one_reported(key):
    assert default(key) == 1
    config, keys = load_config([*TWO_RANKS, *IN_USE, f"{key}=4"])
    assert f"{key}: {SP_REASON}" in notes(config, keys)
    config, keys = load_config([*TWO_RANKS, *IN_USE, f"{key}=1"])
    assert key not in notes(config, keys)
    with pytest.raises(ConfigError, match=f"^{key}=0 must be > 0"):
        load_config([*TWO_RANKS, *IN_USE, f"{key}=0"])


# ------------------------------------------------------------------------------ rollout
@pytest.mark.parametrize("override, default_value, reason", [
    ("multi_stage_wake_up=true", False, "vLLM/SGLang setting; this run generates with the hf engine"),
    ("cudagraph_capture_sizes=[1,2,4]", None, "vLLM/SGLang setting; this run generates with the hf engine"),
    ("expert_parallel_size=2", 1, "vLLM/SGLang setting; this run generates with the hf engine"),
    ("skip_tokenizer_init=true", False, "vLLM/SGLang setting; this run generates with the hf engine"),
    ("data_parallel_size=2", 1, "generation runs on the training ranks, one engine each"),
    ("trace.backend=mlflow", None, "no rollout tracing in this version"),
    ("trace.token2text=true", False, "no rollout tracing in this version"),
    ("skip_dump_dir=/tmp/dump", "/tmp/rollout_dump", "acts only with actor_rollout_ref.rollout.skip.enable=true"),
])
def test_verl_rollout_keys_are_accepted_with_verls_defaults_and_reported(override, default_value, reason):
    key = "actor_rollout_ref.rollout." + override.split("=")[0]
    assert default(key) == default_value
    config, keys = load_config([*VERL, "actor_rollout_ref.rollout." + override])
    assert f"{key}: {reason}" in notes(config, keys)


def test_gpu_engine_settings_not_handed_to_the_engine_are_reported_with_vllm_too():
    from reinforge.config.unused import unused_settings as report

    config, keys = load_config(VERL)
    config.actor_rollout_ref.rollout.name = "vllm"  # no GPU here: set after the checks that want one
    reported = "\n".join(report(config, ["actor_rollout_ref.rollout.cudagraph_capture_sizes",
                                         "actor_rollout_ref.rollout.multi_stage_wake_up"]))
    assert "cudagraph_capture_sizes: not passed to the engine" in reported
    assert "multi_stage_wake_up: the engine takes back its memory in one step" in reported


@pytest.mark.parametrize("override, message", [
    ("actor_rollout_ref.rollout.over_sample_rate=0.1", "actor_rollout_ref.rollout.over_sample_rate=0.1: stopping generation "
     "early and training on the cut-off requests is not supported in this version"),
])
def test_rollout_keys_that_change_the_training_data_are_refused_unless_at_verls_default(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config([*VERL, override])
    key = override.split("=")[0].lstrip("+")
    config, keys = load_config([*VERL, f"{key}={default(key)}"])
    assert key not in notes(config, keys)


# ------------------------------------------------------------------------------ profilers, PF-PPO
@pytest.mark.parametrize("override", [
    "global_profiler.tool=nsys", "global_profiler.steps=[1,2]", "+global_profiler.global_tool_config.torch_memory.stack_depth=8",
    "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.ref.profiler.all_ranks=true",
    "actor_rollout_ref.rollout.profiler.ranks=[0]", "critic.profiler.enable=true", "reward_model.profiler.enable=true",
])
def test_verl_profiler_sections_are_free_form_and_reported(override):
    config, keys = load_config([*VERL, *IN_USE, override])
    key = override.split("=")[0].lstrip("+")
    assert f"{key}: no profiler integration in this version" in notes(config, keys)


def test_pf_ppo_settings_are_reported_where_they_do_nothing():
    assert (default("algorithm.pf_ppo.reweight_method"), default("algorithm.pf_ppo.weight_pow")) == ("pow", 2.0)
    config, keys = load_config([*VERL, "algorithm.pf_ppo.reweight_method=max_min", "algorithm.pf_ppo.weight_pow=3"])
    assert "algorithm.pf_ppo.weight_pow: acts only with algorithm.use_pf_ppo=true" in notes(config, keys)
    config, keys = load_config([*VERL, "algorithm.use_pf_ppo=true", "algorithm.adv_estimator=gae"])
    assert not [line for line in notes(config, keys) if "pf_ppo" in line]
    config, keys = load_config([*VERL, "algorithm.use_pf_ppo=true", "algorithm.adv_estimator=grpo"])
    assert ("algorithm.use_pf_ppo: PF-PPO redraws the batch after an estimator that uses the critic's values (gae); "
            "algorithm.adv_estimator=grpo does not") in notes(config, keys)
    with pytest.raises(ConfigError, match="algorithm.pf_ppo.reweight_method='maxmin' is not one of: pow, max_min, max_random"):
        load_config([*VERL, "algorithm.use_pf_ppo=true", "algorithm.pf_ppo.reweight_method=maxmin"])


# ------------------------------------------------------------------------------ switches without effect
@pytest.mark.parametrize("override", [
    "actor_rollout_ref.actor.use_fused_kernels=true", "actor_rollout_ref.actor.use_remove_padding=true",
    "actor_rollout_ref.model.fused_kernel_options.impl_backend=triton", "actor_rollout_ref.ref.use_torch_compile=false",
    "actor_rollout_ref.ref.entropy_from_logits_with_chunking=true", "actor_rollout_ref.ref.entropy_checkpointing=true",
    "critic.model.use_shm=true", "reward_model.model.use_fused_kernels=true", "data.return_multi_modal_inputs=false",
    "trainer.esi_redundant_time=60", "reward_model.enable_resource_pool=true", "reward_model.n_gpus_per_node=2",
    "reward_model.nnodes=1", "trainer.use_legacy_worker_impl=False", "trainer.use_legacy_worker_impl=disable",
])
def test_verl_switches_without_effect_here_are_accepted_and_reported(override):
    config, keys = load_config([*TWO_RANKS, *IN_USE, override])
    assert f"{override.split('=')[0]}: " in notes(config, keys)


@pytest.mark.parametrize("section", ["actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model", "reward_model.model"])
@pytest.mark.parametrize("override, default_value", [
    ("strategy=fsdp2", "fsdp"), ("use_orig_params=true", False), ("entropy_from_logits_with_chunking=true", False),
    ("use_torch_compile=false", True), ("entropy_checkpointing=true", False), ("forward_only=true", False),
])
def test_verl_engine_fsdp_config_keys_are_accepted_and_reported(section, override, default_value):
    key = f"{section}.fsdp_config.{override.split('=')[0]}"
    assert default(key) == default_value
    config, keys = load_config([*TWO_RANKS, *IN_USE, f"{section}.fsdp_config.{override}"])
    assert f"{key}: " in notes(config, keys)


def test_reference_settings_without_a_reference_say_so():
    override = "actor_rollout_ref.ref.fsdp_config.param_offload=true"
    config, keys = load_config([*TWO_RANKS, override])
    assert (f"{override.split('=')[0]}: no reference model in this run (it is used by actor_rollout_ref.actor.use_kl_loss "
            "or algorithm.use_kl_in_reward)") in notes(config, keys)
    config, keys = load_config([*TWO_RANKS, "algorithm.use_kl_in_reward=true", override])
    assert "no reference model" not in notes(config, keys)


# ------------------------------------------------------------------------------ old names
@pytest.mark.parametrize("override, suggestion", [
    ("actor_rollout_ref.model.use_rmpad=true", "did you mean 'actor_rollout_ref.model.use_remove_padding'?"),
    ("critic.model.use_rmpad=true", "did you mean 'critic.model.use_remove_padding'?"),
    ("actor_rollout_ref.actor.use_gpg_loss=true", "did you mean 'actor_rollout_ref.actor.policy_loss.loss_mode=gpg'?"),
    ("reward_model.overlong_buffer.len=512", "did you mean '+reward_model.reward_kwargs.overlong_buffer_cfg.len' with "
     "'reward_model.reward_manager=dapo' (docs/rewards.md)?"),
    ("actor_rollout_ref.rollout.tools=[]", "did you mean 'actor_rollout_ref.rollout.multi_turn.tool_config_path' (a YAML"),
    ("actor_rollout_ref.rollout.interactions=[]", "did you mean 'actor_rollout_ref.rollout.multi_turn.interaction_config_path'"),
    ("data.chat_template=x", "did you mean 'actor_rollout_ref.model.custom_chat_template' (a Jinja template string)?"),
    ("data.custom_chat_template=x", "did you mean 'actor_rollout_ref.model.custom_chat_template' (a Jinja template"),
    ("ray_init.num_cpus=4", "did you mean 'ray_kwargs.ray_init.num_cpus' (verl's newer place)?"),
    ("actor_rollout_ref.rollout.name=sglang_async", "'sglang_async' is verl's older name of its SGLang engine; write sglang"),
    ("critic.optim.beta1=0.8", "did you mean 'critic.optim.betas=[<beta1>,<beta2>]' (AdamW's two betas, as one list)?"),
    ("algorithm.policy_loss_fn=ppo", "did you mean 'actor_rollout_ref.actor.policy_loss.loss_mode' (vanilla"),
    ("reward_model.reward_format=gsm8k", "the built-in scorer follows each row's data_source column"),
    # a hint only where its key exists: the data section has no betas
    ("data.beta1=0.9", "unknown config key 'data.beta1'"),
    ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2", "it is a setting of verl's Megatron-LM backend, and "
     "reinforge trains with FSDP2"),
    # verl features not in this version, named rather than mistaken for the closest key
    ("algorithm.codapo_top_k=4", "unknown config key 'algorithm.codapo_top_k'; it is a setting of verl's CoDaPO estimator "
     "(algorithm.adv_estimator=codapo), which is not in this version (docs/algorithms.md lists"),
    ("+trainer.remote_backend=arctic", "it is a setting of verl's remote training backends (Arctic RL), which are not in"),
    # verl's gdpo script passes `algorithm.gamma=$gae_gamma` with the variable unset
    ("algorithm.gamma=", "'algorithm.gamma' must be a number, got an empty value ('algorithm.gamma=' with nothing after it, "
     "e.g. from an unset shell variable); leave the override out to keep the default 1.0"),
])
def test_old_verl_names_suggest_their_replacement(override, suggestion):
    with pytest.raises(ConfigError) as error:
        load_config([*VERL, override])
    assert suggestion in str(error.value)


# ------------------------------------------------------------------------------ hf_config_path, tokenizer_path
def test_hf_config_path_and_tokenizer_path_load_from_their_own_folders(tiny_model_path, tmp_path):
    import torch

    from reinforge.training.model import load_causal_lm, load_tokenizer

    weights, hf_config, tokenizer = tmp_path / "weights", tmp_path / "hf_config", tmp_path / "tokenizer"
    for folder, names in ((weights, ["model.safetensors"]), (hf_config, ["config.json"]),
                          (tokenizer, ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"])):
        folder.mkdir()
        for name in names:
            shutil.copy(tiny_model_path / name, folder / name)
    args = [*VERL[:2], f"actor_rollout_ref.model.path={weights}", f"actor_rollout_ref.model.hf_config_path={hf_config}",
            f"actor_rollout_ref.model.tokenizer_path={tokenizer}"]
    config, _ = load_config(args)
    reference, _ = load_config([*VERL[:2], f"actor_rollout_ref.model.path={tiny_model_path}"])
    ids = load_tokenizer(reference)("0042")["input_ids"]
    assert load_tokenizer(config)("0042")["input_ids"] == ids
    with torch.no_grad():
        split = load_causal_lm(config, "cpu", trainable=False)(torch.tensor([ids])).logits
        whole = load_causal_lm(reference, "cpu", trainable=False)(torch.tensor([ids])).logits
    assert torch.equal(split, whole)
    assert dataclasses.asdict(load_config([*args, f"data.tokenizer={tokenizer}"])[0])["data"]["tokenizer"] == str(tokenizer)
    with pytest.raises(ConfigError, match="data.tokenizer=/other and actor_rollout_ref.model.tokenizer_path=.* both name "
                                          "the policy's tokenizer"):
        load_config([*args, "data.tokenizer=/other"])
    with pytest.raises(ConfigError, match="actor_rollout_ref.model.hf_config_path is not supported with "
                                          "actor_rollout_ref.rollout.name=sglang"):
        load_config([*args, "actor_rollout_ref.rollout.name=sglang"])


# ------------------------------------------------------------------------------ newer verl keys (its _generated_ppo_trainer.yaml)
@pytest.mark.parametrize("override, default_value", [
    ("actor_rollout_ref.actor.fsdp_config.seed=7", 42), ("critic.model.fsdp_config.full_determinism=true", False),
    ("actor_rollout_ref.actor.fsdp_config.entropy_from_logits_chunk_size=512", 2048),
    ("actor_rollout_ref.actor.fsdp_config.use_no_sync_for_gradient_accumulation=false", True),
    ("actor_rollout_ref.actor.fsdp_config.pad_to_length=true", False),
    ("actor_rollout_ref.actor.fsdp_config.pad_to_length_bucket=512", 1024),
    ("actor_rollout_ref.actor.fsdp_config.dtype=float16", "bfloat16"),
    ("actor_rollout_ref.actor.fsdp_config.turbo_config.distributed.tensor_parallel_size=2", {}),
    ("actor_rollout_ref.actor.entropy_from_logits_chunk_size=512", 2048), ("actor_rollout_ref.ref.pad_to_length=true", False),
    ("actor_rollout_ref.actor.data_loader_seed=3", 42), ("critic.data_loader_seed=3", 42),
    ("actor_rollout_ref.actor.calculate_entropy=true", False),
    ("actor_rollout_ref.actor.use_prefix_grouper=true", False),
    ("actor_rollout_ref.actor.checkpoint.strict=false", True), ("actor_rollout_ref.model.tiled_mlp.enabled=true", {}),
    ("actor_rollout_ref.model.mtp.enable_rollout=true", {}), ("data.image_patch_size=16", 14), ("data.audio_key=audio", "audios"),
    ("data.tool_config_path=/t.yaml", None),
    ("data.function_tool_path=/t.py", None), ("actor_rollout_ref.rollout.nnodes=1", 0),
    ("actor_rollout_ref.rollout.n_gpus_per_node=8", None), ("actor_rollout_ref.rollout.seed=1", 42),
    ("actor_rollout_ref.rollout.full_determinism=true", False), ("actor_rollout_ref.rollout.checkpoint_engine.backend=nccl", {}),
    ("actor_rollout_ref.rollout.moe_load_balance_metrics_interval=5", 0),
    ("actor_rollout_ref.rollout.prometheus.enable=true", {}), ("actor_rollout_ref.rollout.cast_to_rollout_dtype=true", False),
    ("actor_rollout_ref.rollout.mtp.enable=true", None), ("actor_rollout_ref.rollout.disaggregation.enabled=true", {}),
    ("actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=4", None),
    ("actor_rollout_ref.rollout.pipeline_model_parallel_size=2", 1), ("actor_rollout_ref.rollout.scheduling_policy=priority", "fcfs"),
    ("actor_rollout_ref.rollout.quantization=fp8", None),
    # verl 0.4/0.5's profiler keys (its configs ship profile_steps: null)
    ("trainer.profile_steps=[1,2]", None), ("+trainer.controller_nsight_options.trace=cuda", {}),
    ("trainer.worker_nsight_options.capture-range=cudaProfilerApi", {}),
])
def test_newer_verl_keys_that_change_only_speed_memory_or_logging_are_accepted_and_reported(override, default_value):
    key = override.split("=")[0].lstrip("+")
    parts, config = key.split("."), load_config(VERL)[0]
    field = next(".".join(parts[:i]) for i in range(1, len(parts) + 1)  # a free-form mapping's key: the mapping's field
                 if i == len(parts) or isinstance(node_at(config, ".".join(parts[:i])), (dict, type(None))))
    assert default(field) == default_value
    config, keys = load_config([*TWO_RANKS, *IN_USE, override])
    assert f"{key}: " in notes(config, keys)


@pytest.mark.parametrize("override, message", [
    ("actor_rollout_ref.actor.qat.enable=true", "quantization-aware training is not supported"),
    ("critic.model.fsdp_config.qat.enable=true", "quantization-aware training is not supported"),
    ("actor_rollout_ref.actor.router_replay.mode=R2", "MoE router replay is not supported"),
    ("actor_rollout_ref.ref.router_replay.mode=R3", "MoE router replay is not supported"),
    ("actor_rollout_ref.actor.rollout_n=3", "actor_rollout_ref.actor.rollout_n=3 differs from actor_rollout_ref.rollout.n=2"),
    ("actor_rollout_ref.ref.rollout_n=3", "actor_rollout_ref.ref.rollout_n=3 differs from actor_rollout_ref.rollout.n=2"),
    ("actor_rollout_ref.model.mtp.enable_train=true", "training the model's multi-token-prediction layers is not supported"),
    ("actor_rollout_ref.rollout.logprobs_mode=raw_logprobs", "another kind of engine log-probs than processed_logprobs"),
    ("actor_rollout_ref.rollout.enable_rollout_routing_replay=true", "replaying the engine's MoE routing in training"),
])
def test_newer_verl_keys_that_change_training_are_refused_unless_at_verls_default(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config([*TWO_RANKS, *override.split()])


def test_zero_indexed_step_false_is_read_by_the_cosine_schedule_only():
    """verl's FSDP engine passes zero_indexed_step to its cosine schedule only; its own test scripts set false with the
    constant one."""
    config, keys = load_config([*TWO_RANKS, "actor_rollout_ref.actor.optim.zero_indexed_step=false"])
    assert "actor_rollout_ref.actor.optim.zero_indexed_step: read by the cosine schedule only, as in verl" in notes(config, keys)


def test_remove_previous_ckpt_in_save_keeps_one_checkpoint_of_each_role_as_verl_reads_it():
    config, _ = load_config([*TWO_RANKS, "+trainer.remove_previous_ckpt_in_save=true", "trainer.max_actor_ckpt_to_keep=5"])
    assert (config.trainer.max_actor_ckpt_to_keep, config.trainer.max_critic_ckpt_to_keep) == (1, 1)


def test_optim_total_training_steps_is_filled_in_by_the_trainer_as_in_verl():
    config, keys = load_config([*TWO_RANKS, "actor_rollout_ref.actor.optim.total_training_steps=100"])
    assert "actor_rollout_ref.actor.optim.total_training_steps: the learning-rate schedule spans the run's" in notes(config, keys)


@pytest.mark.parametrize("override", [
    "actor_rollout_ref.actor.optim.zero_indexed_step=true", "actor_rollout_ref.actor.qat.enable=false",
    "actor_rollout_ref.actor.router_replay.mode=disabled", "actor_rollout_ref.actor.rollout_n=2", "actor_rollout_ref.ref.rollout_n=2",
    "actor_rollout_ref.model.mtp.enable_train=false", "actor_rollout_ref.rollout.logprobs_mode=processed_logprobs",
    "actor_rollout_ref.rollout.enable_rollout_routing_replay=false",
])
def test_newer_verl_keys_that_change_training_are_accepted_at_verls_default(override):
    load_config([*TWO_RANKS, override])


def test_a_chat_template_that_is_no_jinja_is_refused_at_the_config_check():
    """A path given where the template's text belongs would render every prompt as that path (verl takes it so too)."""
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref.model.custom_chat_template='/tmp/tmpl.jinja' is not a Jinja "
                                          r"chat template"):
        load_config([*VERL, "actor_rollout_ref.model.custom_chat_template=/tmp/tmpl.jinja"])
    load_config([*VERL, "actor_rollout_ref.model.custom_chat_template='{% for m in messages %}{{ m.content }}{% endfor %}'"])
    from reinforge.config.sft_schema import load_sft_config

    with pytest.raises(ConfigError, match=r"^data.chat_template='chatml' is not a Jinja chat template"):
        load_sft_config(["model.partial_pretrain=/m", "data.train_files=t.parquet", "data.chat_template=chatml"], None, 1)
