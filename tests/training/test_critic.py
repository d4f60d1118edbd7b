import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from reinforge.algorithm import log_probs_from_logits
from reinforge.config import load_config
from reinforge.config.schema import CriticConfig
from reinforge.training.critic import Critic, response_values
from reinforge.training.model import CausalLMWithValueHead, load_value_model


def test_value_model_is_the_lm_backbone_with_a_new_one_output_head(tiny_model_path, trajectories):
    config, _ = load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "data.train_files=/x.parquet",
                             "algorithm.adv_estimator=gae"])
    model = load_value_model(config, "cpu")
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    assert type(model).__name__.endswith("ForTokenClassification") and model.score.out_features == 1
    assert torch.equal(model.model.embed_tokens.weight, lm.model.embed_tokens.weight)
    assert model.config.classifier_dropout == 0.0
    batch = trajectories(lm.config.vocab_size)
    assert response_values(model, batch).shape == (6, 4)


def test_value_head_on_a_causal_lm_matches_a_hand_computed_head(tiny_model_path, trajectories):
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    model = CausalLMWithValueHead(copy.deepcopy(lm)).eval()
    batch = trajectories(lm.config.vocab_size)
    hidden = lm.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      position_ids=batch["position_ids"]).last_hidden_state
    expected = (hidden @ model.score.weight.T)[:, -5:-1, 0]  # the state before each of the 4 response tokens
    assert torch.allclose(response_values(model, batch), expected, atol=1e-6)


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum"])
def test_critic_micro_batches_give_the_full_batch_gradient(tiny_model_path, loss_agg_mode, trajectories):
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    torch.manual_seed(0)
    base = CausalLMWithValueHead(lm)
    batch = trajectories(lm.config.vocab_size)
    grads = {}
    for micro in (None, 1, 4):
        model = copy.deepcopy(base).train()
        cfg = CriticConfig(ppo_mini_batch_size=6, ppo_micro_batch_size_per_gpu=micro, ppo_epochs=1, shuffle=False,
                           loss_agg_mode=loss_agg_mode, cliprange_value=0.05, grad_clip=1e9)
        Critic(model, cfg, torch.optim.SGD(model.parameters(), lr=0.0)).update_critic(batch, rollout_n=1)
        grads[micro] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert grads[None].abs().sum() > 0
    for micro in (1, 4):
        assert torch.allclose(grads[micro], grads[None], atol=1e-6, rtol=1e-4), micro


def test_critic_updates_fit_the_returns(tiny_model_path, trajectories):
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    torch.manual_seed(0)
    model = CausalLMWithValueHead(lm).train()
    batch = trajectories(lm.config.vocab_size)
    cfg = CriticConfig(ppo_mini_batch_size=6, ppo_epochs=1, shuffle=False, loss_agg_mode="token-mean",
                       cliprange_value=100.0, grad_clip=1e9)
    critic = Critic(model, cfg, torch.optim.Adam(model.parameters(), lr=1e-2))
    losses = [critic.update_critic(batch, rollout_n=1)["critic/vf_loss"] for _ in range(30)]
    assert losses[-1] < 0.2 * losses[0]
    values = critic.compute_values(batch)
    assert torch.all(values[batch["response_mask"] == 0] == 0)


def test_log_probs_and_entropy_keep_no_vocabulary_sized_copy_for_backward():
    """What autograd saves for the backward pass: the logits themselves, and a few numbers per token."""
    logits = torch.randn(4, 16, 500, requires_grad=True)
    tokens = torch.randint(0, 500, (4, 16))

    def saved_bytes(fn) -> tuple[int, bool]:
        sizes, shares_logits = [], []

        def pack(tensor):
            sizes.append(tensor.numel() * tensor.element_size())
            shares_logits.append(tensor.untyped_storage().data_ptr() == logits.untyped_storage().data_ptr())
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn()
        return sum(s for s, shared in zip(sizes, shares_logits, strict=True) if not shared), any(shares_logits)

    def plain():
        log_probs = torch.log_softmax(logits, -1)
        picked = log_probs.gather(-1, tokens.unsqueeze(-1))
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return picked, entropy

    ours, keeps_logits = saved_bytes(lambda: log_probs_from_logits(logits, tokens))
    theirs, _ = saved_bytes(plain)
    vocab_copy = logits.numel() * 4
    assert keeps_logits and ours < 0.05 * vocab_copy  # besides the logits: per-token numbers only
    assert theirs >= 2 * vocab_copy  # the plain path keeps log-softmax and softmax copies


def test_critic_ratio_metrics_are_verls_unweighted_mean_of_the_micro_batches(tiny_model_path, trajectories):
    """Micro-batches of 2 rows hold 3, 7 and 3 response tokens; verl averages their vpred means as equals."""
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    torch.manual_seed(0)
    model = CausalLMWithValueHead(lm).train()
    batch = trajectories(lm.config.vocab_size)
    with torch.no_grad():
        values = response_values(model, batch)
    mask = batch["response_mask"].float()
    per_micro = [float((values * mask)[rows].sum() / mask[rows].sum()) for rows in (slice(0, 2), slice(2, 4), slice(4, 6))]
    cfg = CriticConfig(ppo_mini_batch_size=6, ppo_micro_batch_size_per_gpu=2, ppo_epochs=1, shuffle=False,
                       loss_agg_mode="token-mean", cliprange_value=0.5, grad_clip=1e9)
    metrics = Critic(model, cfg, torch.optim.SGD(model.parameters(), lr=0.0)).update_critic(batch, rollout_n=1)
    assert metrics["critic/vpred_mean"] == pytest.approx(sum(per_micro) / 3, abs=1e-5)
    assert abs(float((values * mask).sum() / mask.sum()) - sum(per_micro) / 3) > 1e-4  # token-weighted would differ
    assert metrics["critic/loss"] == metrics["critic/vf_loss"]
