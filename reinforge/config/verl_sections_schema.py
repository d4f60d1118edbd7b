"""Top-level sections of verl's newest `ppo_trainer.yaml` that reinforge reads under other keys, or not at all.

verl moved the reward settings into one `reward` section (`reward/reward.yaml`: `reward.custom_reward_function`,
`reward.reward_manager`, `reward.reward_model`, `reward.sandbox_fusion`) and keeps the older top-level places
(`legacy_reward_impl.yaml`: `reward_manager`, `sandbox_fusion`) with null defaults for old command lines; the rollout
skip moved to a top-level `skip` section (`verl.utils.skip.SkipManagerConfig`). reinforge reads these settings at
their earlier keys (`custom_reward_function.*`, `reward_model.*`): a newer key set away from verl's default sets the
earlier one, and the two set to different values is an error naming both (config/section_checks.py,
`adopt_newer_places`); the newer rollout skip (`skip.rollout`) is refused, naming `actor_rollout_ref.rollout.skip.*`.
"""

from __future__ import annotations

from dataclasses import dataclass

from reinforge.config.fields import Node, _f, _sub


@dataclass
class RewardFunctionRef(Node):
    path: str | None = _f(None, "verl's newer place of custom_reward_function.path: sets it.")
    name: str = _f("compute_score", "verl's newer place of custom_reward_function.name: sets it.")


@dataclass
class ModuleRef(Node):
    path: str | None = _f(None, "verl: a Python file with a reward manager class of one's own (reward_manager.source=module). "
                          "Not in this version: only null (reinforge's managers are reward_model.reward_manager's names).")
    name: str = _f("custom_reward_manager", "verl: the class name inside path; only its default here.")


@dataclass
class RewardManagerRef(Node):
    source: str = _f("register", "verl: where the reward manager comes from, register (by name) or module (module.*); only "
                     "register here.")
    name: str = _f("naive", "verl's newer place of reward_model.reward_manager: sets it.")
    module: ModuleRef = _sub(ModuleRef, "verl: a reward manager class of one's own; not in this version.")


@dataclass
class NewerRewardModelConfig(Node):
    enable: bool = _f(False, "verl's newer place of reward_model.enable: sets it.")
    enable_resource_pool: bool = _f(False, "Accepted for verl compatibility (the reward model on GPUs of its own); no effect "
                                    "here: it shares the training ranks' GPUs.")
    n_gpus_per_node: int = _f(8, "Accepted for verl compatibility (GPUs per node of enable_resource_pool); no effect here.")
    nnodes: int = _f(0, "Accepted for verl compatibility (nodes of enable_resource_pool); no effect here.")
    model_path: str | None = _f(None, "verl's newer place of reward_model.model.path: sets it.")
    rollout: dict | None = _f({}, "Accepted for verl compatibility (the inference server of a reward model: name, dtype, "
                              "gpu_memory_utilization, tensor_model_parallel_size, ...), a free-form mapping; no effect "
                              "here: the reward model runs in the training process (reward_model.judge.* for a generative "
                              "judge).")


@dataclass
class NewerSandboxFusionConfig(Node):
    url: str | None = _f(None, "verl's newer place of reward_model.sandbox_fusion.url: sets it.")
    max_concurrent: int = _f(64, "verl's newer place of reward_model.sandbox_fusion.max_concurrent: sets it.")
    memory_limit_mb: int = _f(1024, "verl's newer place of reward_model.sandbox_fusion.memory_limit_mb: sets it.")


@dataclass
class RewardSectionConfig(Node):
    num_workers: int = _f(8, "The remote reward manager's worker processes (verl's reward workers); the other managers' "
                          "parallelism is reward_model.reward_kwargs' (max_concurrency, num_processes).")
    custom_reward_function: RewardFunctionRef = _sub(RewardFunctionRef, "verl's newer place of custom_reward_function.")
    reward_kwargs: dict = _f({}, "verl's newer place of reward_model.reward_kwargs (its scripts add it with "
                             "+reward.reward_kwargs.*, e.g. DAPO's overlong_buffer_cfg): sets it.")
    compute_score_kwargs: dict = _f({}, "verl: keyword arguments of the built-in scorers (e.g. {method: flexible} for "
                                    "GSM8K). Not in this version: only empty (another value is an error).")
    reward_manager: RewardManagerRef = _sub(RewardManagerRef, "verl's newer place of reward_model.reward_manager.")
    reward_model: NewerRewardModelConfig = _sub(NewerRewardModelConfig, "verl's newer place of the reward model's settings.")
    sandbox_fusion: NewerSandboxFusionConfig = _sub(NewerSandboxFusionConfig, "verl's newer place of "
                                                    "reward_model.sandbox_fusion.")


@dataclass
class LegacySandboxFusionConfig(Node):
    url: str | None = _f(None, "verl's top-level copy of reward_model.sandbox_fusion.url (null: unset): sets it.")
    max_concurrent: int | None = _f(None, "verl's top-level copy of reward_model.sandbox_fusion.max_concurrent: sets it.")
    memory_limit_mb: int | None = _f(None, "verl's top-level copy of reward_model.sandbox_fusion.memory_limit_mb: sets it.")


@dataclass
class LegacyRewardManagerRef(Node):
    source: str = _f("register", "verl's top-level reward_manager.source (register or module); only register here.")
    name: str = _f("naive", "verl's top-level copy of reward_model.reward_manager: sets it.")
    module: ModuleRef = _sub(ModuleRef, "verl: a reward manager class of one's own; not in this version.")


@dataclass
class StepSkipConfig(Node):
    enable: bool = _f(False, "verl's SkipManager: dump the generations of the listed steps and read them back.")
    dump_dir: str = _f("~/.verl/rollout_dump", "verl: where the dumped generations are kept.")
    steps: list = _f([], "verl: the steps whose generation is dumped or read back.")
    action: str = _f("cache", "verl: what a listed step does (cache, repeat).")


@dataclass
class SkipSectionConfig(Node):
    rollout: StepSkipConfig = _sub(StepSkipConfig, "verl's newer rollout skip of the trainer; reinforge's is "
                                   "actor_rollout_ref.rollout.skip.* (enable=true here is an error naming it).")
    rollout_tq: StepSkipConfig = _sub(StepSkipConfig, "Accepted for verl compatibility (the rollout skip of verl's "
                                      "TransferQueue trainer); no effect here.")
    async_rollout: StepSkipConfig = _sub(StepSkipConfig, "Accepted for verl compatibility (the rollout skip of verl's fully "
                                         "asynchronous trainer); no effect here.")
