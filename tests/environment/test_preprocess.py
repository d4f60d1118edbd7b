"""`reinforge data gsm8k|math|countdown`: original formats in, verl-schema parquet out, scorable by the built-in scorers."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import types
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reinforge.cli import main
from reinforge.environment.dataset import create_rl_dataset
from reinforge.environment.preprocess import countdown
from reinforge.errors import DataError
from reinforge.reward import default_compute_score
from reinforge.reward.scorers.countdown import compute_score as countdown_score
from reinforge.reward.scorers.countdown import evaluate_equation, uses_numbers_exactly

ROOT = Path(__file__).resolve().parents[2]
GSM8K_SUFFIX = ' Let\'s think step by step and output the final answer after "####".'
MATH_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."

GSM8K_TRAIN = [
    {"question": "Tom has 3 boxes of 24 pencils. How many pencils does he have?",
     "answer": "He has 3 * 24 = <<3*24=72>>72 pencils.\n#### 72"},
    {"question": "A farm sells 250 eggs a day for 5 days. How many eggs is that?",
     "answer": "250 * 5 = <<250*5=1250>>1250 eggs.\n#### 1,250"},
    {"question": "Ann had 5 dollars and spent 8. What is her balance?", "answer": "5 - 8 = -3\n#### -3"},
]
GSM8K_TEST = [{"question": "What is 6 times 7?", "answer": "6 * 7 = <<6*7=42>>42\n#### 42"}]

MATH_TRAIN = [
    {"problem": "What is $\\frac{1}{4} + \\frac{1}{4}$?", "level": "Level 1", "type": "Prealgebra",
     "solution": "We add: $\\frac{1}{4} + \\frac{1}{4} = \\boxed{\\frac{1}{2}}$."},
    {"problem": "Solve $x + 2 = 5$.", "level": "Level 1", "type": "Algebra",
     "solution": "First guess $\\boxed{2}$ is wrong; subtracting gives $x = \\boxed{3}$."},
]
MATH_TEST = [
    {"problem": "Compute $\\sqrt{16}$.", "level": "Level 1", "type": "Algebra", "solution": "It is $\\boxed{4}$."},
    {"problem": "Name the shape.", "level": "Level 2", "type": "Geometry", "solution": "It is a square."},  # no box
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def read(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def data(*args: str) -> int:
    return main(["data", *map(str, args)])


# ------------------------------------------------------------------------------------- GSM8K
def test_gsm8k_jsonl_becomes_verl_rows_with_the_number_after_hashes(tmp_path, capsys):
    write_jsonl(tmp_path / "raw" / "train.jsonl", GSM8K_TRAIN)
    write_jsonl(tmp_path / "raw" / "test.jsonl", GSM8K_TEST)
    assert data("gsm8k", "--local_dir", tmp_path / "out", "--input", tmp_path / "raw") == 0

    train = read(tmp_path / "out" / "train.parquet")
    assert [row["reward_model"] for row in train] == [{"style": "rule", "ground_truth": gt} for gt in ("72", "1250", "-3")]
    assert train[1] == {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": "A farm sells 250 eggs a day for 5 days. How many eggs is that?" + GSM8K_SUFFIX}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "1250"},
        "extra_info": {"split": "train", "index": 1, "answer": GSM8K_TRAIN[1]["answer"], "question": GSM8K_TRAIN[1]["question"]},
    }
    test = read(tmp_path / "out" / "test.parquet")
    assert [(r["reward_model"]["ground_truth"], r["extra_info"]["split"], r["extra_info"]["index"]) for r in test] == [("42", "test", 0)]
    out = capsys.readouterr().out
    assert f"wrote 3 train rows to {tmp_path / 'out' / 'train.parquet'}" in out and "wrote 1 test rows" in out


GSM8K_TOOL_SUFFIX = " Let's think step by step and output the final answer after `####`."


def test_gsm8k_variants_write_the_rows_of_verls_multiturn_and_sft_scripts(tmp_path, monkeypatch):
    write_jsonl(tmp_path / "raw" / "train.jsonl", GSM8K_TRAIN + [{"question": "Q?", "answer": "no final answer"}])
    write_jsonl(tmp_path / "raw" / "test.jsonl", GSM8K_TEST)
    question, solution = GSM8K_TRAIN[1]["question"], GSM8K_TRAIN[1]["answer"]
    query = question + GSM8K_TOOL_SUFFIX
    base = {"split": "train", "index": 1, "answer": solution, "question": question}

    rows = {}
    for variant in ("multiturn_w_tool", "tool_agent_loop", "multiturn_w_interaction"):
        assert data("gsm8k", "--variant", variant, "--input", tmp_path / "raw", "--local_dir", tmp_path / variant) == 0
        rows[variant] = read(tmp_path / variant / "train.parquet")
        assert len(rows[variant]) == 3  # the row without "#### <number>" is dropped, as for the RL rows
    tool_row = rows["multiturn_w_tool"][1]
    assert tool_row["prompt"][0]["role"] == "system" and "use the `calc_gsm8k_reward` tool" in tool_row["prompt"][0]["content"]
    assert tool_row == {
        "data_source": "openai/gsm8k", "prompt": [tool_row["prompt"][0], {"role": "user", "content": query}], "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "1250"},
        "extra_info": {**base, "need_tools_kwargs": True, "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "1250"}}},
                       "interaction_kwargs": {"query": query, "ground_truth": "1250"}},
    }
    agent_row = rows["tool_agent_loop"][1]
    assert list(agent_row) == ["data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"]
    assert agent_row == {**tool_row, "agent_name": "tool_agent"}
    chat_row = rows["multiturn_w_interaction"][1]
    assert "point out your answer is wrong" in chat_row["prompt"][0]["content"] and chat_row["prompt"][1]["content"] == query
    assert chat_row["extra_info"] == {**base, "interaction_kwargs": {"name": "gsm8k", "query": query, "ground_truth": "1250"}}

    # SFT messages, every row kept (verl's script does not look for the number), in ~/data/gsm8k_sft by default
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data("gsm8k", "--variant", "multiturn_sft", "--input", tmp_path / "raw") == 0
    sft = read(tmp_path / "home" / "data" / "gsm8k_sft" / "train.parquet")
    assert len(sft) == 4 and sft[1] == {"messages": [{"role": "user", "content": question + GSM8K_SUFFIX},
                                                     {"role": "assistant", "content": solution}]}


def test_gsm8k_reads_the_hub_parquet_layout_and_only_its_main_config(tmp_path):
    write_parquet(tmp_path / "gsm8k" / "main" / "train-00000-of-00001.parquet", GSM8K_TRAIN)
    write_parquet(tmp_path / "gsm8k" / "main" / "test-00000-of-00001.parquet", GSM8K_TEST)
    write_parquet(tmp_path / "gsm8k" / "socratic" / "train-00000-of-00001.parquet", GSM8K_TEST * 5)
    (tmp_path / "gsm8k" / "README.md").write_text("card")
    assert data("gsm8k", "--local_save_dir", tmp_path / "out", "--local_dataset_path", tmp_path / "gsm8k") == 0
    assert len(read(tmp_path / "out" / "train.parquet")) == 3
    assert len(read(tmp_path / "out" / "test.parquet")) == 1


def test_gsm8k_reads_datasets_arrow_files_and_slices_splits(tmp_path, capsys):
    for split, rows in (("train", GSM8K_TRAIN), ("test", GSM8K_TEST)):
        table = pa.Table.from_pylist(rows)
        with pa.OSFile(str(tmp_path / f"gsm8k-{split}.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    arrow_files = [tmp_path / "gsm8k-train.arrow", tmp_path / "gsm8k-test.arrow"]
    assert data("gsm8k", "--local_dir", tmp_path / "out", "--input", *arrow_files, "--max_train", "2", "--max_test", "0") == 0
    assert [r["reward_model"]["ground_truth"] for r in read(tmp_path / "out" / "train.parquet")] == ["72", "1250"]
    assert not (tmp_path / "out" / "test.parquet").exists()
    assert "no test rows" in capsys.readouterr().out


def test_rows_without_a_final_answer_are_dropped_and_counted(tmp_path, capsys):
    write_jsonl(tmp_path / "train.jsonl", [*GSM8K_TRAIN, {"question": "Why?", "answer": "Because."}])
    assert data("gsm8k", "--local_dir", tmp_path / "out", "--input", tmp_path / "train.jsonl") == 0
    assert len(read(tmp_path / "out" / "train.parquet")) == 3
    assert f"dropped 1 of 4 train rows without a final answer (the first: {tmp_path / 'train.jsonl'}, row 3)" in capsys.readouterr().err


def test_wrong_columns_name_the_file_row_and_the_columns_needed(tmp_path, capsys):
    write_jsonl(tmp_path / "train.jsonl", [{"prompt": "What is 1 + 1?", "answer": "#### 2"}])
    assert data("gsm8k", "--local_dir", tmp_path / "out", "--input", tmp_path / "train.jsonl") == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'train.jsonl'}: row 0 has no 'question' column; its columns are prompt, answer" in err


def test_a_file_that_names_no_split_is_refused(tmp_path, capsys):
    write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K_TRAIN)
    assert data("gsm8k", "--local_dir", tmp_path / "out", "--input", tmp_path / "gsm8k.jsonl") == 2
    assert "cannot tell whether this file is the train or the test split" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_input_is_a_user_error_with_exit_status_2(tmp_path, capsys):
    assert data("gsm8k", "--local_dir", tmp_path / "out", "--input", tmp_path / "nowhere") == 2
    err = capsys.readouterr().err
    assert f"--input {tmp_path / 'nowhere'}: no such file or folder" in err and "Traceback" not in err
    (tmp_path / "train.csv").write_text("question,answer\n")
    assert data("gsm8k", "--local_dir", tmp_path / "out", "--input", tmp_path / "train.csv") == 2
    assert "unsupported file type '.csv'" in capsys.readouterr().err


def test_without_input_or_the_datasets_library_the_error_says_to_pass_a_local_copy(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    assert data("math", "--local_dir", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "`datasets` library is not installed" in err and "DigitalLearningGmbH/MATH-lighteval" in err
    assert "pass --input DIR" in err


def test_without_input_the_hub_copy_is_loaded_with_datasets(tmp_path, monkeypatch):
    """The hub is unreachable here, so `datasets` is replaced by a module that serves the same splits."""
    calls = []

    def load_dataset(*args):
        calls.append(args)
        return {"train": GSM8K_TRAIN, "test": GSM8K_TEST}

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert data("gsm8k", "--local_dir", tmp_path / "out") == 0
    assert calls == [("openai/gsm8k", "main")]
    assert [r["reward_model"]["ground_truth"] for r in read(tmp_path / "out" / "train.parquet")] == ["72", "1250", "-3"]


def test_a_missing_input_fails_cleanly_from_the_command_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "reinforge", "data", "math", "--local_dir", str(tmp_path / "out"),
                             "--input", str(tmp_path / "MATH")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2
    assert f"reinforge: error: --input {tmp_path / 'MATH'}: no such file or folder" in result.stderr
    assert "Traceback" not in result.stderr


# -------------------------------------------------------------------------------------- MATH
def write_math_tree(root: Path) -> Path:
    """The original MATH layout: one indented JSON object per problem, under train|test/<subject>/."""
    for split, rows in (("train", MATH_TRAIN), ("test", MATH_TEST)):
        for number, row in enumerate(rows):
            path = root / split / row["type"].lower() / f"{number}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(row, indent=4))
    return root


def test_math_tree_becomes_verl_rows_with_the_last_boxed_answer(tmp_path, capsys):
    assert data("math", "--local_dir", tmp_path / "out", "--input", write_math_tree(tmp_path / "MATH")) == 0
    train = read(tmp_path / "out" / "train.parquet")
    # sorted paths: train/algebra/1.json before train/prealgebra/0.json
    assert [row["reward_model"]["ground_truth"] for row in train] == ["3", "\\frac{1}{2}"]
    assert train[1] == {
        "data_source": "DigitalLearningGmbH/MATH-lighteval",
        "prompt": [{"role": "user", "content": "What is $\\frac{1}{4} + \\frac{1}{4}$?" + MATH_SUFFIX}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "\\frac{1}{2}"},
        "extra_info": {"split": "train", "index": 1},
        "level": "Level 1", "type": "Prealgebra",  # raw columns verl's .map keeps
    }
    assert [row["reward_model"]["ground_truth"] for row in read(tmp_path / "out" / "test.parquet")] == ["4"]
    assert "dropped 1 of 2 test rows" in capsys.readouterr().err


def test_math_reads_the_lighteval_parquet_layout(tmp_path):
    """A downloaded DigitalLearningGmbH/MATH-lighteval holds its default config in data/ and one config per subject
    (algebra/, ...) with the same problems again: only data/ is read, as verl's load_dataset reads the default."""
    write_parquet(tmp_path / "lighteval" / "data" / "train-00000-of-00001.parquet", MATH_TRAIN)
    write_parquet(tmp_path / "lighteval" / "data" / "test-00000-of-00001.parquet", MATH_TEST[:1])
    write_parquet(tmp_path / "lighteval" / "algebra" / "train-00000-of-00001.parquet", MATH_TRAIN[:1])
    write_parquet(tmp_path / "lighteval" / "algebra" / "test-00000-of-00001.parquet", MATH_TEST[:1])
    assert data("math", "--local_dir", tmp_path / "out", "--input", tmp_path / "lighteval") == 0
    assert len(read(tmp_path / "out" / "test.parquet")) == 1
    assert [r["reward_model"]["ground_truth"] for r in read(tmp_path / "out" / "train.parquet")] == ["\\frac{1}{2}", "3"]


# --------------------------------------------------------------------------------- countdown
BASE_PROMPT_OF_3_5_TO_8 = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant "
    "first thinks about the reasoning process in the mind and then provides the user with the answer.\n"
    "User: Using the numbers [3, 5], create an equation that equals 8. You can use basic arithmetic operations "
    "(+, -, *, /) and each number can only be used once. Show your work in <think> </think> tags. And return the "
    "final answer in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>.\n"
    "Assistant: Let me solve this step by step.\n<think>"
)


def countdown_copy(path: Path, count: int) -> Path:
    """A copy in Jiayi-Pan/Countdown-Tasks-3to4's format: row i has target 10 + i."""
    return write_parquet(path, [{"target": 10 + i, "nums": [10 + i, 3, 3]} for i in range(count)])


def test_countdown_copy_is_cut_into_train_then_test_with_tinyzero_prompts(tmp_path):
    rows = [{"target": 8, "nums": [3, 5]}] + [{"target": 10 + i, "nums": [10 + i, 3, 3]} for i in range(10)]
    write_parquet(tmp_path / "cd" / "data" / "train-00000-of-00001.parquet", rows)  # the hub layout
    assert data("countdown", "--local_dir", tmp_path / "out", "--input", tmp_path / "cd", "--num_train", "6", "--num_test", "3") == 0
    train, test = read(tmp_path / "out" / "train.parquet"), read(tmp_path / "out" / "test.parquet")
    assert train[0] == {
        "target": 8, "nums": [3, 5],  # the dataset's columns, which TinyZero's datasets.map keeps
        "data_source": "countdown",
        "prompt": [{"role": "user", "content": BASE_PROMPT_OF_3_5_TO_8}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": {"target": 8, "numbers": [3, 5]}},
        "extra_info": {"split": "train", "index": 0},
    }
    assert [r["reward_model"]["ground_truth"]["target"] for r in train] == [8, 10, 11, 12, 13, 14]
    assert [r["reward_model"]["ground_truth"]["target"] for r in test] == [15, 16, 17]
    assert [r["extra_info"]["index"] for r in test] == [0, 1, 2]


def test_countdown_input_mixing_a_split_and_an_unsplit_file_is_refused(tmp_path, capsys):
    train = countdown_copy(tmp_path / "train.parquet", 10)
    assert data("countdown", "--local_dir", tmp_path / "out", "--input", train, countdown_copy(tmp_path / "more.parquet", 10)) == 2
    assert "found splits train, unsplit" in capsys.readouterr().err


def test_countdown_copy_smaller_than_asked_keeps_num_test_rows_for_test(tmp_path):
    countdown_copy(tmp_path / "countdown.parquet", 10)
    assert data("countdown", "--local_dir", tmp_path / "out", "--input", tmp_path / "countdown.parquet", "--num_test", "3") == 0
    assert [r["reward_model"]["ground_truth"]["target"] for r in read(tmp_path / "out" / "test.parquet")] == [17, 18, 19]
    assert len(read(tmp_path / "out" / "train.parquet")) == 7


def test_countdown_chat_template_is_the_request_alone(tmp_path):
    write_parquet(tmp_path / "countdown.parquet", [{"target": 8, "nums": [3, 5]}, {"target": 2, "nums": [1, 1]}])
    assert data("countdown", "--local_dir", tmp_path / "out", "--input", tmp_path / "countdown.parquet",
                "--num_test", "1", "--template", "chat") == 0
    (row,) = read(tmp_path / "out" / "train.parquet")
    assert row["prompt"] == [{"role": "user", "content": BASE_PROMPT_OF_3_5_TO_8.split("User: ")[1].split("\nAssistant:")[0]}]


def test_countdown_takes_tinyzeros_options_and_its_qwen_instruct_template(tmp_path):
    write_parquet(tmp_path / "countdown.parquet", [{"target": 8, "nums": [3, 5]}, {"target": 2, "nums": [1, 1]}])
    assert data("countdown", "--local_dir", tmp_path / "out", "--input", tmp_path / "countdown.parquet",
                "--train_size", "1", "--test_size", "1", "--template_type", "qwen-instruct") == 0
    (row,) = read(tmp_path / "out" / "train.parquet")
    request = BASE_PROMPT_OF_3_5_TO_8.split("User: ")[1].split("\nAssistant:")[0]
    assert row["prompt"][0]["content"] == (
        "<|im_start|>system\nYou are a helpful assistant. You first thinks about the reasoning process in the mind and "
        f"then provides the user with the answer.<|im_end|>\n<|im_start|>user\n {request}<|im_end|>\n"
        "<|im_start|>assistant\nLet me solve this step by step.\n<think>")
    assert [r["target"] for r in read(tmp_path / "out" / "test.parquet")] == [2]


def generate(out: Path, *options: str) -> tuple[list[dict], list[dict]]:
    assert data("countdown", "--generate", "--local_dir", out, *options) == 0
    return read(out / "train.parquet"), read(out / "test.parquet")


def test_generated_countdown_tasks_are_all_solved_by_their_expression(tmp_path):
    train, test = generate(tmp_path / "out", "--num_train", "300", "--num_test", "100", "--seed", "7",
                           "--min_numbers", "2", "--max_numbers", "5", "--max_target", "50")
    assert (len(train), len(test)) == (300, 100)
    for row in train + test:
        truth, expression = row["reward_model"]["ground_truth"], row["extra_info"]["expression"]
        assert 2 <= len(truth["numbers"]) <= 5 and all(1 <= n <= 99 for n in truth["numbers"])
        assert 1 <= truth["target"] <= 50
        assert uses_numbers_exactly(expression, truth["numbers"])
        assert evaluate_equation(expression) == truth["target"]
        assert countdown_score(f"</think> <answer>{expression}</answer>", truth) == 1.0
    assert {len(row["reward_model"]["ground_truth"]["numbers"]) for row in train} == {2, 3, 4, 5}


def test_generation_is_deterministic_in_the_seed_and_test_never_repeats_train(tmp_path):
    first = generate(tmp_path / "a", "--num_train", "200", "--num_test", "50", "--seed", "3")
    assert generate(tmp_path / "b", "--num_train", "200", "--num_test", "50", "--seed", "3") == first
    other = generate(tmp_path / "c", "--num_train", "200", "--num_test", "50", "--seed", "4")
    assert other[0] != first[0]

    def tasks(rows):
        return {(r["reward_model"]["ground_truth"]["target"], tuple(sorted(r["reward_model"]["ground_truth"]["numbers"]))) for r in rows}

    train, test = first
    assert len(tasks(train)) == 200 and len(tasks(test)) == 50 and not tasks(train) & tasks(test)
    # more test tasks do not change the train split
    assert generate(tmp_path / "d", "--num_train", "200", "--num_test", "80", "--seed", "3")[0] == train


def test_impossible_generation_settings_are_user_errors(tmp_path, capsys):
    assert data("countdown", "--generate", "--local_dir", tmp_path / "out", "--min_numbers", "5", "--max_numbers", "4") == 2
    assert "need 2 <= min_numbers <= max_numbers" in capsys.readouterr().err
    assert data("countdown", "--generate", "--local_dir", tmp_path / "out", "--input", tmp_path / "x.parquet") == 2
    assert "pass one of the two" in capsys.readouterr().err
    assert data("countdown", "--local_dir", tmp_path / "out", "--seed", "3", "--max_target", "50") == 2  # no --generate
    assert "--seed --max_target: the generation options only apply with --generate" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_exhausting_the_distinct_tasks_is_a_clear_error():
    # Two numbers reaching 1 with positive intermediate results: n / n (99 tasks) and (n + 1) - n (98 tasks).
    with pytest.raises(DataError, match="Could only generate 197 distinct countdown tasks of the 198 asked for"):
        countdown.generate_tasks(190, 8, seed=0, min_numbers=2, max_numbers=2, max_target=1)


# -------------------------------------------------------------- what the trainer and scorers see
def test_every_written_row_loads_and_its_ground_truth_scores_one(tmp_path, tokenizer, data_config):
    write_jsonl(tmp_path / "gsm8k" / "train.jsonl", GSM8K_TRAIN)
    write_jsonl(tmp_path / "gsm8k" / "test.jsonl", GSM8K_TEST)
    assert data("gsm8k", "--local_dir", tmp_path / "out_gsm8k", "--input", tmp_path / "gsm8k") == 0
    assert data("math", "--local_dir", tmp_path / "out_math", "--input", write_math_tree(tmp_path / "MATH")) == 0
    generate(tmp_path / "out_countdown", "--num_train", "20", "--num_test", "5")

    def perfect(data_source: str, truth, extra_info: dict) -> str:
        if data_source == "openai/gsm8k":
            return f"Adding it up step by step.\n#### {truth}"
        if data_source == "countdown":
            return f"I try a few.</think> <answer>{extra_info['expression']}</answer>"
        return f"So the answer is $\\boxed{{{truth}}}$."

    for name in ("gsm8k", "math", "countdown"):
        files = [tmp_path / f"out_{name}" / "train.parquet", tmp_path / f"out_{name}" / "test.parquet"]
        dataset = create_rl_dataset([str(f) for f in files], data_config(max_prompt_length=512), tokenizer)
        assert len(dataset) == sum(len(read(f)) for f in files)
        for item in (dataset[i] for i in range(len(dataset))):
            truth = item["reward_model"]["ground_truth"]
            assert default_compute_score(item["data_source"], perfect(item["data_source"], truth, item["extra_info"]),
                                         truth, item["extra_info"]) == 1.0
    # and a wrong answer does not score
    assert default_compute_score("openai/gsm8k", "#### 73", "72") == 0.0


def test_generated_countdown_trains_one_step(tmp_path, tiny_model_path):
    from reinforge.config import load_config
    from reinforge.trainer.main import run

    generate(tmp_path / "data", "--num_train", "8", "--num_test", "4", "--template", "chat")
    run_dir = tmp_path / "run"
    config, keys = load_config([
        f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={tmp_path / 'data' / 'train.parquet'}",
        f"data.val_files={tmp_path / 'data' / 'test.parquet'}", f"trainer.default_local_dir={run_dir}",
        "data.train_batch_size=2", "data.max_prompt_length=256", "data.max_response_length=4", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "trainer.total_training_steps=1", "trainer.val_before_train=false", "trainer.test_freq=-1", "algorithm.adv_estimator=grpo",
    ])
    run(config, keys)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "timing_s/step" in r] == [1]


def test_geo3k_rows_keep_their_diagrams_and_each_image_gets_its_place(tmp_path, tiny_vl_model_path, brightness_rows):
    from PIL import Image
    from transformers import AutoTokenizer

    from reinforge.config.data_schema import DataConfig
    from reinforge.environment.dataset import RLDataset
    from reinforge.training.vision import load_processor

    diagrams = [row["images"] for row in brightness_rows(3, seed=2)]
    raw = tmp_path / "geometry3k" / "data"
    raw.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([
        {"images": diagrams[0], "problem": "<image>Find x.", "answer": "3"},
        {"images": diagrams[1], "problem": "Find the area.", "answer": "12\\sqrt{2}"},  # no <image>: one is put first
    ]), raw / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist([{"images": diagrams[2], "problem": "<image>Find y.", "answer": "60"}]),
                   raw / "test-00000-of-00001.parquet")
    assert data("geo3k", "--input", tmp_path / "geometry3k", "--local_dir", tmp_path / "out") == 0
    train = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [row["prompt"][0]["content"].split(" You FIRST")[0] for row in train] == ["<image>Find x.", "<image>Find the area."]
    assert train[1]["images"] == diagrams[1] and train[1]["data_source"] == "hiyouga/geometry3k"
    assert train[1]["reward_model"] == {"style": "rule", "ground_truth": "12\\sqrt{2}"}
    assert train[0]["extra_info"] == {"split": "train", "index": 0, "answer": "3", "question": "<image>Find x."}
    # a PIL image, as the `datasets` library gives them, is stored as PNG bytes
    from reinforge.environment.preprocess.geo3k import stored_image

    stored = stored_image(Image.new("RGB", (30, 20)))
    assert stored["path"] is None and Image.open(io.BytesIO(stored["bytes"])).size == (30, 20)
    # the files load with a vision-language model's processor, and the built-in scorer scores them as verl's does
    tokenizer = AutoTokenizer.from_pretrained(tiny_vl_model_path)
    dataset = RLDataset(str(tmp_path / "out" / "train.parquet"), tokenizer, DataConfig(max_prompt_length=512),
                        load_processor(str(tiny_vl_model_path), tokenizer))
    assert dataset.has_images and len(dataset) == 2
    scores = [default_compute_score("hiyouga/geometry3k", answer, "12\\sqrt{2}") for answer in (
        "<think>area</think> \\boxed{12\\sqrt{2}}", "\\boxed{12\\sqrt2}", "<think>a</think> \\boxed{12}", "12")]
    assert scores == [1.0, 0.9, 0.1, 0.0]
