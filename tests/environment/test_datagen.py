"""data.datagen: a generator appends rows after every step; the loader serves them from the next epoch; resume restores them."""

from __future__ import annotations

import textwrap

import pytest
import torch

from reinforge.config import load_config
from reinforge.config.data_schema import ClassRef
from reinforge.environment.datagen import DynamicGenDataset
from reinforge.environment.dataloader import PromptLoader
from reinforge.environment.dataset import RLDataset, collate_fn, create_rl_dataset
from reinforge.errors import ConfigError, DataError

GENERATORS = """
import numpy as np
import pyarrow as pa
from reinforge.environment.datagen import AbstractDataGenerator


class OneMore(AbstractDataGenerator):
    \"\"\"Each call adds one prompt about the dataset's current size, as a pyarrow table with a numpy value.\"\"\"

    def generate(self, dataset):
        n = len(dataset)
        return pa.Table.from_pylist([{
            "data_source": "test/generated",
            "prompt": [{"role": "user", "content": f"Reverse the digits: {' '.join(str(n))}"}],
            "reward_model": {"ground_truth": str(n)[::-1], "style": "rule"},
            "extra_info": {"made_at": int(np.int64(n))},
        }])


class NoPrompt(AbstractDataGenerator):
    def generate(self, dataset):
        return [{"data_source": "x", "question": "hi"}]


class NotJson(AbstractDataGenerator):
    def generate(self, dataset):
        return [{"prompt": "hi", "extra_info": {"when": object()}}]


class Raises(AbstractDataGenerator):
    def generate(self, dataset):
        raise RuntimeError("the generator's model is not loaded")


class TextExtraInfo(AbstractDataGenerator):
    def generate(self, dataset):
        return [{"prompt": "hi", "extra_info": {"index": 9}}, {"prompt": "hi", "extra_info": "note"}]


class WithImages(AbstractDataGenerator):
    def generate(self, dataset):
        return [{"prompt": "<image>What is shown?", "images": [{"path": "cat.png"}]}]


class NotAGenerator:
    pass
"""


@pytest.fixture
def generator_file(tmp_path):
    path = tmp_path / "my_generators.py"
    path.write_text(textwrap.dedent(GENERATORS))
    return path


@pytest.fixture
def build(tmp_path, tokenizer, data_config, make_rows, write_rows, generator_file):
    """build(name) -> a training set of 4 rows (indices 100-103) growing with the generator `name`."""
    files = str(write_rows(tmp_path / "train.parquet", make_rows(4)))

    def build(name: str, is_train: bool = True):
        config = data_config(datagen=ClassRef(path=str(generator_file), name=name))
        return create_rl_dataset(files, config, tokenizer, is_train=is_train)

    return build


def _loader(dataset, tokenizer) -> PromptLoader:
    return PromptLoader(dataset, 2, collate_fn(tokenizer.pad_token_id), shuffle=True, seed=3)


def _train(loader: PromptLoader, steps: int) -> list[list[int]]:
    """Take a batch, hand it back after the 'step' (the generator runs then); the dataset rows served, per step."""
    served = []
    for _ in range(steps):
        batch = next(iter(loader))
        loader.on_batch_end(batch)
        served.append(batch["dataset_index"])
    return served


def test_the_training_set_grows_after_each_step_and_new_rows_come_in_the_next_epoch(build, tokenizer):
    dataset = build("OneMore")
    assert isinstance(dataset, DynamicGenDataset) and len(dataset) == 4
    loader = _loader(dataset, tokenizer)
    epoch0 = _train(loader, 2)
    assert len(dataset) == 6 and sorted(i for batch in epoch0 for i in batch) == [0, 1, 2, 3]
    epoch1 = _train(loader, 3)
    assert sorted(i for batch in epoch1 for i in batch) == [0, 1, 2, 3, 4, 5]
    assert len(dataset) == 9
    generated = dataset[4]
    assert generated["data_source"] == "test/generated"
    assert generated["extra_info"] == {"made_at": 4, "index": 4}  # no index given: the next row number
    assert generated["reward_model"]["ground_truth"] == "4"
    assert dataset[5]["extra_info"]["made_at"] == 5


def test_validation_data_is_not_generated(build):
    assert type(build("OneMore", is_train=False)) is RLDataset


@pytest.mark.parametrize("stop_after", [1, 2, 4])
def test_a_grown_dataset_resumes_with_its_rows_and_serves_what_an_uninterrupted_run_would(build, tokenizer, tmp_path,
                                                                                           stop_after):
    straight = _loader(build("OneMore"), tokenizer)
    expected = _train(straight, 6)
    first = _loader(build("OneMore"), tokenizer)
    served = _train(first, stop_after)
    torch.save(first.state_dict(), tmp_path / "data.pt")
    resumed = _loader(build("OneMore"), tokenizer)
    resumed.load_state_dict(torch.load(tmp_path / "data.pt"))
    assert len(resumed.dataset) == 4 + stop_after
    served += _train(resumed, 6 - stop_after)
    assert served == expected
    assert all(torch.equal(straight.dataset[i]["input_ids"], resumed.dataset[i]["input_ids"]) for i in range(10))


@pytest.mark.parametrize(("name", "message"), [
    ("NoPrompt", r"data.datagen \(NoPrompt.generate, round 1\): row 0, column 'prompt': a prompt must be a string"),
    ("NotJson", r"data.datagen \(NotJson.generate, round 1\): the rows must be JSON-serialisable"),
    ("Raises", r"data.datagen \(Raises.generate, round 1\) failed: RuntimeError: the generator's model is not loaded"),
    ("TextExtraInfo", r"data.datagen \(TextExtraInfo.generate, round 1\): row 1, column 'extra_info': must be a dict .* got str 'note'"),
    ("WithImages", r"data.datagen \(WithImages.generate, round 1\): row 0, column 'images' \(data.image_key\): the row has images, "
                   r"but the model does not take images here"),
])
def test_bad_generated_rows_name_the_generator_and_the_row(build, name, message):
    dataset = build(name)
    with pytest.raises(DataError, match=message):
        dataset.on_batch_end(None)
    assert len(dataset) == 4 and dataset.generated_rows == []


def test_the_generator_must_subclass_the_abstract_generator(build):
    with pytest.raises(DataError, match=r"'NotAGenerator' is not a subclass of reinforge.environment.datagen.AbstractDataGenerator"):
        build("NotAGenerator")


def test_datagen_with_a_custom_dataset_class_is_refused():
    with pytest.raises(ConfigError, match="data.datagen.path adds generated rows to the built-in dataset"):
        load_config(["data.datagen.path=gen.py", "data.datagen.name=G", "data.custom_cls.path=ds.py", "data.custom_cls.name=D"])
