"""`reinforge train` on data in OpenRLHF's layout (JSONL rows of a string `input` and an `answer`; `data.prompt_key`,
`data.label_key`, `data.apply_chat_template` as OpenRLHF's --input_key, --label_key, --apply_chat_template) with a
reward function file written for OpenRLHF (`reward_func(queries, prompts, labels)`, found without naming it): each
dumped response's score is what the function gives it, computed here again from the dump."""

import json
import re

import pytest

from reinforge.environment.data_files import read_rows
from reinforge.errors import DataError, RewardError

REWARD_FUNC = r"""
import re

import torch

CALLS = []


def digits_right(response, label):
    return sum(a == b for a, b in zip(response, label)) / len(label)


def reward_func(queries, prompts, labels):
    rewards, prefixed = [], []
    for query, prompt, label in zip(queries, prompts, labels):
        prefixed.append(float(query.startswith(prompt)))
        response = re.sub(r"<\|[^|]*\|>", "", query[len(prompt):])  # the response, its EOS's text taken out
        rewards.append(digits_right(response, label))
    return {"rewards": torch.tensor(rewards), "scores": torch.tensor([r > 0.5 for r in rewards], dtype=torch.float),
            "extra_logs": {"prefixed": torch.tensor(prefixed), "calls": torch.tensor([float(len(queries))])}}
"""


@pytest.fixture
def openrlhf_files(task_files, tmp_path):
    """The built-in task's files rewritten in OpenRLHF's layout: JSONL, the question as a string, the answer."""
    paths = []
    for source, name in zip(task_files, ("train", "val"), strict=True):
        rows, _ = read_rows(str(source))
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"input": r["prompt"][0]["content"], "answer": r["reward_model"]["ground_truth"]})
                                + "\n" for r in rows))
        paths.append(path)
    return paths


def test_an_openrlhf_reward_function_scores_openrlhf_data(run_steps, openrlhf_files, tmp_path, capsys):
    reward = tmp_path / "reward_func.py"
    reward.write_text(REWARD_FUNC)
    rollouts = tmp_path / "rollouts"
    train, val = openrlhf_files
    steps = run_steps(f"data.train_files={train}", f"data.val_files={val}", f"custom_reward_function.path={reward}",
                      "data.prompt_key=input", "data.label_key=answer", "data.apply_chat_template=true",
                      f"trainer.rollout_data_dir={rollouts}", "data.max_response_length=6",
                      "actor_rollout_ref.rollout.temperature=3.0")
    assert "defines no compute_score (verl's name, the default); taking reward_func" in capsys.readouterr().out
    answers = {r["input"]: r["answer"] for r in read_rows(str(train))[0]}
    for step, metrics in steps.items():
        assert metrics["reward/errors"] == 0
        assert metrics["reward/prefixed/mean"] == 1.0 and metrics["reward/calls/mean"] == 1.0  # one query a call
        records = [json.loads(line) for line in (rollouts / f"{step}.jsonl").read_text().splitlines()]
        assert len(records) == 4
        for record in records:
            answer = answers[record["input"].split("user\n")[1].split("\n")[0]]  # the chat template's user turn
            assert record["gts"] == answer
            right = sum(a == b for a, b in zip(record["output"], answer, strict=False)) / len(answer)
            assert record["score"] == pytest.approx(right, abs=1e-6)
            assert record["scores"] == float(right > 0.5)
        assert metrics["critic/score/mean"] == pytest.approx(sum(r["score"] for r in records) / 4, abs=1e-6)


def test_input_template_shapes_string_prompts_as_openrlhf_does(run_steps, openrlhf_files, tmp_path):
    reward = tmp_path / "reward_func.py"
    reward.write_text(REWARD_FUNC)
    rollouts = tmp_path / "rollouts"
    train, val = openrlhf_files
    steps = run_steps(f"data.train_files={train}", f"data.val_files={val}", f"custom_reward_function.path={reward}",
                      "data.prompt_key=input", "data.label_key=answer", "data.input_template='Q: {}\nA: '",
                      f"trainer.rollout_data_dir={rollouts}", "trainer.total_training_steps=1")
    assert sorted(steps) == [1] and steps[1]["reward/prefixed/mean"] == 1.0
    records = [json.loads(line) for line in (rollouts / "1.jsonl").read_text().splitlines()]
    assert all(re.fullmatch(r"Q: Add 1: \d+\nA: ", r["input"]) for r in records), records[0]["input"]


def test_a_label_column_the_data_lacks_stops_the_run_before_training(run_steps, openrlhf_files, tmp_path):
    reward = tmp_path / "reward_func.py"
    reward.write_text(REWARD_FUNC)
    train, val = openrlhf_files
    with pytest.raises(DataError, match=rf"^{train}: row \d+: no column 'label' \(data.label_key"):
        run_steps(f"data.train_files={train}", f"data.val_files={val}", f"custom_reward_function.path={reward}",
                  "data.prompt_key=input", "data.label_key=label")


def test_a_function_that_cannot_take_three_arguments_is_named_before_training(run_steps, openrlhf_files, tmp_path):
    reward = tmp_path / "reward_func.py"
    reward.write_text("def reward_func(queries, prompts):\n    return [0.0] * len(queries)\n")
    train, val = openrlhf_files
    with pytest.raises(RewardError, match=r"reward_func\(queries, prompts\) in .*reward_func.py cannot be called as "
                                          r"OpenRLHF calls its reward function"):
        run_steps(f"data.train_files={train}", f"data.val_files={val}", f"custom_reward_function.path={reward}",
                  "data.prompt_key=input", "data.label_key=answer")


def test_a_run_scored_by_openrlhfs_reward_server_on_verl_data(run_steps, tmp_path):
    """verl's data (reward_model.ground_truth as the labels) scored over HTTP by a server as OpenRLHF's serve_rm."""
    from tests.reward.test_openrlhf_rewards import _RewardServer

    server = _RewardServer()
    rollouts = tmp_path / "rollouts"
    try:
        steps = run_steps(f"custom_reward_function.path={server.url}", f"trainer.rollout_data_dir={rollouts}",
                          "trainer.total_training_steps=2")
    finally:
        server.http.shutdown()
    assert sorted(steps) == [1, 2] and all(metrics["reward/errors"] == 0 for metrics in steps.values())
    labels = {body["labels"][0] for _, body in server.requests}
    records = [json.loads(line) for step in (1, 2) for line in (rollouts / f"{step}.jsonl").read_text().splitlines()]
    assert {r["gts"] for r in records} <= labels  # each response's ground truth was sent as its label
    assert all(r["score"] == r["dummy_scores"] for r in records)
