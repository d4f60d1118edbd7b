"""The config of `reinforge sft`: verl's `sft_trainer` (verl.trainer.fsdp_sft_trainer) keys, paths and defaults.

verl users run `torchrun -m verl.trainer.fsdp_sft_trainer data.train_files=... model.partial_pretrain=...`;
the same overrides work with `reinforge sft` (or `torchrun ... -m reinforge sft` for several ranks). Defaults
are verl's, but where they assume a GPU cluster (8 GPUs, wandb) or refuse what works here. verl 0.9's trainer
(`verl.trainer.sft_trainer`: model.path, engine.*, checkpoint.*, conversations only) is driven with other names of
the same settings, which this config takes too (`_newer_places`), with that trainer's optimizer defaults for a
command line in its form.
"""

from __future__ import annotations

from dataclasses import dataclass

from reinforge.config.data_schema import ClassRef
from reinforge.config.engine_schema import SP_DOC, OptimConfig
from reinforge.config.fields import Node, _f, _sub, node_at

NO_EFFECT = "Accepted for verl compatibility; no effect here."
# apply_chat_template arguments the SFT datasets set themselves (data.apply_chat_template_kwargs may not)
RESERVED_TEMPLATE_KWARGS = ("conversation", "add_generation_prompt", "tokenize", "return_dict", "return_tensors")


@dataclass
class SFTMultiTurnConfig(Node):
    enable: bool = _f(False, "Train on conversations (a list of {role, content} messages per row) instead of prompt/response "
                             "pairs; the loss covers the assistant messages only.")
    messages_key: str = _f("messages", "Column of the conversation's messages.")
    tools_key: str = _f("tools", "Column of the tool schemas passed to the chat template (rows without it: no tools).")
    enable_thinking_key: str = _f("enable_thinking", "Column whose value is passed to the chat template as enable_thinking "
                                                     "(rows without it: the template's default).")


@dataclass
class SFTDataConfig(Node):
    train_batch_size: int = _f(256, "Rows per optimizer step, over all ranks.")
    micro_batch_size: int | None = _f(None, "verl's deprecated key (current verl ignores it): rows per micro-batch over all ranks, "
                                            "split over them as older verl did, unless micro_batch_size_per_gpu is set too.")
    micro_batch_size_per_gpu: int = _f(4, "Rows per forward/backward on each rank (gradient accumulation up to the rank's share "
                                          "of train_batch_size); also the validation batch size.")
    train_files: str | list | None = _f(None, "Parquet (or JSON/JSONL) file(s) to train on.")
    val_files: str | list | None = _f(None, "File(s) for the validation loss (val/loss); null: no validation.")
    prompt_key: str = _f("question", "Column of the prompt (single-turn); sent to the chat template as one user message.")
    response_key: str = _f("answer", "Column of the response that is trained on (single-turn).")
    prompt_dict_keys: list | None = _f(None, "When the prompt column holds dicts: the key(s) to follow into it, e.g. [question] "
                                             "for prompt_key=extra_info.")
    response_dict_keys: list | None = _f(None, "When the response column holds dicts: the key(s) to follow into it, e.g. "
                                               "[answer] for response_key=extra_info.")
    multiturn: SFTMultiTurnConfig = _sub(SFTMultiTurnConfig, "Multi-turn conversations.")
    messages_key: str | None = _f(None, "verl's newer spelling of multiturn.messages_key (the same setting; null: that one's).")
    tools_key: str | None = _f(None, "verl's newer spelling of multiturn.tools_key (the same setting; null: that one's).")
    enable_thinking_key: str | None = _f(None, "verl's newer spelling of multiturn.enable_thinking_key (the same setting; "
                                               "null: that one's).")
    max_length: int = _f(1024, "Most tokens of one row, prompt and response together.")
    truncation: str = _f("error", "A row longer than max_length: error (stop, naming the row), left (drop its first tokens) "
                                  "or right (drop its last tokens).")
    pad_mode: str | None = _f(None, "verl's padding mode: right and no_padding (verl 0.9's) are accepted without effect "
                                    "(micro-batches are padded to their longest row; the loss is the same token mean).")
    use_dynamic_bsz: bool = _f(False, "verl 0.9: micro-batches by a token budget (max_token_len_per_gpu). Without effect here "
                                      "(reported when set): micro-batches are micro_batch_size_per_gpu rows, which changes "
                                      "memory use only, never the loss.")
    max_token_len_per_gpu: int | None = _f(None, "verl 0.9: the token budget of use_dynamic_bsz; without effect here.")
    ignore_input_ids_mismatch: bool = _f(False, "verl 0.9: train a conversation whose whole render differs from its turns' "
                                                "renders on the turns' tokens. Here such a row is refused, naming it; true is "
                                                "reported as without effect.")
    enable_thinking_default: str | bool | None = _f(None, "verl 0.9: enable_thinking for rows without the enable_thinking "
                                                          "column (null or 'none': the template's own default).")
    num_workers: int = _f(0, "verl's DataLoader workers; without effect here (rows are tokenized when the run starts).")
    balance_dp_token: bool = _f(False, "verl: normalise the loss by the tokens of all ranks. No effect here (reported when "
                                       "set): the loss is always the mean over every trained token of the step, on any "
                                       "number of ranks and micro-batches.")
    chat_template: str | None = _f(None, "A Jinja chat template that replaces the tokenizer's (verl refuses this key).")
    apply_chat_template_kwargs: dict = _f({}, "Extra keyword arguments of every chat template call (single-turn prompts and "
                                              "conversations), e.g. {enable_thinking: false}; in multi-turn a row's "
                                              "enable_thinking column wins over an enable_thinking here.")
    custom_cls: ClassRef = _sub(ClassRef, "A user Dataset class, called as verl calls it: cls(parquet_files=, tokenizer=, "
                                          "config=, max_samples=); its items hold input_ids, attention_mask and loss_mask.")
    use_shm: bool = _f(False, NO_EFFECT)
    train_max_samples: int = _f(-1, "Use only this many training rows (-1: all): the first ones, or a random choice with "
                                    "shuffle.")
    val_max_samples: int = _f(-1, "Use only this many validation rows (-1: all): the first ones, or a random choice with "
                                  "shuffle.")
    shuffle: bool = _f(False, "When train_max_samples / val_max_samples cut the data: pick the rows at random (seeded by "
                              "seed), as verl does, instead of the first ones. No effect on the epochs' order.")
    seed: int | None = _f(None, "Seed of shuffle's choice of rows; null: trainer.seed (verl's null draws an unseeded choice).")
    trust_remote_code: bool = _f(False, "Allow tokenizer code from the model folder.")


@dataclass
class SFTFSDPConfig(Node):
    model_dtype: str = _f("fp32", "Parameter dtype of the model: fp32 or bf16 (float32/bfloat16 also accepted).")
    wrap_policy: dict = _f({"min_num_params": 0}, "FSDP wrap policy; every decoder layer is its own FSDP2 unit here.")
    cpu_offload: bool = _f(False, "FSDP's CPU offload (several CUDA ranks); no effect on CPU.")
    offload_params: bool = _f(False, "FSDP's parameter offload (with cpu_offload); no effect on CPU.")
    reshard_after_forward: bool = _f(True, "FSDP2: free each gathered layer after its forward.")
    mixed_precision: dict = _f({}, "CUDA mixed precision, verl's keys: param_dtype (compute dtype), reduce_dtype (gradient "
                                   "reduction over ranks), buffer_dtype (accepted). Unset keys and empty: verl's default, bf16 "
                                   "compute and fp32 reduction; param_dtype: fp32 computes in fp32. On the CPU: model_dtype.")

    # what FSDP2 sharding (training/fsdp.py) reads, in the RL config's names
    @property
    def param_offload(self) -> bool:
        return self.cpu_offload

    @property
    def offload_policy(self) -> bool:
        return self.cpu_offload and self.offload_params


@dataclass
class SFTModelConfig(Node):
    partial_pretrain: str | None = _f(None, "Folder (or hub id) of the Hugging Face causal LM to fine-tune.")
    path: str | None = _f(None, "verl 0.9's name of partial_pretrain (the same setting).")
    use_remove_padding: bool = _f(True, "verl 0.9's place of the top-level use_remove_padding (default true there too): pack each "
                                        "micro-batch's rows end to end without padding where that costs less (training/packing.py); "
                                        "false here or at the top level: padded micro-batches.")
    custom_chat_template: str | None = _f(None, "verl 0.9's place of data.chat_template (the same setting).")
    enable_activation_offload: bool = _f(False, NO_EFFECT)
    use_fused_kernels: bool = _f(False, NO_EFFECT)
    fused_kernel_options: dict = _f({}, NO_EFFECT)
    tiled_mlp: dict = _f({}, NO_EFFECT)
    use_shm: bool = _f(False, NO_EFFECT)
    fsdp_config: SFTFSDPConfig = _sub(SFTFSDPConfig, "Sharding over several ranks (FSDP2).")
    external_lib: str | None = _f(None, "A module to import before loading the model (registers custom architectures).")
    enable_gradient_checkpointing: bool = _f(False, "Recompute activations in the backward pass to save memory.")
    trust_remote_code: bool = _f(False, "Allow model code from the model folder.")
    override_config: dict = _f({}, "Values that override the model's config.json.")
    lora_rank: int = _f(0, "LoRA: > 0 trains rank-r adapters on target_modules instead of every weight (peft, extra "
                           "reinforge[lora]); 0: full fine-tuning.")
    lora_alpha: float = _f(16, "LoRA: the adapters' output is scaled by lora_alpha / lora_rank.")
    target_modules: str | list = _f("all-linear", "LoRA: the linear layers that get adapters (peft's target_modules).")
    exclude_modules: str | list | None = _f(None, "LoRA: layers to leave without adapters (peft's exclude_modules).")
    lora_adapter_path: str | None = _f(None, "LoRA: start from this peft adapter folder; its own rank and targets apply.")
    use_liger: bool = _f(False, NO_EFFECT)
    strategy: str = _f("fsdp2", "fsdp or fsdp2; both mean FSDP2 here.")
    attn_implementation: str | None = _f(None, "The model's attention implementation (eager, sdpa, ...); null: transformers' "
                                               "default (verl asks for flash_attention_2, which needs a GPU).")



@dataclass
class SFTOptimConfig(OptimConfig):
    lr: float = _f(1e-5, "Peak learning rate.")
    betas: list = _f([0.9, 0.95], "AdamW betas.")
    lr_warmup_steps_ratio: float = _f(0.1, "Linear warmup as a fraction of the run's steps (used when lr_warmup_steps <= 0).")
    warmup_steps_ratio: float | None = _f(None, "verl's older name of lr_warmup_steps_ratio; when set it wins.")
    clip_grad: float | None = _f(1.0, "Gradient-norm clip.")
    lr_scheduler: str = _f("cosine", "Schedule after warmup: cosine (down to min_lr_ratio), wsd (constant, then a cosine "
                                     "decay over the last 10% of the steps: warmup-stable-decay), linear (transformers', "
                                     "down to min_lr_ratio) or constant. verl 0.9's "
                                     "lr_scheduler_type (or warmup_style), when set, is the same setting.")


@dataclass
class SFTTrainerConfig(Node):
    default_local_dir: str | None = _f(None, "The run folder (checkpoints, metrics.jsonl); null: "
                                             "checkpoints/<project_name>/<experiment_name>.")
    default_hdfs_dir: str | None = _f(None, "verl copies checkpoints to HDFS; not supported (refused when set).")
    resume_path: str | None = _f(None, "verl's older name of resume_from_path (with resume_mode=auto).")
    resume_mode: str = _f("auto", "auto: continue from the latest checkpoint in the run folder; disable; resume_path.")
    resume_from_path: str | None = _f(None, "A global_step_<N> folder to resume from.")
    project_name: str = _f("gsm8k-sft", "Project name: trackers and the default run folder.")
    experiment_name: str = _f("test", "Experiment name: trackers and the default run folder.")
    total_epochs: int = _f(4, "Passes over the training data.")
    total_training_steps: int | None = _f(None, "Stop after this many steps (the learning-rate schedule spans them).")
    logger: list | str = _f(["console"], "Where metrics go: console, tensorboard, wandb (verl's deprecated tracking too), mlflow, "
                                         "swanlab; metrics.jsonl in the "
                                         "run folder is always written (verl's default adds wandb).")
    seed: int = _f(1, "Seed of model-side randomness (and of data.shuffle's choice of rows when data.seed is null); "
                      "the data order is verl's, whose sampler takes no seed: 0 + the epoch.")
    save_freq: int | str = _f(-1, "Save a checkpoint every this many steps (-1: only the last step; after_each_epoch, as "
                                  "verl 0.9: at the end of every epoch).")
    test_freq: int | str = _f(-1, "Compute val/loss every this many steps (-1: only after the last step; after_each_epoch: "
                                  "at the end of every epoch).")
    balance_batch: bool = _f(True, NO_EFFECT)
    profile_interval: list = _f([-1, -1], NO_EFFECT)
    nnodes: int = _f(1, "Nodes; launch one process per rank with torchrun (docs/sft.md).")
    n_gpus_per_node: int | None = _f(None, "Ranks per node; the ranks are torchrun's processes (WORLD_SIZE), this key is "
                                           "checked against them when set (verl's default is 8).")
    max_ckpt_to_keep: int | None = _f(None, "Keep at most this many checkpoints (null: all).")
    checkpoint: dict = _f({"save_contents": ["model", "optimizer", "extra", "hf_model"]},
                          "save_contents / load_contents: model, optimizer, extra (scheduler, data position, RNG), hf_model "
                          "(a Hugging Face folder under huggingface/, what `reinforge train` loads; reinforge saves it by "
                          "default, verl only when asked).")
    device: str | None = _f(None, "cuda or cpu; null: cuda when a GPU is present, else cpu.")


@dataclass
class SFTConfig(Node):
    data: SFTDataConfig = _sub(SFTDataConfig, "Training and validation data.")
    model: SFTModelConfig = _sub(SFTModelConfig, "The model to fine-tune.")
    optim: SFTOptimConfig = _sub(SFTOptimConfig, "Optimizer and learning-rate schedule.")
    ulysses_sequence_parallel_size: int = _f(1, SP_DOC)
    use_remove_padding: bool = _f(True, "Pack each micro-batch's rows end to end without padding where that costs less "
                                        "(model.use_remove_padding, verl 0.9's place, must be true too). false: micro-batches "
                                        "padded to their longest row, not to max_length.")
    trainer: SFTTrainerConfig = _sub(SFTTrainerConfig, "The loop, checkpoints and logging.")
    engine: dict = _f({}, "verl 0.9's training engine settings: strategy, model_dtype, param_offload, reshard_after_forward, "
                          "wrap_policy, mixed_precision and ulysses_sequence_parallel_size are model.strategy, model.fsdp_config.* and "
                          "ulysses_sequence_parallel_size; the others (GPU tuning) are without effect here.")
    checkpoint: dict = _f({}, "verl 0.9's place of trainer.checkpoint (save_contents, load_contents).")
    profiler: dict = _f({}, NO_EFFECT)


# verl 0.9's SFT optimizer defaults (optim/fsdp.yaml) where the older trainer's differ: a command line in its form
# (model.path) gets them for what it leaves out
NEWEST_OPTIM_DEFAULTS = {"lr": 1e-3, "betas": [0.9, 0.999], "lr_warmup_steps_ratio": 0.0, "lr_scheduler": "constant"}
EACH_EPOCH = "after_each_epoch"  # verl 0.9's save_freq / test_freq at the end of every epoch
# verl 0.9's Hydra group choices on the command line (engine=fsdp): the group's settings are this schema's
GROUP_CHOICES = {"engine": ("fsdp", "fsdp2"), "optim": ("fsdp", "fsdp2"), "model": ("hf_model",)}
# verl 0.9's engine keys that name a setting of this schema
ENGINE_KEYS = {"strategy": "model.strategy", "model_dtype": "model.fsdp_config.model_dtype",
               "param_offload": "model.fsdp_config.cpu_offload", "reshard_after_forward": "model.fsdp_config.reshard_after_forward",
               "wrap_policy": "model.fsdp_config.wrap_policy", "ulysses_sequence_parallel_size": "ulysses_sequence_parallel_size",
               "mixed_precision": "model.fsdp_config.mixed_precision"}


def load_sft_config(args: list[str], config_file: str | None, ranks: int) -> tuple[SFTConfig, list[str]]:
    """The config of `reinforge sft` from overrides (and a YAML file), checked for `ranks` ranks, and the notes on
    settings without effect. Nothing here loads a model or imports the training stack, so a mistake in the keys fails
    in a moment, as `reinforge train`'s do."""
    import re

    from reinforge.config.loading import naming_the_file, resolve
    from reinforge.errors import ConfigError

    groups, kept = [], []
    for arg in args:  # engine=fsdp, optim=fsdp, model=hf_model: verl 0.9 picks its config groups so
        match = re.fullmatch(r"(\w+)=(\w+)", arg)
        if match and match.group(1) in GROUP_CHOICES:
            group, option = match.groups()
            if option not in GROUP_CHOICES[group]:
                raise ConfigError(f"{arg}: verl's {group} group {option!r} is not supported here; the {group} settings are "
                                  f"this config's ({', '.join(GROUP_CHOICES[group])})")
            groups.append(f"{arg} (verl's choice of its {group} config group) has no effect here: it is the only one")
        else:
            kept.append(arg)
    with naming_the_file(config_file, kept, SFTConfig, "sft_trainer"):
        config, user_keys, ignored = resolve(SFTConfig, kept, config_file, base="sft_trainer")
        notes = finalize_sft(config, ranks, user_keys)
    return config, groups + notes + [f"{name} (a Hydra setting) has no effect here" for name in ignored]


# ---- checks and derived values ----------------------------------------------------------------------
def finalize_sft(config: SFTConfig, ranks: int, user_keys: list[str] | tuple = ()) -> list[str]:
    """Check `config` for a run on `ranks` ranks and fill in what verl derives (older names, the run folder, the
    micro-batch size); `user_keys` are the keys the user set. Returns notes on settings that have no effect here."""
    from reinforge.config.section_checks import (
        CHECKPOINT_CONTENTS,
        DTYPE_NAMES,
        LR_SCHEDULES,
        chat_template,
        check_mixed_precision,
        check_optim,
        choice,
        positive,
    )
    from reinforge.errors import ConfigError
    from reinforge.trainer.tracking import check_loggers, logger_names

    data, model, optim, trainer = config.data, config.model, config.optim, config.trainer

    def given(key: str) -> bool:  # set by the user (a group given as a mapping, data={...}, sets the keys it names)
        return key in user_keys or any(k.startswith(key + ".") for k in user_keys)

    notes = _newer_places(config, given)
    if not model.partial_pretrain:
        raise ConfigError("model.partial_pretrain (verl 0.9: model.path) is not set: name the Hugging Face model folder to "
                          "fine-tune")
    model.path = model.partial_pretrain  # the name model loading (training/model.py) reads
    if not data.train_files:
        raise ConfigError("data.train_files is not set: name the parquet file(s) to train on")
    if trainer.default_hdfs_dir:
        raise ConfigError(f"trainer.default_hdfs_dir={trainer.default_hdfs_dir}: copying checkpoints to HDFS is not "
                          "supported; leave it unset (checkpoints stay in trainer.default_local_dir)")
    expected = trainer.nnodes * (trainer.n_gpus_per_node or ranks // max(1, trainer.nnodes) or 1)
    if expected != ranks:  # verl reads the ranks from torchrun too, and ignores these keys
        notes.append(f"trainer.nnodes x trainer.n_gpus_per_node = {expected}, but {ranks} process(es) run: the ranks are the "
                     f"processes torchrun starts (torchrun --nproc_per_node={expected} -m reinforge sft ...)")
    if optim.warmup_steps_ratio is not None:
        optim.lr_warmup_steps_ratio = optim.warmup_steps_ratio
    choice("model.fsdp_config.model_dtype", model.fsdp_config.model_dtype, DTYPE_NAMES)  # fp16 would fail only at load
    check_mixed_precision("model.fsdp_config", model.fsdp_config.mixed_precision)
    newer = [(key, value) for key, value in (("optim.lr_scheduler_type", optim.lr_scheduler_type),
                                              ("optim.warmup_style", optim.warmup_style)) if given(key)]
    if given("optim.lr_scheduler"):
        newer = [("optim.lr_scheduler", optim.lr_scheduler)] + newer
    if len({value for _, value in newer}) > 1:
        raise ConfigError(f"{' and '.join(f'{key}={value}' for key, value in newer)} name the learning-rate schedule "
                          "(verl's older and newer names of one setting) with different values; set one of them")
    optim.lr_scheduler = newer[0][1] if newer else optim.lr_scheduler
    choice("optim.lr_scheduler", optim.lr_scheduler, LR_SCHEDULES)
    optim.lr_scheduler_type = optim.lr_scheduler
    check_optim("optim", optim)
    positive("optim.lr", optim.lr, allow_zero=True)
    positive("optim.weight_decay", optim.weight_decay, allow_zero=True)
    positive("optim.clip_grad", optim.clip_grad)  # 0 would scale every gradient to nothing; null: no clipping
    choice("data.truncation", data.truncation, ("error", "left", "right"))  # environment/sft_dataset.py's TRUNCATIONS
    positive("ulysses_sequence_parallel_size", config.ulysses_sequence_parallel_size)
    if data.max_token_len_per_gpu is not None:
        positive("data.max_token_len_per_gpu", data.max_token_len_per_gpu)
    trainer.logger = logger_names(trainer.logger)  # verl also takes a bare string: trainer.logger=console
    check_loggers(trainer.logger, trainer.project_name)
    chat_template("model.custom_chat_template" if given("model.custom_chat_template") else "data.chat_template",
                  data.chat_template)  # where both names end up
    for name in ("messages_key", "tools_key", "enable_thinking_key"):  # verl's newer MultiTurnSFTDataset reads data.<name>
        top, nested = getattr(data, name), getattr(data.multiturn, name)
        if top is not None and top != nested:
            if given(f"data.multiturn.{name}"):
                raise ConfigError(f"data.{name}={top} and data.multiturn.{name}={nested} are the same setting (verl's newer "
                                  "and older spelling) with two values; set one of them")
            setattr(data.multiturn, name, top)
        setattr(data, name, getattr(data.multiturn, name))  # both spellings hold it (a data.custom_cls may read either)
    if data.seed is None:  # verl's null draws an unseeded choice of rows (data.shuffle); trainer.seed keeps runs repeatable
        data.seed = trainer.seed
    if data.micro_batch_size is not None:  # verl's deprecated key: current verl ignores it; older verl split it over the ranks
        if given("data.micro_batch_size_per_gpu"):
            notes.append(f"data.micro_batch_size={data.micro_batch_size} (verl's deprecated key) has no effect here: "
                         f"data.micro_batch_size_per_gpu={data.micro_batch_size_per_gpu} is used")
        elif data.micro_batch_size < 1:
            raise ConfigError(f"data.micro_batch_size={data.micro_batch_size} must be at least 1 (or leave it out and set "
                              "data.micro_batch_size_per_gpu)")
        elif data.micro_batch_size < ranks or data.micro_batch_size % ranks:  # verl 0.9 ignores it
            notes.append(f"data.micro_batch_size={data.micro_batch_size} (verl's deprecated key, rows over all ranks) has no "
                         f"effect here: it does not split over {ranks} rank(s), so data.micro_batch_size_per_gpu="
                         f"{data.micro_batch_size_per_gpu} is used, as verl 0.9 ignores the key")
        else:  # micro-batching changes memory use only, never the gradient
            data.micro_batch_size_per_gpu = data.micro_batch_size // ranks
    for key, value in (("data.train_batch_size", data.train_batch_size), ("data.micro_batch_size_per_gpu", data.micro_batch_size_per_gpu),
                       ("data.max_length", data.max_length), ("trainer.total_epochs", trainer.total_epochs)):
        if value < 1:
            raise ConfigError(f"{key}={value} must be at least 1")
    if data.train_batch_size % ranks:
        raise ConfigError(f"data.train_batch_size={data.train_batch_size} does not split over {ranks} ranks; make it a multiple")
    if trainer.total_training_steps is not None and trainer.total_training_steps < 1:
        raise ConfigError(f"trainer.total_training_steps={trainer.total_training_steps} must be at least 1 (or null)")
    for key in ("save_freq", "test_freq"):
        value = getattr(trainer, key)
        if isinstance(value, str) and value != EACH_EPOCH:
            raise ConfigError(f"trainer.{key}={value!r} must be a number of steps (-1: only the last) or {EACH_EPOCH}")
    choice("trainer.resume_mode", trainer.resume_mode, ("auto", "disable", "resume_path"))
    if trainer.resume_path and not trainer.resume_from_path:
        trainer.resume_from_path = trainer.resume_path
        if trainer.resume_mode == "auto":
            trainer.resume_mode = "resume_path"
    if trainer.resume_mode == "resume_path" and not trainer.resume_from_path:
        raise ConfigError("trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_<N> folder)")
    unknown = set(trainer.checkpoint) - {"save_contents", "load_contents"}
    if unknown:
        raise ConfigError(f"trainer.checkpoint.{sorted(unknown)[0]} is not a key; trainer.checkpoint has save_contents and load_contents")
    trainer.checkpoint.setdefault("save_contents", ["model", "optimizer", "extra", "hf_model"])
    trainer.checkpoint.setdefault("load_contents", [c for c in trainer.checkpoint["save_contents"] if c != "hf_model"])
    for name in ("save_contents", "load_contents"):
        for content in trainer.checkpoint[name]:
            choice(f"trainer.checkpoint.{name}", content, CHECKPOINT_CONTENTS)
    reserved = sorted(set(data.apply_chat_template_kwargs) & set(RESERVED_TEMPLATE_KWARGS))
    if reserved:
        raise ConfigError(f"data.apply_chat_template_kwargs.{reserved[0]}: set by reinforge itself when it renders the rows; "
                          f"leave out {', '.join(RESERVED_TEMPLATE_KWARGS)}")
    trainer.default_local_dir = trainer.default_local_dir or f"checkpoints/{trainer.project_name}/{trainer.experiment_name}"
    if config.ulysses_sequence_parallel_size > 1:
        notes.append(f"ulysses_sequence_parallel_size={config.ulysses_sequence_parallel_size}: sequences are not split "
                     "over ranks here; every rank computes whole sequences")
    if data.pad_mode is not None:
        if data.pad_mode not in ("right", "no_padding"):
            raise ConfigError(f"data.pad_mode={data.pad_mode!r} is not supported; right and no_padding are accepted (micro-batches "
                              "are padded to their longest row); leave data.pad_mode out")
        notes.append(f"data.pad_mode={data.pad_mode} has no effect here: micro-batches are padded to their longest row, not "
                     "to data.max_length, and the loss is the token mean either way")
    if data.use_dynamic_bsz or given("data.max_token_len_per_gpu"):
        notes.append("data.use_dynamic_bsz / data.max_token_len_per_gpu have no effect here: micro-batches are "
                     f"data.micro_batch_size_per_gpu={data.micro_batch_size_per_gpu} rows (memory use only; the loss is the "
                     "step's token mean)")
    if data.ignore_input_ids_mismatch:
        notes.append("data.ignore_input_ids_mismatch=true has no effect here: a conversation the chat template renders "
                     "differently turn by turn is refused, naming its row")
    if data.enable_thinking_default is not None and str(data.enable_thinking_default).lower() != "none":
        value = data.enable_thinking_default
        thinking = value if isinstance(value, bool) else str(value).lower() in ("true", "1", "yes")
        data.apply_chat_template_kwargs.setdefault("enable_thinking", thinking)  # a row's own column still wins
    if data.balance_dp_token:
        notes.append("data.balance_dp_token=True has no effect here: the loss is always the token mean over the whole step, "
                     "on all ranks and micro-batches")
    offload = [key for key in ("model.fsdp_config.cpu_offload", "model.fsdp_config.offload_params") if given(key)]
    if offload and (ranks == 1 or trainer.device == "cpu"):
        notes.append(f"{' / '.join(offload)}: FSDP's offload of a model sharded over several CUDA ranks; no effect "
                     f"{'on one rank' if ranks == 1 else 'on the CPU'}")
    if model.use_liger or model.use_shm or data.use_shm:
        notes.append("model.use_liger / model.use_shm / data.use_shm have no effect here")
    inert = [key for key in ("data.num_workers", "model.enable_activation_offload",
                             "model.use_fused_kernels", "model.fused_kernel_options", "model.tiled_mlp", "profiler",
                             "trainer.balance_batch", "trainer.profile_interval") if given(key)]
    if inert:
        notes.append(f"{', '.join(inert)}: verl's GPU-side settings, without effect here")
    return notes


def _newer_places(config: SFTConfig, given) -> list[str]:
    """verl 0.9's names of settings this config has under older ones: model.path, model.custom_chat_template,
    checkpoint.*, engine.*; a multi-turn column named at data's top level turns multi-turn on, as verl 0.9 always reads
    conversations. Both names given with different values is a ConfigError; returns notes on engine keys without effect."""
    from reinforge.errors import ConfigError

    data, model, trainer = config.data, config.model, config.trainer

    def adopt(newer: str, value, older: str, current, assign) -> None:
        if value is None or value == current:
            return
        if given(older):
            raise ConfigError(f"{newer}={value} and {older}={current} are the same setting (verl's newer and older names) "
                              "with two values; set one of them")
        assign(value)

    adopt("model.path", model.path, "model.partial_pretrain", model.partial_pretrain,
          lambda v: setattr(model, "partial_pretrain", v))
    adopt("model.custom_chat_template", model.custom_chat_template, "data.chat_template", data.chat_template,
          lambda v: setattr(data, "chat_template", v))
    for name, value in config.checkpoint.items():
        adopt(f"checkpoint.{name}", value, f"trainer.checkpoint.{name}", trainer.checkpoint.get(name),
              lambda v, name=name: trainer.checkpoint.__setitem__(name, v))
    notes = []
    for name, value in config.engine.items():
        target = ENGINE_KEYS.get(name)
        if target is None:
            notes.append(f"engine.{name}: verl's engine tuning, without effect here")
            continue
        section, _, leaf = target.rpartition(".")
        node = node_at(config, section) if section else config
        adopt(f"engine.{name}", value, target, getattr(node, leaf), lambda v, node=node, leaf=leaf: setattr(node, leaf, v))
    newest = given("model.path")  # verl 0.9's trainer (verl.trainer.sft_trainer) is driven so; the older one not
    if ((newest or any(given(f"data.{name}") for name in ("messages_key", "tools_key", "enable_thinking_key")))
            and not given("data.prompt_key") and not given("data.multiturn.enable")):
        data.multiturn.enable = True  # verl 0.9's dataset reads conversations only
    if newest:  # its defaults where they differ from the older trainer's, which this schema's are
        for key, value in NEWEST_OPTIM_DEFAULTS.items():
            if not given(f"optim.{key}") and not (key == "lr_scheduler" and (given("optim.lr_scheduler_type")
                                                                         or given("optim.warmup_style"))):
                setattr(config.optim, key, value)
    return notes
