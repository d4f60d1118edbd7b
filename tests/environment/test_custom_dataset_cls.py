"""create_rl_dataset: the built-in RLDataset, a user Dataset class from data.custom_cls, and its errors."""

from __future__ import annotations

import pickle
import re
import textwrap
from pathlib import Path

import pytest

from reinforge.environment.dataset import RLDataset, create_rl_dataset
from reinforge.environment.user_dataset import load_dataset_class
from reinforge.errors import DataError

SOURCE = """
    from torch.utils.data import Dataset


    class WithMaxSamples(Dataset):
        def __init__(self, data_files, tokenizer, config, processor=None, max_samples=-1):
            self.args = dict(data_files=data_files, tokenizer=tokenizer, config=config, processor=processor,
                             max_samples=max_samples)

        def __len__(self):
            return 1

        def __getitem__(self, i):
            return {"input_ids": [1, 2]}


    class WithoutMaxSamples(WithMaxSamples):
        def __init__(self, data_files, tokenizer, config, processor=None):
            super().__init__(data_files, tokenizer, config, processor, max_samples="not given")


    class NotADataset:
        pass


    class Raises(WithMaxSamples):
        def __init__(self, data_files, tokenizer, config, processor=None):
            open(data_files)  # a path that is not there


    class OldSignature(WithMaxSamples):
        def __init__(self, data_files, tokenizer):
            pass


    class NoInputIds(WithMaxSamples):
        def __getitem__(self, i):
            return {"prompt": "text"}
"""


@pytest.fixture
def custom_file(tmp_path):
    path = tmp_path / "my_data.py"
    path.write_text(textwrap.dedent(SOURCE))
    return path


def _config(data_config, path, name):
    config = data_config()
    config.custom_cls.path, config.custom_cls.name = str(path), name
    return config


def test_default_is_rl_dataset(tmp_path, tokenizer, data_config, make_rows, write_rows):
    path = write_rows(tmp_path / "d.jsonl", make_rows(3))
    dataset = create_rl_dataset(str(path), data_config(), tokenizer, max_samples=2)
    assert isinstance(dataset, RLDataset) and len(dataset) == 2


def test_custom_class_gets_the_same_keyword_arguments(custom_file, tokenizer, data_config):
    config = _config(data_config, custom_file, "WithMaxSamples")
    dataset = create_rl_dataset(["x.parquet"], config, tokenizer, processor="proc", max_samples=7)
    assert type(dataset).__name__ == "WithMaxSamples"
    assert dataset.args == {"data_files": ["x.parquet"], "tokenizer": tokenizer, "config": config,
                            "processor": "proc", "max_samples": 7}


def test_custom_class_without_max_samples_is_called_without_it(custom_file, tokenizer, data_config):
    dataset = create_rl_dataset("x.parquet", _config(data_config, custom_file, "WithoutMaxSamples"), tokenizer, max_samples=7)
    assert dataset.args["max_samples"] == "not given"


def test_custom_class_from_an_importable_module(custom_file, monkeypatch, tokenizer, data_config):
    monkeypatch.syspath_prepend(str(custom_file.parent))
    dataset = create_rl_dataset("x.parquet", _config(data_config, "my_data", "WithMaxSamples"), tokenizer)
    assert type(dataset).__name__ == "WithMaxSamples"


def test_class_that_is_not_a_dataset(custom_file, tokenizer, data_config):
    with pytest.raises(DataError, match=r"my_data\.py'?: 'NotADataset' is not a subclass of torch.utils.data.Dataset"):
        create_rl_dataset("x.parquet", _config(data_config, custom_file, "NotADataset"), tokenizer)


@pytest.mark.parametrize(("name", "problem"), [("Missing", "it defines no 'Missing'"), (None, "data.custom_cls.name is not set")])
def test_missing_class_lists_the_classes_defined(custom_file, tokenizer, data_config, name, problem):
    with pytest.raises(DataError) as err:
        create_rl_dataset("x.parquet", _config(data_config, custom_file, name), tokenizer)
    assert problem in str(err.value)
    assert ("the classes it defines are: NoInputIds, NotADataset, OldSignature, Raises, WithMaxSamples, "
            "WithoutMaxSamples.") in str(err.value)


def test_missing_file(tmp_path, tokenizer, data_config):
    with pytest.raises(DataError, match=r"data.custom_cls.path: /.*absent\.py does not exist"):
        create_rl_dataset("x.parquet", _config(data_config, tmp_path / "absent.py", "X"), tokenizer)


def test_missing_module(tokenizer, data_config):
    with pytest.raises(DataError, match="'no_such_module_xyz' is neither a file nor an importable module"):
        create_rl_dataset("x.parquet", _config(data_config, "no_such_module_xyz", "X"), tokenizer)


def test_file_that_fails_to_import(tmp_path, tokenizer, data_config):
    path = tmp_path / "broken.py"
    path.write_text("import torch\nraise RuntimeError('boom')\n")
    with pytest.raises(DataError, match=r"importing .*broken\.py failed: line 2: raise RuntimeError\('boom'\) -> RuntimeError: boom"):
        create_rl_dataset("x.parquet", _config(data_config, path, "X"), tokenizer)


@pytest.mark.parametrize(("name", "message"), [
    ("Raises", r"data.custom_cls Raises \(.*my_data.py\), called with data_files='missing.parquet', ..., failed: "
               r"FileNotFoundError: .*missing.parquet"),
    ("OldSignature", r"data.custom_cls: OldSignature must accept the keyword arguments data_files, tokenizer, config and "
                     r"processor \(as verl calls it\): got an unexpected keyword argument 'config'"),
])
def test_a_class_that_fails_to_build_is_named(custom_file, tokenizer, data_config, name, message):
    with pytest.raises(DataError, match=message):
        create_rl_dataset("missing.parquet", _config(data_config, custom_file, name), tokenizer)


def test_the_readme_promises_what_a_class_is_called_with_processor_always_as_in_verl(tmp_path, tokenizer, data_config):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    promise = " ".join(re.search(r"Your own Dataset class, as in verl: (.*?), whose items", readme, re.S).group(1).split())
    assert "`data_files, tokenizer, config, processor` (always" in promise
    assert "`max_samples` when its `__init__` accepts it" in promise
    path = tmp_path / "no_processor.py"
    path.write_text(textwrap.dedent(SOURCE) + "\n\nclass NoProcessor(WithMaxSamples):\n"
                    "    def __init__(self, data_files, tokenizer, config):\n        pass\n")
    with pytest.raises(DataError, match=r"NoProcessor must accept the keyword arguments data_files, tokenizer, config and "
                                        r"processor \(as verl calls it\)"):
        create_rl_dataset("x.parquet", _config(data_config, path, "NoProcessor"), tokenizer)


def test_items_without_input_ids_fail_when_the_loader_is_made(custom_file, tokenizer, data_config):
    from reinforge.environment.dataloader import PromptLoader
    from reinforge.environment.dataset import collate_fn

    dataset = create_rl_dataset("x", _config(data_config, custom_file, "NoInputIds"), tokenizer)
    with pytest.raises(DataError, match=r"data.custom_cls NoInputIds \(.*my_data.py\), item 0 has no input_ids \(\['prompt'\]\)"):
        PromptLoader(dataset, 1, collate_fn(tokenizer.pad_token_id), shuffle=False, seed=0)


CHECKED = """
    import torch
    from torch.utils.data import Dataset


    class Items(Dataset):
        def __init__(self, data_files, tokenizer, config, processor=None):
            self.items = [{"input_ids": ids, "data_source": "d"} for ids in data_files]
            self.first = self[0]  # a class may read its own items while it is built

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            if self.items[i]["input_ids"] == "raise":
                raise OSError("network share went away")
            return self.items[i]
"""


def test_a_classs_items_are_checked_as_they_are_read_and_errors_name_the_class(tmp_path, tokenizer, data_config):
    """What a user's class raises, a token id the model has no embedding for, and a prompt over data.max_prompt_length
    (data.truncation=error) stop the run naming data.custom_cls, the class, its file and the item; other truncation
    modes cut the prompt as rows of files are cut. The instance is still of the user's class."""
    path = tmp_path / "items.py"
    path.write_text(textwrap.dedent(CHECKED))
    config = _config(data_config, path, "Items")
    config.max_prompt_length = 4
    dataset = create_rl_dataset([[1, 2], "raise", [1, 999], [1, 2, 3, 4, 5, 6]], config, tokenizer)
    assert isinstance(dataset, load_dataset_class(str(path), "Items")) and dataset.first["input_ids"] == [1, 2]
    where = re.escape(f"data.custom_cls Items ({path}), item ")
    with pytest.raises(DataError, match=where + "1: __getitem__ failed: OSError: network share went away"):
        dataset[1]
    assert dataset[2]["input_ids"] == [1, 999]  # the model's vocabulary is not known yet
    dataset.check_token_ids(100, "actor_rollout_ref.model.path=/m")
    with pytest.raises(DataError, match=where + "2: the prompt holds token id 999, but the model of "
                                                "actor_rollout_ref.model.path=/m has embeddings for 100 tokens"):
        dataset[2]
    with pytest.raises(DataError, match=where + "3: the prompt is 6 tokens, over data.max_prompt_length=4"):
        dataset[3]
    config.truncation = "left"
    dataset = create_rl_dataset([[1, 2, 3, 4, 5, 6]], config, tokenizer)
    assert dataset[0]["input_ids"].tolist() == [3, 4, 5, 6]
    assert len(list(dataset)) == 1  # iterating ends at the IndexError past the end, as for the class itself
    copy = pickle.loads(pickle.dumps(dataset))  # a copy in another process is the user's class as it is
    dataset.items[0]["attention_mask"] = [1, 1]
    with pytest.raises(DataError, match=re.escape("item 0: attention_mask has shape (2,), input_ids (6,)")):
        dataset[0]
    dataset.items[0].pop("attention_mask")
    assert type(copy) is load_dataset_class(str(path), "Items") and copy[0]["input_ids"] == [1, 2, 3, 4, 5, 6]

