"""Supervised fine-tuning data: verl's SFT parquet schema, as token sequences with the tokens to train on marked.

- Single-turn (verl's SFTDataset): `data.prompt_key` and `data.response_key` columns (followed into dicts by
  `prompt_dict_keys` / `response_dict_keys`, e.g. gsm8k's `extra_info.question`). The prompt goes through the chat
  template as one user message with the generation prompt; the response is tokenized as is and followed by EOS.
  The loss covers the response's tokens and the EOS.
- Multi-turn (verl's MultiTurnSFTDataset, `data.multiturn.enable`): a list of {role, content} messages per row,
  rendered whole by the chat template (with the row's tools and enable_thinking where it has them).
- Every chat template call also gets `data.apply_chat_template_kwargs` (verl's), a row's own tools / enable_thinking
  winning over the same names there. The loss
  covers what each assistant message adds to the text: its content and the template's end-of-turn tokens.
- A user class (`data.custom_cls`), called as verl calls it; its items' `input_ids`, `attention_mask` and `loss_mask`
  are read with the convention of verl's current trainer: `loss_mask[t] = 1` trains token t.

Every row becomes an `SFTExample` (prompt ids, response ids, which response tokens are trained), the first trained
token starting the response, so a batch has the layout of a rollout (left-padded prompts, right-padded responses,
`response_mask`) and the update runs on the same code as the RL actor's. Rows are tokenized when the dataset is
built, so a row that does not fit stops the run before training, naming the file and row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from reinforge.batch import Batch
from reinforge.environment.data_files import file_list, read_rows
from reinforge.errors import DataError
from reinforge.user_code import load_user_class

TRUNCATIONS = ("error", "left", "right")


@dataclass
class SFTExample:
    prompt: list[int]  # the tokens before the first trained one (at least one)
    response: list[int]  # the first trained token and everything after it
    mask: list[int]  # 1 on the response tokens that are trained


def split_example(ids: list[int], trained: list[int]) -> SFTExample | None:
    """`ids` with `trained` (0/1 per token) as an SFTExample; None when no token after the first is trained."""
    first = next((t for t in range(1, len(ids)) if trained[t]), None)
    if first is None:
        return None
    return SFTExample(list(ids[:first]), list(ids[first:]), [int(bool(m)) for m in trained[first:]])


def untrained_example(ids: list[int]) -> SFTExample:
    """A row with no token to train on, kept as verl keeps it: it takes its place in a batch and adds nothing to the loss."""
    return SFTExample(ids[:1], ids[1:] or ids[:1], [0] * max(1, len(ids) - 1))


def truncate(ids: list[int], trained: list[int], max_length: int, mode: str, where: str) -> tuple[list[int], list[int]]:
    if len(ids) <= max_length:
        return ids, trained
    if mode == "left":
        return ids[-max_length:], trained[-max_length:]
    if mode == "right":
        return ids[:max_length], trained[:max_length]
    raise DataError(f"{where}: {len(ids)} tokens, more than data.max_length={max_length}; raise data.max_length, or set "
                    "data.truncation=left or right to cut such rows")


def _item(value: Any) -> Any:
    """A parquet cell as plain Python: one-element arrays unwrapped (verl's series_to_item), arrays as lists."""
    while isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(-1)[0]
    return value.tolist() if isinstance(value, np.ndarray) else value


def _follow(value: Any, keys: list | None, column: str, key: str, where: str) -> Any:
    for name in keys or []:
        value = _item(value)
        if isinstance(value, list) and len(value) == 1:  # verl's series_to_item: a one-message chat's message
            value = value[0]
        if not isinstance(value, dict) or name not in value:
            has = f"its keys are {', '.join(map(str, value))}" if isinstance(value, dict) else f"it is a {type(value).__name__}"
            raise DataError(f"{where}: column {column!r} has no key {name!r} ({key}); {has}")
        value = value[name]
    return _item(value)


def select_rows(total: int, max_samples: int, shuffle: bool = False, seed: int | None = None) -> list[int]:
    """The rows (indices over all files) a dataset keeps, as verl's SFT datasets choose them: all of them unless
    `max_samples` cuts the data; then the first `max_samples`, or with `shuffle` a random choice without replacement
    (`np.random.default_rng(seed).choice`, in the order drawn; seed None: unseeded)."""
    if not 0 < max_samples < total:
        return list(range(total))
    if shuffle:
        return np.random.default_rng(seed).choice(total, size=max_samples, replace=False).tolist()
    return list(range(max_samples))


class SFTDataset(torch.utils.data.Dataset):
    """The rows of `files` as SFTExamples (single-turn or, with data.multiturn.enable, conversations)."""

    def __init__(self, files, tokenizer, config, max_samples: int = -1):
        if config.truncation not in TRUNCATIONS:
            raise DataError(f"data.truncation={config.truncation!r} is not one of: {', '.join(TRUNCATIONS)}")
        self.tokenizer, self.config = tokenizer, config
        self.examples: list[SFTExample] = []
        self.untrained = 0  # rows with no token to train on (the response all truncated away): kept
        multiturn = config.multiturn.enable
        needed = [config.multiturn.messages_key] if multiturn else [config.prompt_key, config.response_key]
        sources = []  # (file, row index, row) of every file, in order
        for given in file_list(files):
            rows, columns = read_rows(given)
            for column in needed:
                if rows and column not in columns:
                    key = {config.prompt_key: "data.prompt_key", config.response_key: "data.response_key"}.get(
                        column, "data.multiturn.messages_key")
                    hint = ("; for conversations in its messages column set data.multiturn.enable=true"
                            if not multiturn and config.multiturn.messages_key in columns else "")
                    raise DataError(f"{given}: no column {column!r} ({key}); its columns are {', '.join(columns)}{hint}")
            sources += [(given, index, row) for index, row in enumerate(rows)]
        for i in select_rows(len(sources), max_samples, config.get("shuffle", False), config.get("seed")):
            given, index, row = sources[i]
            where = f"{given} row {index}"
            try:
                ids, trained = self._conversation(row, where) if multiturn else self._pair(row, where)
            except DataError:
                raise
            except Exception as error:  # a chat template may raise on messages it does not accept (none, a number as content)
                column = config.multiturn.messages_key if multiturn else config.prompt_key
                raise DataError(f"{where}, column {column!r}: the chat template failed on this row "
                                f"({type(error).__name__}: {str(error)[:200]})") from error
            ids, trained = truncate(ids, trained, config.max_length, config.truncation, where)
            example = split_example(ids, trained)
            if example is None:
                self.untrained += 1
            self.examples.append(example or untrained_example(ids))
        if self.untrained == len(self.examples):
            raise DataError(f"{', '.join(file_list(files))}: no row has a token to train on")

    def _pair(self, row: dict, where: str) -> tuple[list[int], list[int]]:
        config, tokenizer = self.config, self.tokenizer
        prompt = _follow(row[config.prompt_key], config.prompt_dict_keys, config.prompt_key, "data.prompt_dict_keys", where)
        response = _follow(row[config.response_key], config.response_dict_keys, config.response_key,
                           "data.response_dict_keys", where)
        for name, value in (("prompt", prompt), ("response", response)):
            if not isinstance(value, str):
                raise DataError(f"{where}: the {name} is a {type(value).__name__}, not a string ({value!r:.80}); for a list "
                                "of messages use data.multiturn.enable=true")
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False,
                                             **(self.config.apply_chat_template_kwargs or {}))
        prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        response_ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        return prompt_ids + response_ids, [0] * len(prompt_ids) + [1] * len(response_ids)

    def _conversation(self, row: dict, where: str) -> tuple[list[int], list[int]]:
        config, tokenizer = self.config.multiturn, self.tokenizer
        messages = _item(row[config.messages_key])
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise DataError(f"{where}: column {config.messages_key!r} must hold a list of {{role, content}} messages, "
                            f"got {messages!r:.120}")
        messages = [{key: _item(value) for key, value in m.items() if value is not None} for m in messages]
        kwargs = dict(self.config.apply_chat_template_kwargs or {})  # the row's tools / enable_thinking win
        tools = _item(row.get(config.tools_key))
        if tools is not None:
            kwargs["tools"] = json.loads(tools) if isinstance(tools, str) else tools
        thinking = _item(row.get(config.enable_thinking_key))
        if thinking is not None:
            kwargs["enable_thinking"] = bool(thinking)

        def render(upto: int, generation_prompt: bool = False) -> str:
            return tokenizer.apply_chat_template(messages[:upto], add_generation_prompt=generation_prompt, tokenize=False, **kwargs)

        text = render(len(messages))
        spans = []  # character spans of what each assistant message adds
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            if i == 0:
                raise DataError(f"{where}: the conversation starts with an assistant message, so there is no prompt to "
                                "tell its tokens from (the chat template renders nothing before it); begin it with a "
                                "system or user message")
            start, end = render(i, generation_prompt=True), render(i + 1)
            if not (text.startswith(start) and text.startswith(end) and len(start) <= len(end)):
                raise DataError(f"{where}: the chat template does not render the conversation up to message {i} as the "
                                "beginning of the whole (a template that rewrites earlier turns, e.g. drops their "
                                "reasoning), so the assistant's tokens cannot be told apart; use a template that keeps "
                                "earlier turns as they are (data.chat_template)")
            spans.append((len(start), len(end)))
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        trained = [int(any(s <= begin < e for s, e in spans)) for begin, _ in encoded["offset_mapping"]]
        return list(encoded["input_ids"]), trained

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> SFTExample:
        return self.examples[index]


class UserSFTDataset(torch.utils.data.Dataset):
    """A user Dataset (`data.custom_cls`), its items read as SFTExamples."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> SFTExample:
        item = self.dataset[index]
        missing = [key for key in ("input_ids", "loss_mask") if key not in item]
        if missing:
            raise DataError(f"data.custom_cls: item {index} has no {', '.join(missing)}; an SFT item holds input_ids, "
                            f"attention_mask and loss_mask (it has {', '.join(item)})")
        ids, loss = torch.as_tensor(item["input_ids"]).flatten(), torch.as_tensor(item["loss_mask"]).flatten()
        keep = torch.as_tensor(item.get("attention_mask", torch.ones_like(ids))).flatten().bool()
        ids, loss = ids[keep].tolist(), loss[keep].tolist()
        return split_example(ids, loss) or untrained_example(ids)


def create_sft_dataset(files, config, tokenizer, max_samples: int = -1) -> torch.utils.data.Dataset:
    """The dataset of `files`: the user's class (data.custom_cls), else single- or multi-turn SFT rows."""
    if config.custom_cls.path:
        cls = load_user_class(config.custom_cls.path, config.custom_cls.name, "data.custom_cls.path", "data.custom_cls.name")
        return UserSFTDataset(cls(parquet_files=files, tokenizer=tokenizer, config=config, max_samples=max_samples))
    return SFTDataset(files, tokenizer, config, max_samples)


def collate_examples(examples: list[SFTExample], pad_token_id: int) -> Batch:
    """Left-padded prompts and right-padded responses as one Batch (the rollout layout): input_ids, attention_mask,
    position_ids, responses, response_mask (the trained tokens)."""
    rows, prompt_width = len(examples), max(len(e.prompt) for e in examples)
    width = max(len(e.response) for e in examples)
    prompts = torch.full((rows, prompt_width), pad_token_id, dtype=torch.long)
    responses = torch.full((rows, width), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((rows, prompt_width), dtype=torch.long)
    attended = torch.zeros((rows, width), dtype=torch.long)
    response_mask = torch.zeros((rows, width), dtype=torch.long)
    for row, example in enumerate(examples):
        prompts[row, prompt_width - len(example.prompt):] = torch.tensor(example.prompt)
        prompt_mask[row, prompt_width - len(example.prompt):] = 1
        responses[row, :len(example.response)] = torch.tensor(example.response)
        attended[row, :len(example.response)] = 1
        response_mask[row, :len(example.mask)] = torch.tensor(example.mask)
    attention_mask = torch.cat([prompt_mask, attended], dim=1)
    return Batch({"input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attention_mask,
                  "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0), "responses": responses,
                  "response_mask": response_mask})
