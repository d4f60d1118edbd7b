"""Exact resume: k steps, a stop, a resume and N-k steps equal N steps straight (tests/trainer/resume.py).

Three places to stop: in the middle of an epoch (with the adaptive KL controller in the reward and
a warmup + cosine LR schedule, so the scheduler and KL state matter); at an epoch boundary (verl's
known bug there resumes into a run that trains 0 more steps); just after a validation that samples
(val_kwargs.do_sample), so the engine's sampler state saved after validation matters. And PPO with
a critic, whose checkpoint is its own, and PF-PPO's seeded redraw of its batch; LoRA adapters on both (their whole
models saved, or with checkpoint.save_lora_only only what trains); and a bf16 engine, whose copy of the policy a resume
refreshes. SMALL_RUN serves 2 prompts a step; the training set is cut so that an epoch is a few steps.
"""

from unittest import mock

import pytest
import torch

from tests.trainer.resume import assert_resumes_exactly

CASES = {
    "mid_epoch": (
        ["data.max_samples=8", "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
         "algorithm.kl_ctrl.kl_coef=0.05", "algorithm.kl_ctrl.horizon=4", "algorithm.kl_ctrl.target_kl=0.001",
         "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine", "actor_rollout_ref.actor.optim.lr_warmup_steps=1"],
        3, 4,  # epoch 0 is steps 1-4
    ),
    "epoch_boundary": (["data.max_samples=4", "trainer.total_epochs=2"], 2, 4),  # epochs of 2 steps
    "after_validation": (
        ["data.max_samples=8", "trainer.test_freq=2", "trainer.val_before_train=true",
         "actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.rollout.val_kwargs.n=2"],
        2, 3,
    ),
    "ppo_critic": (["data.max_samples=8", "algorithm.adv_estimator=gae"], 2, 3),  # the critic's model, optimizer, scheduler
    # PF-PPO's redraw of each step's batch follows from the seed and the step, so a resumed step redraws the same rows
    "pf_ppo": (["data.max_samples=8", "algorithm.adv_estimator=gae", "algorithm.use_pf_ppo=true"], 2, 3),
    # LoRA on the actor (its reference: the policy with the adapters off) and the critic
    "lora": (["data.max_samples=8", "algorithm.adv_estimator=gae", "actor_rollout_ref.model.lora_rank=4",
              "critic.model.lora_rank=4", "actor_rollout_ref.actor.use_kl_loss=true"], 2, 3),
    # checkpoint.save_lora_only: the rank files hold the adapters and the critic's head; the base weights come from the model
    "lora_only": (["data.max_samples=8", "algorithm.adv_estimator=gae", "actor_rollout_ref.model.lora_rank=4",
                   "critic.model.lora_rank=4", "actor_rollout_ref.actor.checkpoint.save_lora_only=true",
                   "critic.checkpoint.save_lora_only=true"], 1, 2),
    # the hf engine's bf16 copy of the policy must get the checkpoint's weights, not the initial ones
    "bf16_engine_copy": (["data.max_samples=8", "actor_rollout_ref.rollout.dtype=bf16",
                          "algorithm.rollout_correction.rollout_is=token"], 1, 2),
}


def test_a_sampling_judge_resumes_exactly(small_run, tiny_model_path, tmp_path):
    """A generative reward model sampling its verdicts (temperature > 0) samples each with a seed derived from its row's,
    so the resumed run's verdicts, rewards and updates are the straight run's (it drew from the engine's own stream,
    which no checkpoint holds: the first resumed step scored 1.75 where the straight run scored 5.0)."""
    judge = ["custom_reward_function.path=null", "reward_model.reward_manager=batch", "reward_model.enable=true",
             f"reward_model.model.path={tiny_model_path}", "reward_model.judge.enable=true",
             "reward_model.judge.apply_chat_template=false", "reward_model.judge.max_score=9",
             r"reward_model.judge.score_pattern='(\d)'", "reward_model.judge.prompt_template='sun {response} 4 7 1 moon:'",
             "reward_model.judge.max_new_tokens=48", "reward_model.judge.temperature=0.3", "data.max_samples=8"]
    straight = assert_resumes_exactly([*small_run, *judge], tmp_path, stop_after=2, total=3)
    scores = [r["critic/score/mean"] for r in straight if "training/global_step" in r]
    assert len(set(scores)) > 1  # the verdicts vary: the judge samples


@pytest.mark.parametrize("case", list(CASES))
def test_stop_and_resume_equals_a_straight_run(case, small_run, tmp_path):
    extra, stop_after, total = CASES[case]
    straight = assert_resumes_exactly([*small_run, *extra], tmp_path, stop_after=stop_after, total=total)
    steps = {r["step"]: r for r in straight if "training/global_step" in r}
    if case == "mid_epoch":  # the state that this case is about changed during the run
        assert len({s["actor/lr"] for s in steps.values()}) == total
        assert len({s["actor/reward_kl_penalty_coeff"] for s in steps.values()}) > 1
    if case == "epoch_boundary":
        assert [s["training/epoch"] for s in steps.values()] == [0, 0, 1, 1]
    if case == "lora_only":
        for role, head in (("actor", set()), ("critic", {"base_model.model.score.weight", "base_model.model.score.bias"})):
            saved = torch.load(next(tmp_path.rglob(f"global_step_1/{role}/model_world_size_1_rank_0.pt")))
            assert {name for name in saved if ".lora_" not in name} == head, role
    if case == "ppo_critic":
        assert all("critic/vf_loss" in s for s in steps.values())
    if case == "after_validation":
        assert sorted(r["step"] for r in straight if "val-core/reinforge/add_one/acc/mean@2" in r) == [0, 2, 3]


class _Killed(BaseException):
    """Stands in for a SIGKILL: nothing of the trainer's handles it."""


def test_a_kill_just_after_a_checkpoint_is_published_loses_no_step(small_run, tmp_path):
    """A kill between publishing global_step_2 and logging step 2 (here: in the step record's rewrite with the save's
    timing) must not lose step 2: the record written with the checkpoint is logged on resuming."""
    import reinforge.trainer.ppo_trainer as ppo_trainer
    from tests.trainer.resume import _train, is_wall_clock, records

    overrides = [*small_run, "data.max_samples=8", "trainer.save_freq=1"]
    _train(overrides, tmp_path / "straight", 3)
    original = ppo_trainer.save_step_record

    def dies_after_publishing(folder, metrics):
        if folder.name == "global_step_2":  # the published folder, not the staging one
            raise _Killed
        original(folder, metrics)

    with mock.patch.object(ppo_trainer, "save_step_record", dies_after_publishing), pytest.raises(_Killed):
        _train(overrides, tmp_path / "killed", 3)
    assert [r["step"] for r in records(tmp_path / "killed")] == [1]
    _train(overrides, tmp_path / "killed", 3)
    straight, resumed = records(tmp_path / "straight"), records(tmp_path / "killed")
    assert [r["step"] for r in resumed] == [r["step"] for r in straight] == [1, 2, 3]
    for a, b in zip(straight, resumed, strict=True):
        assert {k: v for k, v in a.items() if not is_wall_clock(k)} == {k: v for k, v in b.items() if not is_wall_clock(k)}
