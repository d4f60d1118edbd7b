"""The optimal token baseline in a run: the old-log-prob pass adds sum_pi_squared, the estimator gets it with the
actor's old log-probs, and the config refuses what cannot give it. (Two steps with each estimator:
test_algorithms_end_to_end.py.)"""

import pytest
import torch
from transformers import AutoConfig

from reinforge.algorithm import register_adv_est
from reinforge.algorithm.advantage import ADV_ESTIMATOR_REGISTRY
from reinforge.batch import Batch
from reinforge.config import load_config, unused_settings
from reinforge.errors import ConfigError
from reinforge.training.actor import response_logits
from reinforge.training.workers import ActorRolloutRefWorker

ONE_STEP = "trainer.total_training_steps=1"


def test_the_estimator_receives_the_actors_probabilities(run_steps, tiny_model_path, tmp_path):
    """A user's estimator that takes **kwargs gets sum_pi_squared when actor.calculate_sum_pi_squared is set; each
    value is a sum of squared probabilities: at least the sampled token's p^2 and 1/vocabulary, at most 1."""
    seen = {}

    @register_adv_est("_recording_estimator")
    def recording(token_level_rewards, response_mask, **kwargs):
        seen.update(kwargs, mask=response_mask.clone())
        return response_mask * 0.5, response_mask * 0.5

    try:
        metrics = run_steps(ONE_STEP, "algorithm.adv_estimator=_recording_estimator",
                            "actor_rollout_ref.actor.calculate_sum_pi_squared=true", run_dir=tmp_path / "record")[1]
    finally:
        ADV_ESTIMATOR_REGISTRY.pop("_recording_estimator", None)
    assert "timing_s/old_log_prob" in metrics
    mask = seen["mask"].bool()
    spp, p = seen["sum_pi_squared"][mask], seen["old_log_probs"][mask].exp()
    assert spp.shape == p.shape and len(p) > 0
    assert torch.all(spp >= p.square() * (1 - 1e-5)) and torch.all(spp <= 1 + 1e-6)
    vocab = AutoConfig.from_pretrained(tiny_model_path).vocab_size  # the logits' width
    assert torch.all(spp >= 1 / vocab * (1 - 1e-4))
    assert seen["rollout_is_weights"] is None


def test_the_worker_computes_sum_pi_squared_from_its_own_logits(small_run, tmp_path):
    config, _ = load_config([*small_run, f"trainer.default_local_dir={tmp_path}",
                             "algorithm.adv_estimator=optimal_token_baseline", "actor_rollout_ref.rollout.temperature=0.7"])
    worker = ActorRolloutRefWorker(config, role="actor_rollout")
    worker.init_model(total_training_steps=1)
    torch.manual_seed(0)
    prompts = Batch({"input_ids": torch.randint(3, 20, (4, 6)), "attention_mask": torch.ones(4, 6, dtype=torch.long),
                     "position_ids": torch.arange(6).repeat(4, 1)})
    batch = worker.generate_sequences(prompts)
    out = worker.compute_log_prob(batch)
    with torch.no_grad():  # the model where the worker put it (a GPU when one is present), the results back on the CPU
        device = next(worker.actor.model.parameters()).device
        logits = response_logits(worker.actor.model, batch.to(device), share_prompt=False).logits.cpu()
        probs = torch.softmax(logits.double() / 0.7, -1)
    mask = batch["response_mask"].bool()
    expected = probs.square().sum(-1)
    picked = probs.gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(out["sum_pi_squared"][mask].double(), expected[mask], rtol=1e-5)
    assert torch.allclose(out["old_log_probs"][mask].double(), picked[mask].log(), atol=1e-5)


def test_config_refuses_bypass_mode_and_reports_the_inert_checkpointing_key(small_run):
    with pytest.raises(ConfigError, match=r"algorithm\.adv_estimator=optimal_token_baseline weighs its baseline by the actor's "
                                          r"sum of squared token probabilities, which the old-log-prob pass computes and "
                                          r"algorithm\.rollout_correction\.bypass_mode=true skips"):
        load_config([*small_run, "algorithm.adv_estimator=optimal_token_baseline",
                     "algorithm.rollout_correction.bypass_mode=true"])
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.actor\.calculate_sum_pi_squared=true adds sum_pi_squared in the "
                                          r"old-log-prob pass, which algorithm\.rollout_correction\.bypass_mode=true skips"):
        load_config([*small_run, "actor_rollout_ref.actor.calculate_sum_pi_squared=true",
                     "algorithm.rollout_correction.bypass_mode=true"])
    config, keys = load_config([*small_run, "algorithm.adv_estimator=optimal_token_baseline",
                                "actor_rollout_ref.actor.sum_pi_squared_checkpointing=true"])
    assert any(line.startswith("actor_rollout_ref.actor.sum_pi_squared_checkpointing") for line in unused_settings(config, keys))
