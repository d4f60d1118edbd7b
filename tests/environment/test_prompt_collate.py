"""collate_fn: left padding, attention masks and position ids against hand-computed tensors."""

from __future__ import annotations

import pytest
import torch

from reinforge.environment.dataset import RLDataset, collate_fn, collate_prompts
from reinforge.errors import DataError, ModelError

PAD = 9


def test_left_pads_and_builds_mask_and_position_ids():
    items = [
        {"input_ids": torch.tensor([1, 2, 3]), "data_source": "a", "extra_info": {"index": 0}},
        {"input_ids": torch.tensor([4]), "data_source": "b", "extra_info": {"index": 1}},
        {"input_ids": torch.tensor([5, 6]), "data_source": "c", "extra_info": {"index": 2}},
    ]
    batch = collate_fn(PAD)(items)
    assert batch["input_ids"].tolist() == [[1, 2, 3], [PAD, PAD, 4], [PAD, 5, 6]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1], [0, 1, 1]]
    assert batch["position_ids"].tolist() == [[0, 1, 2], [0, 0, 0], [0, 0, 1]]
    assert all(batch[k].dtype == torch.long for k in ("input_ids", "attention_mask", "position_ids"))
    assert batch["data_source"] == ["a", "b", "c"]
    assert batch["extra_info"] == [{"index": 0}, {"index": 1}, {"index": 2}]


def test_already_padded_items_are_cut_by_their_own_mask_before_repadding():
    items = [
        {"input_ids": torch.tensor([0, 0, 7, 8]), "attention_mask": torch.tensor([0, 0, 1, 1]),
         "position_ids": torch.tensor([0, 0, 0, 1])},
        {"input_ids": [3, 0, 0], "attention_mask": [1, 0, 0]},  # right-padded, as plain lists
    ]
    for item in items:
        item["index"] = 0
    batch = collate_prompts(items, pad_token_id=PAD)
    assert batch["input_ids"].tolist() == [[7, 8], [PAD, 3]]
    assert batch["attention_mask"].tolist() == [[1, 1], [0, 1]]
    assert batch["position_ids"].tolist() == [[0, 1], [0, 0]]
    assert batch["index"] == [0, 0]


def test_collates_dataset_items(tmp_path, tokenizer, data_config, make_rows, write_rows):
    rows = make_rows(3, start=8)  # "8", "9", "10": the last prompt is one token longer
    dataset = RLDataset(write_rows(tmp_path / "d.jsonl", rows), tokenizer, data_config())
    items = [dataset[i] for i in range(3)]
    batch = collate_fn(tokenizer.pad_token_id)(items)
    longest = max(len(item["input_ids"]) for item in items)
    assert batch["input_ids"].shape == (3, longest)
    for row, item in enumerate(items):
        n = len(item["input_ids"])
        assert batch["input_ids"][row, longest - n:].tolist() == item["input_ids"].tolist()
        assert batch["input_ids"][row, : longest - n].tolist() == [tokenizer.pad_token_id] * (longest - n)
        assert batch["position_ids"][row, longest - n:].tolist() == list(range(n))
    assert batch["reward_model"] == [row["reward_model"] for row in rows]


def test_items_with_different_keys_are_an_error():
    with pytest.raises(DataError, match="Dataset items have different keys: item 1"):
        collate_prompts([{"input_ids": [1], "a": 1}, {"input_ids": [2], "b": 2}], pad_token_id=PAD)


def test_two_dimensional_input_ids_are_an_error():
    with pytest.raises(DataError, match=r"Dataset item 0: input_ids must be 1-D .* shape \(1, 2\)"):
        collate_prompts([{"input_ids": torch.tensor([[1, 2]])}], pad_token_id=PAD)


def test_tokenizer_without_pad_token_is_an_error():
    with pytest.raises(ModelError, match="no pad token"):
        collate_fn(None)
