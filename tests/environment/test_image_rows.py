"""Rows with images: split at <image>, rendered, expanded to the image's patch tokens by the processor, checked at load."""

from __future__ import annotations

import io

import pytest
import torch
from PIL import Image

from reinforge.environment.dataset import RLDataset, collate_prompts
from reinforge.environment.multimodal import MM_KEY, row_image_inputs, with_image_parts
from reinforge.errors import DataError


@pytest.fixture(scope="module")
def vl(tiny_vl_model_path):
    from transformers import AutoTokenizer

    from reinforge.training.vision import load_processor

    tokenizer = AutoTokenizer.from_pretrained(tiny_vl_model_path)
    return tokenizer, load_processor(str(tiny_vl_model_path), tokenizer)


def test_a_text_model_has_no_processor_and_a_vision_language_model_has_one(tiny_model_path, tokenizer, vl):
    from reinforge.training.vision import load_processor

    assert load_processor(str(tiny_model_path), tokenizer) is None
    vl_tokenizer, processor = vl
    assert processor.tokenizer is vl_tokenizer and processor.image_processor.patch_size == 14


def test_image_rows_carry_their_pixels_and_as_many_image_tokens_as_merged_patches(tmp_path, vl, data_config, write_rows,
                                                                                 brightness_rows, make_rows):
    tokenizer, processor = vl
    rows = brightness_rows(3, seed=0)
    rows[1]["images"] = [rows[1]["images"][0], {"bytes": rows[0]["images"][0]["bytes"], "path": None}]
    rows[1]["prompt"] = [{"role": "user", "content": "Compare <image> with <image>: which is lighter?"}]
    text = {**make_rows(1)[0], "images": []}  # a text row in the same file
    dataset = RLDataset(str(write_rows(tmp_path / "mixed.parquet", [*rows, text])), tokenizer, data_config(), processor)
    assert dataset.has_images and len(dataset) == 4
    image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    start = tokenizer.convert_tokens_to_ids("<|vision_start|>")
    for i, count in ((0, 1), (1, 2), (2, 1)):
        item = dataset[i]
        inputs = item[MM_KEY]
        grid = inputs["image_grid_thw"]
        assert grid.shape == (count, 3) and inputs["pixel_values"].shape[0] == int(grid.prod(-1).sum())
        # each image is (time 1) x h x w patches of 14 pixels, 2 x 2 of them merged into one token
        assert int((item["input_ids"] == image_id).sum()) == int(grid.prod(-1).sum()) // 4
        assert int((item["input_ids"] == start).sum()) == count
    # the 56 x 56 squares: 4 x 4 patches (two 2 x 2 merges a side), 4 tokens each
    assert dataset[0][MM_KEY]["image_grid_thw"].tolist() == [[1, 4, 4]]
    rendered = tokenizer.decode(dataset[1]["input_ids"])
    assert rendered.startswith("<|im_start|>user\nCompare <|vision_start|><|image_pad|>")
    assert rendered.endswith("<|vision_end|>: which is lighter?<|im_end|>\n<|im_start|>assistant\n")
    assert dataset[3][MM_KEY] is None
    batch = collate_prompts([dataset[i] for i in range(4)], tokenizer.pad_token_id)
    assert [None if x is None else x["image_grid_thw"].shape[0] for x in batch[MM_KEY]] == [1, 2, 1, None]


def test_every_image_form_reads_the_same_pixels(tmp_path, vl, data_config, brightness_rows):
    tokenizer, processor = vl
    row = brightness_rows(1, seed=3)[0]
    data = row["images"][0]["bytes"]
    (tmp_path / "square.png").write_bytes(data)
    forms = [{"bytes": data, "path": None}, {"bytes": None, "path": str(tmp_path / "square.png")},
             str(tmp_path / "square.png"), {"image": Image.open(io.BytesIO(data))}]
    pixels = [row_image_inputs(processor, {**row, "images": [form]}, ("f", 0), data_config())["pixel_values"]
              for form in forms]
    assert all(torch.equal(pixels[0], other) for other in pixels[1:])


def test_mistakes_in_image_rows_name_the_file_row_and_what_to_do(tmp_path, vl, data_config, write_rows, brightness_rows):
    tokenizer, processor = vl
    rows = brightness_rows(3, seed=1)
    rows[2]["prompt"] = [{"role": "user", "content": "Copy: 01"}]  # no <image> for its image
    with pytest.raises(DataError, match=r"few\.parquet: row 2, column 'prompt': the row has 1 image\(s\) but its prompt marks "
                                        r"0 place\(s\) for them; put one <image> in the prompt's text where each image goes"):
        RLDataset(str(write_rows(tmp_path / "few.parquet", rows)), tokenizer, data_config(), processor)
    rows = brightness_rows(2, seed=1)  # TRL's image parts, but the images in another column than data.image_key
    rows = [{**{k: v for k, v in row.items() if k != "images"}, "image": row["images"][0],
             "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Copy: 01"}]}]} for row in rows]
    with pytest.raises(DataError, match=r"trl\.parquet: row 0, column 'prompt': the prompt has 1 image part\(s\) "
                                        r"\(\{'type': 'image'\}\) but the row has no images in column 'images' \(data.image_key\)"):
        RLDataset(str(write_rows(tmp_path / "trl.parquet", rows)), tokenizer, data_config(), processor)
    trl = RLDataset(str(tmp_path / "trl.parquet"), tokenizer, data_config(image_key="image"), processor)  # TRL's layout
    assert trl[0][MM_KEY]["image_grid_thw"].tolist() == [[1, 4, 4]]
    rows = brightness_rows(2, seed=1)
    rows[1]["images"] = [{"bytes": b"not a picture", "path": None}]
    with pytest.raises(DataError, match=r"bad\.parquet: row 1, column 'images', image 0: cannot read the image "
                                        r"\(UnidentifiedImageError"):
        RLDataset(str(write_rows(tmp_path / "bad.parquet", rows)), tokenizer, data_config(), processor)
    rows = brightness_rows(2, seed=1)  # 4 image tokens + about 20 of text
    with pytest.raises(DataError, match=r"long\.parquet: row 0, column 'prompt': the prompt is \d+ tokens with its images' "
                                        r"tokens, over data.max_prompt_length=12, and a prompt with images cannot be truncated"):
        RLDataset(str(write_rows(tmp_path / "long.parquet", rows)), tokenizer,
                  data_config(max_prompt_length=12, truncation="left"), processor)
    rows = brightness_rows(3, seed=1)
    rows[1]["prompt"] = [{"role": "user", "content": "<image>" + " Copy: 0123456789" * 4}]
    dataset = RLDataset(str(write_rows(tmp_path / "some.parquet", rows)), tokenizer,
                        data_config(max_prompt_length=40, filter_overlong_prompts=True), processor)
    assert len(dataset) == 2 and dataset.num_filtered == 1


def test_with_image_parts_splits_content_strings_in_order():
    messages = [{"role": "system", "content": "Look."}, {"role": "user", "content": "<image>a<image> b"}]
    assert with_image_parts(messages, 2, "x") == [
        {"role": "system", "content": "Look."},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "a"}, {"type": "image"},
                                     {"type": "text", "text": " b"}]}]
    with pytest.raises(DataError, match="x: the row has 1 image"):
        with_image_parts(messages, 1, "x")


def test_mm_processor_kwargs_reach_the_processor_for_both_the_tokens_and_the_pixels(tmp_path, vl, data_config, write_rows,
                                                                                   brightness_rows):
    tokenizer, processor = vl
    path = write_rows(tmp_path / "small.parquet", brightness_rows(2, seed=4))
    # Qwen2-VL's pixel bounds: 28 x 28 pixels, one merged 2 x 2 patch, one token (the default bounds give 4)
    config = data_config(mm_processor_kwargs={"size": {"shortest_edge": 784, "longest_edge": 784}})
    small, default = RLDataset(str(path), tokenizer, config, processor), RLDataset(str(path), tokenizer, data_config(), processor)
    image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert small[0][MM_KEY]["image_grid_thw"].tolist() == [[1, 2, 2]] and int((small[0]["input_ids"] == image_id).sum()) == 1
    assert default[0][MM_KEY]["image_grid_thw"].tolist() == [[1, 4, 4]] and int((default[0]["input_ids"] == image_id).sum()) == 4
