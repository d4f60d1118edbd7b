"""Micro-batches trimmed of their all-padding columns, and token-budget micro-batches (use_dynamic_bsz).

The reference is the unoptimised path: the model's forward over every column of the batch
(`response_log_probs` / `response_values` on the whole batch), and for the updates the same update
with `trim_padding` replaced by one that keeps every column.
"""

import copy
import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from reinforge.algorithm import full_kl_from_logits, log_probs_from_logits
from reinforge.batch import Batch
from reinforge.config.schema import ActorConfig, CriticConfig
from reinforge.training import actor as actor_module
from reinforge.training import critic as critic_module
from reinforge.training.actor import Actor, response_log_probs, response_logits
from reinforge.training.critic import Critic, response_values
from reinforge.training.minibatch import (
    FORWARD_KEYS,
    Trimmed,
    balanced_groups,
    micro_batch_rows,
    token_budget_count,
    trim_padding,
)
from reinforge.training.model import CausalLMWithValueHead
from tests.training.conftest import make_trajectories

PROMPT, RESPONSE = 6, 5


def varied_batch(vocab: int) -> Batch:
    """8 trajectories whose prompts are left-padded by 0-3 columns and whose responses are 1-5 tokens long, ordered
    so that consecutive pairs share padding columns (the micro-batches of 2 rows have columns to trim)."""
    batch = make_trajectories(vocab, rows=8, prompt=PROMPT, response=RESPONSE, seed=1)
    pads, lengths = [3, 2, 0, 1, 2, 3, 1, 0], [1, 2, 5, 4, 1, 1, 3, 2]
    attention = torch.zeros(8, PROMPT + RESPONSE, dtype=torch.long)
    for row, (pad, length) in enumerate(zip(pads, lengths, strict=True)):
        attention[row, pad:PROMPT + length] = 1
    batch["attention_mask"] = attention
    batch["position_ids"] = (attention.cumsum(-1) - 1).clamp(min=0)
    batch["response_mask"] = attention[:, PROMPT:]
    for key in ("advantages", "returns", "values"):
        batch[key] = batch[key] * batch["response_mask"]
    return batch


def untrimmed(micro: Batch) -> Trimmed:
    """The unoptimised path: every column of the micro-batch goes into the forward."""
    return Trimmed(micro.select(FORWARD_KEYS), micro["attention_mask"][:, -micro["responses"].shape[1]:].bool())


def test_trim_keeps_exactly_the_columns_some_row_uses():
    attention = torch.tensor([[0, 0, 1, 1, 1, 0, 0],   # prompt 4 columns, response 3
                              [0, 0, 0, 1, 1, 1, 0]])
    micro = Batch({"input_ids": torch.arange(14).view(2, 7), "attention_mask": attention,
                   "position_ids": (attention.cumsum(-1) - 1).clamp(min=0), "responses": torch.arange(6).view(2, 3)})
    trimmed = trim_padding(micro)
    assert trimmed.batch["input_ids"].tolist() == [[2, 3, 4, 5], [9, 10, 11, 12]]  # columns 2..5
    assert trimmed.batch["position_ids"].tolist() == [[0, 1, 2, 2], [0, 0, 1, 2]]  # sliced, not recomputed
    assert trimmed.batch["responses"].tolist() == [[0, 1], [3, 4]]
    widened = trimmed.widen(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert widened.tolist() == [[1.0, 0.0, 0.0], [3.0, 4.0, 0.0]]  # full width, zero where the mask is 0


def test_trim_keeps_the_last_prompt_column_and_one_response_column():
    attention = torch.tensor([[0, 0, 0, 0]])  # an all-padding row: nothing used
    micro = Batch({"input_ids": torch.zeros(1, 4, dtype=torch.long), "attention_mask": attention,
                   "position_ids": torch.zeros(1, 4, dtype=torch.long), "responses": torch.zeros(1, 2, dtype=torch.long)})
    trimmed = trim_padding(micro)
    assert trimmed.batch["input_ids"].shape == (1, 2) and trimmed.batch["responses"].shape == (1, 1)


@pytest.fixture
def model(tiny_model_path):
    return AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()


def test_trimmed_log_probs_equal_the_whole_batch_forward(model):
    batch = varied_batch(model.config.vocab_size)
    assert trim_padding(batch.index([0, 1])).batch["input_ids"].shape[1] == PROMPT + RESPONSE - 2 - 3  # trims happen
    attends = batch["attention_mask"][:, PROMPT:].bool()
    with torch.no_grad():
        want_lp, want_ent = response_log_probs(model, batch, temperature=0.7, with_entropy=True)
    actor = Actor(model, ActorConfig())
    for size, budget in ((2, None), (1, None), (None, 12)):
        log_probs, entropy = actor.compute_log_prob(batch, 0.7, size, with_entropy=True, max_tokens=budget)
        assert torch.allclose(log_probs, want_lp * attends, atol=1e-5), (size, budget)
        assert torch.allclose(entropy, want_ent * attends, atol=1e-5), (size, budget)
        assert (log_probs[~attends] == 0).all()


def test_reference_log_probs_and_full_kl_equal_the_whole_batch_forward(model):
    batch = varied_batch(model.config.vocab_size)
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.01)
        attends = batch["attention_mask"][:, PROMPT:].bool()
        ref_logits = response_logits(ref, batch).logits
        want_lp = log_probs_from_logits(ref_logits, batch["responses"], 0.7)[0] * attends
        want_kl = full_kl_from_logits(response_logits(model, batch).logits, ref_logits, 0.7) * attends
    assert want_kl[attends].abs().min() > 0
    for size, budget in ((2, None), (None, 12)):
        log_probs, kl = Actor(model, ActorConfig()).compute_ref_log_prob_and_full_kl(batch, ref, 0.7, size, budget)
        assert torch.allclose(log_probs, want_lp, atol=1e-5) and torch.allclose(kl, want_kl, atol=1e-6), (size, budget)


def test_token_budget_count_is_the_ceiling_of_tokens_over_budget(model):
    batch = varied_batch(model.config.vocab_size)
    lengths = batch["attention_mask"].sum(-1).tolist()  # [4, 6, 11, 9, 5, 4, 8, 8]: 55 tokens
    assert sum(lengths) == 55
    for budget, want in ((55, 1), (30, 2), (20, 3), (16, 4)):
        groups = micro_batch_rows(batch, None, budget)
        assert len(groups) == want == math.ceil(55 / budget), budget
        assert sorted(torch.cat(groups).tolist()) == list(range(8))  # every row once
        assert all(sum(lengths[r] for r in g.tolist()) <= budget for g in groups), budget


def test_balanced_groups_and_rows_over_the_budget():
    assert balanced_groups([5, 1, 4, 2, 3, 3], 3) == [[0, 1], [2, 3], [4, 5]]  # totals 6, 6, 6
    assert token_budget_count([10, 1, 1], 6) == 2  # ceil(12 / 6); the lone row over the budget is its own: [10], [1, 1]
    assert token_budget_count([3, 3, 3], 5) == 3  # ceil(9 / 5) = 2 would put two rows (6 tokens) in one group
    assert token_budget_count([9, 9], 1) == 2  # never more micro-batches than rows


def actor_grads(base, batch, monkeypatch, trim=True, ref=None, **cfg) -> torch.Tensor:
    model = copy.deepcopy(base).train()
    if not trim:
        monkeypatch.setattr(actor_module, "trim_padding", untrimmed)
    config = ActorConfig(ppo_mini_batch_size=8, use_kl_loss=True, kl_loss_coef=0.1, entropy_coeff=0.01, grad_clip=1e9,
                         clip_ratio_low=0.2, clip_ratio_high=0.2, **cfg)
    Actor(model, config, torch.optim.SGD(model.parameters(), lr=0.0), ref_model=ref).update_policy(batch, 1.0, rollout_n=1)
    monkeypatch.undo()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("loss_agg_mode,kl_loss_type", [("token-mean", "low_var_kl"), ("seq-mean-token-sum-norm", "full"),
                                                        ("seq-mean-token-mean", "k1")])
def test_update_gradient_is_the_same_trimmed_untrimmed_and_with_a_token_budget(model, monkeypatch, loss_agg_mode,
                                                                                kl_loss_type):
    batch = varied_batch(model.config.vocab_size)
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    cfg = {"loss_agg_mode": loss_agg_mode, "kl_loss_type": kl_loss_type}
    want = actor_grads(model, batch, monkeypatch, trim=False, ref=ref, ppo_micro_batch_size_per_gpu=2, **cfg)
    assert want.abs().sum() > 0
    for kwargs in ({"ppo_micro_batch_size_per_gpu": 2}, {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 20}):
        got = actor_grads(model, batch, monkeypatch, ref=ref, **cfg, **kwargs)
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4), (kwargs, (got - want).abs().max().item())


def test_critic_values_and_update_are_the_same_trimmed_untrimmed_and_with_a_token_budget(tiny_model_path, monkeypatch):
    torch.manual_seed(0)
    base = CausalLMWithValueHead(AutoModelForCausalLM.from_pretrained(tiny_model_path)).eval()
    batch = varied_batch(base.config.vocab_size)
    with torch.no_grad():
        want_values = response_values(base, batch) * batch["response_mask"]
    for kwargs in ({"forward_micro_batch_size_per_gpu": 2}, {"use_dynamic_bsz": True, "forward_max_token_len_per_gpu": 20}):
        got = Critic(base, CriticConfig(**kwargs)).compute_values(batch)
        assert torch.allclose(got, want_values, atol=1e-5), kwargs

    def grads(trim: bool, **kwargs) -> torch.Tensor:
        model = copy.deepcopy(base).train()
        if not trim:
            monkeypatch.setattr(critic_module, "trim_padding", untrimmed)
        config = CriticConfig(ppo_mini_batch_size=8, ppo_epochs=1, shuffle=False, grad_clip=1e9, cliprange_value=0.05,
                              loss_agg_mode="seq-mean-token-sum-norm", **kwargs)
        Critic(model, config, torch.optim.SGD(model.parameters(), lr=0.0)).update_critic(batch, rollout_n=1)
        monkeypatch.undo()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    want = grads(False, ppo_micro_batch_size_per_gpu=2)
    assert want.abs().sum() > 0
    for kwargs in ({"ppo_micro_batch_size_per_gpu": 2}, {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 20}):
        got = grads(True, **kwargs)
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4), (kwargs, (got - want).abs().max().item())


def test_global_batch_info_counts_every_row_as_verls_trainer_and_the_tokens_left_after_rejection():
    """verl's trainer passes global_batch_size = ppo_mini_batch_size x rollout.n: a row that rejection sampling emptied
    still counts in the seq-mean-* denominators (its loss is 0), while token-mean divides by the tokens kept."""
    from reinforge.algorithm.core import agg_loss
    from reinforge.training.minibatch import global_batch_info

    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])  # rows 1 and 3 rejected
    info = global_batch_info(mask, None)
    assert (info["global_batch_size"], info["batch_num_tokens"], info["dp_size"]) == (4, 5, 1)
    losses = torch.tensor([[2.0, 4.0, 9.0], [5.0, 5.0, 5.0], [3.0, 3.0, 6.0], [7.0, 7.0, 7.0]])
    # per-row token means 3 and 4 over the 4 rows of the mini-batch (verl: masked sum of seq losses / global_batch_size)
    assert agg_loss(losses, mask, "seq-mean-token-mean", **info).item() == pytest.approx((3.0 + 4.0) / 4)
    assert agg_loss(losses, mask, "token-mean", **info).item() == pytest.approx((2 + 4 + 3 + 3 + 6) / 5)


def test_run_epochs_averages_metrics_but_keeps_the_extremes_of_min_and_max_ones():
    from reinforge.training.minibatch import run_epochs

    batch = Batch({"x": torch.arange(4.0)})
    steps = iter([{"a": 1.0, "d_min": 0.5, "d_max": 2.0}, {"a": 3.0, "d_min": 0.2, "d_max": 1.0}])
    metrics = run_epochs(batch, ["x"], 2, 1, False, "actor", lambda mini: (next(steps), True))
    assert metrics == {"a": 2.0, "d_min": 0.2, "d_max": 2.0, "actor/optimizer_steps": 2.0, "actor/nonfinite_skipped": 0.0}
