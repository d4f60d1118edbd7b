"""`reinforge generate`: n responses to every prompt of a file, written beside the file's columns (verl's main_generation).

As verl's script does: every row's prompt (column `data.prompt_key`) of chat messages is rendered with the tokenizer's
chat template and the generation prompt (a string prompt is the model's input text as it is, as in `reinforge train`), cut to `rollout.prompt_length` tokens on the tokenizer's truncation side, and answered
`data.n_samples` times with the rollout's sampling settings, `data.batch_size` prompts at a time; each response is
its valid tokens decoded without special tokens. The output parquet holds every input column and `responses`, a
list of `n_samples` strings per row.

Where it differs, and why:
- the prompts are read and rendered by the training data path (`create_rl_dataset`), so JSON and JSONL files, plain
  string prompts and `data.apply_chat_template_kwargs` work as in `reinforge train`, and a bad row is named;
- verl calls its engine `n_samples` times per batch; here each batch is one engine call of batch x n_samples rows,
  every row with its own seed hashed from (`rollout.seed`, row, sample): with hf and vLLM the same command writes the
  same file, and other batch sizes draw the same numbers (verl's vLLM engine is seeded once per run), rows computed
  beside others rounding their logits a little differently; SGLang takes no seed per request, only `rollout.seed` for
  the engine, so its files do not repeat exactly;
- one process and one engine: hf (on one device), or vLLM / SGLang, which read model.path's weights themselves and
  spread over `rollout.tensor_model_parallel_size` GPUs (verl: Ray workers on every GPU, vLLM by default);
- the file is written to a temporary name and renamed, so an interrupted run leaves no partial output.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from reinforge.config.generation_schema import ENGINE_KEYS, GenerationConfig, unused_generation_settings
from reinforge.errors import ConfigError, DataError

RESPONSES = "responses"  # the column written, as verl names it
NO_LIMIT = sys.maxsize  # the dataset's own prompt limit: prompts are cut here, where the cut ones are counted


def run_generation(config: GenerationConfig, user_keys: list[str]) -> dict[str, Any]:
    """Generate and write `data.output_path`; returns the summary printed last (rows, samples, tokens, seconds, output)."""
    import torch

    from reinforge.environment.dataset import create_rl_dataset
    from reinforge.environment.multimodal import MM_KEY
    from reinforge.inference import SamplingParams, make_engine
    from reinforge.inference.seeds import row_seeds
    from reinforge.trainer.main import _quiet_transformers
    from reinforge.training.model import model_source
    from reinforge.training.vision import load_processor

    start = time.perf_counter()
    _quiet_transformers()
    data, rollout = config.data, config.rollout
    for line in unused_generation_settings(config, user_keys):
        print(f"reinforge: note: {line}", flush=True)
    source = _input_file(data.path)
    output = _output_file(data.output_path)
    view = _training_config(config)
    _check_engine(view)
    tokenizer = _load_tokenizer(config, model_source(config.model.path, "model.path"))
    processor = load_processor(model_source(config.model.path, "model.path"), tokenizer, config.model.trust_remote_code,
                               "model.path")
    dataset = create_rl_dataset(str(source), view.data, tokenizer, processor, is_train=False)
    table = _read_table(source)
    items = [dataset[i] for i in range(len(dataset))]
    prompts = [item["input_ids"].tolist() for item in items]
    images = [item.get(MM_KEY) for item in items] if getattr(dataset, "has_images", False) else None
    _check_images(images, prompts, rollout, source)
    side = "left" if getattr(tokenizer, "truncation_side", "right") == "left" else "right"
    prompts, cut = _truncate_all(prompts, rollout.prompt_length, side)
    # the engine's context: the prompts as cut to rollout.prompt_length, or whole (null: the longest of them)
    longest = rollout.prompt_length or max(map(len, prompts), default=1)
    view.actor_rollout_ref.rollout.max_model_len = rollout.max_model_len or longest + rollout.response_length
    if cut:
        print(f"reinforge: note: {cut} of {len(prompts)} prompts are longer than rollout.prompt_length={rollout.prompt_length} "
              f"tokens (chat prompts after the chat template) and were cut on the {side} side, as verl cuts them",
              flush=True)

    device = view.trainer.device
    model = _load_model(view, device, rollout.dtype) if rollout.name == "hf" else None  # vLLM/SGLang load their own
    engine = make_engine(view, model, tokenizer)
    params = SamplingParams(max_tokens=rollout.response_length, temperature=rollout.temperature, top_p=rollout.top_p,
                            top_k=rollout.top_k, do_sample=rollout.do_sample, ignore_eos=rollout.ignore_eos)
    n, rows = data.n_samples, len(prompts)
    seeds = torch.stack([row_seeds(rows, rollout.seed, sample) for sample in range(n)], dim=1).tolist()  # (rows, n)
    batches = range(0, rows, data.batch_size)
    print(f"reinforge: generating {n} responses to each of {rows} prompts of {source} with {config.model.path} "
          f"({rollout.name} engine) on {device}, "
          f"{len(batches)} batch(es) of up to {data.batch_size} prompts", flush=True)
    responses: list[list[str]] = []
    tokens = 0
    for number, first in enumerate(batches, start=1):
        batch_rows = range(first, min(first + data.batch_size, rows))
        pixels = {} if images is None else {"multi_modal": [images[row] for row in batch_rows for _ in range(n)]}
        outputs = engine.generate_batch([prompts[row] for row in batch_rows for _ in range(n)], params,
                                        seeds=[seeds[row][sample] for row in batch_rows for sample in range(n)], **pixels)
        tokens += sum(len(output.token_ids) for output in outputs)
        texts = tokenizer.batch_decode([output.token_ids for output in outputs], skip_special_tokens=True)
        responses += [texts[i:i + n] for i in range(0, len(texts), n)]
        print(f"reinforge: [{number}/{len(batches)}] {len(batch_rows)} prompts done ({time.perf_counter() - start:.1f} s)",
              flush=True)
    _write_atomically(_with_column(table, responses), output)
    seconds = time.perf_counter() - start
    summary = {"rows": rows, "samples_per_row": n, "responses": rows * n, "response_tokens": tokens,
               "seconds": round(seconds, 2), "output": str(output)}
    print(f"reinforge: wrote {output}: {rows} rows x {n} responses, {tokens} response tokens "
          f"({tokens / max(rows * n, 1):.1f} per response, {tokens / max(seconds, 1e-9):.1f} tokens/s) in {seconds:.1f} s",
          flush=True)
    return summary


def _input_file(path: str) -> Path:
    """`data.path` as an existing file; DataError naming the key otherwise."""
    file = Path(path).expanduser()
    if not file.is_file():
        what = "is a folder" if file.is_dir() else "does not exist"
        raise DataError(f"data.path={path}: {file.resolve()} {what}; set data.path to the parquet (or .json/.jsonl) file of "
                        "prompts")
    return file


def _output_file(path: str) -> Path:
    """`data.output_path` with its folder created; ConfigError, before any model loads, when it cannot be written."""
    file = Path(path).expanduser().resolve()
    if file.is_dir():
        raise ConfigError(f"data.output_path={path} is a folder; set it to the parquet file to write, e.g. {file / 'out.parquet'}")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((folder for folder in (file.parent, *file.parent.parents) if folder.exists() and not folder.is_dir()), None)
        if blocker:
            raise ConfigError(f"data.output_path={path}: {blocker} is a file, so the folder {file.parent} cannot be created; "
                              "set data.output_path to a file in a folder") from None
        raise ConfigError(f"data.output_path={path}: cannot create the folder {file.parent} ({exc.strerror or exc})") from None
    if not os.access(file.parent, os.W_OK):
        raise ConfigError(f"data.output_path={path}: the folder {file.parent} is not writable")
    return file


def _load_tokenizer(config: GenerationConfig, source: str) -> Any:
    """The tokenizer of `model.path` (`source`); a ModelError naming model.path when it fails to load. One without a chat
    template takes string prompts only (the dataset names the first prompt of chat messages)."""
    from reinforge.training.model import tokenizer_from

    return tokenizer_from(source, "model.path", config.model.trust_remote_code or config.data.trust_remote_code)


def _training_config(config: GenerationConfig) -> Any:
    """The training `Config` that the tokenizer, dataset and engine builders read, holding this command's settings."""
    import torch

    from reinforge.config.schema import Config

    view = Config()
    model = view.actor_rollout_ref.model
    model.path, model.external_lib, model.trust_remote_code = config.model.path, config.model.external_lib, config.model.trust_remote_code
    data = view.data
    data.prompt_key, data.trust_remote_code = config.data.prompt_key, config.data.trust_remote_code
    data.apply_chat_template_kwargs = dict(config.data.apply_chat_template_kwargs)
    data.apply_chat_template, data.input_template = config.data.apply_chat_template, config.data.input_template
    data.max_prompt_length, data.truncation, data.filter_overlong_prompts = NO_LIMIT, "right", False  # every row kept, uncut
    if config.trainer.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device=cuda but no CUDA GPU is visible to torch; use trainer.device=cpu (or null: cuda "
                          "when a GPU is present)")
    view.trainer.device = config.trainer.device or ("cuda" if torch.cuda.is_available() else "cpu")
    view.trainer.seed = config.rollout.seed
    engine = view.actor_rollout_ref.rollout
    engine.name, engine.dtype, engine.micro_batch_size_per_gpu = config.rollout.name, config.rollout.dtype, config.rollout.micro_batch_size_per_gpu
    for key in ENGINE_KEYS:
        setattr(engine, key, getattr(config.rollout, key))
    if engine.load_format.startswith("dummy"):  # verl's default: weights synced from its actor; none are pushed here
        engine.load_format = "auto"
    return view


def _check_engine(view: Any) -> None:
    """A vLLM/SGLang engine that cannot run here stops the command before the data is read, naming this command's keys."""
    from reinforge.inference.factory import check_gpu_engine

    try:
        check_gpu_engine(view)
    except ConfigError as error:
        raise ConfigError(str(error).replace("actor_rollout_ref.", "")) from None


def _load_model(view: Any, device: str, dtype: str | None) -> Any:
    """The causal LM of `model.path` for inference, in `dtype` (null: bfloat16 on cuda, float32 on cpu)."""
    from reinforge.training.model import load_pretrained, prepare_model, pretrained
    from reinforge.training.vision import model_class

    dtype = dtype or ("bf16" if device == "cuda" else "fp32")
    model = load_pretrained(view.actor_rollout_ref.model, "model.path", "model", dtype,
                            lambda source, hf_config, kwargs: pretrained(model_class(hf_config), source, **kwargs))
    return prepare_model(model, device, trainable=False, gradient_checkpointing=False)


def _check_images(images: list | None, prompts: list[list[int]], rollout: Any, source: Path) -> None:
    """Prompts with images need the hf engine and must fit rollout.prompt_length whole (a cut would cut an image)."""
    if images is None:
        return
    if rollout.name != "hf":
        raise ConfigError(f"rollout.name={rollout.name}: {source} has prompts with images, which the hf engine generates "
                          "in this version; set rollout.name=hf")
    limit = rollout.prompt_length or float("inf")
    long = next((row for row, ids in enumerate(prompts) if images[row] and len(ids) > limit), None)
    if long is not None:
        raise DataError(f"{source}: row {long}: the prompt is {len(prompts[long])} tokens with its images' tokens, over "
                        f"rollout.prompt_length={rollout.prompt_length}, and a prompt with images cannot be cut without "
                        "cutting an image; raise rollout.prompt_length")


def _truncate_all(prompts: list[list[int]], limit: int | None, side: str) -> tuple[list[list[int]], int]:
    """Prompts cut to `limit` tokens (None: not cut), keeping the start (side right) or the end (side left); and how many
    were cut."""
    from reinforge.environment.dataset import truncate

    if limit is None:
        return prompts, 0
    return [truncate(ids, limit, side) for ids in prompts], sum(len(ids) > limit for ids in prompts)


def _read_table(file: Path) -> Any:
    """Every column of the input file, as an Arrow table (a parquet file's own schema kept)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from reinforge.environment.data_files import read_rows

    if file.suffix == ".parquet":
        return pq.ParquetFile(file).read()
    rows, _ = read_rows(str(file))
    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise DataError(f"data.path={file}: its rows cannot be laid out as the columns of a parquet file ({exc})") from None


def _with_column(table: Any, responses: list[list[str]]) -> Any:
    """`table` with the `responses` column (list<string> per row) added, or replaced when the input has one (as verl)."""
    import pyarrow as pa

    column = pa.array(responses, type=pa.list_(pa.string()))
    if RESPONSES not in table.column_names:
        return table.append_column(RESPONSES, column)
    table = table.set_column(table.column_names.index(RESPONSES), RESPONSES, column)
    metadata = dict(table.schema.metadata or {})
    if b"pandas" in metadata:  # a file pandas wrote: its record of the replaced column's type would not read back
        pandas = json.loads(metadata[b"pandas"])
        for entry in pandas.get("columns", []):
            if entry.get("field_name", entry.get("name")) == RESPONSES:
                entry.update(pandas_type="list[unicode]", numpy_type="object", metadata=None)
        metadata[b"pandas"] = json.dumps(pandas).encode()
    return table.replace_schema_metadata(metadata)


def _write_atomically(table: Any, output: Path) -> None:
    """Write the file under a temporary name in the same folder, then rename it into place: JSON lines for a .jsonl or
    .json name (what reading it back expects), parquet for any other."""
    import pyarrow.parquet as pq

    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    try:
        if output.suffix in (".jsonl", ".json"):
            try:
                lines = [json.dumps(row, ensure_ascii=False) + "\n" for row in table.to_pylist()]
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"data.output_path={output}: the rows hold values JSON cannot carry ({exc}); "
                                  "write a .parquet file") from None
            partial.write_text("".join(lines), encoding="utf-8")
        else:
            pq.write_table(table, partial)
        os.replace(partial, output)
    except OSError as exc:
        raise ConfigError(f"data.output_path={output}: cannot write the file ({exc.strerror or exc})") from None
    finally:
        partial.unlink(missing_ok=True)
