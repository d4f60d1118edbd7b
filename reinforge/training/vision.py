"""Vision-language models: which transformers class loads a model, and its image processor.

A folder of a Qwen2-VL-family model (`VISION_FAMILIES`: Qwen2-VL, Qwen2.5-VL, whose three-axis positions reinforge
computes with their `get_rope_index`) loads with `AutoModelForImageTextToText`, as verl loads it, and trains on rows
with images; every other folder loads with `AutoModelForCausalLM` as before (other vision-language models that
transformers also lists as causal LMs, such as Qwen3.5, train on text there), and rows with images are refused for it.
Its processor is the folder's `AutoProcessor` around reinforge's tokenizer (custom chat template and pad token
applied). transformers 5 builds a Qwen2-VL processor only with torchvision installed (its video processor needs it);
without torchvision, images need only the image processor's Pillow backend, so the processor is built from that and
the tokenizer, with no video processor (videos are not supported anyway); transformers before 5.18 builds that
backend only with torchvision too (WITHOUT_TORCHVISION).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from reinforge.environment.multimodal import VISION_FAMILIES
from reinforge.errors import ModelError

# transformers before 5.18 builds no Qwen2-VL image processor without torchvision (measured: 5.17 refuses, 5.18 builds it)
WITHOUT_TORCHVISION = "5.18"


def _or_newer() -> str:
    """The other way out of a processor that needs torchvision, on a transformers too old to build it without."""
    import transformers
    from packaging.version import Version

    if Version(transformers.__version__).release >= Version(WITHOUT_TORCHVISION).release:
        return ""
    return f", or transformers {WITHOUT_TORCHVISION} or newer, which builds it without torchvision"


def is_vision_config(hf_config: Any) -> bool:
    """Whether a model config describes a vision-language model that reinforge trains with images."""
    return getattr(hf_config, "model_type", None) in VISION_FAMILIES and getattr(hf_config, "vision_config", None) is not None


def model_class(hf_config: Any):
    """The Auto class that loads a model of `hf_config` with its language-model head."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if is_vision_config(hf_config) else AutoModelForCausalLM


def load_processor(source: str, tokenizer: Any, trust_remote_code: bool = False, key: str = "actor_rollout_ref.model.path"):
    """The multimodal processor of the model folder (or hub id) `source` with `tokenizer` as its tokenizer; None for a
    text model (a local folder without preprocessor_config.json, or a config without `vision_config`)."""
    from transformers import AutoConfig, AutoImageProcessor, AutoProcessor

    folder = Path(source).expanduser()
    if folder.is_dir() and not (folder / "preprocessor_config.json").is_file():
        return None
    try:
        hf_config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception:
        return None  # loading the model says why
    if not is_vision_config(hf_config):
        return None
    try:
        return AutoProcessor.from_pretrained(source, tokenizer=tokenizer, trust_remote_code=trust_remote_code)
    except ImportError as exc:
        if "torchvision" not in str(exc).lower():
            raise ModelError(f"{key}={source}: cannot load the model's processor: {exc}") from exc
    except Exception as exc:
        raise ModelError(f"{key}={source}: cannot load the model's processor: {exc}") from exc
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    cls = getattr(transformers, PROCESSOR_MAPPING_NAMES.get(hf_config.model_type, ""), None)
    if cls is None:
        raise ModelError(f"{key}={source}: the model's processor needs torchvision, which is not installed "
                         f"(pip install torchvision, the build that matches your torch){_or_newer()}")
    try:
        image_processor = AutoImageProcessor.from_pretrained(source, trust_remote_code=trust_remote_code)
        with _no_class_check(cls):  # its check of the (absent) video processor fails without torchvision
            return cls(image_processor=image_processor, tokenizer=tokenizer, video_processor=None,
                       chat_template=getattr(tokenizer, "chat_template", None))
    except Exception as exc:
        raise ModelError(f"{key}={source}: cannot build the model's processor without torchvision ({exc}); "
                         f"pip install torchvision, the build that matches your torch{_or_newer()}") from exc


@contextlib.contextmanager
def _no_class_check(cls):
    original = cls.check_argument_for_proper_class
    cls.check_argument_for_proper_class = lambda self, name, argument: None
    try:
        yield
    finally:
        cls.check_argument_for_proper_class = original


def save_image_processor(source: str, out_dir: Path, trust_remote_code: bool = False) -> None:
    """The image processor of the model `source` into `out_dir` (a checkpoint's huggingface/ folder), so the saved
    model loads with its processor."""
    from transformers import AutoImageProcessor

    AutoImageProcessor.from_pretrained(source, trust_remote_code=trust_remote_code).save_pretrained(out_dir)


def freeze_vision_tower(model: Any) -> int:
    """`actor.freeze_vision_tower`: the vision encoder's parameters (and any adapters in it) take no gradient; returns
    how many tensors it froze. ConfigError for a model without one."""
    from reinforge.errors import ConfigError

    towers = [module for name, module in model.named_modules() if name.split(".")[-1] == "visual"]
    if not towers:
        raise ConfigError("actor_rollout_ref.actor.freeze_vision_tower=true, but the model has no vision tower (a `visual` "
                          "module, as Qwen2-VL's); set it to false for a text model")
    frozen = 0
    for tower in towers:
        for parameter in tower.parameters():
            frozen += parameter.requires_grad
            parameter.requires_grad_(False)
    return frozen
