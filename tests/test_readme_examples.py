"""The README's custom dataset and reward function, run exactly as printed there."""

import json
import re
from pathlib import Path

from reinforge.config import load_config
from reinforge.trainer.main import run

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def python_block(first_line: str) -> str:
    for block in re.findall(r"```python\n(.*?)```", README, re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"no README block starting with {first_line!r}")


def test_readme_custom_dataset_and_reward_train(tiny_model_path, tmp_path):
    (tmp_path / "my_dataset.py").write_text(python_block("# my_dataset.py"))
    (tmp_path / "my_reward.py").write_text(python_block("# my_reward.py"))
    run_dir = tmp_path / "run"
    config, keys = load_config([
        "algorithm.adv_estimator=grpo", f"actor_rollout_ref.model.path={tiny_model_path}",
        f"data.custom_cls.path={tmp_path / 'my_dataset.py'}",  # no data.train_files: the class reads none
        "data.custom_cls.name=PalindromeTask", f"custom_reward_function.path={tmp_path / 'my_reward.py'}",
        "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2",
        "data.max_response_length=4", "trainer.total_training_steps=1", f"trainer.default_local_dir={run_dir}",
    ])
    run(config, keys)
    (record,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert record["step"] == 1 and "reward/ends_with_answer/mean" in record


def bash_block(first_line: str) -> list[str]:
    """The commands of the README's bash block that starts with `first_line` (continuations joined)."""
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        if block.startswith(first_line):
            joined = block.replace("\\\n", " ")
            return [line.strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")]
    raise AssertionError(f"no README bash block starting with {first_line!r}")


def test_readme_dataset_to_run_commands(tiny_model_path, tmp_path, monkeypatch):
    """The README's two commands, as printed, on a small slice with the tiny model in place of Qwen."""
    import shlex

    from reinforge.cli import main

    monkeypatch.chdir(tmp_path)
    prepare, train = bash_block("# from a dataset to a run")
    assert prepare.startswith("reinforge data countdown --generate") and train.startswith("reinforge train")
    prepare = prepare.replace("--num_train 20000 --num_test 256", "--num_train 8 --num_test 4")
    train = train.replace("Qwen/Qwen2.5-0.5B-Instruct", str(tiny_model_path))
    small = ["data.max_response_length=4", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
             "actor_rollout_ref.actor.ppo_mini_batch_size=2", "trainer.total_training_steps=1", "trainer.default_local_dir=run"]
    assert main(shlex.split(prepare)[1:]) == 0
    assert main(shlex.split(train)[1:] + small) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("val-core/countdown/acc/mean@1" in r for r in records)
    assert [r["step"] for r in records if "timing_s/step" in r] == [1]
