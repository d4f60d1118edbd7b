"""PPO with a critic (GAE) learns the built-in task: validation reward rises and the critic explains the returns.

The quickstart preset with `algorithm.adv_estimator=gae`: the critic is the same tiny model with a
fresh value head. About 40 s on 2 cores once the quickstart model is cached (the session's first
user builds it).
"""

import json

from reinforge.config import load_config
from reinforge.trainer.main import run

KEY = "val-core/reinforge/add_one/acc/mean@1"


def test_ppo_with_gae_raises_validation_reward(cache_dir, tmp_path):
    run_dir = tmp_path / "ppo"
    config, keys = load_config(["algorithm.adv_estimator=gae", "critic.optim.lr=1e-3",
                                "critic.model.enable_gradient_checkpointing=false", "trainer.total_training_steps=100",
                                "trainer.test_freq=100", "trainer.save_freq=-1", f"trainer.default_local_dir={run_dir}"])
    run(config, keys)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    vals = [(r["step"], r[KEY]) for r in records if KEY in r]
    (first_step, initial), (last_step, final) = vals[0], vals[-1]
    assert (first_step, last_step) == (0, 100)
    assert final >= initial + 0.15, vals
    steps = [r for r in records if "timing_s/step" in r]
    late = [r["critic/vf_explained_var"] for r in steps[-20:]]
    assert sum(late) / len(late) > 0.0, late  # the value model predicts the returns better than their mean
