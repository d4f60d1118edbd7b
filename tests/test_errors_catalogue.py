"""Every row of the table in docs/errors.md, run through the real `reinforge` command.

The table is the single source: each row's example command is run as written (in a folder that
holds the files the examples name, with a tiny model, data file and batch sizes added unless the
example sets those keys itself: `DEFAULTS`, per sub-command), and the row's message must appear in stderr (`…` separates
pieces that must appear in that order), with the row's exit status and no traceback. The runs
are started two at a time, so the whole file takes about as long as its slowest half.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "errors.md"

# The first failure of a reward function is printed with the traceback of the user's own function, by design.
USER_TRACEBACK_ROWS = {"Reward function that always raises"}

ROW = {"data_source": "reinforge/add_one", "reward_model": {"ground_truth": "2"}}
REWARD_FILES = {
    "raises.py": "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                 "    raise ValueError('cannot parse the answer')\n",
    "returns_string.py": "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 'high'\n",
    "returns_nan.py": "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return float('nan')\n",
    "hangs.py": "import time\n\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                "    time.sleep(3600)\n",
    "wrong_signature.py": "def compute_score(text):\n    return 1.0\n",
    "other_name.py": "def my_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n",
    "syntax_error.py": "def compute_score(data_source, solution_str, ground_truth, extra_info=None)\n    return 1.0\n",
    "trl_reward.py": "def accuracy(completions, solution, **kwargs):\n    return [1.0] * len(completions)\n",
    "trl_too_few.py": "def accuracy(completions, **kwargs):\n    return [1.0]\n",
    "openrlhf_two_args.py": "def reward_func(queries, prompts):\n    return {'rewards': [1.0]}\n",
}


@dataclass(frozen=True)
class Case:
    name: str
    command: str
    message: str
    exit: str


def catalogue() -> list[Case]:
    """The rows of the table in docs/errors.md."""
    cases = []
    for line in TABLE.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if len(cells) == 4 and cells[1].startswith("`") and "reinforge " in cells[1]:
            cases.append(Case(cells[0], cells[1].strip("`"), cells[2], cells[3]))
    return cases


# per sub-command, the keys a row's example gets unless it sets them: a run that would succeed, small and fast
DEFAULTS = {
    "train": {
        "actor_rollout_ref.model.path": "{model}", "data.train_files": "ok.jsonl", "data.train_batch_size": "2",
        "data.max_prompt_length": "64", "data.max_response_length": "4", "actor_rollout_ref.rollout.n": "2",
        "actor_rollout_ref.actor.ppo_mini_batch_size": "2", "trainer.total_training_steps": "1",
        "trainer.val_before_train": "false", "trainer.test_freq": "-1", "algorithm.adv_estimator": "grpo",
        "actor_rollout_ref.model.enable_gradient_checkpointing": "false", "trainer.default_local_dir": "run_{index}",
    },
    "sft": {
        "model.partial_pretrain": "{model}", "data.train_files": "sft.jsonl", "data.train_batch_size": "2",
        "data.micro_batch_size_per_gpu": "2", "trainer.total_training_steps": "1", "trainer.logger": "[]",
        "trainer.default_local_dir": "run_{index}",
    },
    "generate": {
        "model.path": "{model}", "data.path": "ok.jsonl", "data.output_path": "generated_{index}.parquet",
        "data.n_samples": "1", "rollout.response_length": "4", "trainer.device": "cpu",
    },
    "eval": {"data.path": "responses.jsonl"},
}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def make_workspace(folder: Path, model: Path, other_model: Path) -> None:
    """The files the examples name, next to the default model and data."""
    import torch

    from reinforge.training.checkpoint_io import save_training_state

    prompts = [{**ROW, "prompt": [{"role": "user", "content": f"What is {i} plus 1?"}], "extra_info": {"index": i}}
               for i in range(8)]
    write_jsonl(folder / "ok.jsonl", prompts)
    write_jsonl(folder / "long.jsonl", [{**row, "prompt": [{"role": "user", "content": "word " * 300}]} for row in prompts])
    write_jsonl(folder / "no_prompt.jsonl", [{**{k: v for k, v in row.items() if k != "prompt"}, "question": "x"} for row in prompts])
    write_jsonl(folder / "my_task.jsonl", [{**row, "data_source": "my/task"} for row in prompts])
    write_jsonl(folder / "no_source.jsonl", [{k: v for k, v in row.items() if k != "data_source"} for row in prompts])
    write_jsonl(folder / "no_reward_model.jsonl", [{k: v for k, v in row.items() if k != "reward_model"} for row in prompts])
    write_jsonl(folder / "bad_extra_info.jsonl", [{**row, "extra_info": "note"} if i == 2 else row for i, row in enumerate(prompts)])
    write_jsonl(folder / "images.jsonl", [{**row, "images": [{"path": "x.png"}]} for row in prompts])
    from PIL import Image

    from reinforge.training.tiny_vl_model import ensure_tiny_vl_model

    shutil.copytree(ensure_tiny_vl_model(model, model.parent), folder / "vl_model")  # a tiny Qwen2-VL
    Image.new("RGB", (56, 56), (200, 200, 200)).save(folder / "square.png")
    placed = [{**row, "prompt": [{"role": "user", "content": f"<image>What is {i} plus 1?"}], "images": ["square.png"]}
              for i, row in enumerate(prompts)]
    write_jsonl(folder / "with_images.jsonl", placed)
    write_jsonl(folder / "unplaced_images.jsonl", [{**row, "images": ["square.png"]} for row in prompts])
    write_jsonl(folder / "sft.jsonl", [{"question": f"Copy: {i}", "answer": str(i)} for i in range(8)])
    responses = [{**row, "responses": [str(i + 1), "9"]} for i, row in enumerate(prompts)]  # as reinforge generate writes
    write_jsonl(folder / "responses.jsonl", responses)
    write_jsonl(folder / "my_task_responses.jsonl", [{**row, "data_source": "my/task"} for row in responses])
    write_jsonl(folder / "no_ground_truth.jsonl", [{**row, "reward_model": {"style": "rule"}} for row in responses])
    (folder / "no_rows.jsonl").write_text("")
    (folder / "corrupt.parquet").write_bytes(b"this is not a parquet file")
    (folder / "empty.parquet").write_bytes(b"")
    (folder / "bad.yaml").write_text("data:\n  train_batch_size: [1, 2\n  shuffle: : true\n")
    (folder / "groups.yaml").write_text("defaults:\n  - ppo_trainer\n  - actor@actor_rollout_ref.actor: dp_actor\n  - _self_\n")
    (folder / "chdir.yaml").write_text("hydra:\n  job:\n    chdir: true\n")
    (folder / "typo.yaml").write_text("trainer:\n  save_freq: four\n")
    (folder / "notes").mkdir()
    (folder / "notes" / "readme.txt").write_text("not a model, not data, not a checkpoint")
    for name, text in REWARD_FILES.items():
        (folder / name).write_text(text)
    (folder / "no_weights").mkdir()
    for file in model.iterdir():
        if file.suffix in (".json", ".jinja") and file.name != "generation_config.json":
            shutil.copy(file, folder / "no_weights")
    shutil.copytree(model, folder / "renamed_weights")  # keys as torch.compile's module saves them: none fits the model
    from safetensors.torch import load_file, save_file

    weights = folder / "renamed_weights" / "model.safetensors"
    save_file({f"_orig_mod.{name}": tensor for name, tensor in load_file(weights).items()}, weights, metadata={"format": "pt"})
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = [pa.array([json.dumps(row["prompt"]) for row in prompts]), pa.array(["other"] * len(prompts))]
    pq.write_table(pa.Table.from_arrays(columns, names=["prompt", "prompt"]), folder / "dup_columns.parquet")
    shutil.copytree(model, folder / "no_template")
    config_file = folder / "no_template" / "tokenizer_config.json"
    config_file.write_text(json.dumps({k: v for k, v in json.loads(config_file.read_text()).items() if k != "chat_template"}))
    for file in (folder / "no_template").glob("*.jinja"):
        file.unlink()
    shutil.copytree(model, folder / "bad_tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / "bad_tokenizer" / name).write_text("{not json")
    (folder / "empty_run" / "global_step_2").mkdir(parents=True)
    half = folder / "half_run" / "global_step_1" / "actor"  # rank 0's files of a 2-rank save only (names are checked first)
    half.mkdir(parents=True)
    for prefix in ("model", "optim", "extra_state"):
        torch.save({}, half / f"{prefix}_world_size_2_rank_0.pt")
    from transformers import AutoModelForCausalLM

    small = AutoModelForCausalLM.from_pretrained(other_model)  # a checkpoint of another shape than the run's model
    save_training_state(str(folder / "small_run" / "global_step_1" / "actor"), ["model", "optimizer", "extra"], small,
                        torch.optim.AdamW(small.parameters()), {})
    for run in ("half_run/global_step_1", "small_run/global_step_1"):  # the rest of a checkpoint: only the actor's files are wrong
        torch.save({}, folder / run / "data.pt")
        (folder / run / "trainer_state.json").write_text(json.dumps({"global_steps": 1, "kl_ctrl": {"value": 0.001}}))


def command_line(case: Case, index: int, model: Path) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment of a row: its example, with the defaults it does not set."""
    words = shlex.split(case.command)
    env = {}
    while "=" in words[0]:
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert words[0] == "reinforge" and words[1] in DEFAULTS, case
    command = words[1]
    given = {word.split("=", 1)[0].lstrip("+") for word in words[2:] if "=" in word}
    overrides = [f"{key}={value.format(model=model, index=index)}" for key, value in DEFAULTS[command].items()
                 if key not in given]
    return [sys.executable, "-m", "reinforge", command, *overrides, *words[2:]], env


def run_case(case: Case, index: int, folder: Path, model: Path) -> tuple[int | None, str]:
    """(exit status, stderr) of a row; for a row that exits on no error of its own, (None, stderr up to its message)."""
    argv, env = command_line(case, index, model)
    env = {**os.environ, **env}
    if case.exit.isdigit():
        result = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
        return result.returncode, result.stderr
    first_piece = case.message.split("…")[0].strip()
    with open(folder / f"stderr_{index}.txt", "w+") as stderr:
        process = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        deadline = time.monotonic() + 300
        while process.poll() is None and first_piece not in (folder / f"stderr_{index}.txt").read_text() \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        status = process.poll()
        if status is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        return status, (folder / f"stderr_{index}.txt").read_text()


@pytest.fixture(scope="module")
def results(tiny_model_path, cache_dir, tmp_path_factory) -> dict[str, tuple[int | None, str]]:
    """Every row run, two at a time: {case name: (exit status, stderr)}."""
    from reinforge.training.tiny_model import TinyModelSpec, ensure_tiny_model

    folder = tmp_path_factory.mktemp("errors")
    other = ensure_tiny_model(TinyModelSpec(hidden_size=32, intermediate_size=96), root=cache_dir / "models")
    make_workspace(folder, tiny_model_path, other)
    cases = list(enumerate(catalogue()))[::-1]  # the slow rows (a training step, a checkpoint) are last in the table: start them first
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = pool.map(lambda item: run_case(item[1], item[0], folder, tiny_model_path), cases)
        return {case.name: outcome for (_, case), outcome in zip(cases, outcomes, strict=True)}


def test_the_catalogue_covers_the_mistakes_users_make():
    names = [case.name for case in catalogue()]
    assert len(names) == len(set(names)) >= 30
    for word in ("misspelt key", "Negative learning rate", "No responses per prompt", "Mini-batch larger", "not a multiple",
                 "estimator", "policy loss", "data file missing", "Corrupt", "Empty", "prompt column", "too long",
                 "does not exist", "not a model", "chat template", "data_source", "Reward file missing",
                 "wrong signature", "always raises", "returns a string", "returns NaN", "hangs, with", "hangs, no",
                 "not a checkpoint", "another shape"):
        assert any(word in name for name in names), word
    for command in ("sft", "generate", "eval"):  # the other sub-commands that load a config, a misspelt key among their rows
        rows = [case for case in catalogue() if case.command.startswith(f"reinforge {command} ")]
        assert len(rows) >= 5 and any("did you mean" in case.message for case in rows), command


@pytest.mark.parametrize("case", catalogue(), ids=lambda case: case.name)
def test_each_mistake_gets_its_message_and_exit_status(case, results):
    status, stderr = results[case.name]
    pieces = [piece.strip() for piece in case.message.split("…") if piece.strip()]
    found = [stderr.find(piece) for piece in pieces]
    assert all(position >= 0 for position in found), f"{case.name}: {pieces} not all in\n{stderr}"
    positions = [stderr.find(piece, start) for piece, start in zip(pieces, [0, *found[:-1]], strict=True)]
    assert positions == sorted(positions), stderr  # in the order the table gives them
    if case.exit.isdigit():
        assert status == int(case.exit), stderr
        assert re.search(r"^reinforge: error: ", stderr, re.MULTILINE), stderr
    else:
        assert status is None, stderr  # a warning: the run was still going when the message came
    if case.name in USER_TRACEBACK_ROWS:
        assert stderr.count("Traceback") == 1 and 'raises.py", line 2, in compute_score' in stderr
    else:
        assert "Traceback" not in stderr, stderr


LRR = "actor_rollout_ref.actor.optim.lrr=1"


@pytest.mark.parametrize(("argv", "message"), [
    (["--debug", "train", LRR], "did you mean"),
    (["train", "--debug", LRR], "did you mean"),
    (["train", "--traceback", LRR], "did you mean"),  # the older spelling still works
    (["eval", "--debug", "data.respone_key=responses"], "did you mean"),  # sft and generate parse it the same way
    (["data", "--debug", "gsm8k", "--input", "no_copy", "--local_dir", "out"], "--input no_copy: no such file or folder"),
    (["data", "gsm8k", "--input", "no_copy", "--local_dir", "out", "--debug"], "--input no_copy: no such file or folder"),
    (["report", "--debug", "no_run"], "no_run"),
], ids=lambda value: " ".join(value) if isinstance(value, list) else None)
def test_debug_shows_the_traceback_wherever_it_sits(argv, message, tmp_path):
    result = subprocess.run([sys.executable, "-m", "reinforge", *argv], capture_output=True, text=True, cwd=tmp_path,
                            timeout=120)
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr and message in result.stderr
    without = subprocess.run([sys.executable, "-m", "reinforge", *[a for a in argv if a not in ("--debug", "--traceback")]],
                             capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert without.returncode == 2 and "Traceback" not in without.stderr and message in without.stderr


def test_debug_environment_variable_shows_the_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "reinforge", "train", LRR], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120, env={**os.environ, "REINFORGE_DEBUG": "1"})
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr and "did you mean" in result.stderr
