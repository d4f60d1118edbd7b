"""A tiny Qwen2-VL (or Qwen2.5-VL) model built from a tiny text model, for tests and examples with images (nothing
downloaded).

The text model's tokenizer gains Qwen2-VL's vision tokens and a chat template that renders image parts; the language
model keeps the text model's weights (the new tokens' embeddings start at random); a two-block vision tower with
14-pixel patches, merged 2 x 2, is initialised from a fixed seed (Qwen2.5-VL's: one block of windowed attention, one
of full attention). The image processor (Qwen2-VL's, its Pillow
backend) resizes each image to between 4 and 64 merged patches, so an image costs 4 to 64 prompt tokens. Saved with
`save_pretrained` like any Qwen2-VL folder, so it loads with `AutoModelForImageTextToText` and `AutoProcessor`.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from reinforge.training.tiny_model import cache_root, move_into_place

RECIPE = 1
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
VL_CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
PATCH = 14
MERGE = 2


def build_vl_model(text_dir: Path, out_dir: Path, seed: int = 0, arch: str = "qwen2_vl") -> None:
    """Write the tiny vision-language model (`arch`: qwen2_vl or qwen2_5_vl) made from the text model in `text_dir`
    into `out_dir`."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(text_dir)
    tokenizer.add_tokens(VISION_TOKENS, special_tokens=True)
    tokenizer.chat_template = VL_CHATML_TEMPLATE
    text = AutoModelForCausalLM.from_pretrained(text_dir)
    tc = text.config
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in zip(
        ("vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id"), VISION_TOKENS, strict=True)}
    head_dim = tc.hidden_size // tc.num_attention_heads
    vision = (dict(depth=2, embed_dim=32, hidden_size=tc.hidden_size, num_heads=2, mlp_ratio=2, in_chans=3)
              if arch == "qwen2_vl" else
              dict(depth=2, hidden_size=32, out_hidden_size=tc.hidden_size, num_heads=2, intermediate_size=64,
                   window_size=PATCH * MERGE * 2, fullatt_block_indexes=[1], in_channels=3))
    name = {"qwen2_vl": "Qwen2VL", "qwen2_5_vl": "Qwen2_5_VL"}[arch]
    config = getattr(transformers, f"{name}Config")(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=tc.hidden_size, intermediate_size=tc.intermediate_size,
                         num_hidden_layers=tc.num_hidden_layers, num_attention_heads=tc.num_attention_heads,
                         num_key_value_heads=tc.num_key_value_heads, max_position_embeddings=tc.max_position_embeddings,
                         rope_scaling={"type": "mrope", "mrope_section": [head_dim // 8, 3 * head_dim // 16, 3 * head_dim // 16]},
                         tie_word_embeddings=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id),
        vision_config=dict(**vision, patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=2),
        tie_word_embeddings=True, **ids)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = getattr(transformers, f"{name}ForConditionalGeneration")(config)
    finally:
        torch.random.set_rng_state(state)
    with torch.no_grad():  # the language model is the text model's
        language = model.model.language_model
        for name, tensor in text.model.state_dict().items():
            target = language.state_dict()[name]
            target[:tensor.shape[0]].copy_(tensor) if name == "embed_tokens.weight" else target.copy_(tensor)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    side = PATCH * MERGE
    Qwen2VLImageProcessorPil(min_pixels=side * side * 4, max_pixels=side * side * 64, patch_size=PATCH,
                             merge_size=MERGE).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)


def ensure_tiny_vl_model(text_dir: Path, root: Path | None = None, arch: str = "qwen2_vl") -> Path:
    """The tiny vision-language model made from `text_dir`, built once and cached (written under a temporary name)."""
    root = Path(root) if root is not None else cache_root()
    target = root / f"{Path(text_dir).name}-{'vl' if arch == 'qwen2_vl' else arch.replace('_', '')}-r{RECIPE}"
    if (target / "config.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    try:
        build_vl_model(Path(text_dir), tmp, arch=arch)
        move_into_place(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
