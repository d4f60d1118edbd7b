"""On-policy distillation on 2 Ray workers (FSDP2, gloo) trains like 1 process: each rank asks its teacher copy about
its share of the rows, and the loss, its extremes over all ranks' tokens and every other metric agree."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

from reinforge.environment.tasks import write_task_files  # noqa: E402
from reinforge.training.tiny_model import TinyModelSpec, ensure_tiny_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer"))
from resume import is_wall_clock  # noqa: E402
from test_distillation import with_tokenizer_of  # noqa: E402

# averaged over each rank's micro-batches, which hold other rows than one process's (as actor/pg_clipfrac)
PER_RANK = ("global_seqlen/", "actor/pg_clipfrac", "actor/ppo_kl", "actor/distillation/student_mass", "actor/distillation/teacher_mass",
            "actor/distillation/overlap_")
EXTREMES = ("actor/distillation/student_mass_min", "actor/distillation/student_mass_max", "actor/distillation/teacher_mass_min",
            "actor/distillation/teacher_mass_max")


def test_distillation_on_two_ranks_trains_like_one_process(tiny_model_path, cache_dir, tmp_path):
    teacher = with_tokenizer_of(ensure_tiny_model(TinyModelSpec(seed=1), root=cache_dir / "models"), tiny_model_path,
                                tmp_path / "teacher")
    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return sum(map(ord, solution_str)) % 7 / 7\n")
    train, _ = write_task_files()
    common = [f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={train}", f"custom_reward_function.path={reward}",
              "data.max_samples=16", "data.train_batch_size=2", "data.max_prompt_length=48", "data.max_response_length=6",
              "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.optim.lr=1e-3",
              "actor_rollout_ref.actor.optim.eps=1e-6", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
              "algorithm.adv_estimator=grpo", "trainer.total_training_steps=2", "trainer.val_before_train=false",
              "trainer.test_freq=-1", "trainer.device=cpu", "trainer.logger=[console]", "distillation.enabled=true",
              f"distillation.teacher_models.teacher_model.model_path={teacher}",
              "distillation.distillation_loss.loss_mode=forward_kl_topk", "distillation.distillation_loss.topk=8"]

    def run(workers: int) -> dict[int, dict]:
        run_dir = tmp_path / f"ranks{workers}"
        done = subprocess.run([sys.executable, "-m", "reinforge", "train", *common, f"trainer.n_gpus_per_node={workers}",
                               f"trainer.default_local_dir={run_dir}"], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{workers} ranks:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: {k: v for k, v in r.items() if not is_wall_clock(k) and not k.startswith(PER_RANK) or k in EXTREMES}
                for r in records}

    one, two = run(1), run(2)
    assert one.keys() == two.keys() == {1, 2}
    for step, want in one.items():
        assert {"actor/distillation/loss", "actor/distillation/loss_max", *EXTREMES} <= set(want)
        assert two[step].keys() == want.keys(), sorted(two[step].keys() ^ want.keys())
        for key, value in want.items():
            if isinstance(value, float):
                assert math.isclose(two[step][key], value, rel_tol=1e-4, abs_tol=1e-5), (step, key, two[step][key], value)
