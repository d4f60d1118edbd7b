"""Train/inference mismatch on CPU: the hf engine generates from a bf16 copy of the fp32 actor (rollout.dtype=bf16).

The engine's log-probs then differ a little from the actor's, so training/rollout_probs_diff_* are small but not
zero, and algorithm.rollout_correction has something to correct.
"""

import pytest
import torch

from reinforge.batch import Batch
from reinforge.config import load_config
from reinforge.training.workers import ActorRolloutRefWorker

BF16_ENGINE = "actor_rollout_ref.rollout.dtype=bf16"
ONE_STEP = "trainer.total_training_steps=1"


def test_bf16_engine_shows_a_small_mismatch_that_the_fp32_engine_does_not(run_steps, tmp_path):
    shared = run_steps(ONE_STEP, run_dir=tmp_path / "fp32")[1]  # on-policy: the actor measures in its own update
    replica = run_steps(ONE_STEP, BF16_ENGINE, run_dir=tmp_path / "bf16")[1]
    assert "timing_s/old_log_prob" not in replica  # no extra pass was run to measure it
    assert replica["training/rollout_probs_diff_valid"] == 1
    # the untrained tiny model is near uniform (p ~ 1/340), so probabilities differ by little in absolute terms
    assert 0 < replica["training/rollout_probs_diff_mean"] < 1e-4 and replica["training/rollout_probs_diff_max"] < 1e-3
    assert 1e-5 < replica["rollout_corr/log_ppl_abs_diff"] < 1e-2  # bf16 rounding, in relative terms
    assert replica["training/rollout_actor_probs_pearson_corr"] > 0.99
    # the engine's KV-cached fp32 decoding matches the actor's forward pass to float rounding
    assert shared["training/rollout_probs_diff_mean"] < replica["training/rollout_probs_diff_mean"] / 1000
    # chi2 = E[rho^2] - 1 is estimated on the sampled tokens, so either sign can come out; its size is what bf16 changes
    assert abs(shared["rollout_corr/chi2_token"]) < abs(replica["rollout_corr/chi2_token"]) / 100


def test_decoupled_correction_measures_what_the_on_policy_update_measures(run_steps, tmp_path):
    on_policy = run_steps(ONE_STEP, BF16_ENGINE, run_dir=tmp_path / "on_policy")[1]
    corrected = run_steps(ONE_STEP, BF16_ENGINE, "algorithm.rollout_correction.rollout_is=token",
                          "algorithm.rollout_correction.rollout_rs=token_k1", "algorithm.rollout_correction.rollout_rs_threshold=1.001",
                          run_dir=tmp_path / "corrected")[1]
    assert "timing_s/old_log_prob" in corrected  # the weights need pi_old before the update
    for name in ("training/rollout_probs_diff_mean", "training/rollout_probs_diff_max", "rollout_corr/kl"):
        assert corrected[name] == pytest.approx(on_policy[name], rel=1e-3, abs=1e-7), name
    assert corrected["rollout_corr/rollout_is_mean"] == pytest.approx(1.0, abs=0.05)
    assert corrected["rollout_corr/rollout_is_mean"] != 1.0
    assert 0 < corrected["rollout_corr/rollout_rs_masked_fraction"] < 1  # a tight ratio band drops some tokens


def test_bypass_mode_skips_the_old_log_prob_pass(run_steps, tmp_path):
    steps = run_steps(BF16_ENGINE, "algorithm.rollout_correction.bypass_mode=true",
                      "algorithm.rollout_correction.loss_type=reinforce", "algorithm.rollout_correction.rollout_is=sequence",
                      "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", run_dir=tmp_path / "bypass")
    for metrics in steps.values():
        assert "timing_s/old_log_prob" not in metrics and "training/rollout_probs_diff_mean" not in metrics
        assert 0 < metrics["rollout_corr/rollout_is_mean"] < 2.0 and metrics["rollout_corr/k3_kl"] > 0
    debug = run_steps(ONE_STEP, BF16_ENGINE, "algorithm.rollout_correction.bypass_mode=true",
                      "algorithm.rollout_correction.debug_rollout_actor_probs=true", run_dir=tmp_path / "debug")[1]
    assert debug["training/rollout_probs_diff_mean"] > 0 and "timing_s/old_log_prob" in debug


@pytest.fixture
def worker(small_run, tmp_path):
    def build(*extra: str) -> ActorRolloutRefWorker:
        config, _ = load_config([*small_run, f"trainer.default_local_dir={tmp_path}", BF16_ENGINE, *extra])
        worker = ActorRolloutRefWorker(config, role="actor_rollout")
        worker.init_model(total_training_steps=1)
        return worker

    return build


def generated_batch(worker: ActorRolloutRefWorker) -> Batch:
    torch.manual_seed(0)
    prompts = Batch({"input_ids": torch.randint(3, 20, (4, 6)), "attention_mask": torch.ones(4, 6, dtype=torch.long),
                     "position_ids": torch.arange(6).repeat(4, 1)})
    batch = worker.generate_sequences(prompts)
    batch["old_log_probs"] = worker.compute_log_prob(batch)["old_log_probs"]
    batch["advantages"] = torch.linspace(-1.0, 2.0, batch["responses"].numel()).view_as(batch["responses"])
    return batch


def test_the_importance_weights_reach_the_policy_loss(worker):
    """One update where pi_theta = pi_old (ratio 1), so vanilla's loss is -A per token: with weights w it is
    -sum(w A) / tokens, w = min(p_old / p_rollout, 1.001) worked out here from the batch."""
    actor = worker("algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=1.001")
    batch = generated_batch(actor)
    assert actor.engine.model is not actor.actor.model and next(actor.engine.model.parameters()).dtype == torch.bfloat16
    mask, advantages = batch["response_mask"].float(), batch["advantages"]
    weights = (batch["old_log_probs"] - batch["rollout_log_probs"]).exp().clamp(max=1.001) * mask
    assert 0 < float((weights - mask).abs().max()) < 0.5  # the bf16 engine made the weights differ from 1
    unweighted = -(advantages * mask).sum() / mask.sum()
    weighted = -(advantages * weights).sum() / mask.sum()
    assert abs(float(weighted - unweighted)) > 1e-5

    without = worker().update_actor(batch.select()).meta_info["metrics"]  # a fresh actor, same weights
    batch["rollout_is_weights"] = weights
    with_weights = actor.update_actor(batch).meta_info["metrics"]
    assert without["actor/pg_loss"] == pytest.approx(float(unweighted), abs=1e-5)
    assert with_weights["actor/pg_loss"] == pytest.approx(float(weighted), abs=1e-5)


def test_update_weights_refreshes_the_bf16_copy(worker):
    actor = worker()
    batch = generated_batch(actor)
    actor.update_actor(batch)
    trained = next(actor.actor.model.parameters())
    copied = next(actor.engine.model.parameters())
    assert not torch.equal(copied, trained.to(torch.bfloat16))  # the update moved the actor, not the copy
    actor.update_weights()
    assert torch.equal(next(actor.engine.model.parameters()), trained.detach().to(torch.bfloat16))


def test_the_kl_penalty_in_the_reward_keeps_the_tokens_rejection_drops():
    """verl applies the KL penalty in the reward before the rollout correction rejects tokens, so a rejected token keeps
    its penalty in the score the outcome estimators sum: the correction replaces the batch's mask rather than changing
    the one the trainer kept for apply_kl_penalty."""
    from types import SimpleNamespace

    from reinforge.algorithm.kl import FixedKLController, apply_kl_penalty
    from reinforge.config.algorithm_schema import RolloutCorrectionConfig
    from reinforge.trainer.ppo_trainer import RLTrainer

    mask = torch.ones(2, 3)
    old = torch.zeros(2, 3)
    engine = old.clone()
    engine[0, 1] = -3.0  # log(pi_old / pi_rollout) = 3 on one token: past a token_k1 bound of 2
    batch = Batch({"response_mask": mask.clone(), "old_log_probs": old, "rollout_log_probs": engine})
    correction = RolloutCorrectionConfig(rollout_rs="token_k1", rollout_rs_threshold=2.0)
    before = batch["response_mask"]  # what train_step keeps for the penalty
    RLTrainer._rollout_mismatch(SimpleNamespace(correction=correction), batch, {}, {})
    assert batch["response_mask"][0, 1] == 0 and batch["response_mask"].sum() == 5  # rejected for the update
    assert torch.equal(before, mask)  # not for the penalty
    rewards, metrics = apply_kl_penalty(torch.zeros(2, 3), torch.full((2, 3), 0.5), before, FixedKLController(0.1))
    assert rewards[0, 1] == pytest.approx(-0.05) and metrics["actor/reward_kl_penalty"] == pytest.approx(0.5)
