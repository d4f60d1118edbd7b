"""The config schema: every key reinforge reads, its default and its meaning.

Key paths and defaults follow verl's `ppo_trainer.yaml`, so a verl command line means the same
thing here; the `algorithm.*`, `data.*`, `trainer.*` and `actor_rollout_ref.rollout.*` sections are in
`algorithm_schema.py`, `data_schema.py`, `trainer_schema.py` and `rollout_schema.py`, the field helpers in `fields.py`. Every field carries its documentation in `metadata["doc"]`; `reinforge train
--dry-run` and the error messages read it from there. Keys that only matter for engines or
strategies this run does not use are still accepted (see `config/unused.py`, which reports them).

The built-in quickstart (what `reinforge train` runs with no model and no data) changes a few
defaults; those values live in `config/quickstart.py`, not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reinforge.config.algorithm_schema import AlgorithmConfig
from reinforge.config.data_schema import DataConfig
from reinforge.config.distillation_schema import DistillationConfig
from reinforge.config.engine_schema import SP_DOC, FSDPConfig, OptimConfig
from reinforge.config.fields import Node, _f, _sub
from reinforge.config.rollout_schema import PROFILER_DOC, MultiTurnConfig, RolloutConfig  # noqa: F401 (MultiTurnConfig: imported from here)
from reinforge.config.trainer_schema import TrainerConfig
from reinforge.config.verl_sections_schema import (
    LegacyRewardManagerRef,
    LegacySandboxFusionConfig,
    RewardSectionConfig,
    SkipSectionConfig,
)

ATTENTION_KEYS = ("attn_implementation", "_attn_implementation")  # override_config's names of the attention (verl's scripts)


# ------------------------------------------------------------------------------------ model/actor
@dataclass
class ModelConfig(Node):
    path: str | None = _f(None, "Local folder of a Hugging Face causal LM (or a hub id where a hub is reachable). Unset: the built-in tiny model.")
    hf_config_path: str | None = _f(None, "Folder (or hub id) whose config.json describes the model, when it is not in path "
                                    "(the weights still load from path); null: path. override_config applies on top of it.")
    tokenizer_path: str | None = _f(None, "Folder (or hub id) of the policy's tokenizer when it is not in path; null: path "
                                    "(or data.tokenizer, the same setting).")
    custom_chat_template: str | None = _f(None, "A Jinja chat template that replaces the tokenizer's.")
    trust_remote_code: bool = _f(False, "Allow model code from the model folder.")
    enable_gradient_checkpointing: bool = _f(True, "Recompute activations in the backward pass to save memory.")
    share_prompt_forward: bool = _f(True, "Compute a prompt that repeats within a micro-batch (GRPO's rollout.n samples) once "
                                          "in the actor's and the reference's forward passes, the same numbers for less work "
                                          "(training/shared_prefix.py; also with enable_gradient_checkpointing). Models with "
                                          "sliding-window attention layers keep the plain forward. false: every row computes its prompt.")
    use_remove_padding: bool = _f(True, "Pack each micro-batch's sequences end to end without padding where that costs less than padded rows "
                                        "(verl 0.9's default true; training/packing.py), for the actor's and the reference's forwards: the same "
                                        "numbers for less work when lengths vary. false: padded micro-batches, trimmed to the columns their rows use.")
    override_config: dict = _f({}, "Values that override the model's config.json (e.g. attention_dropout); "
                                   "attn_implementation (or _attn_implementation) chooses the attention, as in verl.")
    external_lib: str | None = _f(None, "A module to import before loading the model (registers custom architectures).")
    use_shm: bool = _f(False, "Accepted for verl compatibility (copy the model to shared memory); no effect here.")
    use_fused_kernels: bool = _f(False, "Accepted for verl compatibility (fused log-prob and entropy kernels); no effect here.")
    fused_kernel_options: dict = _f({}, "Accepted for verl compatibility (options of the fused kernels, e.g. impl_backend); "
                                    "no effect here.")
    use_liger: bool = _f(False, "Accepted for verl compatibility (Liger kernels); no effect here.")
    enable_activation_offload: bool = _f(False, "Accepted for verl compatibility (offload activations to the CPU); no "
                                                "effect here (enable_gradient_checkpointing saves activation memory).")
    lora_rank: int = _f(0, "LoRA: > 0 trains rank-r adapters on target_modules instead of every weight (peft, extra "
                        "reinforge[lora]; training/lora.py); the reference is the policy with its adapters off. 0: full fine-tuning.")
    lora_alpha: float = _f(16, "LoRA: the adapters' output is scaled by lora_alpha / lora_rank.")
    target_modules: str | list = _f("all-linear", "LoRA: the linear layers that get adapters: all-linear (every linear "
                                    "layer but the output head), or names such as [q_proj, v_proj] (peft's target_modules).")
    exclude_modules: str | list | None = _f(None, "LoRA: layers to leave without adapters (peft's exclude_modules).")
    lora_adapter_path: str | None = _f(None, "LoRA: start from this peft adapter folder (adapter_config.json, "
                                       "adapter_model.safetensors, e.g. a checkpoint's actor/lora_adapter); its own "
                                       "rank and targets apply, lora_rank and target_modules are not used.")
    tiled_mlp: dict = _f({}, "Accepted for verl compatibility (enabled, num_shards: compute the MLP over sequence tiles to save "
                             "memory), a free-form mapping; no effect here.")
    truncate_padding: bool = _f(False, "Accepted for verl compatibility (move left padding to the right and trim the "
                                       "padding rows share); padded micro-batches are trimmed to the columns their rows use here.")
    lora: dict = _f({}, "Accepted for verl compatibility: the LoRA settings of verl's Megatron backend (type, rank, alpha, "
                        "dropout, target_modules of Megatron's linear_qkv ..., merge, ...), a free-form mapping; only rank=0 "
                        "here (LoRA is lora_rank, lora_alpha, target_modules; another rank is an error).")
    mtp: dict = _f({}, "verl's multi-token prediction (enable, enable_train, enable_rollout, speculative_* ...), a free-form "
                       "mapping; training the MTP layers (enable_train=true) is not in this version and is an error, the "
                       "rest (speculative decoding in the engine) has no effect here.")


@dataclass
class CPPOConfig(Node):
    cppo_w_min: float = _f(0.8, "cppo: the position weight of a response's last token (the first's is 1), in (0, 1].")
    cppo_delta_b: float = _f(0.02, "cppo: the least per-token budget b (b is clamped to [delta_b, 5 delta_b]).")
    cppo_delta_b_q: float = _f(0.9, "cppo: the quantile of a response's |pi - pi_old| that sets its budget, in [0, 1].")
    cppo_delta_b_k: float = _f(1.0, "cppo: the factor on that quantile (>= 0).")


@dataclass
class PolicyLossConfig(Node):
    loss_mode: str = _f("vanilla", "Policy loss from the registry: vanilla, gspo, sapo, gpg, clip_cov, kl_cov, geo_mean, "
                        "cispo, up, dppo_tv, dppo_kl, dro, topr, cppo, or your own (docs/algorithms.md).")
    clip_cov_ratio: float = _f(0.0002, "clip_cov: fraction of tokens clipped.")
    clip_cov_lb: float = _f(1.0, "clip_cov: lower bound of covariance.")
    clip_cov_ub: float = _f(5.0, "clip_cov: upper bound of covariance.")
    kl_cov_ratio: float = _f(0.0002, "kl_cov: fraction of tokens with a KL penalty.")
    ppo_kl_coef: float = _f(0.1, "kl_cov: KL coefficient.")
    dro_beta: float | None = _f(None, "dro: the weight beta of the squared log-ratio penalty; required (> 0) with "
                                "loss_mode=dro.")
    topr_negative_ratio_lower: float = _f(0.0, "topr: lower bound of the tapered weight of a negative-advantage sequence.")
    topr_negative_ratio_upper: float = _f(1.0, "topr: upper bound of the tapered weight of a negative-advantage sequence.")
    cppo: CPPOConfig = _sub(CPPOConfig, "cppo: the cumulative budget's settings (its threshold delta is actor.clip_ratio).")


@dataclass
class CheckpointContents(Node):
    save_contents: list = _f(["model", "optimizer", "extra"], "What a checkpoint holds: model, optimizer, extra (scheduler, RNG) "
                                                                  "in each rank's files, and hf_model: the full weights as safetensors in "
                                                                  "huggingface/ (gathered from every rank; `reinforge merge` writes them later).")
    load_contents: list | None = _f(None, "What resuming loads, from a checkpoint saved by any number of ranks (resharded "
                                          "to this run's); null: save_contents (verl's ${.save_contents}).")
    async_save: bool = _f(False, "Accepted for verl compatibility (save checkpoints in the background); checkpoints are "
                                 "saved before the next step starts.")
    strict: bool = _f(True, "Accepted for verl compatibility (fail on missing or unexpected keys when loading a "
                            "checkpoint); resuming always loads every key here.")
    save_lora_only: bool = _f(False, "With LoRA adapters: the rank files hold only what trains (the adapters, and a critic's "
                                     "value head), as verl's; a resume takes the frozen base weights from the model's folder, "
                                     "and `reinforge merge` needs the whole model, so it refuses such a checkpoint. No effect "
                                     "without LoRA.")


@dataclass
class ActorConfig(Node):
    strategy: str = _f("fsdp", "Training backend: fsdp2 (fsdp is the same): FSDP2 over the ranks when there are more than one, a plain module on one rank (the same maths).")
    ppo_mini_batch_size: int = _f(256, "Prompts per optimizer step (multiplied by rollout.n trajectories).")
    ppo_micro_batch_size: int | None = _f(None, "verl's deprecated global micro-batch: rows over all data-parallel ranks, "
                                          "divided by their number (rounded down) into its _per_gpu key; not together with it.")
    ppo_micro_batch_size_per_gpu: int | None = _f(None, "Trajectories per forward/backward; gradients accumulate up to a mini-batch. Null: the whole mini-batch.")
    use_dynamic_bsz: bool = _f(False, "Form the update's micro-batches by a token budget (ppo_max_token_len_per_gpu) instead of "
                               "ppo_micro_batch_size_per_gpu rows: ceil(real tokens / budget) groups of balanced token totals, "
                               "the same count on every rank; the gradient is the same. The old-log-prob, reference and critic "
                               "passes follow it unless their own keys are set (as in verl).")
    ppo_max_token_len_per_gpu: int = _f(16384, "Real (attended) prompt + response tokens per update micro-batch on one rank "
                                        "when use_dynamic_bsz; a longer trajectory gets a micro-batch of its own.")
    grad_clip: float = _f(1.0, "Clip the global gradient norm to this (the pre-clip norm is logged as actor/grad_norm); "
                               "optim.clip_grad, verl's newer place, wins when set (verl 0.9 reads only that one).")
    clip_ratio: float = _f(0.2, "PPO clip epsilon, read only where clip_ratio_low or clip_ratio_high is null (as verl).")
    clip_ratio_low: float | None = _f(0.2, "Lower clip epsilon (ratio >= 1 - low; 1 or more: no lower clip, as verl's CISPO example's 10); null: clip_ratio.")
    clip_ratio_high: float | None = _f(0.2, "Upper clip epsilon (ratio <= 1 + high); null: clip_ratio. DAPO's clip-higher.")
    clip_ratio_c: float = _f(3.0, "vanilla and up: the dual-clip constant c > 1 bounding the loss for negative advantages "
                                 "(arXiv:1912.09729); dppo_tv and dppo_kl: the cap (> 0) on the ratio multiplying each token's gradient.")
    tau_pos: float = _f(1.0, "SAPO gate temperature for positive advantages (loss_mode=sapo, arXiv:2511.20347).")
    tau_neg: float = _f(1.05, "SAPO gate temperature for non-positive advantages (loss_mode=sapo).")
    loss_agg_mode: str = _f("token-mean", "How token losses become one number over the mini-batch: token-mean, token-sum, "
                            "seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm (docs/algorithms.md).")
    loss_scale_factor: float | None = _f(None, "Divisor of seq-mean-token-sum-norm; null: the response width (rollout.response_length).")
    mask_truncated_responses: bool = _f(False, "Leave responses cut at the length limit (finish reason length: no EOS) out of "
                                        "the actor's loss, as TRL's mask_truncated_completions (DAPO's overlong filtering); "
                                        "they still count in their group's advantage. In multi-turn runs, a conversation cut because a tool's answer "
                                        "did not fit counts as cut too. Not a verl key.")
    entropy_coeff: float = _f(0.0, "Weight of the entropy bonus (loss -= coeff * agg(entropy)).")
    use_kl_loss: bool = _f(False, "Add a KL(actor || reference) term to the loss (GRPO style); needs the reference model.")
    kl_loss_coef: float = _f(0.001, "Weight of the KL loss.")
    kl_loss_type: str = _f("low_var_kl", "KL estimator for the loss: kl (k1), abs, mse (k2), low_var_kl (k3), full, "
                           "or a straight-through variant (k1+, k3+, ...): docs/algorithms.md.")
    ppo_epochs: int = _f(1, "Passes over the batch per step.")
    shuffle: bool = _f(False, "Shuffle trajectories between mini-batches.")
    use_torch_compile: bool = _f(True, "Accepted for verl compatibility; no torch.compile in this version.")
    policy_loss: PolicyLossConfig = _sub(PolicyLossConfig, "Policy loss selection and its parameters.")
    optim: OptimConfig = _sub(OptimConfig, "Optimizer and learning-rate schedule.")
    fsdp_config: FSDPConfig = _sub(FSDPConfig, "FSDP settings.")
    checkpoint: CheckpointContents = _sub(CheckpointContents, "Checkpoint contents.")
    ulysses_sequence_parallel_size: int = _f(1, SP_DOC)
    entropy_from_logits_with_chunking: bool = _f(False, "Accepted for verl compatibility (entropy over chunks of the logits to "
                                                        "save memory); no effect here.")
    entropy_checkpointing: bool = _f(False, "Accepted for verl compatibility (recompute the entropy in the backward pass); "
                                            "no effect here.")
    use_fused_kernels: bool = _f(False, "Accepted for verl compatibility (verl's copy of model.use_fused_kernels); no effect here.")
    use_remove_padding: bool = _f(True, "Accepted for verl compatibility: verl's copy of actor_rollout_ref.model.use_remove_padding, "
                                        "which decides here.")
    calculate_sum_pi_squared: bool = _f(False, "Add sum_pi_squared (the sum of squared token probabilities at each response "
                                               "position) to the batch in the old-log-prob pass, which then always runs. An "
                                               "estimator that names sum_pi_squared (optimal_token_baseline) gets it without this.")
    sum_pi_squared_checkpointing: bool = _f(False, "Accepted for verl compatibility (recompute sum_pi_squared in the backward "
                                                   "pass); no effect here: it is computed without gradients.")
    profiler: dict = _f({}, PROFILER_DOC)
    truncate_padding: bool = _f(False, "Accepted for verl compatibility (verl's copy of model.truncate_padding); padded "
                                       "micro-batches are trimmed to the columns their rows use here.")
    rollout_n: int | None = _f(None, "verl: responses per prompt in the actor's mini-batches; always actor_rollout_ref.rollout.n "
                                     "here (another value is an error).")
    freeze_vision_tower: bool = _f(False, "Keep a vision-language model's vision tower (its `visual` module) frozen: no "
                                          "gradient, no update; an error for a model without one.")
    calculate_entropy: bool = _f(False, "Accepted for verl compatibility (compute the entropy even when entropy_coeff is 0, "
                                        "for actor/entropy); no effect here.")
    use_prefix_grouper: bool = _f(False, "Accepted for verl compatibility (its PrefixGrouper shared-prefix forward); "
                                         "actor_rollout_ref.model.share_prompt_forward does this here.")
    data_loader_seed: int = _f(42, "Accepted for verl compatibility (seed of the actor's mini-batch shuffling); "
                                   "actor.shuffle is seeded by trainer.seed here.")
    entropy_from_logits_chunk_size: int = _f(2048, "Accepted for verl compatibility (chunk size of "
                                             "entropy_from_logits_with_chunking); no effect here.")
    pad_to_length: bool = _f(False, "Accepted for verl compatibility (pad packed micro-batches to bucketed lengths); no effect here.")
    qat: dict = _f({}, "verl's quantization-aware training (enable, mode, group_size, ...), a free-form mapping; only "
                       "enable=false in this version (enable=true is an error).")
    router_replay: dict = _f({}, "verl's MoE router replay (mode: disabled, R2 or R3; record_file, replay_file), a free-form "
                                 "mapping; only mode=disabled in this version (another mode is an error).")


@dataclass
class RefConfig(Node):
    strategy: str = _f("fsdp", "Backend of the reference model: fsdp2 (fsdp is the same), sharded like the actor when there is more than one rank.")
    log_prob_micro_batch_size: int | None = _f(None, "verl's deprecated global micro-batch: rows over all data-parallel ranks, "
                                               "divided by their number (rounded down) into its _per_gpu key; not together with it.")
    log_prob_micro_batch_size_per_gpu: int | None = _f(None, "Trajectories per reference forward; null: rollout.log_prob_micro_batch_size_per_gpu.")
    log_prob_use_dynamic_bsz: bool | None = _f(None, "Form the reference pass's micro-batches by log_prob_max_token_len_per_gpu "
                                               "tokens instead of log_prob_micro_batch_size_per_gpu rows; null: actor.use_dynamic_bsz.")
    log_prob_max_token_len_per_gpu: int | None = _f(None, "Real tokens per reference micro-batch on one rank when "
                                                    "log_prob_use_dynamic_bsz; null: actor.ppo_max_token_len_per_gpu.")
    fsdp_config: FSDPConfig = _sub(FSDPConfig, "FSDP settings of the reference.")
    ulysses_sequence_parallel_size: int = _f(1, SP_DOC)
    use_torch_compile: bool = _f(True, "Accepted for verl compatibility; no torch.compile in this version.")
    entropy_from_logits_with_chunking: bool = _f(False, "Accepted for verl compatibility (entropy over chunks of the logits); "
                                                        "no effect here.")
    entropy_checkpointing: bool = _f(False, "Accepted for verl compatibility (recompute the entropy in the backward pass); "
                                            "no effect here.")
    profiler: dict = _f({}, PROFILER_DOC)
    rollout_n: int | None = _f(None, "verl: responses per prompt of the reference's batches; always "
                                     "actor_rollout_ref.rollout.n here (another value is an error).")
    entropy_from_logits_chunk_size: int = _f(2048, "Accepted for verl compatibility (chunk size of "
                                             "entropy_from_logits_with_chunking); no effect here.")
    pad_to_length: bool = _f(False, "Accepted for verl compatibility (pad packed micro-batches to bucketed lengths); no effect here.")
    router_replay: dict = _f({}, "verl's MoE router replay (mode: disabled, R2 or R3; record_file, replay_file), a free-form "
                                 "mapping; only mode=disabled in this version (another mode is an error).")


@dataclass
class ActorRolloutRefConfig(Node):
    hybrid_engine: bool = _f(True, "Actor, rollout and reference share one worker (the only layout).")
    nccl_timeout: int = _f(600, "Accepted for verl compatibility (seconds before a collective times out); collectives use "
                                "torch.distributed's default, and trainer.hang_dump_s reports calls that hang.")
    model: ModelConfig = _sub(ModelConfig, "The policy model.")
    actor: ActorConfig = _sub(ActorConfig, "The policy update.")
    ref: RefConfig = _sub(RefConfig, "The frozen reference policy (used when a KL term is on).")
    rollout: RolloutConfig = _sub(RolloutConfig, "Generation.")


# ------------------------------------------------------------------------------------- reward
@dataclass
class CustomRewardFunctionConfig(Node):
    path: str | None = _f(None, "Python file (or importable module, e.g. trl.rewards) defining the reward function; or "
                          "the http(s) URL of OpenRLHF's reward server (its --remote_rm_url).")
    name: Any = _f("compute_score", "Function name in that file: compute_score(data_source, solution_str, ground_truth, "
                   "extra_info=None, **kwargs); or a TRL reward function, fn(completions, **kwargs) returning a list of "
                   "rewards, or a list of such names; or an OpenRLHF one, reward_func(queries, prompts, labels), taken by "
                   "default from a file without compute_score (docs/rewards.md).")
    reward_kwargs: dict = _f({}, "Keyword arguments passed to the function on every call.")
    reward_weights: list | None = _f(None, "TRL reward functions: the weight of each function of name in the score, as TRL's "
                                     "reward_weights (null: 1.0 each).")


@dataclass
class SandboxFusionConfig(Node):
    url: str | None = _f(None, "The Sandbox Fusion service's full /run_code endpoint (e.g. http://localhost:8080/run_code); "
                         "set, the built-in code scorers (codecontests, apps, codeforces, taco, primeintellect, livecodebench) "
                         "run programs there; null: in the local sandbox (docs/sandbox.md). Not used by a custom reward function.")
    max_concurrent: int = _f(64, "Most requests in flight to the service at once, over all rows and test cases.")
    memory_limit_mb: int = _f(1024, "Memory limit of one program run on the service, in MiB (sent as memory_limit_MB).")


@dataclass
class RewardModelModelConfig(Node):
    path: str | None = _f(None, "The reward model's folder (Hugging Face format, with its tokenizer). Loaded as "
                          "AutoModelForSequenceClassification with one label; with judge.enable, as a causal LM judge.")
    input_tokenizer: str | None = _f(
        None, "Tokenizer that decodes the policy's tokens for the reward model; null: the policy's own (data.tokenizer, model.tokenizer_path or "
        "actor_rollout_ref.model.path). When the reward model's tokenizer differs from it (vocabulary or chat template), each "
        "prompt + response is decoded, rebuilt as a chat in the reward model's chat template and re-tokenized (up to "
        "reward_model.max_length); when they are the same the reward model reads the policy's token ids as they are.",
    )
    external_lib: str | None = _f(None, "A module to import before loading the reward model (registers custom architectures).")
    trust_remote_code: bool = _f(False, "Allow model and tokenizer code from the reward model's folder.")
    override_config: dict = _f({}, "Values that override the reward model's config.json (e.g. pad_token_id).")
    use_remove_padding: bool = _f(True, "Pack each micro-batch's sequences end to end without padding where that costs less than padded "
                                        "rows (training/packing.py; the same scores up to float rounding). verl's in-process reward "
                                        "model defaulted to false; verl 0.9 serves reward models through an inference engine, which "
                                        "does not pad. false: padded micro-batches, trimmed to the columns their rows use.")
    use_shm: bool = _f(False, "Accepted for verl compatibility (copy the model to shared memory); no effect here.")
    use_fused_kernels: bool = _f(False, "Accepted for verl compatibility (fused kernels); no effect here.")
    fsdp_config: FSDPConfig = _sub(FSDPConfig, "FSDP settings of the reward model (model_dtype acts in one process).")


DEFAULT_JUDGE_TEMPLATE = (
    "Rate how well the response answers the question, from 0 (wrong or useless) to 10 (correct and helpful).\n\n"
    "Question:\n{prompt}\n\nResponse:\n{response}\n\n"
    "Give a one-sentence reason, then a last line of the form 'Score: <integer from 0 to 10>'."
)


@dataclass
class JudgeConfig(Node):
    enable: bool = _f(False, "Use reward_model.model.path as a generative judge: a causal LM that reads prompt_template and "
                      "writes a verdict, whose score is parsed with score_pattern (docs/rewards.md).")
    prompt_template: str = _f(DEFAULT_JUDGE_TEMPLATE, "What the judge reads: {prompt} (the prompt's messages), {response} (the "
                              "decoded response, required) and {ground_truth} (reward_model.ground_truth of the row) are filled "
                              "in; other text, braces included, is kept as written.")
    apply_chat_template: bool = _f(True, "Send the filled template as one user message through the judge's chat template; "
                                   "false: the judge reads the filled template as plain text.")
    score_pattern: str = _f(r"Score:\s*(-?\d+(?:\.\d+)?)", "Python regex for the score in the verdict; the last match counts, "
                            "its first group (or the whole match without groups) is read as a number.")
    min_score: float = _f(0.0, "Parsed scores below this are raised to it.")
    max_score: float = _f(10.0, "Parsed scores above this are lowered to it.")
    max_new_tokens: int = _f(64, "Most tokens of a verdict.")
    temperature: float = _f(0.0, "Sampling temperature of the judge (0: greedy).")


@dataclass
class RewardModelConfig(Node):
    enable: bool = _f(False, "Score responses with a learned reward model (reward_model.model.path) at each response's last "
                      "token; with custom_reward_function.path set, its score is added to the reward model's (docs/rewards.md).")
    reward_manager: str = _f("naive", "How responses are scored: naive (one call per sample), dapo (naive plus DAPO's overlong "
                             "reward shaping, set in reward_kwargs: max_resp_len, overlong_buffer_cfg.{enable,len,penalty_factor,log}), "
                             "batch (one call with lists for the whole batch), prime (one call per sample in a pool of worker "
                             "processes). See docs/rewards.md.")
    reward_kwargs: dict = _f({}, "Options of the reward manager: timeout_s (per call; a row past it scores 0 and counts in "
                             "reward/timeouts; default none, prime 300), max_concurrency (async functions in naive/dapo, 64), "
                             "num_processes (prime, min(8, CPUs)), dapo's max_resp_len and overlong_buffer_cfg; batch passes "
                             "the others to the function.")
    launch_reward_fn_async: bool = _f(False, "Score in a background thread while old-log-prob, reference and value passes run; "
                                      "joined before advantages (timing_s/reward_wait). Synchronous with algorithm.filter_groups.")
    custom_reward_function: CustomRewardFunctionConfig | None = _f(
        None, "Older place of custom_reward_function; used when the top-level one has no path."
    )
    sandbox_fusion: SandboxFusionConfig = _sub(SandboxFusionConfig, "Remote code sandbox.")
    model: RewardModelModelConfig = _sub(RewardModelModelConfig, "The reward model.")
    judge: JudgeConfig = _sub(JudgeConfig, "A generative judge instead of a sequence classifier (reinforge; verl leaves "
                              "generative reward models to the custom reward function).")
    micro_batch_size: int | None = _f(None, "verl's deprecated global micro-batch: rows over all data-parallel ranks, "
                                      "divided by their number (rounded down) into its _per_gpu key; not together with it.")
    micro_batch_size_per_gpu: int | None = _f(None, "Responses per reward model forward (judge: per generation call); null: all at once.")
    max_length: int | None = _f(None, "Longest reward model input in tokens when it is rebuilt (another tokenizer or chat "
                                "template: the end is cut) or is a judge prompt (the start is cut); null: no limit.")
    use_dynamic_bsz: bool | None = _f(None, "Form the sequence classifier's micro-batches by forward_max_token_len_per_gpu tokens "
                                      "instead of micro_batch_size_per_gpu rows (the judge generates in micro_batch_size_per_gpu "
                                      "batches); null: critic.use_dynamic_bsz.")
    forward_max_token_len_per_gpu: int | None = _f(None, "Real tokens of the reward model's inputs per micro-batch when "
                                                   "use_dynamic_bsz; null: critic.forward_max_token_len_per_gpu.")
    strategy: str = _f("fsdp", "Backend of the reward model: fsdp or fsdp2 (single process: plain PyTorch).")
    ulysses_sequence_parallel_size: int = _f(1, SP_DOC)
    enable_resource_pool: bool = _f(False, "Accepted for verl compatibility (run the reward model on GPUs of its own, "
                                    "n_gpus_per_node x nnodes); no effect here: it shares the training ranks' GPUs.")
    n_gpus_per_node: int = _f(0, "Accepted for verl compatibility (GPUs per node of enable_resource_pool); no effect here.")
    nnodes: int = _f(0, "Accepted for verl compatibility (nodes of enable_resource_pool); no effect here.")
    num_workers: int | None = _f(None, "Accepted for verl compatibility (reward loop workers scoring in parallel); no effect "
                                 "here: reward_kwargs sets the scorers' parallelism (max_concurrency, num_processes).")
    use_reward_loop: bool = _f(True, "Accepted for verl compatibility (which of verl's two reward implementations); "
                               "reinforge has one.")
    reward_loop_source: str | None = _f("register", "verl: where the reward loop's manager comes from, register (by "
                                        "reward_manager's name) or module; only register (or null) here.")
    reward_loop_module_path: str | None = _f(None, "verl: a Python file with a reward loop manager class of one's own. Not in "
                                             "this version: only null (another value is an error).")
    reward_loop_class_name: str | None = _f(None, "verl: the class name inside reward_loop_module_path; only null here.")
    rollout: dict | None = _f({}, "Accepted for verl compatibility (the inference server of a reward model: name, dtype, "
                              "gpu_memory_utilization, prompt_length, response_length, ...), a free-form mapping; no effect "
                              "here: the reward model runs in the training process (reward_model.judge.* for a generative "
                              "judge).")
    inference: dict | None = _f({}, "Accepted for verl compatibility (the reward loop's earlier name of rollout); no effect "
                                "here, as rollout.")
    model_path: str | None = _f(None, "verl's reward-loop place of reward_model.model.path: sets it.")
    profiler: dict = _f({}, PROFILER_DOC)


# -------------------------------------------------------------------------------------- critic
@dataclass
class CriticModelConfig(Node):
    path: str | None = _f(None, "The value model's folder; null: the actor's (actor_rollout_ref.model.path). Loaded as "
                          "AutoModelForTokenClassification with one label, or a causal LM's backbone with a linear value head.")
    tokenizer_path: str | None = _f(None, "Accepted for verl compatibility; the critic reads the actor's token ids, so its vocabulary must match.")
    override_config: dict = _f({}, "Values that override the value model's config.json.")
    external_lib: str | None = _f(None, "A module to import before loading the value model.")
    trust_remote_code: bool = _f(False, "Allow model code from the value model's folder.")
    enable_gradient_checkpointing: bool = _f(True, "Recompute activations in the critic's backward pass to save memory.")
    enable_activation_offload: bool = _f(False, "Accepted for verl compatibility (offload activations to the CPU); no effect here.")
    use_remove_padding: bool = _f(True, "Pack each micro-batch's sequences end to end without padding where that costs less (verl 0.9's default "
                                        "true; training/packing.py): the same values. false: padded micro-batches, trimmed to the columns their rows use.")
    use_shm: bool = _f(False, "Accepted for verl compatibility (copy the model to shared memory); no effect here.")
    lora_rank: int = _f(0, "LoRA: > 0 trains rank-r adapters on the value model's target_modules and its value head, "
                        "instead of every weight (peft, extra reinforge[lora]). 0: full fine-tuning.")
    lora_alpha: float = _f(16, "LoRA: the adapters' output is scaled by lora_alpha / lora_rank.")
    target_modules: str | list = _f("all-linear", "LoRA: the backbone's linear layers that get adapters: all-linear, or "
                                    "names such as [q_proj, v_proj].")
    exclude_modules: str | list | None = _f(None, "LoRA: backbone layers to leave without adapters (peft's exclude_modules).")
    lora_adapter_path: str | None = _f(None, "verl: start the critic's LoRA from a peft adapter folder. Not in this version: "
                                       "only null (another value is an error).")
    hf_config_path: str | None = _f(None, "Folder (or hub id) whose config.json describes the value model, when it is not in "
                                    "path (the weights still load from path); null: path. override_config applies on top of it.")
    custom_chat_template: str | None = _f(None, "Accepted for verl compatibility (the critic's chat template); no effect "
                                          "here: the critic reads the actor's token ids.")
    use_liger: bool = _f(False, "Accepted for verl compatibility (Liger kernels); no effect here.")
    use_fused_kernels: bool = _f(False, "Accepted for verl compatibility (fused kernels); no effect here.")
    fused_kernel_options: dict = _f({}, "Accepted for verl compatibility (options of the fused kernels); no effect here.")
    truncate_padding: bool = _f(False, "Accepted for verl compatibility (move left padding to the right and trim the "
                                       "padding rows share); padded micro-batches are trimmed to the columns their rows use here.")
    tiled_mlp: dict = _f({}, "Accepted for verl compatibility (enabled, num_shards: the MLP over sequence tiles to save "
                             "memory), a free-form mapping; no effect here.")
    mtp: dict = _f({}, "Accepted for verl compatibility (verl's multi-token prediction settings, which its value model "
                       "shares with hf_model.yaml), a free-form mapping; training MTP layers (enable_train=true) is an error.")
    lora: dict = _f({}, "Accepted for verl compatibility: the LoRA settings of verl's Megatron backend, a free-form mapping; "
                        "only rank=0 here (the critic's LoRA is lora_rank, lora_alpha, target_modules).")
    fsdp_config: FSDPConfig = _sub(FSDPConfig, "FSDP settings of the critic.")


@dataclass
class CriticOptimConfig(OptimConfig):
    lr: float = _f(1e-5, "Peak learning rate of the critic's AdamW.")


@dataclass
class CriticConfig(Node):
    enable: bool | None = _f(None, "Train a critic; null: when the advantage estimator uses values (gae).")
    rollout_n: int | None = _f(None, "verl: responses per prompt in the critic's mini-batches; always "
                                     "actor_rollout_ref.rollout.n here (another value is an error).")
    strategy: str = _f("fsdp", "Training backend of the critic: fsdp2 (fsdp is the same): FSDP2 over the ranks when there are more than one, a plain module on one rank.")
    model: CriticModelConfig = _sub(CriticModelConfig, "The value model.")
    optim: CriticOptimConfig = _sub(CriticOptimConfig, "The critic's optimizer and learning-rate schedule.")
    ppo_mini_batch_size: int | None = _f(None, "Prompts per critic optimizer step (times rollout.n); null: actor.ppo_mini_batch_size.")
    ppo_micro_batch_size: int | None = _f(None, "verl's deprecated global micro-batch: rows over all data-parallel ranks, "
                                          "divided by their number (rounded down) into its _per_gpu key; not together with it.")
    ppo_micro_batch_size_per_gpu: int | None = _f(None, "Trajectories per critic forward/backward; null: the whole mini-batch.")
    forward_micro_batch_size: int | None = _f(None, "verl's deprecated global micro-batch: rows over all data-parallel ranks, "
                                              "divided by their number (rounded down) into its _per_gpu key; not together with it.")
    forward_micro_batch_size_per_gpu: int | None = _f(None, "Trajectories per forward when computing values; null: ppo_micro_batch_size_per_gpu.")
    use_dynamic_bsz: bool | None = _f(None, "Form the critic's micro-batches by a token budget (ppo_max_token_len_per_gpu for "
                                      "the update, forward_max_token_len_per_gpu for values) instead of rows; null: "
                                      "actor.use_dynamic_bsz.")
    ppo_max_token_len_per_gpu: int = _f(32768, "Real tokens per critic update micro-batch on one rank when use_dynamic_bsz.")
    forward_max_token_len_per_gpu: int | None = _f(None, "Real tokens per value-pass micro-batch on one rank when "
                                                   "use_dynamic_bsz; null: ppo_max_token_len_per_gpu.")
    ppo_epochs: int | None = _f(None, "Passes over the batch per step; null: actor.ppo_epochs.")
    data_loader_seed: int = _f(42, "Accepted for verl compatibility (seed of the critic's mini-batch shuffling); "
                                   "critic.shuffle is seeded by trainer.seed here.")
    shuffle: bool | None = _f(None, "Shuffle trajectories between mini-batches; null: actor.shuffle.")
    grad_clip: float = _f(1.0, "Clip the critic's gradient norm to this (the pre-clip norm is logged as critic/grad_norm).")
    cliprange_value: float = _f(0.5, "Value clipping: new values stay within old values +- this in the loss.")
    loss_agg_mode: str | None = _f(None, "Aggregation of the value loss (modes as actor.loss_agg_mode); null: the actor's.")
    loss_scale_factor: float | None = _f(None, "Divisor of seq-mean-token-sum-norm; null: the actor's.")
    checkpoint: CheckpointContents = _sub(CheckpointContents, "Checkpoint contents of the critic.")
    fsdp: FSDPConfig = _sub(FSDPConfig, "verl's newer place of the critic's engine settings (critic/dp_critic.yaml: "
                            "critic.fsdp.*): a key set away from verl's default sets critic.model.fsdp_config's, which "
                            "reinforge reads (two different values are an error).")
    ulysses_sequence_parallel_size: int = _f(1, SP_DOC)
    profiler: dict = _f({}, PROFILER_DOC)


@dataclass
class Config(Node):
    data: DataConfig = _sub(DataConfig, "Datasets and prompt handling.")
    actor_rollout_ref: ActorRolloutRefConfig = _sub(ActorRolloutRefConfig, "Policy model, its update, generation and reference.")
    critic: CriticConfig = _sub(CriticConfig, "The value model of PPO (used by gae).")
    algorithm: AlgorithmConfig = _sub(AlgorithmConfig, "Advantages and the in-reward KL penalty.")
    reward_model: RewardModelConfig = _sub(RewardModelConfig, "Reward managers and reward models.")
    custom_reward_function: CustomRewardFunctionConfig = _sub(CustomRewardFunctionConfig, "A user reward function.")
    trainer: TrainerConfig = _sub(TrainerConfig, "The training loop, logging and checkpoints.")
    global_profiler: dict = _f({}, "Accepted for verl compatibility: verl's global profiler settings (tool, steps, save_path, "
                                    "global_tool_config, ...), a free-form mapping; no effect here (no profiler integration: "
                                    "the timing_s/* metrics give each phase's seconds per step).")
    reward: RewardSectionConfig = _sub(RewardSectionConfig, "verl's newer reward section (reward/reward.yaml); reinforge "
                                       "reads custom_reward_function.* and reward_model.* (config/verl_sections_schema.py).")
    reward_manager: LegacyRewardManagerRef = _sub(LegacyRewardManagerRef, "verl's top-level reward manager choice; reinforge "
                                                  "reads reward_model.reward_manager.")
    sandbox_fusion: LegacySandboxFusionConfig = _sub(LegacySandboxFusionConfig, "verl's top-level copy of "
                                                     "reward_model.sandbox_fusion (null: unset); reinforge reads "
                                                     "reward_model.sandbox_fusion.*.")
    skip: SkipSectionConfig = _sub(SkipSectionConfig, "verl's newer top-level rollout skip (SkipManager); reinforge's is "
                                   "actor_rollout_ref.rollout.skip.*.")
    distillation: DistillationConfig = _sub(DistillationConfig, "On-policy distillation from teacher models "
                                            "(config/distillation_schema.py).")
    transfer_queue: dict = _f({}, "Accepted for verl compatibility: verl's TransferQueue data plane between the driver and "
                                  "the workers (enable, backend.*, metrics.*), a free-form mapping; no effect here.")
    ray_kwargs: dict = _f({}, "Ray settings of runs with more than one rank: ray_init is passed to ray.init "
                              "(address: the cluster to join, also RAY_ADDRESS; num_cpus, ...); docs/distributed.md.")
