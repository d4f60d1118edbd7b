"""`reinforge train` on data in TRL's layout (a chat `prompt` and a `solution` column, nothing of verl's schema) with
reward functions written for TRL's GRPOTrainer: each dumped response's score is what the functions give it, computed
here again from the dump, and trainer_state counts the steps done."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reinforge.environment.data_files import read_rows
from reinforge.errors import DataError

REWARDS = """
def digits_right(completions, solution, trainer_state, log_metric, **kwargs):
    log_metric("steps_done", trainer_state.global_step)
    log_metric("epochs_done", trainer_state.epoch)
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]  # string prompts: string completions
    return [sum(a == b for a, b in zip(t, s)) / len(s) for t, s in zip(texts, solution)]


def length_bonus(completion_ids, **kwargs):
    return [None if len(ids) < 2 else len(ids) / 10 for ids in completion_ids]
"""


@pytest.fixture
def trl_files(task_files, tmp_path):
    """The built-in task's files rewritten in TRL's layout."""
    paths = []
    for source, name in zip(task_files, ("train", "val"), strict=True):
        rows, _ = read_rows(str(source))
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.Table.from_pylist([{"prompt": r["prompt"], "solution": r["reward_model"]["ground_truth"]}
                                             for r in rows]), path)
        paths.append(path)
    return paths


def test_trl_reward_functions_score_trl_data(run_steps, trl_files, tmp_path):
    reward = tmp_path / "trl_rewards.py"
    reward.write_text(REWARDS)
    rollouts = tmp_path / "rollouts"
    train, val = trl_files
    steps = run_steps(f"data.train_files={train}", f"data.val_files={val}", f"custom_reward_function.path={reward}",
                      "custom_reward_function.name=[digits_right,length_bonus]", "custom_reward_function.reward_weights=[1,0.5]",
                      f"trainer.rollout_data_dir={rollouts}", "data.max_response_length=6",
                      "actor_rollout_ref.rollout.temperature=3.0")
    solutions = {r["prompt"][0]["content"]: r["solution"] for r in read_rows(str(train))[0]}
    for step, metrics in steps.items():
        assert metrics["reward/steps_done/mean"] == step - 1 and metrics["reward/errors"] == 0
        assert metrics["reward/epochs_done/mean"] == (step - 1) / 16  # 32 rows, 2 prompts a step: 16 steps an epoch
        records = [json.loads(line) for line in (rollouts / f"{step}.jsonl").read_text().splitlines()]
        assert len(records) == 4
        for record in records:
            solution = solutions[record["input"].split("user\n")[1].split("\n")[0]]
            right = sum(a == b for a, b in zip(record["output"], solution, strict=False)) / len(solution)
            assert record["digits_right"] == pytest.approx(right)
            expected = right + (0.0 if record["length_bonus"] is None else 0.5 * record["length_bonus"])
            assert record["score"] == pytest.approx(expected, abs=1e-6)
        assert metrics["critic/score/mean"] == pytest.approx(sum(r["score"] for r in records) / 4, abs=1e-6)


def test_a_column_a_trl_function_takes_that_the_data_lacks_stops_the_run_before_training(run_steps, trl_files, tmp_path):
    reward = tmp_path / "trl_rewards.py"
    reward.write_text("def graded(completions, answer, **kwargs):\n    return [0.0] * len(completions)\n")
    train, val = trl_files
    with pytest.raises(DataError, match=rf"^{train}: row \d+: no column 'answer', which the TRL reward function graded takes"):
        run_steps(f"data.train_files={train}", f"data.val_files={val}", f"custom_reward_function.path={reward}",
                  "custom_reward_function.name=graded")


def test_a_base_model_without_a_chat_template_trains_on_string_prompts_as_they_are(run_steps, trl_files, tiny_model_path,
                                                                                   tmp_path, capsys):
    """TRL's standard format: string prompts are the model's input text, so a tokenizer without a chat template will do."""
    import shutil

    base = tmp_path / "base_model"
    shutil.copytree(tiny_model_path, base)
    (base / "chat_template.jinja").unlink()
    paths = []
    for source in trl_files:
        rows, _ = read_rows(str(source))
        path = tmp_path / f"text_{source.name}"
        pq.write_table(pa.Table.from_pylist([{"prompt": r["prompt"][0]["content"] + " =", "solution": r["solution"]}
                                             for r in rows]), path)
        paths.append(path)
    reward = tmp_path / "trl_rewards.py"
    reward.write_text(REWARDS)
    rollouts = tmp_path / "rollouts"
    steps = run_steps(f"actor_rollout_ref.model.path={base}", f"data.train_files={paths[0]}", f"data.val_files={paths[1]}",
                      f"custom_reward_function.path={reward}", "custom_reward_function.name=digits_right",
                      f"trainer.rollout_data_dir={rollouts}", "trainer.total_training_steps=1",
                      "+data.apply_chat_template_kwargs.enable_thinking=false")
    assert sorted(steps) == [1]
    assert ("note: data.apply_chat_template_kwargs without effect: every prompt is a string, the model's input text as it "
            "is") in capsys.readouterr().out
    records = [json.loads(line) for line in (rollouts / "1.jsonl").read_text().splitlines()]
    assert all(r["input"].startswith("Add 1: ") and r["input"].endswith(" =") for r in records)  # no template around it


def test_training_and_validation_prompts_of_two_forms_are_refused_before_training(run_steps, trl_files, tmp_path):
    """A string validation prompt would be the model's raw input and its completions strings, where training has chat
    messages: TRL reward functions take one form per run."""
    rows, _ = read_rows(str(trl_files[1]))
    text_val = tmp_path / "text_val.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": r["prompt"][0]["content"], "solution": r["solution"]} for r in rows]),
                   text_val)
    reward = tmp_path / "trl_rewards.py"
    reward.write_text(REWARDS)
    with pytest.raises(DataError, match=rf"^{text_val}: row \d+, column 'prompt': the prompt is a string, but in "
                                        rf"{trl_files[0]} row \d+ it is chat messages"):
        run_steps(f"data.train_files={trl_files[0]}", f"data.val_files={text_val}", f"custom_reward_function.path={reward}",
                  "custom_reward_function.name=digits_right")
