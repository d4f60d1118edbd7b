"""Load the tokenizer and the causal LM named by `actor_rollout_ref.model`."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import torch

from reinforge.config.schema import Config
from reinforge.errors import ModelError

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}


def _model_source(path: str) -> str:
    expanded = os.path.expanduser(path)
    if Path(expanded).exists():
        if not (Path(expanded) / "config.json").is_file():
            raise ModelError(f"actor_rollout_ref.model.path={path}: the folder has no config.json; is it a Hugging Face model folder?")
        return expanded
    if path.startswith(("/", ".", "~")) or path.count("/") > 1:
        raise ModelError(f"actor_rollout_ref.model.path={path}: no such folder ({expanded})")
    return path  # a hub id; works where a hub is reachable


def load_tokenizer(config: Config):
    """The tokenizer of the model (or data.tokenizer), with custom_chat_template applied."""
    from transformers import AutoTokenizer

    model_cfg = config.actor_rollout_ref.model
    source = _model_source(config.data.tokenizer or model_cfg.path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=model_cfg.trust_remote_code or config.data.trust_remote_code)
    except Exception as exc:
        raise ModelError(f"cannot load the tokenizer from {source}: {exc}") from exc
    if model_cfg.custom_chat_template:
        tokenizer.chat_template = model_cfg.custom_chat_template
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(config: Config, device: str, trainable: bool = True, dtype: str = "fp32") -> torch.nn.Module:
    """The causal LM of actor_rollout_ref.model in `dtype` (fsdp_config.model_dtype), on `device`, in train mode if `trainable`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model_cfg = config.actor_rollout_ref.model
    if model_cfg.external_lib:
        importlib.import_module(model_cfg.external_lib)
    source = _model_source(model_cfg.path)
    try:
        hf_config = AutoConfig.from_pretrained(source, trust_remote_code=model_cfg.trust_remote_code)
        for key, value in model_cfg.override_config.items():
            setattr(hf_config, key, value)
        model = AutoModelForCausalLM.from_pretrained(
            source, config=hf_config, dtype=DTYPES[dtype], trust_remote_code=model_cfg.trust_remote_code
        )
    except Exception as exc:
        raise ModelError(f"cannot load the model from {source}: {exc}") from exc
    model.to(device)
    if trainable:
        model.train()
        if model_cfg.enable_gradient_checkpointing:
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.eval()
        model.requires_grad_(False)
    return model
