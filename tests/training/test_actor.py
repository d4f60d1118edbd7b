import copy

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from reinforge.config.schema import ActorConfig
from reinforge.training.actor import Actor


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum"])
def test_micro_batches_give_the_full_batch_gradient(tiny_model_path, loss_agg_mode, trajectories):
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    batch = trajectories(base.config.vocab_size)
    grads = {}
    for micro in (None, 1, 2):
        model = copy.deepcopy(base).train()
        cfg = ActorConfig(ppo_mini_batch_size=6, ppo_micro_batch_size_per_gpu=micro, loss_agg_mode=loss_agg_mode,
                          use_kl_loss=True, kl_loss_coef=0.1, entropy_coeff=0.01, grad_clip=1e9,
                          clip_ratio_low=0.2, clip_ratio_high=0.2)
        actor = Actor(model, cfg, torch.optim.SGD(model.parameters(), lr=0.0))
        actor.update_policy(batch, temperature=1.0, rollout_n=1)
        grads[micro] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert torch.allclose(grads[1], grads[None], atol=1e-6, rtol=1e-4)
    assert torch.allclose(grads[2], grads[None], atol=1e-6, rtol=1e-4)
    assert grads[None].abs().sum() > 0


def test_on_policy_update_raises_the_log_prob_of_positive_advantage(tiny_model_path, trajectories):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).train()
    batch = trajectories(model.config.vocab_size, rows=2)
    batch["advantages"] = torch.tensor([[1.0], [-1.0]]) * batch["response_mask"]
    cfg = ActorConfig(ppo_mini_batch_size=2, clip_ratio_low=0.2, clip_ratio_high=0.2)
    actor = Actor(model, cfg, torch.optim.SGD(model.parameters(), lr=0.5))
    before, _ = actor.compute_log_prob(batch, 1.0, None)
    metrics = actor.update_policy(batch, temperature=1.0, rollout_n=1)
    after, _ = actor.compute_log_prob(batch, 1.0, None)
    mask = batch["response_mask"].bool()
    assert (after - before)[0][mask[0]].sum() > 0 > (after - before)[1][mask[1]].sum()
    assert metrics["actor/ppo_kl"] == 0.0 and metrics["actor/grad_norm"] > 0
    assert np.isfinite(metrics["actor/entropy"])


def test_nonfinite_gradient_skips_the_optimizer_step(tiny_model_path, trajectories):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).train()
    batch = trajectories(model.config.vocab_size, rows=2)
    batch["advantages"] = torch.full_like(batch["advantages"], float("nan"))
    actor = Actor(model, ActorConfig(ppo_mini_batch_size=2, clip_ratio_low=0.2, clip_ratio_high=0.2),
                  torch.optim.SGD(model.parameters(), lr=1.0))
    before = [p.detach().clone() for p in model.parameters()]
    metrics = actor.update_policy(batch, temperature=1.0, rollout_n=1)
    assert metrics["actor/nonfinite_skipped"] == 1.0 and metrics["actor/optimizer_steps"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=False))


def test_ratio_metrics_are_verls_unweighted_mean_of_the_micro_batches(tiny_model_path, trajectories):
    """verl averages each micro-batch's pg_clipfrac / ppo_kl over the micro-batches, whatever their token counts; the
    rows here have 1, 2, 3, 4, 1, 2 tokens, so micro-batches of 2 rows hold 3, 7 and 3 tokens."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).train()
    batch = trajectories(model.config.vocab_size)
    actor = Actor(model, ActorConfig(ppo_mini_batch_size=6, ppo_micro_batch_size_per_gpu=2, clip_ratio_low=0.2,
                                     clip_ratio_high=0.2), torch.optim.SGD(model.parameters(), lr=0.0))
    new, entropy = actor.compute_log_prob(batch, 1.0, None, with_entropy=True)
    batch["old_log_probs"] = new + torch.linspace(-0.3, 0.3, new.numel()).reshape(new.shape)
    mask = batch["response_mask"].float()
    per_micro = [float(((batch["old_log_probs"] - new) * mask)[rows].sum() / mask[rows].sum())
                 for rows in (slice(0, 2), slice(2, 4), slice(4, 6))]
    metrics = actor.update_policy(batch, temperature=1.0, rollout_n=1)
    assert metrics["actor/ppo_kl"] == pytest.approx(sum(per_micro) / 3, abs=1e-6)
    token_weighted = float(((batch["old_log_probs"] - new) * mask).sum() / mask.sum())
    assert abs(token_weighted - sum(per_micro) / 3) > 1e-3  # the two rules differ on this batch
    # old log-probs given: actor/entropy is the old-log-prob pass's (the trainer's), not the update's
    assert "actor/entropy" not in metrics and "actor/entropy_loss" not in metrics
    # on-policy (no old-log-prob pass): the update's one forward, aggregated over the whole batch as verl does
    batch.pop(["old_log_probs"])
    metrics = actor.update_policy(batch, temperature=1.0, rollout_n=1)
    assert metrics["actor/entropy"] == pytest.approx(float((entropy * mask).sum() / mask.sum()), rel=1e-5)


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_truncated_responses_masked_out_give_the_gradient_of_their_mask_zeroed(tiny_model_path, trajectories, loss_agg_mode):
    """actor.mask_truncated_responses (TRL's mask_truncated_completions): rows that finished by length count as if their
    response mask were 0, the KL and entropy terms included; the trainer's batch keeps its mask."""
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    batch = trajectories(base.config.vocab_size)
    batch["finish_reason"] = ["stop", "length", "stop", "length", "stop", "stop"]
    zeroed = batch.select(batch.keys())
    zeroed["response_mask"] = batch["response_mask"] * torch.tensor([1, 0, 1, 0, 1, 1]).unsqueeze(-1)
    grads = []
    for data, masking in ((batch, True), (zeroed, False)):
        model = copy.deepcopy(base).train()
        cfg = ActorConfig(ppo_mini_batch_size=6, loss_agg_mode=loss_agg_mode, use_kl_loss=True, kl_loss_coef=0.1,
                          entropy_coeff=0.01, grad_clip=1e9, mask_truncated_responses=masking)
        Actor(model, cfg, torch.optim.SGD(model.parameters(), lr=0.0)).update_policy(data, temperature=1.0, rollout_n=1)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-7) and grads[0].abs().sum() > 0
    assert batch["response_mask"][1].sum() > 0  # the caller's mask is unchanged
    unmasked = copy.deepcopy(base).train()  # the same settings, masking off: the truncated rows count
    cfg = ActorConfig(ppo_mini_batch_size=6, loss_agg_mode=loss_agg_mode, use_kl_loss=True, kl_loss_coef=0.1,
                      entropy_coeff=0.01, grad_clip=1e9)
    Actor(unmasked, cfg, torch.optim.SGD(unmasked.parameters(), lr=0.0)).update_policy(batch, temperature=1.0, rollout_n=1)
    assert not torch.allclose(torch.cat([p.grad.flatten() for p in unmasked.parameters() if p.grad is not None]), grads[0])
