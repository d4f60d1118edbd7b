"""A researcher's own Dataset class (`data.custom_cls.path` / `.name`), loaded and read as the trainer reads data files.

verl calls such a class with `data_files, tokenizer, config, processor`; its items are dicts with the prompt's token ids
as `input_ids` (and `data_source`, `reward_model`, `extra_info` for the reward). The class is used as it is, through a
subclass made for it (so `isinstance` checks of the researcher's own code hold) whose `__getitem__` checks each item as
the loader reads it, with errors that name `data.custom_cls`, the class and the item:

- an exception the class raises is a DataError naming the class and the item's index (the run stops with a message,
  its saved checkpoints kept);
- an item that is not a dict with 1-D `input_ids` is refused;
- a token id the model has no embedding for (`check_token_ids`, called before the model loads, as for data files) is
  refused when its item is read, instead of failing inside the model;
- a prompt longer than `data.max_prompt_length` follows `data.truncation`, as rows of data files do: `error` stops the
  run naming the item, `left`/`right`/`middle` shorten it (`data.filter_overlong_prompts` drops rows of data files
  only: a class chooses its own rows, and the start notes say so).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.utils.data import Dataset

from reinforge.environment.data_files import preview
from reinforge.errors import DataError, UserError
from reinforge.user_code import check_keywords, checked_subclass, load_user_class, user_call


def load_dataset_class(path: str, name: str | None) -> type:
    """The torch Dataset subclass `name` defined in the Python file (or importable module) `path`."""
    cls = load_user_class(path, name, "data.custom_cls.path", "data.custom_cls.name")
    if not issubclass(cls, Dataset):
        raise DataError(f"data.custom_cls.path={path!r}: {name!r} is not a subclass of torch.utils.data.Dataset; "
                        f"it is {preview(cls)}.")
    return cls


def create_user_dataset(cls: type, kwargs: dict[str, Any], path: str) -> Dataset:
    """An instance of the user's class `cls` (from the file `path`) built with `kwargs`, its items checked as they are read."""
    where = f"data.custom_cls {cls.__name__} ({path})"
    check_keywords(cls, kwargs, f"data.custom_cls: {cls.__name__}", DataError)
    config = kwargs["config"]
    reading = {"where": where, "vocab_size": None, "setting": "", "max_prompt_length": config.max_prompt_length,
               "truncation": config.truncation}  # a class attribute: the class's __init__ may read items itself
    checked = checked_subclass(cls, {"__getitem__": _checked_getitem, "check_token_ids": _check_token_ids,
                                     "_reinforge_reading": reading})
    with user_call(f"{where}, called with data_files={kwargs['data_files']!r}, ...,", DataError):
        return checked(**kwargs)


def prompt_ids(item: Any, where: str) -> torch.Tensor:
    """A Dataset item's prompt token ids (1-D, cut down by its own attention_mask when it has one); DataError naming
    `where` ("Dataset item 3", or the class and item) when the item is not a dict with 1-D input_ids."""
    if not isinstance(item, dict) or "input_ids" not in item:
        keys = sorted(item) if isinstance(item, dict) else preview(item)
        raise DataError(f"{where} has no input_ids ({keys}); a Dataset's items are dicts with the prompt's token ids as "
                        "input_ids (1-D), and data_source, reward_model, extra_info for the reward.")
    ids = torch.as_tensor(item["input_ids"], dtype=torch.long)
    if ids.dim() != 1:
        raise DataError(f"{where}: input_ids must be 1-D (one prompt), got shape {tuple(ids.shape)}.")
    if "attention_mask" in item:
        mask = torch.as_tensor(item["attention_mask"]).bool()
        if mask.shape != ids.shape:
            raise DataError(f"{where}: attention_mask has shape {tuple(mask.shape)}, input_ids {tuple(ids.shape)}; give "
                            "them the same length, or leave attention_mask out")
        ids = ids[mask]
    return ids


def _check_token_ids(self, vocab_size: int, setting: str) -> None:
    """Token ids of `vocab_size` or more, which the model (its path the config `setting`) has no embedding for, are refused
    when their item is read (a class's items are not all read at start)."""
    self._reinforge_reading.update(vocab_size=vocab_size, setting=setting)


def _checked_getitem(self, index: int) -> dict[str, Any]:
    reading = self._reinforge_reading
    where = f"{reading['where']}, item {index}"
    try:
        item = super(type(self), self).__getitem__(index)
    except IndexError as error:
        try:
            within = 0 <= operator.index(index) < len(self)
        except TypeError:  # no __len__, or an index that is no integer: the class's own error stands
            raise error from None
        if within:
            raise DataError(f"{where}: __getitem__ failed: IndexError: {error}") from error
        raise  # past the end: how iterating a Dataset (`for item in dataset`) ends
    except UserError:
        raise
    except Exception as error:
        raise DataError(f"{where}: __getitem__ failed: {type(error).__name__}: {error}") from error
    ids = prompt_ids(item, where)
    vocab_size = reading["vocab_size"]
    if vocab_size is not None and len(ids) and (int(ids.max()) >= vocab_size or int(ids.min()) < 0):
        bad = int(ids.max()) if int(ids.max()) >= vocab_size else int(ids.min())
        raise DataError(f"{where}: the prompt holds token id {bad}, but the model of {reading['setting']} has embeddings for "
                        f"{vocab_size} tokens; tokenize with the model's own tokenizer")
    limit, mode = reading["max_prompt_length"], reading["truncation"]
    if len(ids) > limit:
        if mode == "error":
            raise DataError(f"{where}: the prompt is {len(ids)} tokens, over data.max_prompt_length={limit}. Raise "
                            "data.max_prompt_length, shorten the prompts in the class, or set data.truncation to left, right "
                            "or middle to cut them as rows of data files are cut.")
        from reinforge.environment.dataset import truncate

        item = {**item, "input_ids": torch.tensor(truncate(ids.tolist(), limit, mode), dtype=torch.long)}
        item.pop("attention_mask", None)
        item.pop("position_ids", None)
    return item
