"""Every estimator, loss and KL kind through the real trainer for two steps; the critic, ReMax, DAPO, custom modules."""

import json
import math
import re
from pathlib import Path

import pytest
import torch

from reinforge.algorithm import adv_estimator_names, policy_loss_names
from reinforge.errors import ConfigError

BUILT_IN_ESTIMATORS = ["gae", "gpg", "grpo", "grpo_passk", "grpo_vectorized", "opo", "optimal_token_baseline", "reinforce_plus_plus",
                       "reinforce_plus_plus_baseline", "remax", "rloo", "rloo_vectorized", "tir_optimal_token_baseline"]
BUILT_IN_LOSSES = ["cispo", "clip_cov", "dppo_kl", "dppo_tv", "dro", "geo_mean", "gpg", "gspo", "kl_cov", "sapo", "up", "vanilla"]


def finite(metrics: dict, name: str) -> bool:
    return name in metrics and math.isfinite(metrics[name])


def test_every_built_in_name_is_covered_here():
    assert set(BUILT_IN_ESTIMATORS) <= set(adv_estimator_names())
    assert set(BUILT_IN_LOSSES) <= set(policy_loss_names())


@pytest.mark.parametrize("estimator", BUILT_IN_ESTIMATORS)
def test_two_steps_with_each_estimator(run_steps, estimator):
    steps = run_steps(f"algorithm.adv_estimator={estimator}")
    assert sorted(steps) == [1, 2]
    for metrics in steps.values():
        assert finite(metrics, "actor/pg_loss") and finite(metrics, "actor/grad_norm")
        assert finite(metrics, "critic/advantages/mean") and finite(metrics, "critic/returns/mean")
        assert metrics["critic/advantages/max"] > metrics["critic/advantages/min"]  # the updates had a signal
        assert ("critic/vf_loss" in metrics) == (estimator == "gae")  # the critic exists only when values are used
        assert ("timing_s/gen_max" in metrics) == (estimator == "remax")  # ReMax's greedy baseline rollout
        # on-policy GRPO-style steps skip the old-log-prob pass; the token baseline needs its sum_pi_squared
        assert ("timing_s/old_log_prob" in metrics) == estimator.endswith("optimal_token_baseline")


@pytest.mark.parametrize("loss_mode", BUILT_IN_LOSSES)
@pytest.mark.parametrize("ppo", [False, True], ids=["on_policy", "two_epochs"])
def test_two_steps_with_each_policy_loss(run_steps, loss_mode, ppo):
    extra = ["actor_rollout_ref.actor.ppo_epochs=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"] if ppo else []
    steps = run_steps(f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}",
                      "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.5", "actor_rollout_ref.actor.policy_loss.dro_beta=0.5",
                      *extra)
    for metrics in steps.values():
        for name in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower", "actor/entropy"):
            assert finite(metrics, name), name
        if not ppo:
            assert metrics["actor/ppo_kl"] == 0.0  # on-policy: old log-probs are the current ones
    if ppo:  # the second epoch sees a moved policy
        assert any(s["actor/ppo_kl"] != 0.0 for s in steps.values())


@pytest.mark.parametrize("kl_type", ["k1", "abs", "k2", "k3", "full", "k3+", "kl+"])
def test_kl_loss_kinds(run_steps, kl_type):
    steps = run_steps("actor_rollout_ref.actor.use_kl_loss=true", f"actor_rollout_ref.actor.kl_loss_type={kl_type}",
                      "actor_rollout_ref.actor.kl_loss_coef=0.1")
    assert steps[1]["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)  # the policy starts as the reference
    assert steps[2]["actor/kl_loss"] != 0.0 and finite(steps[2], "actor/kl_loss")


@pytest.mark.parametrize("kl_type", ["kl", "low_var_kl", "full"])
def test_kl_in_reward_with_the_adaptive_controller(run_steps, tmp_path, kl_type):
    steps = run_steps("algorithm.use_kl_in_reward=true", f"algorithm.kl_penalty={kl_type}", "algorithm.kl_ctrl.type=adaptive",
                      "algorithm.kl_ctrl.kl_coef=0.5", "algorithm.kl_ctrl.target_kl=0.01", "algorithm.kl_ctrl.horizon=10",
                      "trainer.save_freq=2")
    assert steps[1]["actor/reward_kl_penalty"] == pytest.approx(0.0, abs=1e-6)
    # step 1 saw KL 0 < target: the coefficient shrank by (1 - 0.2 * 4 trajectories / 10)
    assert steps[2]["actor/reward_kl_penalty_coeff"] == pytest.approx(0.5 * (1 - 0.2 * 4 / 10))
    kl2 = steps[2]["actor/reward_kl_penalty"]
    assert kl2 != 0 and (kl2 > 0 or kl_type == "kl")  # k1 (log-ratio of sampled tokens) can average below 0; k3, full cannot
    state = json.loads((tmp_path / "run" / "global_step_2" / "trainer_state.json").read_text())
    expected = 0.5 * 0.92 * (1 + max(min(kl2 / 0.01 - 1, 0.2), -0.2) * 4 / 10)
    assert state["kl_ctrl"]["value"] == pytest.approx(expected)  # the adaptive coefficient is checkpointed


def test_ppo_with_a_critic_warms_up_checkpoints_and_resumes_exactly(run_steps, tmp_path):
    common = ["algorithm.adv_estimator=gae", "algorithm.lam=0.95", "trainer.critic_warmup=1", "trainer.save_freq=2",
              "trainer.total_training_steps=4", "critic.ppo_micro_batch_size_per_gpu=1"]
    straight = run_steps(*common, run_dir=tmp_path / "straight")
    assert "actor/pg_loss" not in straight[1] and "actor/pg_loss" in straight[2]  # step 1 trains only the critic
    for metrics in straight.values():
        for name in ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "critic/lr",
                     "critic/values/mean", "critic/vf_explained_var", "timing_s/values", "timing_s/update_critic"):
            assert finite(metrics, name), name
    critic = tmp_path / "straight" / "global_step_4" / "critic"
    assert (critic / "model_world_size_1_rank_0.pt").is_file() and (critic / "optim_world_size_1_rank_0.pt").is_file()

    resumed = tmp_path / "resumed"
    run_steps(*common, "trainer.total_training_steps=2", run_dir=resumed)
    again = run_steps(*common, run_dir=resumed)  # resumes at step 3; metrics.jsonl keeps steps 1-2
    for step in (3, 4):
        for name in ("critic/vf_loss", "critic/values/mean", "actor/pg_loss", "critic/score/mean"):
            assert again[step][name] == straight[step][name], (step, name)
    a = torch.load(critic / "model_world_size_1_rank_0.pt")
    b = torch.load(resumed / "global_step_4" / "critic" / "model_world_size_1_rank_0.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_critic_checkpoints_have_their_own_retention(run_steps, tmp_path):
    run_steps("algorithm.adv_estimator=gae", "trainer.save_freq=1", "trainer.total_training_steps=3",
              "trainer.max_critic_ckpt_to_keep=1")
    run_dir = tmp_path / "run"
    assert [(run_dir / f"global_step_{s}" / "critic").is_dir() for s in (1, 2, 3)] == [False, False, True]
    assert all((run_dir / f"global_step_{s}" / "actor").is_dir() for s in (1, 2, 3))
    # and the actor's limit keeps the critic's parts it does not cover, as verl's per-role retention; a step with
    # neither left goes whole; a limit below 1 keeps all (verl's)
    other = tmp_path / "other"
    run_steps("algorithm.adv_estimator=gae", "trainer.save_freq=1", "trainer.total_training_steps=3",
              "trainer.max_actor_ckpt_to_keep=1", "trainer.max_critic_ckpt_to_keep=2", run_dir=other)
    assert [sorted(p.name for p in (other / f"global_step_{s}").iterdir() if p.is_dir()) if (other / f"global_step_{s}").exists()
            else None for s in (1, 2, 3)] == [None, ["critic"], ["actor", "critic"]]
    third = tmp_path / "third"
    run_steps("trainer.save_freq=1", "trainer.total_training_steps=3", "trainer.max_actor_ckpt_to_keep=-1", run_dir=third)
    assert all((third / f"global_step_{s}" / "actor").is_dir() for s in (1, 2, 3))


@pytest.mark.parametrize("metric", ["seq_reward", "reward"])  # the recipe's name of the summed reward, and verl v1's
def test_dynamic_sampling_keeps_only_groups_whose_reward_varies(run_steps, tmp_path, metric):
    reward = tmp_path / "reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if extra_info['index'] % 2 == 0:\n"
        "        return {'score': 0.5, 'acc': 0.5}  # the same for every response: no learning signal\n"
        "    return {'score': float(len(solution_str)), 'acc': float(len(solution_str) % 2)}\n"
    )
    rollouts = tmp_path / "rollouts"
    steps = run_steps(f"custom_reward_function.path={reward}", "algorithm.filter_groups.enable=true",
                      f"algorithm.filter_groups.metric={metric}", "data.gen_batch_size=2", "data.train_batch_size=2",
                      "actor_rollout_ref.rollout.n=4", "data.shuffle=false", f"trainer.rollout_data_dir={rollouts}",
                      "data.max_response_length=6", "actor_rollout_ref.rollout.temperature=3.0")
    for step, metrics in steps.items():
        assert metrics["train/num_dropped_groups"] >= metrics["train/num_gen_batches"]  # each batch of 2 has one constant group
        assert metrics["train/num_generated_groups"] == 2 * metrics["train/num_gen_batches"]
        kept = [json.loads(line) for line in (rollouts / f"{step}.jsonl").read_text().splitlines()]
        assert len(kept) == 2 * 4  # train_batch_size groups of n
        assert all(r["score"] != 0.5 for r in kept)


def test_dynamic_sampling_ends_the_run_when_total_epochs_are_used_up_as_verl(run_steps, tmp_path, capsys):
    """10 prompts, one epoch, each step needs 2 generation batches of 2 (half the groups never vary): verl's loop over
    total_epochs trains 2 steps; the 3rd runs out of data after its first batch, and the run ends after step 2,
    checkpointed. The filter's metric may be the reward function's own `score` (verl's reward managers keep it)."""
    reward = tmp_path / "reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if extra_info['index'] % 2 == 0:\n"
        "        return {'score': 0.5, 'acc': 1.0}\n"
        "    return {'score': sum(map(ord, solution_str)) % 7 / 7, 'acc': 1.0}  # acc never varies: score must be read\n")
    overrides = [f"custom_reward_function.path={reward}", "algorithm.filter_groups.enable=true",
                 "algorithm.filter_groups.metric=score", "data.gen_batch_size=2", "data.train_batch_size=2",
                 "actor_rollout_ref.rollout.n=4", "data.shuffle=false", "data.max_samples=10", "trainer.total_epochs=1",
                 "trainer.total_training_steps=null", "trainer.save_freq=5", "actor_rollout_ref.rollout.temperature=3.0"]
    steps = run_steps(*overrides)
    assert sorted(steps) == [1, 2] and all(s["train/num_gen_batches"] == 2 for s in steps.values())
    out = capsys.readouterr().out
    assert ("the training data ran out during step 3: algorithm.filter_groups had kept 1 of 2 prompt groups from 1 "
            "generation batches when the 1 epochs (trainer.total_epochs) of data.train_files were used up; training ends "
            "after step 2") in out
    assert (tmp_path / "run" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    again = run_steps(*overrides)  # resumed: the data stays used up, nothing more is trained
    assert sorted(again) == [1, 2] and "training ends after step 2" in capsys.readouterr().out


def test_dynamic_sampling_joins_batches_whose_reward_keys_differ(run_steps, tmp_path):
    """The first generation batch's rows return plain numbers (an acc column), the next ones dicts without acc: the
    kept rows are joined with acc None where a batch had none."""
    reward = tmp_path / "reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if extra_info['index'] < 2:\n"
        "        return 0.5  # constant: these groups are dropped, but their batch has an acc column\n"
        "    return {'score': sum(map(ord, solution_str)) % 7 / 7}\n")
    steps = run_steps(f"custom_reward_function.path={reward}", "algorithm.filter_groups.enable=true",
                      "data.gen_batch_size=2", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=4", "data.shuffle=false",
                      "trainer.total_training_steps=1", "actor_rollout_ref.rollout.temperature=3.0")
    assert steps[1]["train/num_gen_batches"] >= 2 and steps[1]["train/num_dropped_groups"] >= 2


def test_pf_ppo_trains_on_a_redraw_of_the_batch(run_steps, tmp_path):
    """max_min redraws only the batch's best and worst responses; the same step without PF-PPO generated the same ones."""
    common = ["algorithm.adv_estimator=gae", "actor_rollout_ref.rollout.n=4", "trainer.total_training_steps=1",
              "data.max_response_length=6", "actor_rollout_ref.rollout.temperature=3.0"]
    scores = {}
    for name, extra in (("plain", []), ("pf_ppo", ["algorithm.use_pf_ppo=true", "algorithm.pf_ppo.reweight_method=max_min"])):
        rollouts = tmp_path / name / "rollouts"
        metrics = run_steps(*common, *extra, f"trainer.rollout_data_dir={rollouts}", run_dir=tmp_path / name)[1]
        assert "critic/vf_loss" in metrics and "actor/pg_loss" in metrics
        scores[name] = [json.loads(line)["score"] for line in (rollouts / "1.jsonl").read_text().splitlines()]
    plain, redrawn = scores["plain"], scores["pf_ppo"]
    assert len(redrawn) == len(plain) == 8 and len(set(plain)) > 2  # more than two scores to choose from
    assert set(redrawn) <= {min(plain), max(plain)} and len(set(redrawn)) == 2


def test_dynamic_sampling_joins_batches_whose_prompts_differ_in_length(run_steps, tmp_path):
    data = tmp_path / "varied.jsonl"
    rows = [{"data_source": "reinforge/add_one", "prompt": [{"role": "user", "content": "Add 1: " + "3" * (1 + i % 5)}],
             "reward_model": {"ground_truth": "4"}, "extra_info": {"index": i}} for i in range(16)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    reward = tmp_path / "reward.py"
    reward.write_text(  # the even rows' groups never vary, so every step needs a second generation batch
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return 0.5 if extra_info['index'] % 2 == 0 else sum(map(ord, solution_str)) % 7 / 7\n")
    steps = run_steps(f"data.train_files={data}", f"data.val_files={data}", f"custom_reward_function.path={reward}",
                      "algorithm.filter_groups.enable=true", "data.gen_batch_size=2", "data.train_batch_size=2",
                      "actor_rollout_ref.rollout.n=4", "data.shuffle=false")
    assert all(s["train/num_gen_batches"] >= 2 for s in steps.values())
    assert all(s["prompt_length/max"] > s["prompt_length/min"] for s in steps.values())


def test_critic_warmup_without_a_critic_does_not_stop_the_actor(run_steps):
    steps = run_steps("trainer.critic_warmup=2")
    assert all("actor/pg_loss" in s for s in steps.values())


def test_dapo_overlong_shaping_through_the_config(run_steps):
    steps = run_steps("reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.max_resp_len=4",
                      "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
                      "+reward_model.reward_kwargs.overlong_buffer_cfg.len=2",
                      "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
                      "+reward_model.reward_kwargs.overlong_buffer_cfg.log=true", "actor_rollout_ref.rollout.ignore_eos=true")
    for metrics in steps.values():  # every response has the full 4 tokens: 2 past the expected 2, penalty -2/2 * 1.0
        assert metrics["reward/overlong_reward/mean"] == pytest.approx(-1.0)
        assert metrics["reward/overlong/mean"] == 1.0


def test_dynamic_sampling_gives_up_with_a_clear_message(run_steps, tmp_path):
    from reinforge.errors import ConfigError

    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n")
    with pytest.raises(ConfigError, match="after 3 generation batches only 0 of 2 prompt groups had a varying seq_reward"):
        run_steps(f"custom_reward_function.path={reward}", "algorithm.filter_groups.enable=true",
                  "algorithm.filter_groups.max_num_gen_batches=3")
    with pytest.raises(ConfigError, match=r"only 0 of 2 prompt groups had a mean seq_reward within \[0.0, 0.5\] \(band_pass\)"):
        run_steps(f"custom_reward_function.path={reward}", "algorithm.filter_groups.enable=true",
                  "algorithm.filter_groups.filter_type=band_pass", "algorithm.filter_groups.lower_bound=0",
                  "algorithm.filter_groups.upper_bound=0.5", "algorithm.filter_groups.max_num_gen_batches=2",
                  run_dir=tmp_path / "band_pass")


def test_the_documented_custom_module_registers_an_estimator_and_a_loss(run_steps, tmp_path):
    doc = (Path(__file__).parents[2] / "docs" / "algorithms.md").read_text()
    module = tmp_path / "my_algos.py"
    module.write_text(re.search(r"```python\n# my_algos.py\n(.*?)```", doc, re.S).group(1))
    rollouts = tmp_path / "rollouts"
    steps = run_steps(f"algorithm.custom_modules=[{module}]", "algorithm.adv_estimator=centred",
                      "actor_rollout_ref.actor.policy_loss.loss_mode=reinforce", f"trainer.rollout_data_dir={rollouts}")
    for step, metrics in steps.items():
        scores = [json.loads(line)["score"] for line in (rollouts / f"{step}.jsonl").read_text().splitlines()]
        mean = sum(scores) / len(scores)  # "centred": score minus the batch mean, on every token
        assert metrics["critic/advantages/max"] == pytest.approx(max(scores) - mean, abs=1e-6)
        assert metrics["critic/advantages/min"] == pytest.approx(min(scores) - mean, abs=1e-6)
        assert "actor/pg_clipfrac" not in metrics  # the documented loss reports no metrics of its own


def test_unknown_names_list_the_registered_ones(tiny_model_path):
    from reinforge.config import load_config
    from reinforge.errors import ConfigError

    base = [f"actor_rollout_ref.model.path={tiny_model_path}", "data.train_files=/x.parquet"]
    with pytest.raises(ConfigError, match="algorithm.adv_estimator=.grp. is not one of: gae, gdpo, gpg, grpo"):
        load_config([*base, "algorithm.adv_estimator=grp"])
    with pytest.raises(ConfigError, match="loss_mode=.vanila. is not one of: cispo, clip_cov, cppo, dppo_kl, dppo_tv, dro, geo_mean"):
        load_config([*base, "actor_rollout_ref.actor.policy_loss.loss_mode=vanila"])
    with pytest.raises(ConfigError, match=r"algorithm.custom_modules: .*missing_algos.py does not exist"):
        load_config([*base, "algorithm.custom_modules=[/nowhere/missing_algos.py]"])


def test_a_custom_estimator_taking_epsilon_gets_verls_default(run_steps, tmp_path):
    module = tmp_path / "eps_algos.py"
    module.write_text("from reinforge.algorithm import register_adv_est\n\n"
                      "@register_adv_est('eps_centred')\n"
                      "def eps_centred(token_level_rewards, response_mask, index, epsilon, config=None):\n"
                      "    assert epsilon == 1e-6, epsilon\n"
                      "    scores = token_level_rewards.sum(-1)\n"
                      "    adv = (scores - scores.mean()).unsqueeze(-1) * response_mask\n"
                      "    return adv, adv\n")
    steps = run_steps(f"algorithm.custom_modules=[{module}]", "algorithm.adv_estimator=eps_centred")
    assert sorted(steps) == [1, 2]


@pytest.mark.parametrize("case", ["estimator_shape", "estimator_raises", "loss_shape", "loss_metrics"])
def test_mistakes_in_custom_algorithm_code_name_the_function_and_file(run_steps, tmp_path, case):
    from reinforge.errors import ConfigError

    module = tmp_path / "bad_algos.py"
    module.write_text("from reinforge.algorithm import register_adv_est, register_policy_loss\n\n"
                      "@register_adv_est('per_sequence')\n"
                      "def per_sequence(token_level_rewards, response_mask):\n"
                      "    scores = token_level_rewards.sum(-1)\n"
                      "    return scores, scores\n\n"
                      "@register_adv_est('raising')\n"
                      "def raising(token_level_rewards, response_mask, index):\n"
                      "    return {}['missing']\n\n"
                      "@register_policy_loss('vector_metric')\n"
                      "def vector_metric(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode='token-mean', config=None):\n"
                      "    return (-advantages * log_prob).mean(), {'mine': log_prob.mean(-1)}\n\n"
                      "@register_policy_loss('unreduced')\n"
                      "def unreduced(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode='token-mean', config=None):\n"
                      "    return (-advantages * log_prob).sum(-1), {}\n")
    keys, message = {
        "estimator_shape": (["algorithm.adv_estimator=per_sequence"],
                            r"advantage estimator 'per_sequence' \(per_sequence in .*bad_algos.py\) must return \(advantages, "
                            r"returns\), two tensors shaped like response_mask \((\d+), \d+\) .* got tensors of shapes \(\1,\), \(\1,\)"),
        "estimator_raises": (["algorithm.adv_estimator=raising"],
                             r"advantage estimator 'raising' \(raising in .*bad_algos.py\) failed: KeyError: 'missing'"),
        "loss_metrics": (["actor_rollout_ref.actor.policy_loss.loss_mode=vector_metric"],
                         r"policy loss 'vector_metric' \(vector_metric in .*bad_algos.py\) returned metrics that are not numbers "
                         r"\(only one element tensors can be converted to Python scalars\)"),
        "loss_shape": (["actor_rollout_ref.actor.policy_loss.loss_mode=unreduced"],
                       r"policy loss 'unreduced' \(unreduced in .*bad_algos.py\) must return \(loss, metrics\): a scalar tensor "
                       r".* got a loss of shape \(\d+,\)"),
    }[case]
    with pytest.raises(ConfigError, match=message):
        run_steps(f"algorithm.custom_modules=[{module}]", *keys)


def test_a_custom_loss_may_report_its_metrics_as_one_element_tensors(run_steps, tmp_path):
    module = tmp_path / "tensor_metrics.py"
    module.write_text("from reinforge.algorithm import agg_loss, register_policy_loss\n\n"
                      "@register_policy_loss('tensor_metrics')\n"
                      "def tensor_metrics(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode='token-mean', config=None):\n"
                      "    loss = agg_loss(-advantages * log_prob, response_mask, loss_agg_mode, **config.global_batch_info)\n"
                      "    return loss, {'actor/my_loss': loss.detach()}\n")
    steps = run_steps(f"algorithm.custom_modules=[{module}]", "actor_rollout_ref.actor.policy_loss.loss_mode=tensor_metrics")
    for metrics in steps.values():  # a float in metrics.jsonl, as on several ranks
        assert isinstance(metrics["actor/my_loss"], float) and metrics["actor/my_loss"] == pytest.approx(metrics["actor/pg_loss"])


def test_rollout_is_with_a_custom_loss_that_cannot_take_its_weights_is_refused(tiny_model_path, tmp_path):
    from reinforge.config import load_config
    from reinforge.errors import ConfigError

    module = tmp_path / "no_weights.py"
    module.write_text("from reinforge.algorithm import register_policy_loss\n\n"
                      "@register_policy_loss('plain')\n"
                      "def plain(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode='token-mean', config=None, **kwargs):\n"
                      "    return (-advantages * log_prob).mean(), {}\n")
    base = [f"actor_rollout_ref.model.path={tiny_model_path}", "data.train_files=/x.parquet", f"algorithm.custom_modules=[{module}]",
            "algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=2.0"]
    with pytest.raises(ConfigError, match=r"rollout_is=token weights the policy loss per token, but actor_rollout_ref.actor.policy_loss."
                                          r"loss_mode=plain \(.*plain\) has no rollout_is_weights argument"):
        load_config([*base, "actor_rollout_ref.actor.policy_loss.loss_mode=plain"])
    load_config([*base, "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"])  # built-in losses all take the weights
    doc = (Path(__file__).parents[2] / "docs" / "algorithms.md").read_text()  # so does the documented example
    documented = tmp_path / "my_algos.py"
    documented.write_text(re.search(r"```python\n# my_algos.py\n(.*?)```", doc, re.S).group(1))
    load_config([*base[:2], f"algorithm.custom_modules=[{documented}]", *base[3:], "actor_rollout_ref.actor.policy_loss.loss_mode=reinforce"])


def test_band_pass_bounds_the_wrong_way_round_are_refused(tiny_model_path):
    from reinforge.config import load_config
    from reinforge.errors import ConfigError

    with pytest.raises(ConfigError, match=r"algorithm.filter_groups.lower_bound=0.9 is above upper_bound=0.1"):
        load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "data.train_files=/x.parquet",
                     "algorithm.filter_groups.enable=true", "algorithm.filter_groups.filter_type=band_pass",
                     "algorithm.filter_groups.lower_bound=0.9", "algorithm.filter_groups.upper_bound=0.1"])


def test_gdpo_normalises_the_rewards_the_reward_function_returns(run_steps, tmp_path):
    reward = tmp_path / "two_rewards.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    fmt = float(len(solution_str) % 2)\n"
        "    acc = sum(map(ord, solution_str)) % 7 / 7\n"
        "    return {'score': fmt + acc, 'format_reward': fmt, 'accuracy_reward': acc,\n"
        "            'reward_components': {'format_reward': fmt, 'accuracy_reward': acc}}\n")
    # the reward manager as verl's GDPO example names it, in its newer reward section
    steps = run_steps("algorithm.adv_estimator=gdpo", f"custom_reward_function.path={reward}", "reward.reward_manager.name=gdpo",
                      "algorithm.gdpo_reward_keys=[format_reward,accuracy_reward]", "algorithm.gdpo_reward_weights=[1.0,2.0]",
                      "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4")
    for step in steps.values():
        assert 0.0 <= step["gdpo/format_reward/mean"] <= 1.0 and step["gdpo/accuracy_reward/max"] <= 1.0
        # whitened over the batch's response tokens: mean 0 (std 1 unless every advantage is 0)
        assert abs(step["critic/advantages/mean"]) < 1e-5
        assert math.isfinite(step["actor/pg_loss"])
    assert max(step["actor/grad_norm"] for step in steps.values()) > 0  # the rewards varied: the policy learned something
    with pytest.raises(ConfigError, match=r"algorithm\.gdpo_reward_weights has 1 weights for the 2"):
        run_steps("algorithm.adv_estimator=gdpo", "algorithm.gdpo_reward_keys=[format_reward,accuracy_reward]",
                  "algorithm.gdpo_reward_weights=[1.0]")
    with pytest.raises(ConfigError, match=r"adv_estimator=gdpo normalises several rewards one by one"):
        run_steps("algorithm.adv_estimator=gdpo")
