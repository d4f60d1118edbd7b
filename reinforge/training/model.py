"""Load the tokenizer and the causal LM named by `actor_rollout_ref.model`."""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
from pathlib import Path

import torch

from reinforge.config.schema import ATTENTION_KEYS, Config
from reinforge.errors import ModelError, without_colours
from reinforge.user_code import import_user_module

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "32": torch.float32, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16}


# the files one of which every Hugging Face tokenizer folder holds (fast, sentencepiece, BPE and WordPiece tokenizers)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


def model_source(path: str, key: str = "actor_rollout_ref.model.path") -> str:
    """What `from_pretrained` should load for config key `key`: the existing folder `path` (it must hold
    a config.json), or `path` as a hub id; ModelError for a path that looks local but is not there."""
    source, local = _local_or_hub(path, key)
    if local and not (Path(source) / "config.json").is_file():
        raise ModelError(f"{key}={path}: the folder has no config.json; is it a Hugging Face model folder?")
    return source


def tokenizer_source(path: str, key: str) -> str:
    """`model_source` for a tokenizer alone (data.tokenizer, reward_model.model.input_tokenizer): a folder needs a
    tokenizer's files, not a model's config.json (a folder holding only tokenizer.json, tokenizer_config.json and a
    chat template loads, as AutoTokenizer loads it)."""
    source, local = _local_or_hub(path, key)
    if local:
        _require_tokenizer_files(source, f"{key}={path}")
    return source


def has_tokenizer_files(folder: str | Path) -> bool:
    """Whether `folder` holds a tokenizer's files (TOKENIZER_FILES)."""
    return any((Path(folder).expanduser() / name).is_file() for name in TOKENIZER_FILES)


def _require_tokenizer_files(folder: str, setting: str) -> None:
    """A ModelError naming `setting` when `folder` holds no tokenizer files (transformers would build a tokenizer of one
    token from a config.json alone)."""
    if not has_tokenizer_files(folder):
        raise ModelError(f"{setting}: the folder has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}); is it "
                         "a Hugging Face tokenizer or model folder?")


def _local_or_hub(path: str, key: str) -> tuple[str, bool]:
    """(`path` with `~` expanded, True) when it exists here, else (`path`, False) as a hub id, which works where a hub is
    reachable; ModelError for a path that looks local but is not there."""
    expanded = os.path.expanduser(path)
    if Path(expanded).exists():
        return expanded, True
    if path.startswith(("/", ".", "~")) or path.count("/") > 1:
        raise ModelError(f"{key}={path}: no such folder ({expanded})")
    unreachable = None if _in_hub_cache(path) else _hub_unreachable()
    if unreachable:  # at once, not after huggingface_hub's retries (about 25 s for each file)
        raise ModelError(f"{key}={path}: there is no such folder here, and as a model id on the hub it is not in the "
                         f"Hugging Face cache, while {unreachable}. Give the folder of a downloaded model (where the hub "
                         f"is reachable: `hf download {path} --local-dir <folder>`), or check the path")
    return path, False


def _in_hub_cache(repo_id: str) -> bool:
    """Whether the Hugging Face cache holds a model's or a tokenizer's config of `repo_id` (from an earlier download)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return any(isinstance(try_to_load_from_cache(repo_id, name), str) for name in ("config.json", "tokenizer_config.json"))
    except ValueError:  # not a valid repo id: loading it says so
        return True


@functools.cache
def _hub_unreachable() -> str | None:
    """Why the hub cannot be reached from here (one connection, 5 s at most), or None: it can, or offline mode is set
    (transformers then says at once that the files are not cached), or a proxy is (the connection goes through it)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                                                                          "all_proxy", "HTTP_PROXY", "http_proxy")):
        return None
    endpoint = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or (80 if endpoint.scheme == "http" else 443)),
                                 timeout=5).close()
    except OSError as error:
        return f"the hub ({constants.ENDPOINT}) cannot be reached from this machine ({error.strerror or error})"
    return None


def policy_tokenizer(config: Config) -> tuple[str | None, str]:
    """The policy's tokenizer folder when it is not the model's, and the key that names it: data.tokenizer or verl's
    actor_rollout_ref.model.tokenizer_path (the same setting; validation refuses two different values)."""
    if config.data.tokenizer:
        return config.data.tokenizer, "data.tokenizer"
    return config.actor_rollout_ref.model.tokenizer_path, "actor_rollout_ref.model.tokenizer_path"


def load_tokenizer(config: Config):
    """The tokenizer of the model (or of data.tokenizer / model.tokenizer_path), with custom_chat_template applied."""
    model_cfg = config.actor_rollout_ref.model
    path, key = policy_tokenizer(config)
    if path:
        source = tokenizer_source(path, key)
    else:
        key, source = "actor_rollout_ref.model.path", model_source(model_cfg.path)
    return tokenizer_from(source, key, model_cfg.trust_remote_code or config.data.trust_remote_code,
                          model_cfg.custom_chat_template)


def tokenizer_from(source: str, key: str, trust_remote_code: bool, chat_template: str | None = None):
    """The tokenizer in `source` (named by config key `key` in messages), with `chat_template` replacing its own when
    given, and EOS as its padding token when it has none."""
    from transformers import AutoTokenizer

    if Path(source).is_dir():
        _require_tokenizer_files(source, f"{key}={source}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception as exc:
        raise ModelError(f"{key}={source}: cannot load the tokenizer{_as_hub_id(source)}: {exc}") from exc
    if chat_template:
        tokenizer.chat_template = chat_template
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_pretrained(model_cfg, key: str, what: str, dtype: str, build) -> torch.nn.Module:
    """The model that `build(source, hf_config, kwargs)` loads for `model_cfg` (a config's `...model` section,
    whose path is config key `key`): `external_lib` imported, `hf_config` read from `hf_config_path` where the section
    has one set (else from the model's folder), `override_config` applied to it,
    `kwargs` holding the config, `dtype` and trust_remote_code; any failure is a ModelError naming `what`."""
    from transformers import AutoConfig

    if model_cfg.external_lib:  # a module (or file) that registers custom model classes with transformers
        import_user_module(model_cfg.external_lib, f"{key.removesuffix('.path')}.external_lib", ModelError)
    config_path = model_cfg.get("hf_config_path")  # verl's: the config.json is in another folder than the weights
    if config_path:
        source = _local_or_hub(model_cfg.path, key)[0]
        config_source = model_source(config_path, f"{key.removesuffix('.path')}.hf_config_path")
    else:
        source = config_source = model_source(model_cfg.path, key)
    report = io.StringIO()
    try:
        with _warnings_into(report):
            hf_config = AutoConfig.from_pretrained(config_source, trust_remote_code=model_cfg.trust_remote_code)
            overrides = dict(model_cfg.override_config)
            attention = [overrides.pop(name) for name in ATTENTION_KEYS if name in overrides]
            for name, value in overrides.items():
                setattr(hf_config, name, value)
            kwargs = {"config": hf_config, "dtype": DTYPES[dtype], "trust_remote_code": model_cfg.trust_remote_code}
            if attention:  # transformers takes it as a loading argument; set on the config it would be a plain attribute
                kwargs["attn_implementation"] = attention_here(attention[0])
            if config_path:  # generation settings (eos ids) come with the config, as verl reads them, not from the weights
                kwargs["generation_config"] = _generation_config(config_source, hf_config)
            return build(source, hf_config, kwargs)
    except Exception as exc:
        detail = str(exc) if len(str(exc)) > 40 else f"{type(exc).__name__}: {exc}"
        if "above report" in detail and report.getvalue().strip():  # transformers' load report, which a quiet run kept back
            detail += "\n" + without_colours(report.getvalue().rstrip())
        raise ModelError(f"{key}={source}: cannot load the {what}{_as_hub_id(source)}: {detail}") from exc


def attention_here(name: str) -> str:
    """The attention implementation a model asked for `name` (override_config.attn_implementation) gets on this machine:
    flash attention's kernels need a CUDA GPU, so without one it attends with sdpa (the same maths)."""
    return "sdpa" if str(name).startswith("flash_attention") and not torch.cuda.is_available() else name


def _as_hub_id(source: str) -> str:
    """For a message: that `source` was read as a hub model id, there being no such folder here (a mistyped path?)."""
    return "" if Path(source).exists() else f" (there is no folder {source} here, so it was taken for a model id on the hub)"


@contextlib.contextmanager
def _warnings_into(buffer: io.StringIO):
    """transformers' warnings (its load report of weights that do not fit among them) written to `buffer` instead of
    being dropped, while a quiet run (trainer/main.py) keeps them off the console."""
    from transformers.utils import logging as hf_logging

    library = hf_logging.get_logger()
    if library.getEffectiveLevel() <= logging.WARNING:  # not quiet: they are printed anyway
        yield
        return
    handler = logging.StreamHandler(buffer)
    level, propagate = library.level, library.propagate
    hf_logging.disable_default_handler()
    library.addHandler(handler)
    library.setLevel(logging.WARNING)
    library.propagate = False
    try:
        yield
    finally:
        library.setLevel(level)
        library.propagate = propagate
        library.removeHandler(handler)
        hf_logging.enable_default_handler()


def _generation_config(source: str, hf_config):
    """The generation config (generation_config.json) of the folder `source`, else the one `hf_config` implies."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(source)
    except (OSError, TypeError):  # no generation_config.json (transformers may fail with TypeError on a local folder)
        return GenerationConfig.from_model_config(hf_config)


def pretrained(cls, source: str, new_head: bool = False, **kwargs) -> torch.nn.Module:
    """`cls.from_pretrained(source, **kwargs)`, refusing a checkpoint that leaves weights of the model unloaded, which
    transformers would initialise at random and only log (renamed keys, another architecture's checkpoint, a tensor
    missing); with `new_head` the task head outside the backbone may be new (a value head on a causal LM's weights, as
    verl's critic starts)."""
    model, info = cls.from_pretrained(source, output_loading_info=True, **kwargs)
    backbone = model.base_model_prefix + "."
    missing = sorted(k for k in info["missing_keys"] if not new_head or k.startswith(backbone))
    if missing:
        unexpected = sorted(info["unexpected_keys"])
        hint = f"; the checkpoint has weights the model does not use, e.g. {unexpected[:3]}" if unexpected else ""
        raise ModelError(f"the checkpoint has no weights for {len(missing)} of the model's tensors, e.g. {missing[:3]}, so "
                         f"they would be random{hint}")
    return model


def model_text_settings(model_cfg, *names: str) -> tuple:
    """The values of `names` (vocab_size, max_position_embeddings) in the config of `model_cfg` (a config's `...model`
    section) for its language model, after override_config; None for each when the config cannot be read here
    (loading the model reports why), and for one it does not have."""
    from transformers import AutoConfig

    try:
        source = model_cfg.get("hf_config_path") or model_source(model_cfg.path)
        hf_config = AutoConfig.from_pretrained(source, trust_remote_code=model_cfg.trust_remote_code).get_text_config()
    except Exception:
        return (None,) * len(names)
    return tuple(model_cfg.override_config.get(name, getattr(hf_config, name, None)) for name in names)


def load_causal_lm(config: Config, device: str, trainable: bool = True, dtype: str = "fp32") -> torch.nn.Module:
    """The causal LM of actor_rollout_ref.model in `dtype` (fsdp_config.model_dtype), on `device`, in train mode if `trainable`."""
    from reinforge.training.vision import model_class

    model_cfg = config.actor_rollout_ref.model
    model = load_pretrained(model_cfg, "actor_rollout_ref.model.path", "model", dtype,
                             lambda source, hf_config, kwargs: pretrained(model_class(hf_config), source, **kwargs))
    return prepare_model(model, device, trainable, model_cfg.enable_gradient_checkpointing)


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Non-reentrant gradient checkpointing of a Hugging Face model's layers, by transformers' newer name for it where
    the model has it (`activation_checkpointing_enable`: in 5.24, not in 5.17 or 4.x)."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def prepare_model(model: torch.nn.Module, device: str, trainable: bool, gradient_checkpointing: bool) -> torch.nn.Module:
    """`model` on `device`: in train mode (with non-reentrant gradient checkpointing when asked) if `trainable`,
    else in eval mode with gradients off."""
    model.to(device)
    if trainable:
        model.train()
        if gradient_checkpointing:
            enable_gradient_checkpointing(model.model if isinstance(model, CausalLMWithValueHead) else model)
    else:
        model.eval()
        model.requires_grad_(False)
    return model


class CausalLMWithValueHead(torch.nn.Module):
    """A causal LM's backbone with a linear value head, for architectures that have no ...ForTokenClassification.

    `forward` returns an object with `.logits` of shape (batch, length, 1), like the token
    classification models, so the critic treats both alike.
    """

    def __init__(self, causal_lm: torch.nn.Module):
        super().__init__()
        self.config = causal_lm.config
        self.model = causal_lm.base_model  # the decoder stack, without the vocabulary head
        self.score = torch.nn.Linear(causal_lm.config.hidden_size, 1, bias=False)
        torch.nn.init.normal_(self.score.weight, std=getattr(causal_lm.config, "initializer_range", 0.02))
        self.score.to(next(self.model.parameters()).dtype)

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, use_cache=False, **kwargs):
        from transformers.modeling_outputs import TokenClassifierOutput

        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=use_cache, **kwargs).last_hidden_state
        return TokenClassifierOutput(logits=self.score(hidden))


def load_value_model(config: Config, device: str, dtype: str = "fp32") -> torch.nn.Module:
    """The critic's value model (critic.model): token classification with one label, else a causal LM with a value head.

    Either way `model(...).logits` is (batch, length, 1); the head is new when loaded from a
    causal LM checkpoint (seeded by torch's global RNG).
    """
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    def build(source: str, hf_config, kwargs: dict) -> torch.nn.Module:
        hf_config.num_labels = 1
        hf_config.classifier_dropout = 0.0  # a value estimate, not a regulariser's sample
        if type(hf_config) in AutoModelForTokenClassification._model_mapping:
            return pretrained(AutoModelForTokenClassification, source, new_head=True, **kwargs)
        return CausalLMWithValueHead(pretrained(AutoModelForCausalLM, source, **kwargs))

    model_cfg = config.critic.model
    model = load_pretrained(model_cfg, "critic.model.path", "value model", dtype, build)
    return prepare_model(model, device, trainable=True, gradient_checkpointing=model_cfg.enable_gradient_checkpointing)
