"""LoRA on 2 Ray workers (FSDP2 shards holding frozen base weights beside trainable adapters; the hf engine's own
copy refreshed with the merged weights after each update) trains like 1 process: the same metrics at every step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytest.importorskip("peft")

from reinforge.environment.tasks import write_task_files  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_scale_out import REWARD, assert_same_metrics, records  # noqa: E402


def test_lora_on_two_workers_trains_like_one_process(tiny_model_path, tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    train, _ = write_task_files()
    common = [
        f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={train}", f"custom_reward_function.path={reward}",
        "data.max_samples=16", "data.train_batch_size=4", "data.max_prompt_length=48", "data.max_response_length=6",
        "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.eps=1e-6",  # eps: see test_scale_out.py
        "actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.1",
        "algorithm.adv_estimator=gae", "critic.model.lora_rank=4", "critic.optim.lr=1e-3",
        "trainer.total_training_steps=3", "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.device=cpu",
        "trainer.logger=[console]",
    ]
    runs = {}
    for workers in (1, 2):
        run_dir = tmp_path / f"w{workers}"
        done = subprocess.run([sys.executable, "-m", "reinforge", "train", *common, f"trainer.n_gpus_per_node={workers}",
                               f"trainer.default_local_dir={run_dir}"], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{workers} workers failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        assert "returned a view tensor" not in done.stdout + done.stderr  # FSDP2's warning about the critic's output
        runs[workers] = records(run_dir)
    assert sorted(runs[1]) == sorted(runs[2]) == [1, 2, 3]
    for step, want in runs[1].items():
        assert_same_metrics(runs[2][step], want, f"step {step}")
    # the engine generated with the policy it trained (the merged copy on 2 workers): no train/inference mismatch
    assert all(runs[2][s]["training/rollout_probs_diff_max"] < 1e-4 for s in (1, 2, 3))
    assert runs[1][3]["actor/kl_loss"] > 0 and runs[1][3]["critic/vf_loss"] > 0
