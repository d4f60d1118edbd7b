"""On-policy distillation (`distillation.*`, training/distill.py): the losses by hand, the teachers' outputs and
routing, the config's mistakes, and runs in which the student moves towards its teacher."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch

from reinforge.batch import Batch
from reinforge.config import load_config
from reinforge.errors import ConfigError, DataError, ModelError
from reinforge.training.distill import teacher_log_probs, teacher_outputs, topk_losses
from reinforge.training.model import TOKENIZER_FILES
from reinforge.training.tiny_model import TinyModelSpec, ensure_tiny_model


def with_tokenizer_of(model: Path, student: Path, folder: Path) -> Path:
    """`model`'s weights and config in `folder`, with `student`'s tokenizer: a teacher of other weights that shares the
    student's tokenizer, as a distillation teacher must (tiny models of other seeds train tokenizers of their own)."""
    folder.mkdir(parents=True, exist_ok=True)
    for file in model.iterdir():
        if file.name in ("config.json", "generation_config.json", "model.safetensors"):
            shutil.copy(file, folder / file.name)
    for name in TOKENIZER_FILES + ("chat_template.jinja",):
        if (student / name).is_file():
            shutil.copy(student / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def teacher_path(cache_dir, tiny_model_path, tmp_path_factory):
    other = ensure_tiny_model(TinyModelSpec(seed=1), root=cache_dir / "models")
    return with_tokenizer_of(other, tiny_model_path, tmp_path_factory.mktemp("teacher"))


def distill_args(teacher, mode="k3", *extra):
    return ["distillation.enabled=true", f"distillation.teacher_models.teacher_model.model_path={teacher}",
            f"distillation.distillation_loss.loss_mode={mode}", *extra]


def test_forward_kl_over_the_teachers_top_k_by_hand():
    # one position, vocabulary 4; student logits log([4, 2, 1, 1]) -> p_s = [.5, .25, .125, .125]
    # teacher top-2: tokens 1 and 0 with p_t = .6 and .3
    logits = torch.tensor([[[math.log(4), math.log(2), 0.0, 0.0]]], requires_grad=True)
    teacher = torch.tensor([[[math.log(0.6), math.log(0.3)]]])
    ids = torch.tensor([[[1, 0]]])
    out = topk_losses(logits, 1.0, teacher, ids, None)
    expected = 0.6 * (math.log(0.6) - math.log(0.25)) + 0.3 * (math.log(0.3) - math.log(0.5))
    assert out["loss"].item() == pytest.approx(expected, abs=1e-6)
    assert out["student_mass"].item() == pytest.approx(0.75) and out["teacher_mass"].item() == pytest.approx(0.9)
    assert out["overlap_count"].item() == 2  # the student's own top-2 are tokens 0 and 1 too
    # d loss / d z_v = mass_t * p_s(v) - p_t(v) on the teacher's tokens (p_t = 0 elsewhere)
    out["loss"].sum().backward()
    p_s = torch.tensor([0.5, 0.25, 0.125, 0.125])
    assert torch.allclose(logits.grad[0, 0], 0.9 * p_s - torch.tensor([0.3, 0.6, 0.0, 0.0]), atol=1e-6)
    # at temperature 2 the student's distribution is that of logits / 2; a top-k KL below 0 counts 0
    same = topk_losses(logits.detach() * 2, 2.0, torch.log(torch.tensor([[[0.25, 0.5]]])), ids, None)
    assert same["loss"].item() == pytest.approx(0.0, abs=1e-6)


def test_teacher_outputs_are_its_log_softmax_at_the_sampled_token_or_its_top_k():
    logits = torch.randn(3, 5, 40, generator=torch.Generator().manual_seed(0))
    tokens = torch.randint(0, 40, (3, 5), generator=torch.Generator().manual_seed(1))
    exact = torch.log_softmax(logits, -1)
    values, ids = teacher_outputs(logits, tokens, 1)
    assert torch.equal(ids[..., 0], tokens) and torch.allclose(values[..., 0], exact.gather(-1, tokens[..., None])[..., 0], atol=1e-6)
    values, ids = teacher_outputs(logits, tokens, 6)
    top = exact.topk(6, -1)
    assert torch.equal(ids, top.indices) and torch.allclose(values, top.values, atol=1e-6)


def test_each_row_is_scored_by_the_teacher_its_data_source_names(tiny_model_path, teacher_path):
    from transformers import AutoModelForCausalLM

    from reinforge.config.distillation_schema import Teacher
    from reinforge.training.actor import response_log_probs

    models = {key: AutoModelForCausalLM.from_pretrained(path).eval() for key, path in (("a", tiny_model_path), ("b", teacher_path))}
    g = torch.Generator().manual_seed(0)
    rows, prompt, response = 4, 6, 5
    ids = torch.randint(3, 300, (rows, prompt + response), generator=g)
    batch = Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(prompt + response).repeat(rows, 1),
                   "responses": ids[:, prompt:]})
    batch["data_source"] = ["a", "b", "b", "a"]
    teachers = [(Teacher(key, "", ""), model) for key, model in models.items()]
    out = teacher_log_probs(teachers, batch, "data_source", 1, None, "cpu", True, False)
    for key, model in models.items():
        own, _ = response_log_probs(model, batch, 1.0)
        chosen = [r for r, source in enumerate(batch["data_source"]) if source == key]
        assert torch.allclose(out["teacher_logprobs"][chosen, :, 0], own[chosen], atol=1e-5)
    batch["data_source"] = ["a", "c", "b", "a"]
    with pytest.raises(DataError, match=r"rows whose data_source is 'c' have no teacher: the teachers' keys .* are a, b"):
        teacher_log_probs(teachers, batch, "data_source", 1, None, "cpu", True, False)


@pytest.mark.parametrize("overrides, message", [
    (["distillation.distillation_loss.loss_mode=k1"], r"loss_mode=k1 with use_policy_gradient=false: the gradient of k1"),
    (["distillation.distillation_loss.loss_mode=kll"], r"loss_mode='kll' is not one of: kl, k1, abs, mse, k2, low_var_kl, k3, "
                                                      r"forward_kl_topk"),
    (["distillation.distillation_loss.loss_mode=forward_kl_topk", "distillation.distillation_loss.topk=0"],
     r"distillation.distillation_loss.topk=0 must be a positive number of tokens"),
    (["distillation.distillation_loss.use_policy_gradient=true", "distillation.distillation_loss.policy_loss_mode=gspo"],
     r"policy_loss_mode='gspo': only vanilla"),
    (["distillation.teacher_models.teacher_model.model_path=null"], r"distillation.teacher_models.teacher_model.model_path is not set"),
    (["+distillation.teacher_models.math.model_path=/m", "+distillation.teacher_models.code.model_path=/c",
      "+distillation.teacher_models.code.key=code"], r"distillation.teacher_models.math.key is not set: with several teachers"),
    (["distillation.teacher_models.teacher_model.modelpath=/m"],
     r"unknown config key 'distillation.teacher_models.teacher_model.modelpath': a teacher has model_path, key"),
    (["+distillation.teacher_models.ta=/m"], r"distillation.teacher_models.ta='/m': a teacher is a mapping of model_path"),
    (["+distillation.teacher_models.t1.model_path=/m", "+distillation.teacher_models.t1.key=x",
      "+distillation.teacher_models.t2.model_path=/c", "+distillation.teacher_models.t2.key=x"], r"t2.key='x' is another teacher's too"),
])
def test_config_mistakes_name_the_key(small_run, teacher_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config([*small_run, *distill_args(teacher_path), *overrides])


def test_a_teacher_equal_to_the_student_costs_nothing(run_steps, tiny_model_path):
    for mode in ("k3", "forward_kl_topk"):
        steps = run_steps(*distill_args(tiny_model_path, mode, "distillation.distillation_loss.topk=8",
                                        "actor_rollout_ref.rollout.temperature=1.0"))
        first = steps[1]  # before the first update the two models are the same
        assert first["actor/distillation/loss"] == pytest.approx(0.0, abs=1e-6) and abs(first["actor/distillation/loss_max"]) < 1e-5
        assert first["timing_s/teacher"] > 0


@pytest.mark.parametrize("mode", ["forward_kl_topk", "k3"])
def test_the_student_moves_towards_its_teacher(run_steps, teacher_path, mode):
    """Distillation alone (no task loss): the student's distance to a teacher of other weights falls over 12 steps."""
    steps = run_steps(*distill_args(teacher_path, mode, "distillation.distillation_loss.use_task_rewards=false",
                                    "distillation.distillation_loss.topk=16"),
                      "trainer.total_training_steps=12", "data.max_response_length=16", "data.train_batch_size=4",
                      "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "data.max_samples=64")
    losses = [steps[s]["actor/distillation/loss"] for s in sorted(steps)]
    assert sum(losses[-3:]) < 0.75 * sum(losses[:3]), losses
    assert all(steps[s]["actor/loss"] == steps[s]["actor/distillation/loss"] for s in steps)  # the task's loss is left out
    assert not any("actor/pg_loss" in metrics for metrics in steps.values())  # and not computed, as verl's ppo_loss


def test_distillation_as_a_reward_beside_the_task_loss(run_steps, teacher_path):
    steps = run_steps(*distill_args(teacher_path, "k1", "distillation.distillation_loss.use_policy_gradient=true",
                                    "distillation.distillation_loss.distillation_loss_coef=0.5"),
                      "actor_rollout_ref.actor.ppo_epochs=2")
    for metrics in steps.values():
        for name in ("actor/distillation/pg_clipfrac", "actor/distillation/ppo_kl", "actor/distillation/abs_loss", "actor/distillation/loss_min"):
            assert math.isfinite(metrics[name]), name
        assert metrics["actor/loss"] == pytest.approx(metrics["actor/pg_loss"] + 0.5 * metrics["actor/distillation/loss"], abs=1e-6)


def test_every_distillation_metric_is_documented(run_steps, teacher_path, tmp_path):
    from tests.trainer.test_metrics_documented import DOC, documented_patterns

    patterns = documented_patterns(DOC.read_text())
    seen = set()
    for mode, extra in (("forward_kl_topk", ()), ("k1", ("distillation.distillation_loss.use_policy_gradient=true",))):
        for metrics in run_steps(*distill_args(teacher_path, mode, *extra), run_dir=tmp_path / mode).values():
            seen |= set(metrics)
    assert {"actor/distillation/student_mass_max", "actor/distillation/pg_clipfrac", "timing_s/teacher"} <= seen
    assert [key for key in sorted(seen) if not any(p.match(key) for p in patterns)] == []


def test_start_up_mistakes_name_the_teacher_before_training(run_steps, teacher_path, tmp_path, cache_dir):
    with pytest.raises(ModelError, match=r"distillation.teacher_models.teacher_model.model_path=.*nowhere"):
        run_steps(*distill_args(tmp_path / "nowhere"))
    small_vocab = ensure_tiny_model(TinyModelSpec(vocab_size=256), root=cache_dir / "models")
    with pytest.raises(ModelError, match=r"model_path=.*: the teacher's tokenizer gives \d+ of the student's 384 tokens other ids"):
        run_steps(*distill_args(small_vocab))
    weights_only = tmp_path / "weights_only"  # no tokenizer to compare: the size of its vocabulary still is
    weights_only.mkdir()
    for file in small_vocab.iterdir():
        if file.name in ("config.json", "model.safetensors", "generation_config.json"):
            (weights_only / file.name).write_bytes(file.read_bytes())
    with pytest.raises(ModelError, match=r"the teacher scores 259 tokens, fewer than the student's tokenizer has \(384\)"):
        run_steps(*distill_args(weights_only))
    two = ["+distillation.teacher_models.a.model_path=" + str(teacher_path), "+distillation.teacher_models.a.key=elsewhere",
           "+distillation.teacher_models.b.model_path=" + str(teacher_path), "+distillation.teacher_models.b.key=other"]
    with pytest.raises(DataError, match=r"train.*: rows whose data_source is '.*' have no teacher: the teachers' keys .* are "
                                        r"elsewhere, other"):
        run_steps(*distill_args(teacher_path), *two)
    with pytest.raises(DataError, match=r"rows with no value in column 'task', which distillation.teacher_key names"):
        run_steps(*distill_args(teacher_path), *two, "distillation.teacher_key=task")
    with pytest.raises(ConfigError, match=r"distillation.distillation_loss.topk=1000 is more tokens than the teacher .* and the "
                                          r"student share \(384\)"):
        run_steps(*distill_args(teacher_path, "forward_kl_topk", "distillation.distillation_loss.topk=1000"))
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # nothing trained


def test_a_teacher_with_a_larger_padded_vocabulary_gives_top_k_ids_the_student_has(run_steps, cache_dir, tiny_model_path,
                                                                                     tmp_path):
    """A teacher whose embedding has more rows than the student's logits (a padded vocabulary): its top-k is taken among
    the ids the student scores, so the top-k loss can index them."""
    larger = with_tokenizer_of(ensure_tiny_model(TinyModelSpec(vocab_size=512, seed=1), root=cache_dir / "models"),
                               tiny_model_path, tmp_path / "larger")
    steps = run_steps(*distill_args(larger, "forward_kl_topk", "distillation.distillation_loss.topk=16"))
    assert all(math.isfinite(metrics["actor/distillation/loss"]) for metrics in steps.values())
    logits = torch.randn(2, 3, 40)
    values, ids = teacher_outputs(logits, torch.zeros(2, 3, dtype=torch.long), 4, vocab_limit=30)
    exact = torch.log_softmax(logits, -1)
    assert int(ids.max()) < 30 and torch.allclose(values, exact.gather(-1, ids), atol=1e-6)  # the teacher's own log-probs
