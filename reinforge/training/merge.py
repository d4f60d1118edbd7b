"""`reinforge merge CHECKPOINT OUT`: a checkpoint's model as a Hugging Face model folder.

CHECKPOINT is a worker's folder of a saved step (`global_step_<N>/actor`, or `.../critic`), saved by
any number of ranks (checkpoint_io.py reassembles the shards). OUT gets `model.safetensors` and
`config.json` written by transformers' `save_pretrained` (so `from_pretrained` loads it), then the
generation config and tokenizer files that the checkpoint keeps in `huggingface/`. An actor becomes
an `AutoModelForCausalLM`; a critic (its state has the value head `score.weight`) an
`AutoModelForTokenClassification` with one label, which exists for architectures transformers has a
token-classification class for; a critic built as a causal LM with our own value head
(`CausalLMWithValueHead`, training/model.py) has no Hugging Face class to write and is refused. A
model trained with LoRA adapters is written merged (W + scale B A, training/lora.py; the scale from
its `lora_adapter/adapter_config.json`, or from `lora_train_meta.json` in a verl checkpoint); verl's
merger writes the base weights and the adapter in `lora_adapter/` instead.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from reinforge.errors import ConfigError
from reinforge.trainer.checkpoint import damaged, verify_files
from reinforge.training.checkpoint_io import read_full_model_state, write_hf_model
from reinforge.training.lora import ADAPTER_DIR, merge_lora_state, saved_lora

ADVICE = "Name a worker folder of a saved step, e.g. checkpoints/<project>/<experiment>/global_step_<N>/actor"
DAMAGED = "Merge another saved step (its global_step_<N>/actor folder)"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")  # and model-*: shards


def merge_checkpoint(folder: str, out: str, trust_remote_code: bool = False, overwrite: bool = False) -> Path:
    """Write the model of checkpoint folder `folder` as a Hugging Face model folder `out`; returns `out`. A folder that
    already holds a model's weights is written over only with `overwrite` (it may be the base model the run started from)."""
    from transformers import AutoConfig, AutoModelForTokenClassification

    from reinforge.training.vision import model_class as language_model_class

    path, out_dir = Path(folder), Path(out)
    hf_dir = path / "huggingface"
    if not path.is_dir():
        raise ConfigError(f"{path} does not exist. {ADVICE}")
    roles = [role for role in ("actor", "critic") if (path / role / "huggingface" / "config.json").is_file()]
    if roles and not (hf_dir / "config.json").is_file():
        raise ConfigError(f"{path} is a saved step; name its worker folder: {' or '.join(str(path / role) for role in roles)}")
    if not (hf_dir / "config.json").is_file():
        raise ConfigError(f"{path} is not a reinforge checkpoint folder: it has no huggingface/config.json. {ADVICE}")
    if out_dir.resolve() in (path.resolve(), hf_dir.resolve()):
        raise ConfigError(f"the output folder {out} is the checkpoint folder itself or its huggingface/; name another one")
    _check_output(out_dir, overwrite)
    # the files merge reads and copies, against the checksums the save wrote (trainer/checkpoint.py)
    verify_files([*sorted(path.glob("model_world_size_*_rank_*.pt")), *sorted(hf_dir.iterdir())], DAMAGED)
    state = read_full_model_state(path, ADVICE)
    try:
        config = AutoConfig.from_pretrained(hf_dir, trust_remote_code=trust_remote_code)
    except (ValueError, OSError) as error:  # a config.json cut short or overwritten
        raise damaged(hf_dir / "config.json", error, DAMAGED) from error
    model_class = language_model_class(config)
    if "score.weight" in state:  # a critic's value model
        if type(config) not in AutoModelForTokenClassification._model_mapping:
            raise ConfigError(f"{path} holds a value model made of a {config.model_type} causal LM and reinforge's own "
                              "value head; transformers has no class for it, so merge cannot write it")
        model_class = AutoModelForTokenClassification
    layers = [name.split(".lora_A.")[0] for name in state if ".lora_A." in name]
    if any(f"{layer}.base_layer.weight" not in state for layer in layers):
        raise ConfigError(f"{path} holds LoRA adapters without the model's own weights (saved with checkpoint.save_lora_only): "
                          f"load its {ADAPTER_DIR}/ onto the base model with peft's PeftModel.from_pretrained and merge_and_unload")
    if layers:  # LoRA adapters: the folder gets the merged weights
        state = merge_lora_state(state, *saved_lora(path, model_class, config, state, trust_remote_code))
    try:
        write_hf_model(config, state, out_dir, model_class, trust_remote_code)
        for file in hf_dir.iterdir():  # the generation config and tokenizer as the run had them
            if file.is_file() and not _is_weights(file.name) and file.name != "config.json":
                shutil.copy(file, out_dir / file.name)
    except OSError as error:
        raise _unwritable("write", out_dir, error) from None
    return out_dir


def _check_output(out_dir: Path, overwrite: bool) -> None:
    """`out_dir` made, or a ConfigError: it cannot be, or it holds a model's weights and `overwrite` is not set."""
    weights = sorted(file.name for file in out_dir.glob("*") if _is_weights(file.name)) if out_dir.is_dir() else []
    if weights and not overwrite:
        raise ConfigError(f"the output folder {out_dir} already holds a model ({', '.join(weights[:3])}); merge does not "
                          "write over it unless asked: name a new folder, or add --overwrite")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _unwritable("make", out_dir, error) from None


def _is_weights(name: str) -> bool:
    return name in WEIGHT_FILES or name.startswith("model-")


def _unwritable(verb: str, out_dir: Path, error: OSError) -> ConfigError:
    return ConfigError(f"cannot {verb} the output folder {out_dir} ({error.strerror or error}: {error.filename}); "
                       "name a writable folder")
