"""Reading data files into rows: parquet, JSON (an array of rows, one object, or JSON lines) or JSONL.

The RL and SFT datasets, `reinforge data` and `reinforge generate` / `eval` read their files here; every error is a
DataError that names the file (and the line or row). Only pyarrow and json are imported: no torch.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from reinforge.errors import DataError

FORMATS = (".parquet", ".json", ".jsonl")


def file_list(data_files: str | Path | Sequence[str | Path]) -> list[str]:
    """The data files given as one path or a list of them, as strings, a glob pattern replaced by the files it matches in
    name order (as `datasets.load_dataset`, which verl reads them with, expands it); an empty list, or a pattern that
    matches no file, is a DataError."""
    given = [str(data_files)] if isinstance(data_files, (str, Path)) else [str(f) for f in data_files]
    if not given:
        raise DataError("No data files given: set data.train_files / data.val_files to a file or a list of files.")
    files = []
    for name in given:
        if not glob.has_magic(name) or os.path.exists(os.path.expanduser(name)):  # a file named train[v2].parquet is one
            files.append(name)
            continue
        matches = sorted(glob.glob(os.path.expanduser(name)))
        if not matches:
            raise DataError(f"{name}: the pattern matches no file; check data.train_files and data.val_files.")
        files += matches
    return files


def parse_json_rows(text: str) -> list[Any]:
    """The rows of a JSON text: a JSON array of rows, one JSON object (one row), or JSON lines."""
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as err:
        if text.lstrip().startswith("["):
            raise DataError(f"not valid JSON ({err}).") from err
    else:
        return whole if isinstance(whole, list) else [whole]
    rows = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise DataError(
                    f"line {line_number} is not valid JSON ({err}); expected one JSON object per line "
                    "(JSON lines), one JSON array of rows, or one JSON object."
                ) from err
    return rows


def read_rows(given: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of one data file as dicts, and its column names; raises DataError naming the file."""
    path = Path(given).expanduser().resolve()
    if path.is_dir():
        raise DataError(f"{given} is a folder; data.train_files and data.val_files take data files ({', '.join(FORMATS)}), "
                        "or a list of them: '[a.parquet,b.parquet]'.")
    if not path.is_file():
        raise DataError(f"Data file not found: {given} (resolved to {path}); check data.train_files and data.val_files.")
    if path.suffix not in FORMATS:
        raise DataError(f"{given}: unsupported file type {path.suffix or '(no extension)'!r}; use one of {', '.join(FORMATS)}.")
    try:
        if path.suffix == ".parquet":
            table = pq.ParquetFile(path).read()  # one file: read_table would import pyarrow.dataset (~0.5 s quiet, seconds on busy cores)
            repeated = sorted({name for name in table.column_names if table.column_names.count(name) > 1})
            if repeated:  # a row dict would keep the last of them; datasets.load_dataset, verl's reader, refuses the file too
                raise DataError(f"the file has more than one column named {', '.join(map(repr, repeated))}; keep one of each.")
            return table.to_pylist(), list(table.column_names)
        rows = parse_json_rows(path.read_text(encoding="utf-8"))
    except DataError as err:
        raise DataError(f"{given}: {err}") from err
    except Exception as err:  # pyarrow, OS and decoding errors all mean: this file cannot be read
        raise DataError(f"{given}: cannot read this {path.suffix} file ({type(err).__name__}: {err}).") from err
    for row_number, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{given}: row {row_number} is a JSON {type(row).__name__}, not an object of columns.")
    return rows, list(dict.fromkeys(key for row in rows for key in row))


def check_row(row: dict[str, Any], origin: tuple[str, int], config: Any, images_ok: bool = False) -> None:
    """DataError naming the file (or data generator), row and column of what the dataset cannot use, found at load
    rather than mid-run: no `data.label_key` column when that is set, an `extra_info` or `reward_model` that is not a
    dict (`extra_info`'s `index` is read, and both go to the reward function; null or missing is fine), videos, and
    images unless the model has a processor for them (`images_ok`): a text-only run would silently ignore them."""
    file, number = origin
    label_key = getattr(config, "label_key", None)
    if label_key and label_key not in row:
        raise DataError(f"{file}: row {number}: no column {label_key!r} (data.label_key, the column of each row's answer); "
                        f"the row's columns are {', '.join(map(str, row))}")
    extra_info = row.get("extra_info")
    if extra_info is not None and not isinstance(extra_info, dict):
        raise DataError(f"{file}: row {number}, column 'extra_info': must be a dict of extra fields (verl's schema: "
                        f"{{'split': 'train', 'index': 0}}) or null; got {preview(extra_info)}.")
    reward_model = row.get("reward_model")
    if reward_model is not None and not isinstance(reward_model, dict):
        raise DataError(f"{file}: row {number}, column 'reward_model': must be a dict (verl's schema: {{'style': 'rule', "
                        f"'ground_truth': ...}}) or null; got {preview(reward_model)}.")
    value = row.get(config.image_key)
    if not images_ok and value is not None and not (hasattr(value, "__len__") and len(value) == 0):
        raise DataError(f"{file}: row {number}, column {config.image_key!r} (data.image_key): the row has images, but the "
                        "model does not take images here (reinforge trains them with Qwen2-VL and Qwen2.5-VL models, whose "
                        "folder has a preprocessor_config.json), so the prompt would be trained as text without them. Use "
                        f"such a model, or rows without images (an empty or null {config.image_key!r} is fine).")
    value = row.get(config.video_key)
    if value is not None and not (hasattr(value, "__len__") and len(value) == 0):
        raise DataError(f"{file}: row {number}, column {config.video_key!r} (data.video_key): the row has videos, but videos "
                        "are not supported in this version (images are) and the prompt would be trained as text without "
                        f"them. Use rows without videos (an empty or null {config.video_key!r} is fine).")


def is_text_prompt(value: Any) -> bool:
    """A prompt given as a string: the model's input text as it is (TRL's standard format), where chat messages go through
    the chat template; as messages (agent loops, reward models) it is one user message (`to_messages`)."""
    return isinstance(value, str)


def shape_prompt(row: dict[str, Any], origin: tuple[str, int], column: str, config: Any) -> dict[str, Any]:
    """The row with a string prompt as OpenRLHF's options shape it: one user message under data.apply_chat_template,
    else `data.input_template.format(prompt)`; any other row as it is."""
    value = row.get(column)
    if not isinstance(value, str):
        return row
    messages = to_messages(value, origin, column)  # refuses chat messages encoded as JSON text, template or not
    if getattr(config, "apply_chat_template", False):
        return {**row, column: messages}
    template = getattr(config, "input_template", None)
    return {**row, column: template.format(value)} if template else row


def to_messages(value: Any, origin: tuple[str, int], column: str) -> list[dict[str, Any]]:
    """The chat messages of one prompt value: a list of role/content dicts, or a string as one user message. A message
    may have no content when it carries tool calls (an assistant turn that only calls tools), as chat templates take it."""
    if isinstance(value, str):
        if value.lstrip().startswith("[{") and _json_messages(value):
            file, row = origin
            raise DataError(f"{file}: row {row}, column {column!r}: the prompt is a chat message list encoded as JSON text "
                            f"({preview(value, 60)}); it would be trained as that text. Store the list itself (decode it "
                            "with json.loads when writing the file)")
        return [{"role": "user", "content": value}]
    if isinstance(value, (list, tuple)) and value and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and (m.get("content") is not None or m.get("tool_calls"))
        for m in value
    ):
        return [dict(m) for m in value]
    file, row = origin
    raise DataError(
        f"{file}: row {row}, column {column!r}: a prompt must be a string or a non-empty list of chat messages "
        f"{{'role': ..., 'content': ...}}; got {preview(value)}."
    )


def _json_messages(text: str) -> bool:
    """Whether `text` is JSON of a list of role/content messages."""
    try:
        decoded = json.loads(text)
    except ValueError:
        return False
    return isinstance(decoded, list) and bool(decoded) and all(isinstance(m, dict) and "role" in m for m in decoded)


def missing_ground_truth(row: dict[str, Any]) -> str | None:
    """Why `row` has no reward_model.ground_truth (verl's schema), in words for a message; None when it has one."""
    reward_model = row.get("reward_model")
    if isinstance(reward_model, dict) and "ground_truth" in reward_model:
        return None
    return ("there is no such column" if "reward_model" not in row else "it is null" if reward_model is None
            else f"it holds {preview(reward_model)}, without a 'ground_truth' key")


def preview(value: Any, limit: int = 120) -> str:
    """A value's type and its repr, cut to `limit` characters, for messages about a row."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= limit else text[:limit] + '...'}"
