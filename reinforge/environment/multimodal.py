"""Images in prompts (verl's multimodal rows), for vision-language models of the Qwen2-VL family.

A row holds its images in the column `data.image_key` (verl's `images`): a list whose entries are PIL images, dicts
with `bytes` (how a Hugging Face `Image` feature stores them in parquet) or `path` or `image`, or file paths. Each
`<image>` in the prompt's messages marks where one image goes, in order: the content string is split there into
verl's content list (`{"type": "image"}`, `{"type": "text", "text": ...}`) before the processor's chat template
renders it. The processor (the model folder's `AutoProcessor`) expands each image into its patch tokens; those
token ids are the prompt the engine and the actor see, and the images' `pixel_values` and `image_grid_thw` travel
with the row as `multi_modal_inputs` (one dict per row, as verl's), concatenated over a forward's rows.

Positions: Qwen2-VL's rotary embedding is three-dimensional (time, height, width) over image tokens and the same
number in all three after them (`mrope_positions`, from the model's own `get_rope_index`); a response token's
position is the one before it plus one in each. reinforge computes them for each forward from the token ids and
the attention mask, so the batch's `position_ids` stay the text positions every other part reads.

Under the hf engine a vision-language model never generates its vision tokens (`<|image_pad|>`, `<|vision_start|>`,
...): the engine samples and the actor computes log-probs with their logits at `NEVER` (`mask_vision_tokens`; the
worker gives the actor `never_generated`), the same distribution on both sides. A trained model gives them no
probability anyway; an untrained one would otherwise emit an image placeholder that no image fills.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import torch

from reinforge.errors import DataError, ModelError

PLACEHOLDER = "<image>"
NEVER = -1e9  # the logit of a token never generated (finite: 0 * NEVER is 0 where entropies multiply by probabilities)
MM_KEY = "multi_modal_inputs"  # a row's processed images: {"pixel_values", "image_grid_thw"} (None for a row without)
VISION_FAMILIES = ("qwen2_vl", "qwen2_5_vl")  # the model types that train on rows with images (training/vision.py)


def one_image(value: Any) -> bool:
    """Whether an image column's value is one image (a dict, a path, bytes, a PIL image) rather than a list of them."""
    return isinstance(value, (dict, str, bytes)) or not hasattr(value, "__len__")


def row_images(row: dict[str, Any], key: str) -> list[Any]:
    """The images of a row's column `key` as a list (none when the column is missing, null or empty)."""
    value = row.get(key)
    if value is None:
        return []
    return [value] if one_image(value) else list(value)


def loaded_images(row: dict[str, Any], origin: tuple[str, int], config: Any) -> list:
    """The row's images (column `data.image_key`) as RGB PIL images; DataError naming the file, row and image."""
    where = f"{origin[0]}: row {origin[1]}, column {config.image_key!r}"
    return [load_image(value, f"{where}, image {k}") for k, value in enumerate(row_images(row, config.image_key))]


def load_image(value: Any, where: str):
    """A PIL image in RGB from one entry of a row's images (`where` names it for the message)."""
    from PIL import Image

    try:
        if isinstance(value, Image.Image):
            image = value
        elif isinstance(value, dict) and value.get("bytes") is not None:
            image = Image.open(io.BytesIO(value["bytes"]))
        elif isinstance(value, dict) and isinstance(value.get("image"), Image.Image):
            image = value["image"]
        elif isinstance(value, dict) and (value.get("path") or value.get("image")):
            image = Image.open(Path(str(value.get("path") or value.get("image"))).expanduser())
        elif isinstance(value, (str, Path)):
            image = Image.open(Path(value).expanduser())
        elif isinstance(value, bytes):
            image = Image.open(io.BytesIO(value))
        else:
            raise TypeError(f"an image is a PIL image, a dict with 'bytes' or 'path', or a file path; got {type(value).__name__}")
        return image.convert("RGB")
    except Exception as exc:
        raise DataError(f"{where}: cannot read the image ({type(exc).__name__}: {exc})") from exc


def pil_images(value: Any, where: str) -> Any:
    """A row's image column with each image as a PIL image (a list stays a list, a single image a single one)."""
    if one_image(value):
        return load_image(value, where)
    return [load_image(image, f"{where}, image {k}") for k, image in enumerate(value)]


def with_image_parts(messages: list[dict[str, Any]], count: int, where: str) -> list[dict[str, Any]]:
    """`messages` with each content string split at `<image>` into verl's content list; the placeholders must number
    `count` (the row's images)."""
    found = sum(m["content"].count(PLACEHOLDER) for m in messages if isinstance(m.get("content"), str))
    found += image_parts(messages)
    if found != count:
        raise DataError(f"{where}: the row has {count} image(s) but its prompt marks {found} place(s) for them; put one "
                        f"{PLACEHOLDER} in the prompt's text where each image goes, in order")
    shaped = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) and PLACEHOLDER in content:
            parts = [piece for piece in re.split(f"({re.escape(PLACEHOLDER)})", content) if piece]
            content = [{"type": "image"} if piece == PLACEHOLDER else {"type": "text", "text": piece} for piece in parts]
        shaped.append({**message, "content": content})
    return shaped


def image_inputs(processor, images: list, kwargs: dict | None = None) -> dict[str, torch.Tensor]:
    """The row's `multi_modal_inputs`: its images through the processor's image processor (`pixel_values`,
    `image_grid_thw`), with `kwargs` (data.mm_processor_kwargs, e.g. max_pixels)."""
    out = processor.image_processor(images=images, return_tensors="pt", **(kwargs or {}))
    return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}


def concat_inputs(rows: list[dict[str, torch.Tensor] | None], device: torch.device | str) -> dict[str, torch.Tensor]:
    """The model's image keyword arguments for a forward over `rows` (in order; None rows have no images)."""
    present = [row for row in rows if row]
    if not present:
        return {}
    return {key: torch.cat([row[key] for row in present]).to(device) for key in present[0]}


def has_images(rows) -> bool:
    return rows is not None and any(row for row in rows)


def vision_model(model: torch.nn.Module) -> torch.nn.Module:
    """The module that has `get_rope_index` (Qwen2-VL's and Qwen2.5-VL's inner model), inside any wrappers."""
    inner = next((module for module in model.modules() if hasattr(module, "get_rope_index")), None)
    if inner is None:
        raise ModelError(f"{type(model).__name__} has no get_rope_index: images are supported for Qwen2-VL-family "
                         "models (Qwen2-VL, Qwen2.5-VL)")
    return inner


def mrope_positions(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """(3, rows, length) rotary positions of a left- or right-padded batch whose image tokens `inputs` describe."""
    inner = vision_model(model)
    config = getattr(inner, "config", None) or model.config
    types = torch.zeros_like(input_ids, dtype=torch.int)  # image tokens 1; videos are not taken, so none is marked 2
    types[input_ids == config.image_token_id] = 1
    positions, _ = inner.get_rope_index(input_ids, mm_token_type_ids=types, image_grid_thw=inputs.get("image_grid_thw"),
                                        attention_mask=attention_mask)
    return positions


def with_stand_in_image(config: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, column: int
                        ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The batch with one more row: a single image token in `column`, the only one attended, and the inputs of the
    blank image (one merged block of patches) it stands for."""
    vision = config.vision_config
    merge = vision.spatial_merge_size
    channels = getattr(vision, "in_channels", None) or getattr(vision, "in_chans", 3)
    pixels = torch.zeros(merge * merge, channels * vision.temporal_patch_size * vision.patch_size ** 2,
                         device=input_ids.device)
    row = torch.zeros_like(input_ids[:1])
    row[0, column] = config.image_token_id
    mask = torch.zeros_like(attention_mask[:1])
    mask[0, column] = 1
    grid = torch.tensor([[1, merge, merge]], device=input_ids.device)
    return torch.cat([input_ids, row]), torch.cat([attention_mask, mask]), {"pixel_values": pixels, "image_grid_thw": grid}


def image_parts(messages: list[dict[str, Any]]) -> int:
    """How many `{"type": "image"}` parts the messages' content lists hold."""
    return sum(1 for m in messages if isinstance(m.get("content"), list) for part in m["content"]
               if isinstance(part, dict) and part.get("type") == "image")


def shape_image_rows(rows: list[dict[str, Any]], messages: list[list[dict[str, Any]]], origins: list[tuple[str, int]],
                     config: Any) -> list[list[dict[str, Any]]]:
    """Each row's messages, split at `<image>` where the row has images (column `data.image_key`); DataError for image
    parts in a row without images (the template would place an image that no pixels fill)."""
    shaped = []
    for m, row, (file, number) in zip(messages, rows, origins, strict=True):
        images, where = row_images(row, config.image_key), f"{file}: row {number}, column {config.prompt_key!r}"
        if not images and (parts := image_parts(m)):
            raise DataError(f"{where}: the prompt has {parts} image part(s) ({{'type': 'image'}}) but the row has "
                            f"no images in column {config.image_key!r} (data.image_key); put the images there, or set "
                            "data.image_key to the column that holds them")
        shaped.append(with_image_parts(m, len(images), where) if images else m)
    return shaped


def expand_image_tokens(processor, rows: list[dict[str, Any]], texts: list[str], token_ids: list[list[int]],
                        origins: list[tuple[str, int]], config: Any) -> list[list[int]]:
    """`token_ids` with each row that has images tokenized by the processor instead, its image tokens expanded to the
    image's patches (the ids the model reads)."""
    out = []
    for row, text, ids, origin in zip(rows, texts, token_ids, origins, strict=True):
        images = loaded_images(row, origin, config)
        if images:
            try:
                ids = processor(text=[text], images=images, add_special_tokens=False,
                                **dict(config.mm_processor_kwargs))["input_ids"][0]
            except Exception as exc:
                raise DataError(f"{origin[0]}: row {origin[1]}, column {config.image_key!r}: the processor failed on the "
                                f"row ({type(exc).__name__}: {exc})") from exc
            ids = list(ids.tolist() if hasattr(ids, "tolist") else ids)
        out.append(ids)
    return out


def check_untruncated(rows: list[dict[str, Any]], token_ids: list[list[int]], origins: list[tuple[str, int]],
                      config: Any) -> None:
    """DataError for a prompt with images over data.max_prompt_length (cutting it would cut image tokens)."""
    for row, ids, (file, number) in zip(rows, token_ids, origins, strict=True):
        if len(ids) > config.max_prompt_length and row_images(row, config.image_key):
            raise DataError(f"{file}: row {number}, column {config.prompt_key!r}: the prompt is {len(ids)} tokens with its "
                            f"images' tokens, over data.max_prompt_length={config.max_prompt_length}, and a prompt with "
                            "images cannot be truncated (data.truncation) without cutting an image. Raise "
                            "data.max_prompt_length, or set data.filter_overlong_prompts=true to drop such rows")


def row_image_inputs(processor, row: dict[str, Any], origin: tuple[str, int], config: Any) -> dict[str, torch.Tensor] | None:
    """The row's `multi_modal_inputs` (None when it has no images)."""
    images = loaded_images(row, origin, config)
    return image_inputs(processor, images, dict(config.mm_processor_kwargs)) if images else None


def never_generated(config: Any, model: torch.nn.Module) -> list[int]:
    """The tokens the run's engine never samples: a vision-language model's vision tokens under the hf engine (vLLM
    and SGLang sample from the whole vocabulary)."""
    return vision_token_ids(model.config) if config.actor_rollout_ref.rollout.name == "hf" else []


def vision_token_ids(config: Any) -> list[int]:
    """The vision tokens of a Qwen2-VL-family model's config (none for any other model's)."""
    if getattr(config, "model_type", None) not in VISION_FAMILIES:
        return []
    names = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    return sorted({value for value in (getattr(config, name, None) for name in names) if isinstance(value, int)})


def mask_vision_tokens(logits: torch.Tensor, token_ids: torch.Tensor | None) -> torch.Tensor:
    """`logits` (..., vocab) with the vision tokens' at `NEVER`, in place (no vocabulary-sized copy; autograd takes it:
    the language-model head's backward does not read its output); returns `logits`."""
    if token_ids is not None and len(token_ids):
        logits.index_fill_(-1, token_ids.to(logits.device), NEVER)
    return logits


def check_image_run(config: Any, datasets: list, processor: Any) -> list[str]:
    """ConfigError for what this version does not do with a vision-language model or rows with images (in any of
    `datasets`, the built-in dataset's): a critic (the value model is a causal LM's), and for rows with images any
    engine but hf, multi-turn rollouts and distillation. Returns notes to print."""
    from reinforge.errors import ConfigError

    if processor is not None and config.critic.enable:
        raise ConfigError(f"algorithm.adv_estimator={config.algorithm.adv_estimator} trains a critic, and a critic for a "
                          "vision-language model is not supported in this version; use an estimator without one (grpo, "
                          "rloo, reinforce_plus_plus, remax, ...)")
    with_images = [dataset for dataset in datasets if getattr(dataset, "has_images", False)]
    if not with_images:
        return []
    rollout = config.actor_rollout_ref.rollout
    refused = [(rollout.name != "hf", f"actor_rollout_ref.rollout.name={rollout.name}", "set it to hf"),
               (rollout.multi_turn.enable, "actor_rollout_ref.rollout.multi_turn.enable=true", "set it to false"),
               (config.distillation.enabled, "distillation", "turn distillation off")]
    for on, setting, advice in refused:
        if on:
            raise ConfigError(f"{setting}: prompts with images (data.image_key) are generated single-turn by the hf engine "
                              f"only in this version, without distillation; {advice}, or use rows without images")
    if config.reward_model.enable:
        return ["the reward model reads the prompts of rows with images as text, without their images"]
    return []
