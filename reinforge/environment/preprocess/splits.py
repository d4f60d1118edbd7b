"""Reading a dataset's raw splits (a local copy or the Hugging Face hub) and writing verl-schema parquet.

Local copies (`--input`, one or more files or folders) may be in any of these layouts:

- files `.parquet`, `.jsonl`, `.json` (a JSON array of rows, JSON lines, or ONE object per file,
  as in the original MATH tree) or `.arrow` (the `datasets` library's cache and `save_to_disk`
  files);
- a folder: every such file below it, in sorted path order, skipping hidden paths and the
  `datasets` metadata files (`dataset_info.json`, `state.json`, `dataset_dict.json`). When the
  folder holds a sub-folder named after the dataset's hub config (GSM8K's `main/`), only that
  sub-folder is read, so GSM8K's `socratic/` variant is not mixed in.

The split of a file is the word `train` or `test` in its name (`train.jsonl`,
`train-00000-of-00001.parquet`, `gsm8k-test.arrow`) or, inside a folder given with `--input`,
in the name of a sub-folder below it (`MATH/train/algebra/1.json`). The name itself wins over
its folders. Inside a folder, files that name no split are skipped; a file given by name that
names no split is put under "unsplit" (the task decides what that means).

Without `--input`, the hub copy is loaded with `datasets.load_dataset`; when that library is
missing or the hub cannot be reached, a DataError says how to pass a local copy.

Each output split is written to `<local_dir>/<split>.parquet` atomically (a temporary file, then
a rename), and a line says how many rows went where.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from reinforge.errors import DataError, UserError

_T = TypeVar("_T")

SPLITS = ("train", "test")
UNSPLIT = "unsplit"
DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".arrow")
METADATA_FILES = frozenset({"dataset_info.json", "state.json", "dataset_dict.json"})

Origin = tuple[str, int]  # (file or hub split, 0-based row), for messages


@dataclass(frozen=True)
class HubDataset:
    """Where `datasets.load_dataset` finds a dataset: its hub name and config (subset), and the folder of a local copy
    of the hub repository that holds that config's files (default: the config's name)."""

    name: str
    config: str | None = None
    folder: str | None = None


@dataclass
class RawSplit:
    """The raw rows of one split, with where each came from."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    origins: list[Origin] = field(default_factory=list)

    def add(self, rows: list[dict[str, Any]], source: str) -> None:
        self.rows += rows
        self.origins += [(source, i) for i in range(len(rows))]

    def slice(self, start: int, stop: int) -> RawSplit:
        return RawSplit(self.rows[start:stop], self.origins[start:stop])


# ------------------------------------------------------------------------------------- reading
def load_raw_splits(inputs: list[str] | None, hub: HubDataset) -> dict[str, RawSplit]:
    """The raw rows of each split: from the local files and folders `inputs`, else from the hub."""
    if not inputs:
        return load_from_hub(hub)
    splits: dict[str, RawSplit] = {}
    for given in inputs:
        for path, split in _data_files(given, hub):
            splits.setdefault(split, RawSplit()).add(_read_file(path), str(path))
    return splits


def _data_files(given: str, hub: HubDataset) -> list[tuple[Path, str]]:
    path = Path(given).expanduser()
    if path.is_file():
        if path.suffix not in DATA_SUFFIXES:
            raise DataError(f"--input {given}: unsupported file type {path.suffix or '(none)'!r}; use {', '.join(DATA_SUFFIXES)}.")
        return [(path, split_named_by([path.name]) or UNSPLIT)]
    if not path.is_dir():
        raise DataError(f"--input {given}: no such file or folder.")
    folder = hub.folder or hub.config  # a downloaded repository holds every config: read the one verl loads
    if folder and (path / folder).is_dir():
        path = path / folder
    found = []
    for file in sorted(path.rglob("*")):
        relative = file.relative_to(path).parts
        if not file.is_file() or file.suffix not in DATA_SUFFIXES or file.name in METADATA_FILES:
            continue
        if any(part.startswith(".") for part in relative):
            continue
        split = split_named_by(relative)
        if split:
            found.append((file, split))
    if not found:
        raise DataError(
            f"--input {given}: found no {'/'.join(DATA_SUFFIXES)} files whose name or sub-folder says "
            "'train' or 'test'. Name the files train.* and test.* (or put them in train/ and test/), or pass the files."
        )
    return found


def split_named_by(parts: Iterable[str]) -> str | None:
    """'train' or 'test' when a path part (the last one first) has that word in its name, else None."""
    for part in reversed(list(parts)):
        words = re.split(r"[^a-z0-9]+", part.lower())
        for split in SPLITS:
            if split in words:
                return split
    return None


def _read_file(path: Path) -> list[dict[str, Any]]:
    if path.suffix != ".arrow":
        from reinforge.environment.data_files import read_rows  # imported here: pyarrow, which `--help` does not need

        return read_rows(str(path))[0]
    import pyarrow as pa

    try:
        with pa.memory_map(str(path)) as source:
            try:
                table = pa.ipc.open_stream(source).read_all()  # what `datasets` writes
            except pa.ArrowInvalid:
                source.seek(0)
                table = pa.ipc.open_file(source).read_all()
    except Exception as err:  # pyarrow and OS errors all mean: this file cannot be read
        raise DataError(f"{path}: cannot read this .arrow file ({type(err).__name__}: {err}).") from err
    return table.to_pylist()


def load_from_hub(hub: HubDataset) -> dict[str, RawSplit]:
    """Every split of `hub` through `datasets.load_dataset`; DataError when that cannot work here."""
    download = (
        f"Download a copy (e.g. `huggingface-cli download --repo-type dataset {hub.name} --local-dir DIR`) "
        "and pass --input DIR (or the files)."
    )
    try:
        import datasets
    except ImportError as err:
        raise DataError(
            f"No --input given, and the `datasets` library is not installed to load {hub.name} from the Hugging Face hub. "
            f"{download} Or `pip install datasets`."
        ) from err
    print(f"reinforge: loading {hub.name} from the Hugging Face hub ...", file=sys.stderr)
    try:
        loaded = datasets.load_dataset(hub.name, hub.config) if hub.config else datasets.load_dataset(hub.name)
    except Exception as err:  # network, authentication and format errors all mean: use a local copy
        raise DataError(f"Could not load {hub.name} from the Hugging Face hub ({type(err).__name__}: {err}). {download}") from err
    splits: dict[str, RawSplit] = {}
    for split in loaded:
        splits.setdefault(split, RawSplit()).add([dict(row) for row in loaded[split]], f"{hub.name} [{split}]")
    return splits


# ---------------------------------------------------------------------------------- converting
RowMaker = Callable[[dict[str, Any], str, int], "dict[str, Any] | None"]


def convert_split(raw: RawSplit, split: str, make_row: RowMaker, required: tuple[str, ...]) -> list[dict[str, Any]]:
    """verl-schema rows of one split: `make_row(raw_row, split, index)` for each raw row.

    `index` is the row's position in the raw split. A raw row that lacks a `required` column is a
    DataError naming where it came from; `make_row` returns None for a row that has no usable
    answer: such rows are dropped and counted on stderr.
    """
    rows, dropped = [], []
    for index, (raw_row, origin) in enumerate(zip(raw.rows, raw.origins, strict=True)):
        missing = [column for column in required if raw_row.get(column) is None]
        if missing:
            source, number = origin
            raise DataError(
                f"{source}: row {number} has no {', '.join(repr(c) for c in missing)} column; its columns are "
                f"{', '.join(raw_row) or '(none)'}. Pass a copy of the original dataset (columns {', '.join(required)})."
            )
        row = make_row(raw_row, split, index)
        if row is None:
            dropped.append(origin)
        else:
            rows.append(row)
    if dropped:
        source, number = dropped[0]
        print(f"reinforge: dropped {len(dropped)} of {len(raw.rows)} {split} rows without a final answer "
              f"(the first: {source}, row {number})", file=sys.stderr)
    if raw.rows and not rows:
        raise DataError(f"None of the {len(raw.rows)} {split} rows has a final answer (the first: {dropped[0][0]}).")
    return rows


# ------------------------------------------------------------------------------------- writing
def take(rows: list[_T], limit: int | None) -> list[_T]:
    """The first `limit` rows (all when `limit` is None)."""
    return rows if limit is None else rows[:limit]


def write_splits(local_dir: str | Path, splits: dict[str, list[dict[str, Any]]]) -> dict[str, Path]:
    """Write each non-empty split to `<local_dir>/<split>.parquet`; returns the paths written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(local_dir).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a file of that name, a folder where files cannot be added
        raise UserError(f"--local_dir {local_dir}: cannot make the folder ({error.strerror or error}: "
                        f"{error.filename or folder}); give a folder that can be written") from None
    written = {}
    for split, rows in splits.items():
        path = folder / f"{split}.parquet"
        if not rows:
            print(f"reinforge: no {split} rows; {path} not written")
            continue
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        os.replace(tmp, path)
        print(f"wrote {len(rows)} {split} rows to {path}")
        written[split] = path
    return written


def preprocess_splits(inputs: list[str] | None, hub: HubDataset, make_row: RowMaker, required: tuple[str, ...],
                      local_dir: str | Path, limits: dict[str, int | None]) -> dict[str, Path]:
    """Load the train and test splits, convert them with `make_row`, keep the first `limits[split]`
    rows of each, and write them; the flow of the question/answer datasets (GSM8K, MATH)."""
    raw = load_raw_splits(inputs, hub)
    if UNSPLIT in raw:
        source = raw[UNSPLIT].origins[0][0] if raw[UNSPLIT].origins else inputs
        raise DataError(f"{source}: cannot tell whether this file is the train or the test split; "
                        "put 'train' or 'test' in its name (train.jsonl, test.parquet, ...).")
    present = [split for split in SPLITS if split in raw]
    if not present:
        raise DataError(f"{hub.name}: no train or test split found (found: {', '.join(raw) or 'nothing'}).")
    converted = {split: take(convert_split(raw[split], split, make_row, required), limits.get(split)) for split in present}
    return write_splits(local_dir, converted)
