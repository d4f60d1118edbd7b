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
        f"data.train_files={tmp_path / 'unused.parquet'}", f"data.custom_cls.path={tmp_path / 'my_dataset.py'}",
        "data.custom_cls.name=PalindromeTask", f"custom_reward_function.path={tmp_path / 'my_reward.py'}",
        "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=2",
        "data.max_response_length=4", "trainer.total_training_steps=1", f"trainer.default_local_dir={run_dir}",
    ])
    run(config, keys)
    (record,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert record["step"] == 1 and "reward/ends_with_answer/mean" in record
