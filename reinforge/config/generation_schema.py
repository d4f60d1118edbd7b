"""The config of `reinforge generate`: verl's `main_generation` keys (verl/trainer/config/generation.yaml) and defaults.

Keys are those of verl's generation.yaml over its versions (the older `ray_init` section and the newer `ray_kwargs`
both load), plus the keys verl's script reads with `.get` that users add with `+` (`data.trust_remote_code`,
`data.apply_chat_template_kwargs`, `model.trust_remote_code`, `rollout.seed`). Where verl's default only works on a
GPU it is replaced by one that works here, and the field says so. Settings that do nothing in this command are
accepted and listed as without effect (`unused_generation_settings`); `check_generation` checks the values.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from reinforge.config.fields import Node, _f, _sub
from reinforge.errors import ConfigError

_NO_EFFECT = "Accepted for verl compatibility; no effect here."
_ENGINE_ONLY = "vLLM/SGLang setting (rollout.name=vllm or sglang), passed to the engine as in reinforge train; no effect with hf."


@dataclass
class GenTrainerConfig(Node):
    nnodes: int = _f(1, "Nodes (verl: of the Ray cluster). Generation here runs in one process on one device; more than one "
                        "is reported as without effect.")
    n_gpus_per_node: int = _f(8, "GPUs per node (verl's default 8). Generation here runs in one process on one device; "
                                 "nnodes x n_gpus_per_node > 1 is reported as without effect.")
    device: str | None = _f(None, "cuda or cpu; null: cuda when a GPU is present, else cpu (verl's default: cuda).")


@dataclass
class GenDataConfig(Node):
    path: str = _f("~/data/rlhf/math/test.parquet", "The prompts: a parquet file in verl's schema (also .json or .jsonl, "
                   "as data.train_files takes). Every column is copied to the output.")
    prompt_key: str = _f("prompt", "Column holding the prompt: a list of chat messages (verl), rendered with the tokenizer's "
                         "chat template and the generation prompt, or a plain string, the model's input text as it is.")
    apply_chat_template: bool = _f(False, "Render a string prompt with the chat template too, as one user message "
                                   "(OpenRLHF's --apply_chat_template), as reinforge train's data.apply_chat_template.")
    input_template: str | None = _f(None, "A string prompt's text is input_template.format(prompt) (OpenRLHF's "
                                    "--input_template), as reinforge train's data.input_template.")
    n_samples: int = _f(5, "Responses generated per prompt (each row's `responses` list has this many).")
    output_path: str = _f("/opt/tiger/math_Qwen2-7B-Instruct.parquet", "The parquet file written: the input's columns plus "
                          "`responses`. Its folder is created; the file is written to a temporary name and renamed.")
    batch_size: int = _f(128, "Prompts generated per batch (each batch runs n_samples responses of each of its prompts).")
    trust_remote_code: bool = _f(False, "Allow a tokenizer with custom code (verl reads it with .get: +data.trust_remote_code).")
    apply_chat_template_kwargs: dict = _f({}, "Extra keyword arguments for tokenizer.apply_chat_template (e.g. "
                                          "enable_thinking: false), as verl passes them.")


@dataclass
class GenModelConfig(Node):
    path: str = _f("~/models/Qwen2-7B-Instruct", "Local folder of a Hugging Face causal LM (or a hub id where a hub is "
                   "reachable); its tokenizer and chat template are used too.")
    external_lib: str | None = _f(None, "A module to import before loading the model (registers custom architectures).")
    trust_remote_code: bool = _f(False, "Allow model code from the model folder (verl's examples add +model.trust_remote_code=True).")


@dataclass
class GenRolloutConfig(Node):
    name: str = _f("hf", "Generation engine: hf (transformers, CPU or GPU), or vllm / sglang (a CUDA GPU and the extra "
                   "reinforge[vllm] / reinforge[sglang]; the engine reads model.path's weights itself). verl's default is vllm.")
    mode: str = _f("sync", _NO_EFFECT + " (verl: the vLLM LLM or AsyncLLM class; here the engine's batched call.)")
    temperature: float = _f(1.0, "Sampling temperature; 0: greedy (then data.n_samples must be 1, as verl requires).")
    top_k: int = _f(50, "Top-k sampling; 0 or -1: off (verl: 0 for its hf rollout, -1 for vLLM).")
    top_p: float = _f(0.7, "Nucleus sampling threshold (1: off).")
    prompt_length: int | None = _f(1536, "Prompt tokens (after the chat template) kept; longer prompts are cut on the "
                                   "tokenizer's truncation side (right, as verl's tokenizer call cuts them), with a note giving "
                                   "how many were. null: not cut (verl 0.9's main_generation_server sends whole prompts; its "
                                   "command line gets null).")
    response_length: int = _f(512, "Most tokens generated per response.")
    do_sample: bool = _f(True, "Sample; false: greedy.")
    ignore_eos: bool = _f(False, "Keep generating past EOS up to response_length.")
    n: int = _f(1, "Accepted for verl compatibility; no effect: data.n_samples sets the responses per prompt (verl's engine "
                   "is given n=1 too).")
    seed: int = _f(0, "Seed of sampling (verl reads rollout.seed with .get, default 0, as the vLLM engine's seed: "
                      "+rollout.seed=N). Each response samples with its own seed hashed from (seed, row, sample), so the "
                      "same command writes the same responses whatever data.batch_size is.")
    dtype: str | None = _f(None, "Model dtype: fp32 or bf16 (float32/bfloat16). null: bfloat16 on cuda (verl's default), "
                                 "float32 on cpu.")
    micro_batch_size_per_gpu: int | None = _f(None, "hf engine: rows (prompts x samples) decoded together (vLLM/SGLang "
                                                   "schedule their own); null: a whole "
                                                   "batch (data.batch_size x n_samples) at once.")
    use_fire_sampling: bool = _f(False, "verl: FIRE sampling (arXiv:2410.21236). Only false in this version; true is an error.")
    calculate_log_probs: bool = _f(False, _NO_EFFECT + " (the output holds the responses' text only, as verl's does.)")
    gpu_memory_utilization: float = _f(0.5, _ENGINE_ONLY)
    enforce_eager: bool = _f(True, _ENGINE_ONLY)
    free_cache_engine: bool = _f(True, _ENGINE_ONLY)
    load_format: str = _f("dummy_dtensor", "vLLM/SGLang: how the engine loads model.path's weights; a dummy format "
                          "(verl's default, for weights synced from its actor) is read as auto, since nothing else gives "
                          "the engine weights here.")
    tensor_model_parallel_size: int = _f(1, _ENGINE_ONLY)
    data_parallel_size: int = _f(1, _NO_EFFECT + " (one engine; tensor_model_parallel_size spreads it over GPUs.)")
    max_num_batched_tokens: int = _f(8192, _ENGINE_ONLY)
    max_model_len: int | None = _f(None, _ENGINE_ONLY)
    max_num_seqs: int = _f(1024, _ENGINE_ONLY)
    disable_log_stats: bool = _f(True, _ENGINE_ONLY)
    enable_chunked_prefill: bool = _f(True, _ENGINE_ONLY)
    engine_kwargs: dict = _f({}, _ENGINE_ONLY)
    log_prob_micro_batch_size: int | None = _f(None, _NO_EFFECT + " (no log-probs are computed.)")
    log_prob_micro_batch_size_per_gpu: int = _f(8, _NO_EFFECT + " (no log-probs are computed.)")


@dataclass
class GenerationConfig(Node):
    trainer: GenTrainerConfig = _sub(GenTrainerConfig, "Where generation runs.")
    data: GenDataConfig = _sub(GenDataConfig, "The prompts file, the output file, samples and batches.")
    model: GenModelConfig = _sub(GenModelConfig, "The model (and its tokenizer).")
    rollout: GenRolloutConfig = _sub(GenRolloutConfig, "Sampling.")
    actor: dict = _f({"strategy": "fsdp", "ulysses_sequence_parallel_size": 1, "fsdp_config": {"fsdp_size": -1}},
                     _NO_EFFECT + " (verl builds its worker from it; the model is loaded unsharded here.)")
    ray_init: dict = _f({"num_cpus": None, "timeline_json_file": None}, _NO_EFFECT + " (older verl's Ray settings; no Ray here.)")
    ray_kwargs: dict = _f({"ray_init": {"num_cpus": None}, "timeline_json_file": None},
                          _NO_EFFECT + " (newer verl's Ray settings; no Ray here.)")


GPU_ENGINES = ("vllm", "sglang")
_DTYPES = ("fp32", "float32", "bf16", "bfloat16")
ENGINE_KEYS = ("gpu_memory_utilization", "enforce_eager", "free_cache_engine", "load_format", "tensor_model_parallel_size",
               "max_num_batched_tokens", "max_model_len", "max_num_seqs", "disable_log_stats", "enable_chunked_prefill",
               "engine_kwargs")  # passed to vLLM/SGLang under the same names as reinforge train's rollout keys
_ALWAYS_INERT = {
    "rollout.n": "data.n_samples sets the responses per prompt (verl's engine is given n=1 too)",
    "rollout.calculate_log_probs": "the output holds the responses' text only, as verl's does",
    "rollout.log_prob_micro_batch_size": "no log-probs are computed",
    "rollout.log_prob_micro_batch_size_per_gpu": "no log-probs are computed",
    "rollout.mode": "the engine is called with whole batches (verl: the vLLM LLM or AsyncLLM class)",
    "rollout.data_parallel_size": "one engine (rollout.tensor_model_parallel_size spreads it over GPUs)",
    "actor": "verl builds its rollout worker from it; the model is loaded unsharded here",
    "ray_init": "no Ray: generation runs in this process",
    "ray_kwargs": "no Ray: generation runs in this process",
}


def check_generation(config: GenerationConfig) -> None:
    """ConfigError naming the key of the first value `reinforge generate` cannot use."""
    from reinforge.config.section_checks import check_prompt_options

    data, rollout = config.data, config.rollout
    check_prompt_options(data)
    for key, value in (("data.n_samples", data.n_samples), ("data.batch_size", data.batch_size),
                       ("rollout.prompt_length", rollout.prompt_length), ("rollout.response_length", rollout.response_length)):
        if value is not None and value < 1:
            raise ConfigError(f"{key}={value} must be > 0")
    if rollout.micro_batch_size_per_gpu is not None and rollout.micro_batch_size_per_gpu < 1:
        raise ConfigError(f"rollout.micro_batch_size_per_gpu={rollout.micro_batch_size_per_gpu} must be > 0 (or null: a whole batch)")
    if rollout.temperature < 0:
        raise ConfigError(f"rollout.temperature={rollout.temperature} must be >= 0 (0: greedy)")
    if not 0 < rollout.top_p <= 1:
        raise ConfigError(f"rollout.top_p={rollout.top_p} must be in (0, 1] (1: off)")
    if rollout.temperature == 0 and data.n_samples != 1:
        raise ConfigError(f"rollout.temperature=0 is greedy decoding, which gives the same response every time, and "
                          f"data.n_samples={data.n_samples}; verl requires data.n_samples=1 then: set it, or a temperature > 0")
    if rollout.name not in ("hf", *GPU_ENGINES):
        raise ConfigError(f"rollout.name={rollout.name!r} is not an engine; use hf, vllm or sglang")
    if rollout.dtype is not None and rollout.dtype not in _DTYPES:
        raise ConfigError(f"rollout.dtype={rollout.dtype!r}: use one of {', '.join(_DTYPES)} (or null: bfloat16 on cuda, "
                          "float32 on cpu)")
    if rollout.use_fire_sampling:
        raise ConfigError("rollout.use_fire_sampling=true: FIRE sampling is not supported in this version yet; remove it")
    if config.trainer.device not in (None, "cpu", "cuda"):
        raise ConfigError(f"trainer.device={config.trainer.device!r}: use cuda or cpu (or null: cuda when a GPU is present)")
    if not data.output_path:
        raise ConfigError("data.output_path is not set; set it to the parquet file to write")


def unused_generation_settings(config: GenerationConfig, user_keys: list[str]) -> list[str]:
    """One line per key the user set that does nothing in this command, with the reason."""
    lines = []
    for key in dict.fromkeys(user_keys):
        parts = key.split(".")
        reason = next((r for prefix, r in _ALWAYS_INERT.items() if key == prefix or key.startswith(prefix + ".")), None)
        if reason is None and parts[0] == "rollout" and len(parts) > 1 and parts[1] in ENGINE_KEYS and config.rollout.name == "hf":
            reason = "vLLM/SGLang setting; this run generates with the hf engine"
        elif reason is None and key == "rollout.micro_batch_size_per_gpu" and config.rollout.name != "hf":
            reason = f"hf engine setting; {config.rollout.name} schedules its own batches"
        elif reason is None and parts[0] == "trainer" and parts[-1] in ("nnodes", "n_gpus_per_node"):
            if config.trainer.nnodes * config.trainer.n_gpus_per_node > 1:
                reason = "generation runs in one process on one device (trainer.device)"
        elif reason is None and key == "data.input_template" and config.data.apply_chat_template:
            reason = "data.apply_chat_template renders string prompts with the chat template instead (as in OpenRLHF)"
        elif reason is None and key.startswith(("hydra.", "hydra/")):
            reason = "Hydra's own setting (its outputs and logs); it changes no config key"
        elif reason is None and not _generation_key(key):
            reason = "a training setting of the ppo_trainer config, which verl's main_generation_server does not read either"
        if reason:
            lines.append(f"{key}: {reason}")
    return lines


def load_generation_config(args: list[str], config_file: str | None = None) -> tuple[GenerationConfig, list[str]]:
    """The checked config of `reinforge generate` from overrides (and a YAML file), and the keys the user set; the
    command line of verl 0.9's main_generation_server (ppo_trainer keys) is read too (`server_form`)."""
    from reinforge.config.loading import naming_the_file, resolve

    args, training_keys = server_form(list(args))
    with naming_the_file(config_file, args, GenerationConfig, "generation"):
        config, user_keys, ignored = resolve(GenerationConfig, args, config_file, base="generation")
        check_generation(config)
    return config, ignored + user_keys + training_keys


# verl 0.9 ships main_generation_server, which reads the ppo_trainer config instead of generation.yaml: its keys here
SERVER_KEYS = {"data.train_files": "data.path", "actor_rollout_ref.rollout.n": "data.n_samples",
               "actor_rollout_ref.model.path": "model.path", "actor_rollout_ref.model.external_lib": "model.external_lib",
               "actor_rollout_ref.model.trust_remote_code": "model.trust_remote_code"}
# and its defaults where they differ from generation.yaml's: ppo_trainer's rollout.n and top_p, no top-k, and prompts sent
# whole (it reads no prompt length: data.max_prompt_length is reported as a training setting)
SERVER_DEFAULTS = ["data.n_samples=1", "rollout.top_p=1.0", "rollout.top_k=-1", "rollout.prompt_length=null"]


def server_form(args: list[str]) -> tuple[list[str], list[str]]:
    """`args` as this command's overrides, and the training keys among them that generation does not read. A command
    line with `data.train_files` or `actor_rollout_ref.*` keys is verl 0.9's main_generation_server's: SERVER_KEYS and
    `actor_rollout_ref.rollout.<key>` become this command's keys over SERVER_DEFAULTS; another key of `reinforge train`
    is kept aside (reported as without effect), and an unknown one is a ConfigError with a suggestion."""
    import re

    from reinforge.config.loading import parse_overrides, resolve
    from reinforge.config.schema import Config

    parsed = parse_overrides(args)
    if not any(o.key == "data.train_files" or o.key.startswith("actor_rollout_ref.") for o in parsed):
        return args, []
    rollout_keys = {f.name for f in fields(GenRolloutConfig)}
    translated, training, set_by = list(SERVER_DEFAULTS), [], {}
    for arg, override in zip(args, parsed, strict=True):
        key = override.key
        target = SERVER_KEYS.get(key)
        if target is None and key.startswith("actor_rollout_ref.rollout.") and key.split(".")[2] in rollout_keys:
            target = "rollout." + key.split(".", 2)[2]
        if target is None and (_generation_key(key) or key.startswith(("hydra.", "hydra/"))):  # Hydra's: ignored, listed
            target = key
        if target is None:
            resolve(Config, [arg])  # a key of neither command: ConfigError naming it, with the closest training key
            training.append(key)
            continue
        if key == "data.train_files" and isinstance(override.value, list):
            if len(override.value) != 1:
                raise ConfigError(f"data.train_files={override.value}: reinforge generate reads one file of prompts (verl's "
                                  "generation server concatenates several); join them into one file, or run once per file")
            arg = f"data.train_files={override.value[0]}"
        earlier = set_by.setdefault(target, override)
        if earlier.key != key and earlier.value != override.value:
            raise ConfigError(f"{earlier.key}={earlier.value} and {key}={override.value} are the same setting of reinforge "
                              f"generate ({target}; verl's generation server names it {_server_name(target)}); set one")
        prefix, _, value = re.match(r"^([+~]*)([^=]*)(=.*)?$", arg).groups()
        translated.append(f"{prefix.replace('+', '') if target != key else prefix}{target}{value or ''}")
    return translated, training


def _server_name(target: str) -> str:
    return next((key for key, ours in SERVER_KEYS.items() if ours == target), target.replace("rollout.", "actor_rollout_ref.rollout.", 1))


def _generation_key(key: str) -> bool:
    from reinforge.config.loading import all_keys

    return any(key == known or key.startswith(known + ".") for known in all_keys(GenerationConfig))


def describe_generation(config: GenerationConfig, user_keys: list[str]) -> str:
    """What `reinforge generate --dry-run` prints: the resolved config and the settings without effect."""
    from reinforge.config.loading import describe

    return describe(config, unused_generation_settings(config, user_keys))
