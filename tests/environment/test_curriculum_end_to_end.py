"""Training with the learnability curriculum and a data generator: both are fed after each step and resume exactly."""

from __future__ import annotations

import json

import torch

from reinforge.config import load_config
from reinforge.environment.tasks import write_task_files
from reinforge.trainer.main import run

# 0 or 1 by the response text, so that prompts get different success rates and the curriculum moves
COIN_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(sum(map(ord, solution_str)) % 2)
"""

# one more add-one question after every step, in the task's own format
ADD_ONE_GENERATOR = """
from reinforge.environment.datagen import AbstractDataGenerator


class MoreQuestions(AbstractDataGenerator):
    def generate(self, dataset):
        digits = f"{9000 + len(dataset):04d}"
        answer = "".join(str((int(d) + 1) % 10) for d in digits)
        return [{"data_source": "reinforge/add_one", "prompt": [{"role": "user", "content": f"Add 1: {digits}"}],
                 "reward_model": {"ground_truth": answer, "style": "rule"}}]
"""


def test_curriculum_and_generated_rows_resume_exactly(tiny_model_path, tmp_path):
    (tmp_path / "reward.py").write_text(COIN_REWARD)
    (tmp_path / "generator.py").write_text(ADD_ONE_GENERATOR)
    train, _ = write_task_files()

    def train_run(run_dir, steps: int) -> None:
        config, keys = load_config([
            f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={train}", f"trainer.default_local_dir={run_dir}",
            f"custom_reward_function.path={tmp_path / 'reward.py'}", "data.sampler.class_path=reinforge.environment.sampler",
            "data.sampler.class_name=LearnabilitySampler", f"data.datagen.path={tmp_path / 'generator.py'}",
            "data.datagen.name=MoreQuestions", "data.max_samples=6", "data.train_batch_size=2", "data.max_prompt_length=48",
            "data.max_response_length=3", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false", "algorithm.adv_estimator=grpo",
            "trainer.total_epochs=2", f"trainer.total_training_steps={steps}", "trainer.save_freq=2", "trainer.test_freq=-1",
        ])
        run(config, keys)

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train_run(straight, 4)
    train_run(resumed, 2)
    train_run(resumed, 4)  # resumes from step 2

    final = [torch.load(folder / "global_step_4" / "data.pt") for folder in (straight, resumed)]
    assert json.loads(final[0]["dataset"]["rows"])[3]["prompt"][0]["content"] == "Add 1: 9009"  # 6 rows + 3 generated
    weights = final[0]["sampler"]["weights"]
    assert len(weights) == 10 and len(set(weights.tolist())) > 1  # the rewards moved the weights
    assert final[0]["dataset"] == final[1]["dataset"]
    assert torch.equal(final[0]["sampler"]["weights"], final[1]["sampler"]["weights"])
    assert final[0]["sampler"]["pending"] == final[1]["sampler"]["pending"]
    models = [torch.load(folder / "global_step_4" / "actor" / "model_world_size_1_rank_0.pt") for folder in (straight, resumed)]
    assert all(torch.equal(models[0][k], models[1][k]) for k in models[0])
