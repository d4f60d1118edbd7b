"""The `algorithm.*` section of the config schema (config/schema.py assembles the whole): advantage
estimation, the in-reward KL, DAPO's dynamic sampling and the train/inference mismatch correction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reinforge.config.fields import Node, _f, _sub


@dataclass
class KLControlConfig(Node):
    type: str = _f("fixed", "fixed or adaptive KL coefficient for the in-reward penalty.")
    kl_coef: float = _f(0.001, "Initial (fixed: constant) coefficient of the in-reward KL penalty.")
    horizon: int = _f(10000, "Adaptive controller horizon.")
    target_kl: float = _f(0.1, "Adaptive controller target KL.")


@dataclass
class FilterGroupsConfig(Node):
    enable: bool = _f(False, "DAPO dynamic sampling (arXiv:2503.14476): drop groups whose metric does not vary, generate more until "
                      "data.train_batch_size groups are kept.")
    metric: str = _f("seq_reward", "What must vary within a group: seq_reward (the summed reward; verl's newer name: reward) or a key the "
                                   "reward function returns (score, acc, ...).")
    max_num_gen_batches: int = _f(10, "Most generation batches per step; the step fails with a clear message past it (0: no limit).")
    filter_type: str = _f("same_value", "same_value: drop groups whose metric spread is <= tolerance; band_pass: keep groups whose "
                          "mean metric lies in [lower_bound, upper_bound].")
    tolerance: float = _f(1e-6, "same_value: a group whose metric max - min is at most this counts as having no variance.")
    lower_bound: float | None = _f(None, "band_pass: lowest mean metric kept (null: no bound).")
    upper_bound: float | None = _f(None, "band_pass: highest mean metric kept (null: no bound).")
    max_inflight_gen_batches: int = _f(1, "Accepted for verl compatibility (generation batches in flight at once, in "
                                       "train-batch units); no effect here: generation batches are drawn one at a time.")


@dataclass
class RolloutCorrectionConfig(Node):
    rollout_is: str | None = _f(
        None, "Importance weights w = pi_old / pi_rollout on the policy loss, correcting for the engine sampling from a "
        "slightly different distribution than the actor trains (e.g. a bf16 engine beside an fp32 actor): token (w per "
        "token) or sequence (one w per response, the product of its tokens'); null: no weights. Needs the old-log-prob "
        "pass (it then runs even on-policy). docs/algorithms.md")
    rollout_is_threshold: Any = _f(2.0, "A number: weights are truncated at it (TIS); a 'lower_upper' string (e.g. "
                                   "'0.5_5.0'): weights outside [lower, upper] become 0 (IcePop).")
    rollout_is_batch_normalize: bool = _f(False, "Divide the weights by their batch mean (over tokens, or over responses "
                                          "for sequence weights) so they average 1.")
    rollout_rs: str | None = _f(
        None, "Rejection: drop tokens or whole responses whose divergence between pi_old and pi_rollout is out of bounds, "
        "before advantages. Comma-separated options (all must pass): token_k1/k2/k3, seq_sum_k1/k2/k3, seq_mean_k1/k2/k3, "
        "seq_max_k2/k3 (k1 = -log r, k2 = (log r)^2/2, k3 = r - 1 - log r), binary_kl (two-way Bernoulli KL of the token's "
        "probabilities); null: no rejection.")
    rollout_rs_threshold: Any = _f(None, "Bounds of rollout_rs, one shared or one per option (comma-separated): k1 takes "
                                   "ratio bounds 'lower_upper' (a single u means 1/u..u), the others one upper bound.")
    bypass_mode: bool = _f(False, "Use the engine's log-probs as the old log-probs and skip the old-log-prob pass (two "
                           "policies instead of three); the loss is then loss_type, with weights and rejection comparing "
                           "the current policy with pi_rollout in every micro-batch.")
    loss_type: str = _f("ppo_clip", "Bypass mode's loss: ppo_clip (PPO's clip on pi_theta / pi_rollout, no extra weights) "
                        "or reinforce (-w A log pi_theta with the rollout_is weights).")
    debug_rollout_actor_probs: bool = _f(False, "Bypass mode: run the old-log-prob pass anyway, only to log "
                                         "training/rollout_probs_diff_* (training is unchanged).")


@dataclass
class PFPPOConfig(Node):
    reweight_method: str = _f("pow", "How PF-PPO weighs a trajectory for the redraw: pow (|score|^weight_pow), max_min (only "
                              "the batch's highest and lowest scores) or max_random (0.4 for the highest score, 0.1 otherwise).")
    weight_pow: float = _f(2.0, "The power of the pow reweighting.")


@dataclass
class AlgorithmConfig(Node):
    adv_estimator: str = _f("gae", "Advantage estimator from the registry: gae (with a critic), grpo, grpo_passk, rloo, "
                            "reinforce_plus_plus, reinforce_plus_plus_baseline, remax, opo, gpg, gdpo, grpo_vectorized, "
                            "rloo_vectorized, optimal_token_baseline, tir_optimal_token_baseline, or your own "
                            "(docs/algorithms.md).")
    norm_adv_by_std_in_grpo: bool = _f(True, "GRPO: divide by the group's std; false gives Dr. GRPO (arXiv:2503.20783).")
    gdpo_reward_keys: list | None = _f(None, "GDPO: the rewards normalised one by one, keys of the dict the reward function "
                                       "returns (e.g. [format_reward, accuracy_reward]); needed by adv_estimator=gdpo.")
    gdpo_reward_weights: list | None = _f(None, "GDPO: a weight per gdpo_reward_keys entry; null: 1 each.")
    gamma: float = _f(1.0, "Discount factor.")
    lam: float = _f(1.0, "GAE lambda.")
    use_kl_in_reward: bool = _f(False, "Subtract kl_coef * KL(actor || ref) from the token rewards (needs the reference).")
    kl_penalty: str = _f("kl", "KL estimator of the in-reward penalty: kl (k1), abs, mse (k2), low_var_kl (k3), full, or a + variant.")
    kl_ctrl: KLControlConfig = _sub(KLControlConfig, "Coefficient of the in-reward KL penalty.")
    use_pf_ppo: bool = _f(False, "PF-PPO's policy filtration (arXiv:2409.06957): after the advantages of an estimator that "
                          "uses the critic (gae), redraw the batch's trajectories with replacement, weighted by score "
                          "(pf_ppo.*); as in verl, other estimators ignore it.")
    pf_ppo: PFPPOConfig = _sub(PFPPOConfig, "Settings of PF-PPO (use_pf_ppo).")
    filter_groups: FilterGroupsConfig = _sub(FilterGroupsConfig, "DAPO's dynamic sampling.")
    rollout_correction: RolloutCorrectionConfig = _sub(
        RolloutCorrectionConfig, "Train/inference mismatch correction (verl's): importance weights, rejection, bypass mode.")
    custom_modules: list = _f([], "Python files or module names imported at start (and in every Ray worker); the estimators, "
                              "losses, agent loops, text environments and reward managers they register (@register_adv_est, "
                              "@register_policy_loss, @register_agent_loop, @register_env, @register_reward_manager) can "
                              "then be named like the built-in ones.")
