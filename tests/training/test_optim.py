import pytest
import torch

from reinforge.config.schema import OptimConfig
from reinforge.training.optim import lr_factor, make_optimizer, warmup_steps


def test_constant_schedule_with_warmup_steps():
    optim = OptimConfig(lr_warmup_steps=4, lr_scheduler_type="constant")
    assert [lr_factor(s, optim, 100) for s in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]


def test_warmup_ratio_used_when_steps_negative():
    assert warmup_steps(OptimConfig(lr_warmup_steps=-1, lr_warmup_steps_ratio=0.1), 50) == 5
    assert warmup_steps(OptimConfig(lr_warmup_steps=0, lr_warmup_steps_ratio=0.1), 50) == 0


def test_cosine_decays_to_min_lr_ratio():
    optim = OptimConfig(lr_warmup_steps=0, lr_scheduler_type="cosine", min_lr_ratio=0.1)
    assert lr_factor(0, optim, 10) == pytest.approx(1.0)
    assert lr_factor(5, optim, 10) == pytest.approx(0.1 + 0.9 * 0.5)  # half way: cos(pi/2) = 0
    assert lr_factor(10, optim, 10) == pytest.approx(0.1)


def test_adamw_is_fused_on_cpu_and_takes_the_textbook_first_step():
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(5, 3))
    frozen = torch.nn.Parameter(torch.randn(2), requires_grad=False)
    before, grad = weight.detach().clone(), torch.randn(5, 3)
    weight.grad = grad.clone()
    cfg = OptimConfig(lr=0.1, weight_decay=0.01)
    optimizer = make_optimizer([weight, frozen], cfg)
    assert optimizer.param_groups[0]["fused"] and len(optimizer.param_groups[0]["params"]) == 1
    optimizer.step()
    # step 1 of AdamW: decoupled decay, then bias-corrected m / sqrt(v) = g / |g|
    expected = before * (1 - 0.1 * 0.01) - 0.1 * grad / (grad.abs() + cfg.eps)
    assert torch.allclose(weight.detach(), expected, atol=1e-6)
