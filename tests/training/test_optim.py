import pytest
import torch

from reinforge.config.engine_schema import OptimConfig
from reinforge.training.optim import lr_factor, make_optimizer, warmup_steps


def test_constant_schedule_with_warmup_steps():
    optim = OptimConfig(lr_warmup_steps=4, lr_scheduler_type="constant")
    assert [lr_factor(s, optim, 100) for s in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]


def test_warmup_ratio_used_when_steps_negative():
    assert warmup_steps(OptimConfig(lr_warmup_steps=-1, lr_warmup_steps_ratio=0.1), 50) == 5
    assert warmup_steps(OptimConfig(lr_warmup_steps=0, lr_warmup_steps_ratio=0.1), 50) == 5  # 0: the ratio, as verl's engine
    assert warmup_steps(OptimConfig(lr_warmup_steps=0, lr_warmup_steps_ratio=0.0), 50) == 0


def test_cosine_decays_to_min_lr_ratio():
    optim = OptimConfig(lr_warmup_steps=0, lr_scheduler_type="cosine", min_lr_ratio=0.1)
    assert lr_factor(0, optim, 10) == pytest.approx(1.0)
    assert lr_factor(5, optim, 10) == pytest.approx(0.1 + 0.9 * 0.5)  # half way: cos(pi/2) = 0
    assert lr_factor(10, optim, 10) == pytest.approx(0.1)


def test_linear_is_transformers_schedule_with_a_floor():
    """TRL's default lr_scheduler_type="linear": transformers' get_linear_schedule_with_warmup, here down to min_lr_ratio."""
    from transformers import get_linear_schedule_with_warmup

    weight = torch.nn.Parameter(torch.zeros(1))
    reference = get_linear_schedule_with_warmup(torch.optim.SGD([weight], lr=1.0), num_warmup_steps=3, num_training_steps=12)
    theirs = [reference.lr_lambdas[0](s) for s in range(13)]
    optim = OptimConfig(lr_warmup_steps=3, lr_scheduler_type="linear")
    assert [lr_factor(s, optim, 12) for s in range(13)] == pytest.approx(theirs)
    floor = OptimConfig(lr_warmup_steps=0, lr_scheduler_type="linear", min_lr_ratio=0.2)
    assert [lr_factor(s, floor, 4) for s in range(5)] == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2])


def test_cosine_counted_from_one_is_a_step_ahead_as_verls():
    # verl's get_cosine_schedule_with_warmup(zero_indexed_step=False): step + 1, then warmup 2 of 10 steps, min 0.1
    optim = OptimConfig(lr_warmup_steps=2, lr_scheduler_type="cosine", min_lr_ratio=0.1, zero_indexed_step=False)
    assert lr_factor(0, optim, 10) == pytest.approx(0.5)  # (0 + 1) / 2
    assert lr_factor(1, optim, 10) == pytest.approx(1.0)  # step 2: warmup over, progress 0
    assert lr_factor(5, optim, 10) == pytest.approx(0.1 + 0.9 * 0.5)  # step 6: progress (6 - 2) / 8, cos(pi / 2) = 0
    constant = OptimConfig(lr_warmup_steps=2, lr_scheduler_type="constant", zero_indexed_step=False)
    assert lr_factor(0, constant, 10) == 0.0  # not read by the other schedules, as in verl


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


def test_another_optimizer_class_gets_the_settings_it_takes_and_the_overrides():
    weight = torch.nn.Parameter(torch.ones(3))
    sgd = make_optimizer([weight], OptimConfig(optimizer="SGD", lr=0.5, weight_decay=0.0,
                                               override_optimizer_config={"momentum": 0.9}))
    assert isinstance(sgd, torch.optim.SGD) and sgd.param_groups[0]["momentum"] == 0.9  # betas and eps not passed
    weight.grad = torch.ones(3)
    sgd.step()
    assert torch.allclose(weight.detach(), torch.full((3,), 0.5))  # 1 - lr * g
    adamw = make_optimizer([weight], OptimConfig(override_optimizer_config={"amsgrad": True}))
    assert isinstance(adamw, torch.optim.AdamW) and adamw.param_groups[0]["amsgrad"]
    # eps at its default is the class's own, as verl passes none (Adagrad's 1e-10); a set eps is passed
    assert make_optimizer([weight], OptimConfig(optimizer="Adagrad")).param_groups[0]["eps"] == 1e-10
    assert make_optimizer([weight], OptimConfig(optimizer="Adagrad", eps=1e-3)).param_groups[0]["eps"] == 1e-3
    assert make_optimizer([weight], OptimConfig()).param_groups[0]["eps"] == 1e-8


@pytest.mark.parametrize("settings, message", [
    ({"optimizer": "Adamm"}, "optim.optimizer='Adamm' is not an optimizer class of torch.optim"),
    ({"optimizer": "Tensor", "optimizer_impl": "torch"}, "optim.optimizer='Tensor' is not an optimizer class of torch"),
    ({"optimizer_impl": "no_such_optimizers"}, "optim.optimizer_impl='no_such_optimizers' cannot be imported"),
])
def test_an_optimizer_that_cannot_be_found_is_a_config_error(settings, message):
    from reinforge.errors import ConfigError
    from reinforge.training.optim import optimizer_class

    with pytest.raises(ConfigError, match=message):
        optimizer_class(OptimConfig(**settings))


def test_resuming_with_another_lr_and_betas_uses_the_config_and_says_so():
    from reinforge.training.optim import apply_settings, group_settings, make_scheduler

    saved_cfg = OptimConfig(lr=1e-3, lr_warmup_steps=4, lr_scheduler_type="cosine")
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = make_optimizer([weight], saved_cfg)
    scheduler = make_scheduler(optimizer, saved_cfg, 10)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    state = optimizer.state_dict(), scheduler.state_dict()

    def resumed(cfg):
        optimizer = make_optimizer([weight], cfg)
        scheduler = make_scheduler(optimizer, cfg, 10)
        built = group_settings(optimizer)
        optimizer.load_state_dict(state[0])
        scheduler.load_state_dict(state[1])
        return optimizer, scheduler, apply_settings(optimizer, scheduler, cfg, "actor_rollout_ref.actor.optim", built)

    optimizer, scheduler, notes = resumed(saved_cfg)
    assert notes == [] and optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * 3 / 4)  # unchanged: as saved
    new_cfg = OptimConfig(lr=1e-5, betas=[0.8, 0.99], lr_warmup_steps=4, lr_scheduler_type="cosine")
    optimizer, scheduler, notes = resumed(new_cfg)
    assert notes == ["resumed with actor_rollout_ref.actor.optim.betas=[0.8, 0.99] (the checkpoint had [0.9, 0.999])",
                     "resumed with actor_rollout_ref.actor.optim.lr=1e-05 (the checkpoint had 0.001)"]
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-5 * 3 / 4)  # the new peak, at the saved point of warmup
    assert scheduler.get_last_lr() == [pytest.approx(1e-5 * 3 / 4)] and optimizer.param_groups[0]["betas"] == (0.8, 0.99)
    optimizer.step()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-5)  # warmup ends on the new peak


def test_a_finished_schedule_continued_for_more_steps_takes_the_new_schedules_lr_at_once():
    """A 10-step cosine run that finished (lr 0) resumed for 15 steps: the 11th step trains at the 15-step schedule's
    lr for it, not at the saved 0 (a step lost); resumed for the same 10 steps, the lr is the saved one, bit for bit."""
    from reinforge.training.optim import apply_settings, group_settings, make_scheduler

    cfg = OptimConfig(lr=1e-3, lr_scheduler_type="cosine")
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = make_optimizer([weight], cfg)
    scheduler = make_scheduler(optimizer, cfg, 10)
    middle = None
    for step in range(10):
        optimizer.step()
        scheduler.step()
        if step == 4:
            middle = optimizer.state_dict(), scheduler.state_dict(), optimizer.param_groups[0]["lr"]
    assert optimizer.param_groups[0]["lr"] == 0.0
    state = optimizer.state_dict(), scheduler.state_dict()
    for total, saved, expected in ((15, state, 1e-3 * lr_factor(10, cfg, 15)), (10, middle, middle[2])):
        optimizer = make_optimizer([weight], cfg)
        scheduler = make_scheduler(optimizer, cfg, total)
        built = group_settings(optimizer)
        optimizer.load_state_dict(saved[0])
        scheduler.load_state_dict(saved[1])
        assert apply_settings(optimizer, scheduler, cfg, "optim", built) == []
        assert optimizer.param_groups[0]["lr"] == expected and scheduler.get_last_lr() == [expected] and expected > 0


def test_resuming_with_the_same_overrides_changes_nothing_and_other_overrides_are_noted():
    from reinforge.training.optim import apply_settings, group_settings, make_scheduler

    saved_cfg = OptimConfig(optimizer="Adam", override_optimizer_config={"betas": [0.5, 0.9], "weight_decay": 0.0, "amsgrad": True})
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = make_optimizer([weight], saved_cfg)
    scheduler = make_scheduler(optimizer, saved_cfg, 10)
    state = optimizer.state_dict(), scheduler.state_dict()
    for cfg, expected in [
        (saved_cfg, []),  # the overrides are the settings the optimizer was built with: an exact resume
        (OptimConfig(optimizer="Adam", override_optimizer_config={"betas": [0.5, 0.9], "weight_decay": 0.0}),
         ["resumed with actor_rollout_ref.actor.optim.optimizer=Adam's amsgrad=False (the checkpoint had True)"]),
    ]:
        optimizer = make_optimizer([weight], cfg)
        scheduler = make_scheduler(optimizer, cfg, 10)
        built = group_settings(optimizer)
        optimizer.load_state_dict(state[0])
        scheduler.load_state_dict(state[1])
        assert apply_settings(optimizer, scheduler, cfg, "actor_rollout_ref.actor.optim", built) == expected
        assert group_settings(optimizer) == built
