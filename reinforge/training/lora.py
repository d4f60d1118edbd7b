"""LoRA adapters on the actor and the critic (verl's `model.lora_rank`, `lora_alpha`, `target_modules`,
`exclude_modules`, `lora_adapter_path`), with peft (`pip install 'reinforge[lora]'`).

`add_lora` puts peft's LoRA layers into the model's linear layers in place (`inject_adapter_in_model`):
the model keeps its class and its forward, and only the adapters' A and B matrices train (a critic's
value head trains too). Each adapted layer computes W x + (alpha / r) B A x; B starts at zero, so the
policy starts as the model it was loaded from (or as the adapter `lora_adapter_path` names).

- The reference policy is the actor with its adapters switched off for the pass (`WithoutAdapters`),
  as verl's ref-in-actor: no second copy of the model.
- Engines that hold their own weights (vLLM, SGLang, an hf copy in another dtype or on several
  ranks) and Hugging Face folders get the merged weights, W + (alpha / r) B A under W's own name
  (its transpose for a Conv1D layer, as peft's fan_in_fan_out; `merged_weights`, `merge_lora_state`), so they see a
  plain model.
- Checkpoints keep the base and adapter weights as the model holds them (an exact resume) under peft's
  names (`base_model.model.` first, as verl's rank files of a LoRA model; checkpoint_io.py), with
  `lora_train_meta.json` ({r, lora_alpha, task_type}, which verl writes and its model merger reads for
  the adapters' scale), and `lora_adapter/` in peft's layout (`adapter_config.json`,
  `adapter_model.safetensors`), which `PeftModel.from_pretrained` or `lora_adapter_path` loads (the
  actor's onto the base causal LM; the critic's holds its backbone's adapters, whose value head is in
  the rank files). A resume checks that the checkpoint's adapters have this run's layers, ranks and
  scales. With `checkpoint.save_lora_only` the rank files hold only what trains (the adapters, and a
  critic's value head), as verl's, and a resume takes the frozen base weights from the model's folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from reinforge.config.section_checks import lora_enabled  # noqa: F401 (the workers ask here)
from reinforge.distributed.process_group import full_tensor
from reinforge.errors import ConfigError
from reinforge.inference.colocated import ModuleWeights

ADAPTER_DIR = "lora_adapter"  # in a checkpoint's worker folder (global_step_<N>/actor/lora_adapter)
TRAIN_META = "lora_train_meta.json"  # in a checkpoint's worker folder: the adapters' r, lora_alpha and task_type, as verl's
UNSUPPORTED = ("use_dora", "lora_bias", "modules_to_save", "trainable_token_indices", "layer_replication")
ADAPTER_NAME = "default"
BASE = ".base_layer."  # peft's name of the wrapped layer inside an adapted one
SAVED_PREFIX = "base_model.model."  # peft's prefix of a PeftModel's keys: in adapter_model.safetensors, and in rank files


def _peft(key: str):
    try:
        import peft
    except ImportError as exc:
        raise ConfigError(f"{key} asks for LoRA adapters, which need the peft package: pip install 'reinforge[lora]'") from exc
    return peft


def add_lora(model: torch.nn.Module, model_cfg, key: str) -> torch.nn.Module:
    """`model` with LoRA adapters in its linear layers (the `model_cfg` section at config key `key`), only the adapters
    trainable. A model with a value head (`score`) gets them in its backbone and keeps its head trainable."""
    peft = _peft(f"{key}.lora_rank")
    target = lora_target(model)
    adapter_path = model_cfg.get("lora_adapter_path")
    if adapter_path:
        lora_config, weights = read_adapter(adapter_path, f"{key}.lora_adapter_path")
        unsupported = [name for name in UNSUPPORTED if getattr(lora_config, name, None)]
        if unsupported:
            raise ConfigError(f"{key}.lora_adapter_path={adapter_path}: the adapter sets {', '.join(unsupported)} in its "
                              "adapter_config.json; reinforge trains and merges plain LoRA adapters (W + scale B A on linear "
                              "layers) only")
    else:
        modules = model_cfg.target_modules
        lora_config = peft.LoraConfig(r=model_cfg.lora_rank, lora_alpha=model_cfg.lora_alpha, lora_dropout=0.0, bias="none",
                                      target_modules=modules if isinstance(modules, str) else list(modules),
                                      exclude_modules=model_cfg.get("exclude_modules"),
                                      task_type=None if target is not model else "CAUSAL_LM")
        lora_config.base_model_name_or_path = model_cfg.get("path")
    lora_config.inference_mode = False
    try:
        peft.inject_adapter_in_model(lora_config, target, adapter_name=ADAPTER_NAME)
    except ValueError as exc:  # peft's "Target modules ... not found in the base model"
        modules = model_cfg.get("target_modules")
        hint = ("; a string other than all-linear is a regular expression over whole module names (e.g. "
                "'.*self_attn.q_proj'): name layers with a list, e.g. [q_proj,v_proj]"
                if isinstance(modules, str) and modules != "all-linear" else "")
        raise ConfigError(f"{key}.target_modules={modules!r}: {exc}{hint}") from exc
    modules = model_cfg.get("target_modules")
    if not adapter_path and not isinstance(modules, str):  # peft needs one name to match; each one named should
        layers = {id(layer) for layer in adapted_layers(target)}
        adapted = [name for name, module in target.named_modules() if id(module) in layers]
        unmatched = [m for m in modules if not any(name == m or name.endswith("." + m) for name in adapted)]
        if unmatched:
            raise ConfigError(f"{key}.target_modules names {unmatched}, which match no layer of the model (adapted: "
                              f"{sorted({name.rsplit('.', 1)[-1] for name in adapted})}); leave them out or fix their spelling")
    layers = {id(layer) for layer in adapted_layers(model)}
    kinds = {name: type(module).__name__ for name, module in model.named_modules() if id(module) in layers}
    others = sorted(set(kinds.values()) - {"Linear"})
    if others:  # e.g. a mixture-of-experts model's fused expert weights, which peft's all-linear adapts as ParamWrapper
        linear = sorted({name.rsplit(".", 1)[-1] for name, kind in kinds.items() if kind == "Linear"})
        where = sorted(name for name, kind in kinds.items() if kind != "Linear")[0]
        raise ConfigError(f"{key}.target_modules={model_cfg.get('target_modules')!r} adapts layers of kind {', '.join(others)} "
                          f"({where}, ...); reinforge trains and merges LoRA on linear layers only: name them"
                          + (f", e.g. {key}.target_modules=[{','.join(linear)}] (the linear layers it adapts here)" if linear
                             else " (e.g. [q_proj,v_proj])"))
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if getattr(model.config, "tie_word_embeddings", False) and any(layer is output for layer in adapted_layers(model)):
        raise ConfigError(f"{key}.target_modules adapts the output layer (lm_head), whose weight this model shares with its "
                          "input embedding (tie_word_embeddings): an adapter there would change both when merged; leave "
                          "lm_head out (all-linear does)")
    if adapter_path:
        try:
            loaded = peft.set_peft_model_state_dict(target, weights, adapter_name=ADAPTER_NAME)
        except RuntimeError as exc:  # the adapter's matrices do not fit these layers' sizes
            raise ConfigError(f"{key}.lora_adapter_path={adapter_path}: the adapter was trained for a model of another "
                              f"shape than {model_cfg.get('path')}'s: {str(exc).splitlines()[-1].strip()}") from exc
        missing = [name for name in loaded.missing_keys if ".lora_" in name]
        if loaded.unexpected_keys or missing:
            raise ConfigError(f"{key}.lora_adapter_path={adapter_path}: the adapter does not fit the model "
                              f"(unexpected {loaded.unexpected_keys[:3]}, missing {missing[:3]})")
    return model


def lora_target(model: torch.nn.Module) -> torch.nn.Module:
    """Where the adapters go: a value model's backbone (its head `score` stays a plain trainable layer), else the model."""
    return model.model if hasattr(model, "score") and hasattr(model, "model") else model


def read_adapter(path: str, key: str):
    """The LoraConfig and weights of a peft adapter folder (adapter_config.json, adapter_model.safetensors)."""
    peft = _peft(key)
    folder = Path(path).expanduser()
    if not (folder / "adapter_config.json").is_file():
        raise ConfigError(f"{key}={path}: no adapter_config.json there; name a peft adapter folder (a checkpoint's "
                          f"{ADAPTER_DIR} folder, or one saved with save_pretrained)")
    try:
        lora_config = peft.LoraConfig.from_pretrained(str(folder))
        weights = peft.load_peft_weights(str(folder), device="cpu")
    except Exception as exc:
        raise ConfigError(f"{key}={path}: cannot read the adapter: {exc}") from exc
    return lora_config, weights


def adapted_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [module for module in model.modules() if isinstance(module, BaseTunerLayer)]


def has_lora(model: torch.nn.Module) -> bool:
    return any(".lora_A." in name for name, _ in model.named_parameters())


@contextmanager
def adapters_disabled(model: torch.nn.Module) -> Iterator[None]:
    """`model` computing with its base weights only. peft's `enable_adapters(False)` would also turn the adapters'
    requires_grad off, which must not happen between the policy's forward and backward (the reference's pass of an
    exact KL runs there), so the layers' flag is set directly."""
    layers = adapted_layers(model)
    for layer in layers:
        layer._disable_adapters = True
    try:
        yield
    finally:
        for layer in layers:
            layer._disable_adapters = False


class WithoutAdapters(torch.nn.Module):
    """The policy with its LoRA adapters off during each forward pass: the model it was loaded from, which is the
    reference policy of a LoRA run (verl's ref-in-actor), computed without a second copy of the weights."""

    def __init__(self, policy: torch.nn.Module):
        super().__init__()
        self.policy = policy
        self.config = policy.config

    def forward(self, *args, cache=None, **kwargs):
        """The policy's forward; a KV cache given as `cache` goes to it under the keyword its forward takes."""
        from reinforge.inference.hf import cache_keyword

        if cache is not None:
            kwargs[cache_keyword(self.policy)] = cache
        with adapters_disabled(self.policy):
            return self.policy(*args, **kwargs)

    def get_output_embeddings(self) -> torch.nn.Module | None:
        return self.policy.get_output_embeddings()  # the vocabulary head, which a packed forward runs on fewer positions

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.policy.get_input_embeddings()  # the packing probe's token ids come from its size


def lora_scaling(model: torch.nn.Module) -> dict[str, float]:
    """The scale alpha / r of each adapted layer, by its name in `model`."""
    from peft.tuners.lora import LoraLayer

    return {name: module.scaling[ADAPTER_NAME] for name, module in model.named_modules() if isinstance(module, LoraLayer)}


def fan_in_fan_out(model: torch.nn.Module) -> set[str]:
    """The adapted layers of `model` whose weight is stored (in, out), as transformers' Conv1D (GPT-2's) stores it:
    peft's fan_in_fan_out, whose update B A is added to the weight transposed."""
    from peft.tuners.lora import LoraLayer

    return {name for name, module in model.named_modules() if isinstance(module, LoraLayer) and getattr(module, "fan_in_fan_out", False)}


def merge_lora_state(state: dict[str, torch.Tensor], scaling: dict[str, float],
                     transposed: set[str] | frozenset[str] = frozenset()) -> dict[str, torch.Tensor]:
    """A state dict with LoRA layers as the plain model's: `X.base_layer.weight` + scale B A as `X.weight` (its transpose
    for the `transposed` layers, `fan_in_fan_out`), the base layer's other tensors under `X.`, the adapters' own tensors
    dropped."""
    merged = {}
    for name, tensor in state.items():
        if ".lora_A." in name or ".lora_B." in name:
            continue
        if BASE not in name:
            merged[name] = tensor
            continue
        layer, rest = name.split(BASE, 1)
        if rest == "weight":
            a = state[f"{layer}.lora_A.{ADAPTER_NAME}.weight"]
            b = state[f"{layer}.lora_B.{ADAPTER_NAME}.weight"]
            update = b.float() @ a.float()
            tensor = tensor + (scaling[layer] * (update.T if layer in transposed else update)).to(tensor.dtype)
        merged[f"{layer}.{rest}"] = tensor
    return merged


def merged_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor, bool]]:
    """The current weights of a model with LoRA layers under the plain model's names, as (name, tensor, owned): the
    module's own tensors, and each adapted layer's merged weight, computed (not owned) one layer at a time from
    gathered tensors when FSDP2 shards them (every rank must iterate)."""
    scaling, transposed = lora_scaling(model), fan_in_fan_out(model)
    state = model.state_dict()
    for name, tensor in state.items():
        if ".lora_A." in name or ".lora_B." in name:
            continue
        if BASE not in name:
            yield name, tensor, True
            continue
        layer, rest = name.split(BASE, 1)
        if rest != "weight":
            yield f"{layer}.{rest}", tensor, True
            continue
        parts = {f"{layer}.base_layer.weight": full_tensor(tensor),
                 f"{layer}.lora_A.{ADAPTER_NAME}.weight": full_tensor(state[f"{layer}.lora_A.{ADAPTER_NAME}.weight"]),
                 f"{layer}.lora_B.{ADAPTER_NAME}.weight": full_tensor(state[f"{layer}.lora_B.{ADAPTER_NAME}.weight"])}
        yield f"{layer}.weight", merge_lora_state(parts, scaling, transposed)[f"{layer}.weight"], False


class MergedWeights(ModuleWeights):
    """What an engine with its own weights gets of a policy with LoRA layers: `merged_weights`, read anew each time."""

    def tensors(self):
        return merged_weights(self.module)


def engine_weights(model: torch.nn.Module) -> ModuleWeights:
    """The policy's weights as an engine takes them: merged when it has LoRA layers."""
    return MergedWeights(model) if has_lora(model) else ModuleWeights(model)


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' weights, gathered (a collective with several ranks), under peft's saved names."""
    return {SAVED_PREFIX + name.replace(f".{ADAPTER_NAME}.", "."): full_tensor(tensor).detach().cpu()
            for name, tensor in lora_target(model).state_dict().items() if ".lora_A." in name or ".lora_B." in name}


def save_adapter(model: torch.nn.Module, weights: dict[str, torch.Tensor], path: Path) -> None:
    """In the checkpoint worker folder `path`: ADAPTER_DIR/adapter_config.json and adapter_model.safetensors (peft's
    layout), and TRAIN_META (verl's record of the adapters' rank, alpha and task)."""
    import json

    from safetensors.torch import save_file

    config = lora_target(model).peft_config[ADAPTER_NAME]
    folder = path / ADAPTER_DIR
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(folder))
    save_file({name: tensor.contiguous() for name, tensor in weights.items()}, str(folder / "adapter_model.safetensors"))
    task = getattr(config.task_type, "value", config.task_type) or "CAUSAL_LM"
    (path / TRAIN_META).write_text(json.dumps({"r": int(config.r), "lora_alpha": config.lora_alpha, "task_type": str(task)}))


def saved_lora(path: Path, model_class, config, state: dict[str, torch.Tensor],
               trust_remote_code: bool = False) -> tuple[dict[str, float], set[str]]:
    """The scale of each adapted layer of the checkpoint worker folder `path` (whose model state is `state`), and the
    layers whose update is added transposed (`fan_in_fan_out`): its saved adapter config applied to the model
    `model_class` builds from `config`, without weights; or, for a checkpoint without one (verl's), lora_alpha / r from
    its TRAIN_META, and the layers that are transformers' Conv1D."""
    peft = _peft("the checkpoint's LoRA adapters")
    folder = path / ADAPTER_DIR
    with torch.device("meta"):
        model = model_class.from_config(config, trust_remote_code=trust_remote_code)
    if not (folder / "adapter_config.json").is_file():
        if (path / TRAIN_META).is_file():
            import json

            from transformers.pytorch_utils import Conv1D

            meta = json.loads((path / TRAIN_META).read_text())
            layers = {name.split(".lora_A.")[0] for name in state if ".lora_A." in name}
            return ({layer: meta["lora_alpha"] / meta["r"] for layer in layers},
                    {layer for layer in layers if isinstance(model.get_submodule(layer), Conv1D)})
        raise ConfigError(f"{path} holds LoRA adapter weights but neither {ADAPTER_DIR}/adapter_config.json nor {TRAIN_META} "
                          "giving their scale; it was not saved whole")
    lora_config = peft.LoraConfig.from_pretrained(str(folder))
    peft.inject_adapter_in_model(lora_config, lora_target(model), adapter_name=ADAPTER_NAME)
    return lora_scaling(model), fan_in_fan_out(model)


def check_same_scaling(path: Path, model: torch.nn.Module, section: str) -> None:
    """ConfigError when the checkpoint worker folder `path` saved adapters of another scale (lora_alpha, rslora, per-layer
    patterns) than `model`'s: the same weights would then compute another policy."""
    saved_file = path / ADAPTER_DIR / "adapter_config.json"
    if not saved_file.is_file():
        return
    import json

    saved = json.loads(saved_file.read_text())
    current = lora_target(model).peft_config[ADAPTER_NAME]
    names = ("lora_alpha", "use_rslora", "alpha_pattern", "rank_pattern")
    differ = [f"{name} {saved.get(name)!r} (checkpoint) vs {getattr(current, name)!r} (this run)" for name in names
              if saved.get(name) != getattr(current, name)]
    if differ:
        raise ConfigError(f"the checkpoint {path} scales its LoRA adapters otherwise than this run: {'; '.join(differ)}. "
                          f"Resume it with the {section}.lora_alpha it was saved with, or start afresh in another "
                          "trainer.default_local_dir")
