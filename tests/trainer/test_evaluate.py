"""`reinforge eval` (verl's main_eval): test_score/<data_source> as the mean over rows of each row's mean score."""

from __future__ import annotations

import ast
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reinforge.cli import main

PARITY = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return len(solution_str) % 2\n"


def printed_metrics(out: str) -> dict[str, float]:
    """The dict line eval prints last, as verl's main_eval prints it."""
    return ast.literal_eval(out.strip().splitlines()[-1])


def responses_file(tmp_path, rows):
    path = tmp_path / "responses.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_generate_then_eval_gives_the_mean_over_rows_of_each_rows_mean(tiny_model_path, tmp_path, capsys):
    rows = [{"data_source": source, "prompt": [{"role": "user", "content": f"Add one to {i}"}],
             "reward_model": {"ground_truth": str(i)}} for i, source in enumerate(["a", "b", "a", "a", "b"])]
    prompts = responses_file(tmp_path, rows)
    output = tmp_path / "generated.parquet"
    assert main(["generate", f"model.path={tiny_model_path}", f"data.path={prompts}", f"data.output_path={output}",
                 "data.n_samples=3", "rollout.response_length=9"]) == 0
    (tmp_path / "parity.py").write_text(PARITY)
    capsys.readouterr()
    assert main(["eval", f"data.path={output}", "data.response_key=responses", "data.data_source_key=data_source",
                 "data.reward_model_key=reward_model", f"custom_reward_function.path={tmp_path / 'parity.py'}",
                 "custom_reward_function.name=compute_score"]) == 0

    written = pq.read_table(output)
    expected: dict[str, list[float]] = {}
    for source, responses in zip(written.column("data_source").to_pylist(), written.column("responses").to_pylist(), strict=True):
        expected.setdefault(f"test_score/{source}", []).append(sum(len(r) % 2 for r in responses) / len(responses))
    metrics = printed_metrics(capsys.readouterr().out)
    assert metrics == pytest.approx({key: sum(means) / len(means) for key, means in expected.items()})


def test_rows_count_once_whatever_their_number_of_responses_and_built_in_scorers_by_data_source(tmp_path, capsys):
    rows = [
        {"data_source": "reinforge/add_one", "responses": ["2345", "0000", "0000", "0000"], "reward_model": {"ground_truth": "2345"}},
        {"data_source": "reinforge/add_one", "responses": ["9999"], "reward_model": {"ground_truth": "9999"}},
        {"data_source": "countdown", "responses": ["<answer>3 + 4</answer>"],
         "reward_model": {"ground_truth": {"target": 7, "numbers": [3, 4]}}},
    ]
    path = tmp_path / "responses.jsonl"  # JSON lines: the ground truths' types differ, which one parquet column cannot hold
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["eval", f"data.path={path}"]) == 0
    metrics = printed_metrics(capsys.readouterr().out)
    assert metrics["test_score/reinforge/add_one"] == pytest.approx((0.25 + 1.0) / 2)  # not 2/5 over responses
    assert metrics["test_score/countdown"] == 1.0 and len(metrics) == 2


def test_a_failing_call_scores_zero_and_the_rest_are_scored(tmp_path, capsys):
    (tmp_path / "picky.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth):\n"
        "    if solution_str == 'bad':\n        raise ValueError('cannot parse')\n    return 1.0\n")
    path = responses_file(tmp_path, [{"data_source": "d", "responses": ["ok", "bad"], "reward_model": {"ground_truth": ""}}])
    assert main(["eval", f"data.path={path}", f"custom_reward_function.path={tmp_path / 'picky.py'}"]) == 0
    captured = capsys.readouterr()
    assert printed_metrics(captured.out) == {"test_score/d": 0.5}
    assert "1 call(s) failed and scored 0" in captured.out and "ValueError: cannot parse" in captured.err
    assert "Later ones are only counted in the count of failed calls printed at the end" in captured.err  # no metrics here

    (tmp_path / "broken.py").write_text("def compute_score(data_source, solution_str, ground_truth):\n    return 'high'\n")
    assert main(["eval", f"data.path={path}", f"custom_reward_function.path={tmp_path / 'broken.py'}"]) == 2
    err = capsys.readouterr().err  # every call failed: the function is broken, and a score of 0 would be no result
    assert (f"reinforge: error: the reward function compute_score ({tmp_path / 'broken.py'}) failed on all 2 responses of "
            f"{path} (2 errors, 0 timeouts; the first is printed above), so every score would be 0") in err


@pytest.mark.parametrize("override, message", [
    ("data.response_key=answers", "no column 'answers' (data.response_key); its columns are data_source, responses, reward_model"),
    ("data.reward_model_key=rm", "no column 'rm' (data.reward_model_key)"),
    ("data.respons_key=x", "unknown config key 'data.respons_key'; did you mean 'data.response_key'?"),
    ("custom_reward_function.path=absent.py", "custom_reward_function.path"),
])
def test_user_errors_name_the_key_or_column(override, message, tmp_path, capsys):
    path = responses_file(tmp_path, [{"data_source": "d", "responses": ["x"], "reward_model": {"ground_truth": "x"}}])
    assert main(["eval", f"data.path={path}", override]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_file_and_rows_without_ground_truth_are_named(tmp_path, capsys):
    assert main(["eval", f"data.path={tmp_path / 'nope.parquet'}"]) == 2
    assert f"data.path={tmp_path / 'nope.parquet'}" in capsys.readouterr().err
    path = responses_file(tmp_path, [{"data_source": "d", "responses": ["x"], "reward_model": {"style": "rule"}}])
    assert main(["eval", f"data.path={path}"]) == 2
    assert "row 0, column 'reward_model' (data.reward_model_key): expected a dict with a 'ground_truth' key" in capsys.readouterr().err
    (tmp_path / "empty.jsonl").write_text("")  # a generation step that wrote nothing is not an evaluation that passed
    assert main(["eval", f"data.path={tmp_path / 'empty.jsonl'}"]) == 2
    assert f"data.path={tmp_path / 'empty.jsonl'}: the file holds no rows, so there is nothing to score" in capsys.readouterr().err


def test_dry_run_and_verl_ray_keys(capsys):
    assert main(["eval", "--dry-run", "ray_init.num_cpus=4", "+ray_kwargs.ray_init.num_cpus=2"]) == 0
    out = capsys.readouterr().out
    assert "response_key: responses" in out and "name: compute_score" in out
    assert "- ray_init.num_cpus: no Ray" in out and "- ray_kwargs.ray_init.num_cpus: no Ray" in out


def test_the_function_is_called_by_position_under_verl_09s_reward_keys(tmp_path, capsys):
    """verl's main_eval calls fn(data_source, response, ground_truth) by position, so any parameter names work; verl 0.9
    reads the file from +reward.custom_reward_function.*, which sets the same keys here."""
    (tmp_path / "named.py").write_text("def judge(source, text, answer, **kwargs):\n"
                                       "    return float(text == answer) + kwargs.get('bonus', 0)\n")
    path = responses_file(tmp_path, [{"data_source": "d", "responses": ["7", "8", "7"], "reward_model": {"ground_truth": "7"}},
                                     {"data_source": "d", "responses": ["1"], "reward_model": {"ground_truth": "2"}}])
    assert main(["eval", f"data.path={path}", f"+reward.custom_reward_function.path={tmp_path / 'named.py'}",
                 "+reward.custom_reward_function.name=judge", "+reward.custom_reward_function.reward_kwargs.bonus=1"]) == 0
    assert printed_metrics(capsys.readouterr().out) == pytest.approx({"test_score/d": (2 / 3 + 1 + 0 + 1) / 2})
    (tmp_path / "short.py").write_text("def compute_score(source, text):\n    return 1.0\n")
    assert main(["eval", f"data.path={path}", f"custom_reward_function.path={tmp_path / 'short.py'}"]) == 2
    assert "calls it as verl's main_eval does, fn(data_source, response, ground_truth)" in capsys.readouterr().err
