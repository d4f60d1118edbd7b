"""Prompt datasets in verl's RL schema, and the collate function that pads them into batches.

A row of an RL data file holds `data_source` (str), the prompt (column `data.prompt_key`: a list
of chat messages `{"role", "content"}`, rendered by the chat template, or a plain string, the model's input text as
it is: TRL's standard format; its messages, for agent loops and reward models, are one user message; OpenRLHF's
`data.apply_chat_template` and `data.input_template` reshape it first: `data_files.shape_prompt`),
`ability`, `reward_model` (`{"ground_truth", "style"}`; `data.label_key` names a column to take the ground truth
from instead) and `extra_info` (a dict that may hold `index`). Files are parquet, JSON (an array of rows, one
object, or JSON lines) or JSONL.

Several files are concatenated in the order given; each row keeps its own `data_source`, and
errors name the file and the row within it.

`RLDataset` reads the files, renders every chat prompt with the tokenizer's chat template and
tokenizes every prompt once at load time, so that overlong prompts can be filtered or reported with their
file and row before training starts (10k rows load in seconds). Items are UNPADDED; `collate_fn`
left-pads a list of items into (batch, prompt_len) tensors. `create_rl_dataset` builds either
`RLDataset` or the user's own Dataset class (`data.custom_cls`).

Rows with images (`data.image_key`) go through the model's processor (`multimodal.py`): each item then carries its
`multi_modal_inputs`. Rows with videos (`data.video_key`), or with images for a model without a processor, are refused
at load rather than trained as text.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from reinforge.environment import data_files, multimodal
from reinforge.environment.data_files import check_row, file_list, is_text_prompt, preview, read_rows, shape_prompt, to_messages
from reinforge.environment.user_dataset import create_user_dataset, load_dataset_class, prompt_ids
from reinforge.errors import ConfigError, DataError, ModelError

TRUNCATION_MODES = ("error", "left", "right", "middle")

Origin = tuple[str, int]  # (file as the user gave it, 0-based row within that file)


# ----------------------------------------------------------------------------------- one prompt
def sample_rows(total: int, count: int, shuffle: bool, seed: int | None) -> list[int]:
    """The `count` of `total` rows that max_samples keeps, picked as verl's RLHFDataset picks them: with data.shuffle,
    distinct rows drawn by `np.random.default_rng(data.seed).choice`, in the order drawn; without, the first ones.

    verl builds the validation set from the same data config, so data.shuffle (not validation_shuffle) applies to it too.
    """
    if not shuffle:
        return list(range(count))
    return np.random.default_rng(seed).choice(total, size=count, replace=False).tolist()


def truncate(ids: list[int], max_length: int, mode: str) -> list[int]:
    """Shorten token ids to `max_length`: `left` keeps the last tokens, `right` the first, `middle` both ends."""
    if len(ids) <= max_length:
        return ids
    if mode == "left":
        return ids[len(ids) - max_length:]
    if mode == "right":
        return ids[:max_length]
    head = max_length // 2
    tail = max_length - head
    return ids[:head] + ids[len(ids) - tail:]


# ---------------------------------------------------------------------------------- the dataset
class RLDataset(Dataset):
    """Prompts of verl-schema data files, rendered with the chat template and tokenized at load time.

    Args:
        data_files: a path or a list of paths (`~` expanded): `.parquet`, `.json` (an array of rows,
            one object, or JSON lines) or `.jsonl`; rows of several files are concatenated in order.
        tokenizer: a Hugging Face tokenizer (with a chat template, for prompts of chat messages).
        config: the `data` section (prompt_key, max_prompt_length, truncation, filter_overlong_prompts,
            return_raw_chat, return_full_prompt, apply_chat_template_kwargs).
        processor: the model's multimodal processor (`load_processor`), for rows with images; None for a text model.
        max_samples: keep only N rows of the concatenated files (before filtering), chosen as verl's RLHFDataset
            does (`sample_rows`); <= 0: all.

    Only the prompt column is required to load. A row without `reward_model` gets `{}` and one without `data_source`
    gets "unknown": a reward model needs neither, a reward function needs `reward_model.ground_truth`
    (`check_reward_columns`, before training) and a `data_source` only to pick a built-in scorer. `extra_info` must be a
    dict or missing/null, and rows with videos (or images, without a processor) are refused (`check_row`): both fail
    at load, naming the row, not mid-run.

    Each item is a dict: `input_ids` (1-D LongTensor, unpadded), `attention_mask` (ones), `data_source`, `reward_model`,
    `extra_info` (always with `index`), `index`, `ability` (when any row has the column, None in rows without it, so
    that items of mixed files collate), `agent_name` (likewise: the agent loop of a multi-turn rollout, docs/agents.md),
    the column `data.reward_fn_key` names (when it is another), `row_columns` (the row as read: the columns TRL reward
    functions are given), `raw_prompt` (the messages, when `return_raw_chat`), `full_prompts` (the rendered text before
    truncation, when `return_full_prompt`) and `multi_modal_inputs` (when any row has images: the row's `pixel_values`
    and `image_grid_thw`, None for a row without). `index` is the row's `extra_info.index`, else its row number in the
    concatenated files (generated rows: numbered on after them). `append_rows` adds rows later (data generation).

    Attributes:
        num_filtered: rows dropped by `filter_overlong_prompts` (0 when off).
    """

    def __init__(self, data_files: str | Path | Sequence[str | Path], tokenizer: Any, config: Any,
                 processor: Any = None, max_samples: int = -1):
        if config.truncation not in TRUNCATION_MODES:
            raise ConfigError(f"data.truncation={config.truncation!r}: use one of {', '.join(TRUNCATION_MODES)}.")
        self.config = config
        self.processor = processor
        self.tokenizer = tokenizer
        self.files = file_list(data_files)
        self.num_filtered = 0
        self._rows: list[dict[str, Any]] = []
        self._origins: list[Origin] = []
        self._messages: list[list[dict[str, Any]]] = []
        self._texts: list[str] = []
        self._row_numbers: list[int] = []
        self._input_ids: list[torch.Tensor] = []
        self._rows_read = 0  # rows of the files and generated rows so far, kept or not: the default `index` of the next one
        self._has_ability = False  # whether any row has an `ability` column
        self._has_agent_name = False  # whether any row has an `agent_name` column (which agent loop runs it)
        self._has_images = False  # whether any row has images (data.image_key)
        # verl's filter measures a prompt with the tool schemas the multi-turn rollout renders it with
        self._tool_schemas = _tool_schemas(config) if config.filter_overlong_prompts else None

        rows, origins, numbers = self._read(max_samples)
        self._add_rows(rows, origins, numbers, where=", ".join(self.files), keep_none_ok=False)

    @property
    def has_images(self) -> bool:
        """Whether any row has images (its items carry `multi_modal_inputs`)."""
        return self._has_images

    def origin(self, i: int) -> Origin:
        """The file (or data generator) and row that item `i` comes from, for messages."""
        return self._origins[i]

    def located_rows(self) -> Iterator[tuple[dict[str, Any], str, int]]:
        """Each row with its file and row number there (what a message about the row names)."""
        return ((row, file, number) for row, (file, number) in zip(self._rows, self._origins, strict=True))

    def data_source_files(self, key: str = "data_source") -> dict[str, list[str]]:
        """For each distinct value of column `key` (data.reward_fn_key: what picks the scorer), the files (in the
        order given) whose rows carry it; a missing or empty `data_source` is "unknown", as in the items."""
        files: dict[str, dict[str, None]] = {}
        for row, (file, _) in zip(self._rows, self._origins, strict=True):
            files.setdefault(str(row.get(key) or "unknown"), {})[file] = None
        return {source: list(names) for source, names in files.items()}

    def check_reward_columns(self, key: str = "data_source", ground_truth: bool = True) -> None:
        """DataError naming the file and row of the first row a reward function cannot be called for: no value in
        column `key` (data.reward_fn_key, when not `data_source`, which may be missing) or no `reward_model` dict
        with a `ground_truth` (what the reward managers pass as ground_truth, as verl's do; not with `ground_truth` False,
        for functions that do without, or under data.label_key, whose column is checked when the rows are read)."""
        for row, (file, number) in zip(self._rows, self._origins, strict=True):
            if key != "data_source" and row.get(key) is None:
                raise DataError(f"{file}: row {number}: no value in column {key!r}, which data.reward_fn_key={key!r} "
                                "names as the column that picks each row's reward function")
            if getattr(self.config, "label_key", None) or not ground_truth:  # the label column is it (check_row: every row
                continue  # has it), or the function does without (OpenRLHF's: "")
            what = data_files.missing_ground_truth(row)
            if what:
                raise DataError(f"{file}: row {number}, column 'reward_model': {what}. The reward function is called with "
                                "the row's reward_model.ground_truth (verl's schema: {'style': 'rule', 'ground_truth': ...}); a "
                                "reward function written for TRL (a completions, completion_ids or prompts parameter, or "
                                "reward_model.reward_manager=trl) is given the row's columns instead; data.label_key names "
                                "another column of the answers")

    def append_rows(self, rows: list[dict[str, Any]], where: str) -> int:
        """Add rows in the schema of the data files (a data generator's output); returns how many were kept.

        They are rendered and tokenized like the rows of the files, and overlong prompts follow
        data.truncation / filter_overlong_prompts the same way; errors name `where` and the row
        (counted from 0 within `rows`). A row without `extra_info.index` gets the next row number.
        """
        numbers = list(range(self._rows_read, self._rows_read + len(rows)))
        kept = self._add_rows(rows, [(where, i) for i in range(len(rows))], numbers, where, keep_none_ok=True)
        self._rows_read += len(rows)
        return kept

    # ---- loading ---------------------------------------------------------------------------------
    def _read(self, max_samples: int) -> tuple[list[dict[str, Any]], list[Origin], list[int]]:
        """The rows of the files (all, or the max_samples that `sample_rows` picks), their origins and row numbers.

        Counts every row of the files in `_rows_read`, so that generated rows are numbered after them."""
        rows: list[dict[str, Any]] = []
        origins: list[Origin] = []
        for given in self.files:
            file_rows, columns = read_rows(given)
            if file_rows and self.config.prompt_key not in columns:
                raise DataError(
                    f"{given}: no prompt column {self.config.prompt_key!r} (data.prompt_key); its columns are "
                    f"{', '.join(columns)}. Set data.prompt_key to the column that holds the prompts."
                )
            rows += file_rows
            origins += [(given, i) for i in range(len(file_rows))]
        if not rows:
            raise DataError(f"The data files hold no rows: {', '.join(self.files)}.")
        self._rows_read = len(rows)
        if not 0 < max_samples < len(rows):
            return rows, origins, list(range(len(rows)))
        numbers = sample_rows(len(rows), max_samples, self.config.shuffle, self.config.seed)
        cut = [file for file in self.files if file not in {origins[i][0] for i in numbers}]
        if cut:
            how = f"{max_samples} rows drawn at random (data.shuffle, data.seed={self.config.seed})" if self.config.shuffle \
                else f"the first {max_samples} rows"
            print(f"reinforge: note: max_samples={max_samples} keeps {how} of {', '.join(self.files)}; no rows come from "
                  f"{', '.join(cut)}", file=sys.stderr)
        return [rows[i] for i in numbers], [origins[i] for i in numbers], numbers

    def _add_rows(self, rows: list[dict[str, Any]], origins: list[Origin], numbers: list[int], where: str,
                  keep_none_ok: bool) -> int:
        key = self.config.prompt_key
        rows = [shape_prompt(row, origin, key, self.config) for row, origin in zip(rows, origins, strict=True)]
        for row, origin in zip(rows, origins, strict=True):
            check_row(row, origin, self.config, images_ok=self.processor is not None)
        messages = [to_messages(row.get(key), origin, key) for row, origin in zip(rows, origins, strict=True)]
        messages = multimodal.shape_image_rows(rows, messages, origins, self.config)  # with images: through the template
        plain = [is_text_prompt(row.get(key)) and not multimodal.row_images(row, self.config.image_key) for row in rows]
        self._check_chat_template(plain, origins)
        failures: list[DataError] = []
        texts = self._render_rows(messages, origins, failures, plain=plain)
        with_tools = self._render_rows(messages, origins, failures, self._tool_schemas) if self._tool_schemas else texts
        rendered = [i for i in range(len(rows)) if texts[i] is not None and with_tools[i] is not None]
        if len(rendered) < len(rows):
            self._drop_failed(len(rows) - len(rendered), len(rows), where, failures[0], bool(keep_none_ok or rendered))
            rows, origins, numbers, messages, texts, with_tools, plain = (
                [seq[i] for i in rendered] for seq in (rows, origins, numbers, messages, texts, with_tools, plain))
        token_ids = self._tokenize(texts, plain)
        token_ids = multimodal.expand_image_tokens(self.processor, rows, texts, token_ids, origins, self.config)
        measured = self.tokenizer(with_tools, add_special_tokens=False)["input_ids"] if self._tool_schemas and texts else token_ids
        empty = next((i for i, ids in enumerate(token_ids) if not ids), None)
        if empty is not None:  # nothing for the model to continue from
            file, row = origins[empty]
            how = "" if plain[empty] else " after the chat template"
            raise DataError(f"{file}: row {row}, column {key!r}: the prompt is 0 tokens{how} "
                            f"({preview(texts[empty])}); give it some text" + ("" if plain[empty] else ", or fix the chat template"))
        keep = self._fit_lengths(measured, origins, where, keep_none_ok, plain)
        multimodal.check_untruncated(*([seq[i] for i in keep] for seq in (rows, token_ids, origins)), self.config)
        self._has_images |= any(multimodal.row_images(rows[i], self.config.image_key) for i in keep)
        limit, mode = self.config.max_prompt_length, self.config.truncation
        self._has_ability |= any("ability" in rows[i] for i in keep)
        self._has_agent_name |= any("agent_name" in rows[i] for i in keep)
        for i in keep:
            self._rows.append(rows[i])
            self._origins.append(origins[i])
            self._messages.append(messages[i])
            self._texts.append(texts[i])
            self._row_numbers.append(numbers[i])
            self._input_ids.append(torch.tensor(truncate(token_ids[i], limit, mode), dtype=torch.long))
        return len(keep)

    def _check_chat_template(self, plain: list[bool], origins: list[Origin]) -> None:
        """DataError naming the first row that needs the tokenizer's chat template (chat messages, or any prompt rendered
        with the tools of a multi-turn rollout) when the tokenizer has none."""
        if getattr(self.tokenizer, "chat_template", None):
            return
        first = next((i for i, is_plain in enumerate(plain) if not is_plain or self._tool_schemas), None)
        if first is not None:
            file, row = origins[first]
            what = "the tools' schemas go" if plain[first] else "the prompt is a list of chat messages, which goes"
            other = "give the prompt as a string (the model's input text, as is)"
            if not plain[first] and getattr(self.config, "apply_chat_template", False):
                what = "the prompt goes (data.apply_chat_template=true: a string prompt as one user message)"
                other = "set data.apply_chat_template=false (a string prompt is then the model's input text, as is)"
            raise DataError(f"{file}: row {row}, column {self.config.prompt_key!r}: {what} through the chat template, but "
                            "the tokenizer has no chat template. Use a tokenizer with one (reinforge train: or set "
                            f"actor_rollout_ref.model.custom_chat_template), or {other}")

    def _tokenize(self, texts: list[str], plain: list[bool]) -> list[list[int]]:
        """Token ids of each prompt text: a rendered chat has its special tokens from the template; a string prompt gets
        the tokenizer's own (a BOS where it adds one), as TRL tokenizes its standard-format prompts."""
        ids: dict[int, list[int]] = {}
        for special in (False, True):
            rows = [i for i, is_plain in enumerate(plain) if is_plain == special]
            tokens = self.tokenizer([texts[i] for i in rows], add_special_tokens=special)["input_ids"] if rows else []
            ids.update(zip(rows, tokens, strict=True))
        return [ids[i] for i in range(len(texts))]

    def _render_rows(self, messages: list[list[dict[str, Any]]], origins: list[Origin], failures: list[DataError],
                     tools: list[dict] | None = None, plain: list[bool] | None = None) -> list[str | None]:
        """Each prompt's text: a string prompt (`plain`) as it is, chat messages after the chat template. A prompt the
        template fails on stops the load, or, under data.filter_overlong_prompts, is None (verl's filter drops it) and
        its error goes to `failures`."""
        texts: list[str | None] = []
        for i, (m, origin) in enumerate(zip(messages, origins, strict=True)):
            if plain is not None and plain[i]:
                texts.append(m[0]["content"])
                continue
            try:
                texts.append(self._render(m, origin, tools))
            except DataError as err:
                if not self.config.filter_overlong_prompts:
                    raise
                failures.append(err)
                texts.append(None)
        return texts

    def _drop_failed(self, failed: int, total: int, where: str, first: DataError, some_may_remain: bool) -> None:
        if not some_may_remain:
            raise DataError(f"No rows left after filtering: the chat template failed on all {total} prompts of {where}. "
                            f"The first: {first}")
        self.num_filtered += failed
        print(f"reinforge: dropped {failed} of {total} prompts from {where}: the chat template failed on them "
              f"(data.filter_overlong_prompts drops them, as verl's filter does). The first: {first}", file=sys.stderr)

    def _render(self, messages: list[dict[str, Any]], origin: Origin, tools: list[dict] | None = None) -> str:
        kwargs = dict(self.config.apply_chat_template_kwargs) | ({"tools": tools} if tools else {})
        try:
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
        except Exception as err:  # a template may raise on roles or fields it does not accept
            file, row = origin
            raise DataError(
                f"{file}: row {row}, column {self.config.prompt_key!r}: the chat template failed on this prompt "
                f"({type(err).__name__}: {err})."
            ) from err

    def _fit_lengths(self, token_ids: list[list[int]], origins: list[Origin], where: str, keep_none_ok: bool,
                     plain: list[bool]) -> list[int]:
        """Indices of the rows to keep; drops overlong rows or raises, as configured."""
        limit = self.config.max_prompt_length
        overlong = [i for i, ids in enumerate(token_ids) if len(ids) > limit]
        truncating = self.config.truncation != "error"
        if not overlong or (truncating and not self.config.filter_overlong_prompts):
            return list(range(len(token_ids)))  # truncated when the items are built
        if not self.config.filter_overlong_prompts:
            file, row = origins[overlong[0]]
            how = "" if plain[overlong[0]] and not self._tool_schemas else " after the chat template"
            raise DataError(
                f"{file}: row {row}, column {self.config.prompt_key!r}: the prompt is {len(token_ids[overlong[0]])} "
                f"tokens{how}, over data.max_prompt_length={limit} ({len(overlong)} of "
                f"{len(token_ids)} rows are). Raise data.max_prompt_length, or set data.truncation to left, right "
                "or middle (or data.filter_overlong_prompts=true to drop such rows); verl 0.9's agent loop keeps the last "
                "max_prompt_length tokens of such a prompt whatever data.truncation says, which data.truncation=left does."
            )
        self.num_filtered += len(overlong)
        print(
            f"reinforge: dropped {len(overlong)} of {len(token_ids)} prompts longer than "
            f"data.max_prompt_length={limit} tokens from {where}",
            file=sys.stderr,
        )
        if len(overlong) == len(token_ids) and not keep_none_ok:
            raise DataError(
                f"No rows left after filtering: all {len(token_ids)} prompts of {where} are longer "
                f"than data.max_prompt_length={limit} tokens. Raise data.max_prompt_length."
            )
        dropped = set(overlong)
        return [i for i in range(len(token_ids)) if i not in dropped]

    # ---- items -----------------------------------------------------------------------------------
    def check_token_ids(self, vocab_size: int, setting: str) -> None:
        """A DataError naming the first prompt that holds a token id of `vocab_size` or more, which the model (its path
        the config `setting`) has no embedding for: a tokenizer with tokens added that the model was not resized for."""
        for ids, origin in zip(self._input_ids, self._origins, strict=True):
            if len(ids) and int(ids.max()) >= vocab_size:
                file, row = origin
                raise DataError(f"{file}: row {row}, column {self.config.prompt_key!r}: the prompt holds token id "
                                f"{int(ids.max())}, but the model of {setting} has embeddings for {vocab_size} tokens; use the "
                                "model's own tokenizer, or a model whose embeddings were resized for the added tokens")

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self._rows[i]
        input_ids = self._input_ids[i]
        extra_info, label_key = dict(row.get("extra_info") or {}), getattr(self.config, "label_key", None)
        if extra_info.get("index") is None:
            extra_info["index"] = self._row_numbers[i]
        item = {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "data_source": row.get("data_source") or "unknown",
            "reward_model": {**(row.get("reward_model") or {}), **({"ground_truth": row[label_key]} if label_key else {})},
            "extra_info": extra_info,
            "index": extra_info["index"],
            "row_columns": row,  # the row as read (its prompt shaped), for reward functions written for TRL (reward/manager/trl.py)
        }
        key = getattr(self.config, "reward_fn_key", "data_source")
        if key not in item:  # another column picks the reward function (data.reward_fn_key)
            item[key] = row.get(key)
        if self._has_ability:  # every item has the same keys, so rows of mixed files collate together
            item["ability"] = row.get("ability")
        if self._has_agent_name:
            item["agent_name"] = row.get("agent_name")
        if self._has_images:
            item[multimodal.MM_KEY] = multimodal.row_image_inputs(self.processor, row, self._origins[i], self.config)
        if self.config.return_raw_chat:
            item["raw_prompt"] = self._messages[i]
        if self.config.return_full_prompt:
            item["full_prompts"] = self._texts[i]
        return item


# ------------------------------------------------------------------------------------- collation
def collate_prompts(items: list[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Left-pad items' prompts into a batch.

    Returns `input_ids`, `attention_mask` (0 on pads) and `position_ids` (count of real tokens
    before each one, 0 on pads), all (batch, longest prompt); every other key becomes a list.
    An item that is already padded (a user Dataset's) is first cut down by its own `attention_mask`;
    any `position_ids` it has are recomputed.
    """
    if not items:
        raise ValueError("collate_prompts needs at least one item")
    prompts = [prompt_ids(item, f"Dataset item {i}") for i, item in enumerate(items)]
    length = max(len(p) for p in prompts)
    input_ids = torch.full((len(items), length), pad_token_id, dtype=torch.long)  # (batch, prompt_len)
    attention_mask = torch.zeros((len(items), length), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, length - len(prompt):] = prompt
        attention_mask[row, length - len(prompt):] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    batch: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
    keys = [k for k in items[0] if k not in batch]
    for i, item in enumerate(items):
        if set(item) - set(batch) != set(keys):
            raise DataError(f"Dataset items have different keys: item {i} has {sorted(item)}, item 0 has {sorted(items[0])}.")
    batch.update({key: [item[key] for item in items] for key in keys})
    return batch


def collate_fn(pad_token_id: int) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    """The collate function for a PromptLoader: `collate_prompts` with the tokenizer's pad id bound."""
    if pad_token_id is None:
        raise ModelError("The tokenizer has no pad token; set one (e.g. tokenizer.pad_token = tokenizer.eos_token).")
    return functools.partial(collate_prompts, pad_token_id=pad_token_id)


# ------------------------------------------------------------------------------- dataset factory
def _tool_schemas(config: Any) -> list[dict] | None:
    """The tool schemas of data.tool_config_path and data.function_tool_path (which the trainer sets to the multi-turn
    rollout's), as the chat template is given them; None without either."""
    path, functions = getattr(config, "tool_config_path", None), getattr(config, "function_tool_path", None)
    if not path and not functions:
        return None
    from reinforge.inference.tools import load_all_tools, plain_schema

    return [plain_schema(tool.get_openai_tool_schema()) for tool in load_all_tools(path, functions).values()] or None


def create_rl_dataset(data_files: str | Path | Sequence[str | Path], data_config: Any, tokenizer: Any,
                      processor: Any = None, is_train: bool = True, max_samples: int = -1) -> Dataset:
    """The dataset of `data_files`: the user's class when `data.custom_cls.path` is set, else `RLDataset`.

    A user class is called with keyword arguments `data_files, tokenizer, config, processor` and
    `max_samples` when its `__init__` accepts it. With `data.datagen.path` set, the training set
    (`is_train`) is a `DynamicGenDataset` that grows during training (`environment/datagen.py`);
    otherwise both splits are built the same way.
    """
    custom = data_config.custom_cls
    if custom.path:
        cls = load_dataset_class(custom.path, custom.name)
    elif is_train and data_config.datagen.path:
        from reinforge.environment.datagen import DynamicGenDataset

        cls = DynamicGenDataset
    else:
        cls = RLDataset
    kwargs = {"data_files": data_files, "tokenizer": tokenizer, "config": data_config, "processor": processor}
    if _accepts(cls, "max_samples"):
        kwargs["max_samples"] = max_samples
    if not custom.path:
        return cls(**kwargs)
    return create_user_dataset(cls, kwargs, custom.path)


def _accepts(cls: type, name: str) -> bool:
    params = inspect.signature(cls.__init__).parameters.values()
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
