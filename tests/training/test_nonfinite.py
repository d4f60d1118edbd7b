"""A NaN/inf loss or gradient skips the optimizer step, is counted, and stops the run after
`trainer.max_nonfinite_steps` all-skipped training steps in a row.

The NaN losses here add a NaN constant to the vanilla loss: the gradient stays finite, so only the
loss check can skip the step (a gradient-only check would step on them).
"""

import copy
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from reinforge.algorithm import compute_policy_loss, register_policy_loss
from reinforge.cli import main
from reinforge.config.schema import ActorConfig, CriticConfig
from reinforge.environment.tasks import write_task_files
from reinforge.training.actor import Actor
from reinforge.training.critic import Critic


def vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config):
    return compute_policy_loss("vanilla", old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages,
                               response_mask=response_mask, loss_agg_mode=loss_agg_mode, config=config, rollout_is_weights=None)


@pytest.fixture
def nan_loss():
    """Registers `nan_if_big_advantage`: the vanilla loss, plus NaN when a micro-batch has an advantage above 100."""
    @register_policy_loss("nan_if_big_advantage")
    def nan_if_big_advantage(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, **_):
        loss, metrics = vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config)
        return (loss + float("nan") if advantages.max() > 100 else loss), metrics


def make_actor(tiny_model_path, mini: int, micro: int | None = None) -> Actor:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).train()
    config = ActorConfig(ppo_mini_batch_size=mini, ppo_micro_batch_size_per_gpu=micro, clip_ratio_low=0.2, clip_ratio_high=0.2)
    config.policy_loss.loss_mode = "nan_if_big_advantage"
    return Actor(model, config, torch.optim.AdamW(model.parameters(), lr=1e-2))


def snapshot(model):
    return [p.detach().clone() for p in model.parameters()]


def unchanged(before, model) -> bool:
    return all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_finite_loss_steps_and_a_nan_loss_skips_every_step(tiny_model_path, trajectories, nan_loss):
    actor = make_actor(tiny_model_path, mini=1)  # 2 rows: 2 optimizer steps
    batch = trajectories(actor.model.config.vocab_size, rows=2)
    batch["old_log_probs"] = actor.compute_log_prob(batch, temperature=1.0, micro_batch_size=None)[0]
    before = snapshot(actor.model)
    good = actor.update_policy(batch, temperature=1.0, rollout_n=1)
    assert good["actor/optimizer_steps"] == 2 and good["actor/nonfinite_skipped"] == 0
    assert not unchanged(before, actor.model)

    batch["advantages"] = batch["advantages"] + 1000 * batch["response_mask"]
    before, adam_state = snapshot(actor.model), copy.deepcopy(actor.optimizer.state_dict()["state"])
    bad = actor.update_policy(batch, temperature=1.0, rollout_n=1)
    assert bad["actor/optimizer_steps"] == 2 and bad["actor/nonfinite_skipped"] == 2
    assert unchanged(before, actor.model)
    after = actor.optimizer.state_dict()["state"]  # no Adam moment or step count moved
    assert after.keys() == adam_state.keys()
    assert all(torch.equal(after[i][k], adam_state[i][k]) for i in after for k in after[i])
    assert all(p.grad is None for p in actor.model.parameters())
    assert bad["actor/grad_norm"] != bad["actor/grad_norm"]  # NaN: no complete gradient to measure


def test_one_nan_micro_batch_skips_its_whole_mini_batch(tiny_model_path, trajectories, nan_loss):
    actor = make_actor(tiny_model_path, mini=2, micro=1)  # one optimizer step of two micro-batches
    batch = trajectories(actor.model.config.vocab_size, rows=2)
    batch["advantages"][1] = 1000.0  # only the second micro-batch's loss is NaN
    before = snapshot(actor.model)
    metrics = actor.update_policy(batch, temperature=1.0, rollout_n=1)
    assert metrics["actor/optimizer_steps"] == 1 and metrics["actor/nonfinite_skipped"] == 1
    assert unchanged(before, actor.model)  # the finite first micro-batch's gradient is not applied alone


def test_the_critic_counts_its_skipped_steps(tiny_model_path, trajectories):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).train()
    critic = Critic(model, CriticConfig(ppo_mini_batch_size=1, ppo_epochs=2, loss_agg_mode="token-mean"), torch.optim.SGD(model.parameters(), lr=0.1))
    batch = trajectories(model.config.vocab_size, rows=3)
    batch["returns"][1, 0] = float("inf")  # row 1's value loss is inf in both epochs; rows 0 and 2 are fine
    before = snapshot(model)
    metrics = critic.update_critic(batch, rollout_n=1)
    assert metrics["critic/optimizer_steps"] == 6 and metrics["critic/nonfinite_skipped"] == 2
    assert not unchanged(before, model)


# A custom loss module, as a user would write one: the vanilla loss, plus NaN on the update calls
# listed in $NAN_CALLS (1-based, counted across processes in the file $NAN_COUNTER). With one
# mini-batch and one epoch, call k is training step k.
NAN_MODULE = '''
import os
from pathlib import Path

from reinforge.algorithm import compute_policy_loss, register_policy_loss


@register_policy_loss("nan_on_listed_calls")
def nan_on_listed_calls(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, **kwargs):
    counter = Path(os.environ["NAN_COUNTER"])
    call = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(call))
    loss, metrics = compute_policy_loss("vanilla", old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages,
                                        response_mask=response_mask, loss_agg_mode=loss_agg_mode, config=config,
                                        rollout_is_weights=None)
    return (loss + float("nan") if str(call) in os.environ["NAN_CALLS"].split(",") else loss), metrics
'''

RUN = [
    "data.max_samples=32", "data.train_batch_size=2", "data.max_prompt_length=48", "data.max_response_length=4",
    "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.optim.lr=1e-3",
    "actor_rollout_ref.model.enable_gradient_checkpointing=false", "trainer.val_before_train=false", "trainer.test_freq=-1",
    "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=nan_on_listed_calls",
    "trainer.max_nonfinite_steps=2", "trainer.save_freq=1",
]


# the first step is skipped: the schedule still advances, without torch's warning about a scheduler stepped first
@pytest.mark.filterwarnings("error:Detected call of `lr_scheduler.step\\(\\)`")
def test_the_run_stops_after_max_nonfinite_steps_in_a_row_and_the_count_resumes(tiny_model_path, tmp_path, monkeypatch,
                                                                                  capsys):
    module = tmp_path / "nan_losses.py"
    module.write_text(NAN_MODULE)
    monkeypatch.setenv("NAN_COUNTER", str(tmp_path / "calls"))
    monkeypatch.setenv("NAN_CALLS", "1,3,4")
    train, val = write_task_files()
    run_dir = tmp_path / "run"
    args = ["train", f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={train}", f"data.val_files={val}",
            f"trainer.default_local_dir={run_dir}", f"algorithm.custom_modules=[{module}]", *RUN]

    assert main([*args, "trainer.total_training_steps=3"]) == 0  # bad, good (resets), bad: never 2 in a row
    state = {step: json.loads((run_dir / f"global_step_{step}" / "trainer_state.json").read_text()) for step in (1, 2, 3)}
    assert [state[step]["nonfinite_steps"] for step in (1, 2, 3)] == [1, 0, 1]

    capsys.readouterr()
    assert main([*args, "trainer.total_training_steps=6"]) == 2  # resumes at 1 in a row; step 4 is the 2nd
    err = capsys.readouterr().err
    assert "reinforge: error: steps 3 to 4: 2 training steps in a row had a NaN/inf loss" in err
    assert "trainer.max_nonfinite_steps=2" in err and "Traceback" not in err
    steps = {r["step"]: r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "timing_s/step" in r}
    assert sorted(steps) == [1, 2, 3, 4]
    assert [steps[s]["actor/nonfinite_skipped"] for s in (1, 2, 3, 4)] == [1, 0, 1, 1]
    assert all(steps[s]["actor/optimizer_steps"] == 1 for s in steps)
