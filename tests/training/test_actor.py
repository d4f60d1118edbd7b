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
