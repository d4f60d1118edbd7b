"""Every key a run writes to metrics.jsonl is documented in docs/metrics.md.

Short runs cover the metric families: GRPO with a KL loss and validation n > 1; GAE with a critic,
KL in the reward, two PPO epochs and a checkpoint; DAPO's dynamic sampling with a reward function
that returns extra keys; a bf16 engine with every kind of rollout-correction metric. The doc's
tables are parsed; a name there may hold `<placeholders>` (one path segment; `<data_source>` any
text) and `@N` (a number), so a new metric fails this test
until it is documented.
"""

import re
from pathlib import Path

import pytest

from tests.trainer.conftest import records

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

EXTRA_KEYS_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    score = sum(map(ord, solution_str)) % 7 / 7
    return {"score": score, "acc": float(score > 0.5), "pred": solution_str[:3]}
"""


def documented_patterns(doc: str) -> list[re.Pattern]:
    """One regex per metric name in the first column of the doc's tables (`name` in backticks)."""
    patterns = []
    for line in doc.splitlines():
        cells = line.split("|")
        if not line.startswith("|") or len(cells) < 3:
            continue
        for name in re.findall(r"`([^`]+)`", cells[1]):
            regex = re.escape(name).replace("<data_source>", ".+")  # re.escape leaves < > alone; a data source may hold "/"
            regex = re.sub(r"<[^>]+>", "[^/]+", regex)  # any other placeholder is one path segment
            regex = regex.replace("@N", "@[0-9]+")
            patterns.append(re.compile(regex + r"\Z"))
    return patterns


def undocumented(keys: set[str]) -> list[str]:
    patterns = documented_patterns(DOC.read_text())
    return sorted(key for key in keys if key != "step" and not any(p.match(key) for p in patterns))


def test_the_doc_table_parser_matches_placeholders_and_nothing_else():
    patterns = documented_patterns("| metric | meaning |\n|---|---|\n| `val-core/<data_source>/<var>/mean@N`, `perf/x` | y |\n"
                                   "not a table `timing_s/z`\n")
    assert len(patterns) == 2
    assert patterns[0].match("val-core/gsm8k/reward/mean@4")
    assert patterns[0].match("val-core/reinforge/add_one/acc/mean@16")  # a data source with a slash
    assert not patterns[0].match("val-core/gsm8k/reward/mean@4/std")
    assert not patterns[0].match("val-core/gsm8k/reward/mean@N")
    assert patterns[1].match("perf/x") and not patterns[1].match("perf/xy")
    assert not any(p.match("timing_s/z") for p in patterns)


def test_the_real_doc_documents_the_core_names_and_rejects_others():
    assert undocumented({"perf/mfu/actor", "timing_s/update_weights", "val-aux/gsm8k/acc/pass@4", "reward/acc/mean"}) == []
    assert undocumented({"perf/made_up", "timing_s/made_up", "actor/made_up"}) == ["actor/made_up", "perf/made_up", "timing_s/made_up"]


RUNS = {
    "grpo_kl_loss_validation_n2": [
        "actor_rollout_ref.actor.use_kl_loss=true", "trainer.test_freq=2", "trainer.val_before_train=true",
        "actor_rollout_ref.rollout.val_kwargs.n=2", "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
    ],
    "gae_critic_kl_in_reward_checkpoint": [
        "algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true", "actor_rollout_ref.actor.ppo_epochs=2",
        "trainer.save_freq=2",
    ],
    "dapo_filter_groups_extra_reward_keys": [
        "algorithm.filter_groups.enable=true", "data.gen_batch_size=4", "reward_model.reward_manager=dapo",
        "algorithm.filter_groups.max_num_gen_batches=0",
    ],
    "rollout_correction_bf16_engine": [
        "actor_rollout_ref.rollout.dtype=bf16", "algorithm.rollout_correction.rollout_is=token",
        "algorithm.rollout_correction.rollout_is_threshold=0.999_1.001", "algorithm.rollout_correction.rollout_is_batch_normalize=true",
        'algorithm.rollout_correction.rollout_rs="token_k1,seq_max_k3"', 'algorithm.rollout_correction.rollout_rs_threshold="1.001,1e-4"',
        "actor_rollout_ref.actor.calculate_sum_pi_squared=true",
    ],
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_logged_metric_is_documented(name, run_steps, tmp_path):
    extra = list(RUNS[name])
    if name.startswith("dapo"):
        reward = tmp_path / "extra_keys_reward.py"
        reward.write_text(EXTRA_KEYS_REWARD)
        extra.append(f"custom_reward_function.path={reward}")
    run_dir = tmp_path / "run"
    steps = run_steps(*extra, run_dir=run_dir)
    assert sorted(steps) == [1, 2]
    keys = {key for record in records(run_dir) for key in record}
    assert undocumented(keys) == [], f"add these to {DOC} (a table row each)"
    # the run did produce the families it is here to cover
    expected = {
        "grpo_kl_loss_validation_n2": ["actor/kl_loss", "val-core/reinforge/add_one/acc/mean@2", "timing_s/testing"],
        "gae_critic_kl_in_reward_checkpoint": ["critic/vf_loss", "critic/values/mean", "timing_s/values",
                                               "timing_s/update_critic", "timing_s/save_checkpoint", "timing_s/old_log_prob",
                                               "actor/reward_kl_penalty"],
        "dapo_filter_groups_extra_reward_keys": ["train/num_gen_batches", "reward/acc/mean"],
        "rollout_correction_bf16_engine": ["training/rollout_probs_diff_mean", "rollout_corr/chi2_seq",
                                           "rollout_corr/rollout_is_oob_ratio", "rollout_corr/rollout_is_batch_norm_factor",
                                           "rollout_corr/rollout_rs_seq_max_k3_masked_fraction",
                                           "variance_proxy/proxy2_total_power", "variance_proxy/proxy3_pure_noise"],
    }[name]
    assert [key for key in expected if key not in keys] == []
