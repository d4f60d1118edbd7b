"""Advantage estimators, registered by name (`algorithm.adv_estimator`); formulas in docs/algorithms.md.

An estimator is a pure function of tensors called with verl's keyword arguments
(`token_level_rewards`, `response_mask`, `index`, `values`, `reward_baselines`, `gamma`, `lam`,
`epsilon`, `norm_adv_by_std_in_grpo`, `config`, `old_log_probs`, `sum_pi_squared`, `rollout_is_weights`, and
`reward_components`: the reward function's extra values by key); it receives the ones its signature names and
returns `(advantages, returns)`, each (batch, response_len) and zero on masked positions.

What an estimator needs follows from its signature, so the trainer never branches on a name:
one that names `values` gets a critic, one that names `reward_baselines` gets a greedy baseline
rollout (`needs_critic`, `needs_reward_baselines`), one that names `old_log_probs` or `sum_pi_squared` gets the
actor's old-log-prob pass, with the sum of squared probabilities per token for the latter.

Outcome estimators group trajectories by `index` (the prompt's uid). A group of one has no
baseline to compare with; as in verl, its baseline is 0 (and its std 1).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from reinforge.algorithm.core import masked_whiten
from reinforge.errors import ConfigError
from reinforge.registry import Registry

ADV_ESTIMATOR_REGISTRY = Registry("advantage estimator")


def register_adv_est(name: str) -> Callable[[Callable], Callable]:
    """Decorator: make `fn` available as `algorithm.adv_estimator=<name>`."""
    return ADV_ESTIMATOR_REGISTRY.register(name)


def get_adv_estimator_fn(name: str) -> Callable:
    return ADV_ESTIMATOR_REGISTRY.get(name)


def adv_estimator_names() -> list[str]:
    return ADV_ESTIMATOR_REGISTRY.names()


def needs_critic(name: str) -> bool:
    """The estimator takes `values` (a critic's per-token values)."""
    return ADV_ESTIMATOR_REGISTRY.takes(name, "values")


def needs_reward_baselines(name: str) -> bool:
    """The estimator takes `reward_baselines` (the score of a greedy response per prompt)."""
    return ADV_ESTIMATOR_REGISTRY.takes(name, "reward_baselines")


def needs_old_log_probs(name: str) -> bool:
    """The estimator takes `old_log_probs` (the actor's log-probs before the update), so the old-log-prob pass runs."""
    return ADV_ESTIMATOR_REGISTRY.takes(name, "old_log_probs")


def needs_sum_pi_squared(name: str) -> bool:
    """The estimator takes `sum_pi_squared` (sum of squared token probabilities), which the old-log-prob pass adds."""
    return ADV_ESTIMATOR_REGISTRY.takes(name, "sum_pi_squared")


def compute_advantage(name: str, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Call estimator `name` with the keyword arguments its signature accepts; a result that is not two tensors shaped
    like `response_mask` (the user's estimator returning per-sequence values, say) is a ConfigError naming it."""
    result = ADV_ESTIMATOR_REGISTRY.call(name, **kwargs)
    shape = tuple(kwargs["response_mask"].shape)
    if not (isinstance(result, tuple) and len(result) == 2
            and all(isinstance(t, torch.Tensor) and tuple(t.shape) == shape for t in result)):
        got = (f"tensors of shapes {', '.join(str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__ for t in result)}"
               if isinstance(result, tuple) else type(result).__name__)
        raise ConfigError(f"{ADV_ESTIMATOR_REGISTRY.describe(name)} must return (advantages, returns), two tensors shaped "
                          f"like response_mask {shape} (batch, response length), zero on masked positions; got {got}")
    return result


# ---- group statistics -----------------------------------------------------------------------------
def _group_of(index) -> tuple[torch.Tensor, torch.Tensor]:
    """(group id of each row, group size of each row) for the uids in `index`."""
    _, inverse = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    group = torch.as_tensor(inverse.reshape(-1), dtype=torch.long)
    return group, torch.bincount(group)[group]


def _group_mean(scores: torch.Tensor, group: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Each row's (weighted) group mean of `scores`."""
    weights = torch.ones_like(scores) if weights is None else weights
    sums = torch.zeros(int(group.max()) + 1, dtype=scores.dtype).index_add_(0, group, scores * weights)
    totals = torch.zeros_like(sums).index_add_(0, group, weights)
    return (sums / totals.clamp(min=1e-12))[group]


def _outcome(scores: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    advantages = scores.unsqueeze(-1) * response_mask
    return advantages, advantages


# ---- estimators ---------------------------------------------------------------------------------
@register_adv_est("gae")
@torch.no_grad()
def compute_gae_advantage_return(token_level_rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor,
                                 gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (arXiv:1506.02438), whitened over the batch.

    Masked positions (padding, or tool/user tokens inside a multi-turn response) are skipped: the
    recursion carries V and A across them unchanged. Returns are A + V before whitening.
    """
    next_value = torch.zeros_like(values[:, 0])
    last_advantage = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        m = response_mask[:, t]
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * last_advantage
        next_value = values[:, t] * m + (1 - m) * next_value
        last_advantage = advantage * m + (1 - m) * last_advantage
        advantages[:, t] = last_advantage
    returns = (advantages + values) * response_mask
    return masked_whiten(advantages, response_mask), returns


@register_adv_est("grpo")
@register_adv_est("grpo_vectorized")  # verl's vectorized form of grpo; this one has no loop over groups either
@torch.no_grad()
def compute_grpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                                   epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True,
                                   config=None) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (arXiv:2402.03300): a response's score minus its group's mean, over the group's std.

    `norm_adv_by_std_in_grpo=False` skips the division (Dr. GRPO, arXiv:2503.20783).
    """
    return _outcome(_grpo_scalars(token_level_rewards.sum(-1), index, epsilon, norm_adv_by_std_in_grpo), response_mask)


def _grpo_scalars(scores: torch.Tensor, index, epsilon: float, norm_by_std: bool) -> torch.Tensor:
    """Each row's score minus its group's mean, over the group's unbiased std (`norm_by_std`); a group of one keeps its
    score (std 1). A NaN score (a reward not scored: GDPO's None) takes no part in its group's mean and std and gets 0,
    and a scored value alone among several of its group gets 0 (TRL's normalize_then_sum: nanmean, nanstd)."""
    scored = ~scores.isnan()
    group, size = _group_of(index)
    weights, scores = scored.to(scores.dtype), torch.where(scored, scores, torch.zeros_like(scores))
    groups = int(group.max()) + 1
    count = torch.zeros(groups, dtype=scores.dtype).index_add_(0, group, weights)[group]
    centred = scores - torch.where(size > 1, _group_mean(scores, group, weights), torch.zeros_like(scores))
    squares = torch.zeros(groups, dtype=scores.dtype).index_add_(0, group, centred.square() * weights)[group]
    std = torch.where(count > 1, (squares / (count - 1).clamp(min=1)).sqrt(), torch.ones_like(scores))
    return torch.where(scored, centred / (std + epsilon) if norm_by_std else centred, torch.zeros_like(scores))


@register_adv_est("gdpo")
@torch.no_grad()
def compute_gdpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                                   reward_components: dict | None = None, epsilon: float = 1e-6,
                                   norm_adv_by_std_in_grpo: bool = True, config=None) -> tuple[torch.Tensor, torch.Tensor]:
    """GDPO (arXiv:2601.05242): each reward component normalised within its group as GRPO does, on its own, then their
    weighted sum whitened over the batch's response tokens, so a dominant reward does not drown the others.

    The components are the values the reward function returns under the keys `algorithm.gdpo_reward_keys`
    (`reward_components`: its extra values by key), weighted by `algorithm.gdpo_reward_weights` (1 each by default);
    without keys, the score alone.
    """
    keys = list(config.get("gdpo_reward_keys") or []) if config is not None else []
    components = reward_components or {}
    missing = [key for key in keys if key not in components]
    if missing:
        raise ConfigError(f"algorithm.gdpo_reward_keys names {missing}, which the reward function does not return (it returns "
                          f"{sorted(components) or 'only a score'}); return a dict holding them beside 'score'")
    # a None (a row the reward function did not score under that key: a TRL reward function's None) is NaN here
    columns = [torch.as_tensor(np.asarray(components[key], dtype=np.float64)).to(token_level_rewards.dtype) for key in keys]
    columns = columns or [token_level_rewards.sum(-1)]
    weights = (config.get("gdpo_reward_weights") if config is not None else None) or [1.0] * len(columns)
    total = sum(w * _grpo_scalars(c, index, epsilon, norm_adv_by_std_in_grpo) for w, c in zip(weights, columns, strict=True))
    mask = response_mask * torch.stack([~c.isnan() for c in columns]).any(0).unsqueeze(-1)  # rows something scored
    advantages = masked_whiten(total.unsqueeze(-1) * mask, mask)
    return advantages, advantages


@register_adv_est("grpo_passk")
@torch.no_grad()
def compute_grpo_passk_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                                         epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True,
                                         config=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k training (arXiv:2503.19595): only each group's best response learns, by its margin over the second best."""
    scores = token_level_rewards.sum(-1)
    group, size = _group_of(index)
    advantages = torch.zeros_like(scores)
    for g in range(int(group.max()) + 1):
        rows = (group == g).nonzero(as_tuple=True)[0]
        if len(rows) < 2:
            raise ValueError(f"grpo_passk needs at least 2 responses per prompt; group {index[int(rows[0])]!r} has 1 "
                             "(set actor_rollout_ref.rollout.n >= 2)")
        top, order = torch.topk(scores[rows], 2)
        margin = top[0] - top[1]
        if norm_adv_by_std_in_grpo:
            margin = margin / (scores[rows].std() + epsilon)
        advantages[rows[order[0]]] = margin
    return _outcome(advantages, response_mask)


@register_adv_est("rloo")
@torch.no_grad()
def compute_rloo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                                   epsilon: float = 1e-6, config=None) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO (arXiv:2402.14740): the score minus the mean of the other responses to the same prompt."""
    scores = token_level_rewards.sum(-1)
    group, size = _group_of(index)
    n = size.to(scores.dtype)
    loo = (scores - _group_mean(scores, group)) * n / (n - 1).clamp(min=1)
    return _outcome(torch.where(size > 1, loo, scores), response_mask)


@register_adv_est("rloo_vectorized")
@torch.no_grad()
def compute_rloo_vectorized_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                                              epsilon: float = 1e-6, config=None) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's vectorized RLOO: `rloo`, except that a response alone in its group gets advantage 0 (rloo: its score)."""
    advantages, _ = compute_rloo_outcome_advantage(token_level_rewards, response_mask, index)
    alone = _group_of(index)[1] == 1
    advantages[alone] = 0.0
    return advantages, advantages


@register_adv_est("reinforce_plus_plus")
@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                                  config=None, gamma: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (arXiv:2501.03262): discounted returns over the response's own tokens, whitened over the batch.

    A token outside the mask (padding, or a tool's or user's span inside a multi-turn response) neither adds its
    reward nor discounts: the return is carried through it unchanged, so a turn before a tool answer still gets the
    outcome reward that comes after it (verl restarts the return at 0 at a masked token: the same for trailing
    padding, no credit for the earlier turns of a multi-turn response). gamma is `config.gamma` (algorithm.gamma), as in verl; the
    `gamma` argument is used without a config.
    """
    gamma = config.gamma if config is not None else (1.0 if gamma is None else gamma)
    returns = torch.zeros_like(token_level_rewards)
    running = torch.zeros_like(token_level_rewards[:, 0])
    for t in reversed(range(token_level_rewards.shape[1])):
        mask = response_mask[:, t]
        running = torch.where(mask != 0, token_level_rewards[:, t] + gamma * running, running)
        returns[:, t] = running * mask
    return masked_whiten(returns, response_mask), returns


@register_adv_est("reinforce_plus_plus_baseline")
@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                                           index: np.ndarray, epsilon: float = 1e-6,
                                                           config=None) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group-mean baseline (arXiv:2501.03262), whitened over the batch."""
    scores = token_level_rewards.sum(-1)
    group, size = _group_of(index)
    centred = scores - torch.where(size > 1, _group_mean(scores, group), torch.zeros_like(scores))
    advantages = masked_whiten(centred.unsqueeze(-1) * response_mask, response_mask)
    return advantages, advantages


@register_adv_est("remax")
@torch.no_grad()
def compute_remax_outcome_advantage(token_level_rewards: torch.Tensor, reward_baselines: torch.Tensor,
                                    response_mask: torch.Tensor, config=None) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (arXiv:2310.10505): reward-to-go minus the score of a greedy response to the same prompt."""
    returns = (token_level_rewards * response_mask).flip(-1).cumsum(-1).flip(-1)
    advantages = returns - reward_baselines.unsqueeze(-1) * response_mask
    return advantages * response_mask, returns * response_mask


@register_adv_est("opo")
@torch.no_grad()
def compute_opo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                                  epsilon: float = 1e-6, config=None) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO (arXiv:2505.23585): the baseline is the group's mean score weighted by response length."""
    scores = token_level_rewards.sum(-1)
    lengths = response_mask.sum(-1).to(scores.dtype)
    group, size = _group_of(index)
    baseline = torch.where(size > 1, _group_mean(scores, group, weights=lengths), torch.zeros_like(scores))
    return _outcome(scores - baseline, response_mask)


@register_adv_est("gpg")
@torch.no_grad()
def compute_gpg_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                                  epsilon: float = 1e-6, f_norm: float = 1.0, alpha: float = 1.0,
                                  config=None) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG (arXiv:2504.02546): group-centred scores, scaled by batch size / trajectories with a non-zero score.

    `alpha` is recomputed from the batch, as in verl; `f_norm` divides the result.
    """
    scores = token_level_rewards.sum(-1)
    alpha = len(scores) / max(int(torch.count_nonzero(scores)), 1)
    group, size = _group_of(index)
    centred = scores - torch.where(size > 1, _group_mean(scores, group), torch.zeros_like(scores))
    return _outcome(alpha * centred / f_norm, response_mask)


@register_adv_est("optimal_token_baseline")
@torch.no_grad()
def compute_optimal_token_baseline_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                                             old_log_probs: torch.Tensor, sum_pi_squared: torch.Tensor,
                                             rollout_is_weights: torch.Tensor | None = None,
                                             handle_zero_tail: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal token baseline (verl's OTB): reward-to-go G_t minus a baseline for each position t of each group,
    B_t = sum_i G_it W_it / sum_i W_it over the group's responses, where W_t = sum_{j<=t} (1 - 2 pi_j + sum_v pi(v)_j^2)
    is the path-variance proxy up to t (pi_j: the sampled token's probability; sum_pi_squared from the actor's
    old-log-prob pass). With rollout correction weights rho, each term of W is scaled by rho^2. A group of one has
    no baseline. `handle_zero_tail` (verl's default, on): the one longest response of a group gets no baseline past
    the second longest, where its own return would be its whole baseline.
    """
    returns = (token_level_rewards * response_mask).flip(-1).cumsum(-1).flip(-1) * response_mask
    weights = _path_variance(old_log_probs, sum_pi_squared, rollout_is_weights, response_mask)
    members = torch.ones(len(returns), dtype=torch.bool)
    return _token_baseline_advantage(returns, weights, response_mask, index, members, handle_zero_tail), returns


@register_adv_est("tir_optimal_token_baseline")
@torch.no_grad()
def compute_tir_optimal_token_baseline_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                                 index: np.ndarray, old_log_probs: torch.Tensor,
                                                 sum_pi_squared: torch.Tensor, rollout_is_weights: torch.Tensor | None = None,
                                                 handle_zero_tail: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The optimal token baseline for multi-turn (tool-integrated) responses: as `optimal_token_baseline`, but the
    baseline of a response's k-th trained token pools the k-th trained tokens of its group (tool output and user
    turns, masked out, do not count as positions), and responses with no trained token stay out of their group."""
    returns = (token_level_rewards * response_mask).flip(-1).cumsum(-1).flip(-1) * response_mask
    weights = _path_variance(old_log_probs, sum_pi_squared, rollout_is_weights, response_mask)
    rows, cols = response_mask.nonzero(as_tuple=True)
    slot = (response_mask.cumsum(-1) - 1).long()[rows, cols]  # the k of each trained token
    lengths = response_mask.sum(-1).long()
    width = int(lengths.max()) if len(lengths) else 0

    def packed(values: torch.Tensor) -> torch.Tensor:
        out = values.new_zeros(len(values), width)
        out[rows, slot] = values[rows, cols]
        return out

    packed_mask = (torch.arange(width) < lengths.unsqueeze(-1)).to(response_mask.dtype)
    packed_adv = _token_baseline_advantage(packed(returns), packed(weights), packed_mask, index, lengths > 0, handle_zero_tail)
    advantages = torch.zeros_like(returns)
    advantages[rows, cols] = packed_adv[rows, slot]
    return advantages, returns


def _path_variance(old_log_probs: torch.Tensor, sum_pi_squared: torch.Tensor, rollout_is_weights: torch.Tensor | None,
                   response_mask: torch.Tensor) -> torch.Tensor:
    """W_t = sum_{j<=t} (1 - 2 pi_j + sum pi^2_j) (times rho_j^2), over the trained tokens."""
    per_token = 1 - 2 * old_log_probs.exp() + sum_pi_squared
    if rollout_is_weights is not None:
        per_token = per_token * rollout_is_weights.square()
    return (per_token * response_mask).cumsum(-1)


def _token_baseline_advantage(returns: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor, index, members: torch.Tensor,
                              handle_zero_tail: bool) -> torch.Tensor:
    """returns - B, where B_t of a group is sum_i G_it W_it / (sum_i W_it + 1e-8) over its member rows' unmasked
    positions; 0 for a group with one member; with `handle_zero_tail`, 0 past the second-longest member's length on a
    group's single longest member."""
    group, _ = _group_of(index)
    groups = int(group.max()) + 1
    member = members.to(returns.dtype)
    count = torch.zeros(groups, dtype=returns.dtype).index_add_(0, group, member)[group]
    weighted = weights * mask * member.unsqueeze(-1)
    numerator = torch.zeros(groups, returns.shape[1], dtype=returns.dtype).index_add_(0, group, returns * weighted)
    denominator = torch.zeros_like(numerator).index_add_(0, group, weighted) + 1e-8
    baseline = torch.where((count > 1).unsqueeze(-1), (numerator / denominator)[group], 0.0)
    if handle_zero_tail:
        lengths = torch.where(members, mask.sum(-1), -1.0)
        longest = torch.full((groups,), -1.0, dtype=lengths.dtype).scatter_reduce(0, group, lengths, "amax")[group]
        at_longest = lengths == longest
        ties = torch.zeros(groups, dtype=lengths.dtype).index_add_(0, group, at_longest.to(lengths.dtype))[group]
        below = torch.where(at_longest, -1.0, lengths)
        second = torch.full((groups,), -1.0, dtype=lengths.dtype).scatter_reduce(0, group, below, "amax")[group]
        alone = at_longest & (ties == 1) & (count > 1) & members
        tail = torch.arange(returns.shape[1]).unsqueeze(0) >= second.unsqueeze(-1)
        baseline = torch.where(alone.unsqueeze(-1) & tail, 0.0, baseline)
    return (returns - baseline) * mask
