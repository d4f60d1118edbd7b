"""Policy losses, registered by name (`actor_rollout_ref.actor.policy_loss.loss_mode`); formulas in docs/algorithms.md.

A loss is a pure function `(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
config, rollout_is_weights=None) -> (loss, metrics)`. Tensors are (batch, response_len);
`config` is the actor config (clip ratios, `tau_pos`/`tau_neg`, `policy_loss.*`) and carries
`global_batch_info`, the mini-batch totals that `agg_loss` normalises by, so a micro-batch's
loss is its exact share of the mini-batch's; `rollout_is_weights` multiply the per-token losses
when given. `metrics` maps verl's names (`actor/pg_clipfrac`, `actor/ppo_kl`,
`actor/pg_clipfrac_lower`) to floats.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from reinforge.algorithm.core import agg_loss, masked_mean
from reinforge.errors import ConfigError
from reinforge.registry import Registry

POLICY_LOSS_REGISTRY = Registry("policy loss")


def register_policy_loss(name: str) -> Callable[[Callable], Callable]:
    """Decorator: make `fn` available as `policy_loss.loss_mode=<name>`."""
    return POLICY_LOSS_REGISTRY.register(name)


def get_policy_loss_fn(name: str) -> Callable:
    return POLICY_LOSS_REGISTRY.get(name)


def policy_loss_names() -> list[str]:
    return POLICY_LOSS_REGISTRY.names()


def compute_policy_loss(name: str, **kwargs) -> tuple[torch.Tensor, dict[str, float]]:
    """Call loss `name` with the keyword arguments it accepts; a verl-era 4-tuple result becomes metrics."""
    result = POLICY_LOSS_REGISTRY.call(name, **kwargs)
    if isinstance(result, tuple) and len(result) == 4:  # (loss, clipfrac, ppo_kl, clipfrac_lower), verl's signature before metrics dicts
        loss, clipfrac, ppo_kl, clipfrac_lower = result
        result = loss, _metrics(clipfrac, ppo_kl, clipfrac_lower)
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.Tensor) and result[0].numel() == 1
            and isinstance(result[1], dict)):
        got = (f"a loss of shape {tuple(result[0].shape)}" if isinstance(result, tuple) and result and isinstance(result[0], torch.Tensor)
               else f"{type(result).__name__} {result!r}"[:200])
        raise ConfigError(f"{POLICY_LOSS_REGISTRY.describe(name)} must return (loss, metrics): a scalar tensor (aggregate the "
                          "per-token losses with agg_loss(loss_mat, response_mask, loss_agg_mode, **config.global_batch_info)) and "
                          f"a dict of floats; got {got}")
    loss, metrics = result
    try:  # one-element tensors and numpy numbers become floats, as one rank and several both log them
        return loss, {key: _float(value) for key, value in metrics.items()}
    except (TypeError, ValueError, RuntimeError) as err:
        raise ConfigError(f"{POLICY_LOSS_REGISTRY.describe(name)} returned metrics that are not numbers ({err}): "
                          f"{ {key: type(value).__name__ for key, value in metrics.items()} }") from None


def _clip_range(config) -> tuple[float, float]:
    clip = getattr(config, "clip_ratio", 0.2)
    low, high = getattr(config, "clip_ratio_low", None), getattr(config, "clip_ratio_high", None)
    return (clip if low is None else low), (clip if high is None else high)


def _aggregate(token_losses: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str, config,
               rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    if rollout_is_weights is not None:
        token_losses = token_losses * rollout_is_weights
    return agg_loss(token_losses, response_mask, loss_agg_mode, **getattr(config, "global_batch_info", {}))


def _float(value) -> float:
    return float(value.detach()) if isinstance(value, torch.Tensor) else float(value)


def _metrics(clipfrac, ppo_kl, clipfrac_lower=0.0) -> dict[str, float]:
    return {"actor/pg_clipfrac": _float(clipfrac), "actor/ppo_kl": _float(ppo_kl), "actor/pg_clipfrac_lower": _float(clipfrac_lower)}


def _dual_clip(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor, config):
    """PPO's per-token losses with dual-clip: (log-ratio, clipped, dual-clipped losses, whether the clip won, whether
    the cap -A c won)."""
    clip_low, clip_high = _clip_range(config)
    clip_c = getattr(config, "clip_ratio_c", 3.0)
    log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    loss_cap = -advantages * clip_c
    token_losses = torch.where(advantages < 0, torch.minimum(loss_ppo, loss_cap), loss_ppo)
    return log_ratio, token_losses, loss_clipped > loss_unclipped, (loss_ppo > loss_cap) & (advantages < 0)


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                                rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate (arXiv:1707.06347) with asymmetric clipping and dual-clip (arXiv:1912.09729)."""
    log_ratio, token_losses, clipped, capped = _dual_clip(old_log_prob, log_prob, advantages, config)
    loss = _aggregate(token_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return loss, _metrics(masked_mean(clipped.float(), response_mask), masked_mean(-log_ratio, response_mask),
                          masked_mean(capped.float(), response_mask))


@register_policy_loss("gspo")
def compute_policy_loss_gspo(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                             response_mask: torch.Tensor, loss_agg_mode: str = "seq-mean-token-mean", config=None,
                             rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO (arXiv:2507.18071): PPO clip on the sequence's geometric-mean ratio, aggregated by `loss_agg_mode` as verl
    does since 0.6 (the paper's aggregation is seq-mean-token-mean, which verl's GSPO examples set)."""
    clip_low, clip_high = _clip_range(config)
    log_ratio = log_prob - old_log_prob
    seq_log_ratio = (log_ratio * response_mask).sum(-1) / response_mask.sum(-1).clamp(min=1)  # (batch,)
    # s_{i,t} = sg(s_i) * pi / sg(pi): the value of s_i, the gradient of each token's log-prob
    token_log_ratio = (log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)).clamp(max=10.0)
    ratio = token_log_ratio.exp()
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    token_losses = torch.maximum(loss_unclipped, loss_clipped)
    loss = _aggregate(token_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return loss, _metrics(masked_mean((loss_clipped > loss_unclipped).float(), response_mask),
                          masked_mean(-log_ratio, response_mask))


@register_policy_loss("sapo")
def compute_policy_loss_sapo(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                             response_mask: torch.Tensor, loss_agg_mode: str = "seq-mean-token-mean", config=None,
                             rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """SAPO (arXiv:2511.20347): a sigmoid gate (4/tau) sigmoid(tau (ratio - 1)) instead of a hard clip."""
    tau_pos, tau_neg = getattr(config, "tau_pos", 1.0), getattr(config, "tau_neg", 1.05)
    log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    tau = torch.where(advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    loss = _aggregate(-gate * advantages, response_mask, "seq-mean-token-mean", config, rollout_is_weights)
    return loss, _metrics(0.0, masked_mean(-log_ratio, response_mask))


@register_policy_loss("gpg")
def compute_policy_loss_gpg(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                            response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                            rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """GPG (arXiv:2504.02546): the plain policy gradient -A log pi, no ratio and no clip."""
    loss = _aggregate(-log_prob * advantages, response_mask, loss_agg_mode, config, rollout_is_weights)
    return loss, _metrics(0.0, masked_mean(old_log_prob - log_prob, response_mask))


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                 response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                                 rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Clip-Cov (arXiv:2505.22617): PPO clip, and no gradient for a random few tokens of high covariance."""
    params = config.policy_loss
    clip_low, clip_high = _clip_range(config)
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    valid = response_mask > 0
    cov = (advantages - masked_mean(advantages, response_mask)) * (log_prob - masked_mean(log_prob.detach(), response_mask))
    eligible = valid & ~(loss_clipped > loss_unclipped) & (cov > params.clip_cov_lb) & (cov < params.clip_cov_ub)
    candidates = eligible.nonzero()  # (k, 2) positions
    count = min(max(int(params.clip_cov_ratio * int(valid.sum())), 1), len(candidates))
    chosen = candidates[torch.randperm(len(candidates))[:count].to(candidates.device)]
    keep = torch.ones_like(advantages)
    keep[chosen[:, 0], chosen[:, 1]] = 0
    token_losses = torch.maximum(loss_unclipped, loss_clipped) * keep
    loss = _aggregate(token_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return loss, _metrics(masked_mean((keep == 0).float(), response_mask), masked_mean(-log_ratio, response_mask))


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                               response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                               rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """KL-Cov (arXiv:2505.22617): -A ratio, plus a |log-ratio| penalty on the tokens of largest covariance."""
    params = config.policy_loss
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    token_losses = -advantages * ratio
    valid = (response_mask > 0).flatten()
    positions = valid.nonzero(as_tuple=True)[0]
    if len(positions):
        adv = advantages.detach().flatten()[positions]
        logp = log_prob.detach().flatten()[positions]
        cov = (adv - adv.mean()) * (logp - logp.mean())
        count = max(1, int(len(positions) * params.kl_cov_ratio))
        chosen = positions[torch.topk(cov, min(count, len(positions))).indices]
        penalty = torch.zeros(advantages.numel(), dtype=token_losses.dtype, device=token_losses.device)
        penalty[chosen] = 1.0
        token_losses = token_losses + params.ppo_kl_coef * log_ratio.abs() * penalty.view_as(token_losses)
    loss = _aggregate(token_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return loss, _metrics(0.0, masked_mean(log_ratio.abs(), response_mask))


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                 response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                                 rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """GMPO (arXiv:2507.20673): PPO clip on the geometric mean of token ratios, one term per sequence.

    The mean over sequences uses the mini-batch's sequence count (`global_batch_size`), so
    micro-batching does not change the gradient; `loss_agg_mode` is not used.
    """
    clip_low, clip_high = _clip_range(config)
    log_ratio = log_prob - old_log_prob
    sign = torch.sign(advantages)
    log_ratio_clipped = log_ratio.clamp(-clip_low, clip_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * log_ratio_clipped)
    lengths = response_mask.sum(-1)
    seq_ratio = torch.exp((pessimistic * response_mask).sum(-1) / (lengths + 1e-8))
    seq_advantage = (advantages * response_mask).sum(-1) / (lengths + 1e-8)
    seq_losses = -seq_advantage * seq_ratio
    if rollout_is_weights is not None:  # token weights become a per-sequence geometric mean
        seq_losses = seq_losses * torch.exp((torch.log(rollout_is_weights + 1e-10) * response_mask).sum(-1) / (lengths + 1e-8))
    info = getattr(config, "global_batch_info", {})
    sequences = info.get("global_batch_size") or max(int((lengths > 0).sum()), 1)
    loss = seq_losses.sum() / sequences * info.get("dp_size", 1)
    clipped = (log_ratio != log_ratio_clipped).float()
    return loss, _metrics(masked_mean(clipped * (advantages > 0), response_mask), masked_mean(-log_ratio, response_mask),
                          masked_mean(clipped * (advantages < 0), response_mask))


@register_policy_loss("cispo")
def compute_policy_loss_cispo(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                              response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                              rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO (arXiv:2506.13585): -sg(clip(ratio)) A log pi; the clip weighs the gradient, no token loses it."""
    clip_low, clip_high = _clip_range(config)
    log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    weight = ratio.clamp(1 - clip_low, 1 + clip_high).detach()
    loss = _aggregate(-weight * advantages * log_prob, response_mask, loss_agg_mode, config, rollout_is_weights)
    return loss, _metrics(masked_mean((ratio != weight).float(), response_mask), masked_mean(-log_ratio, response_mask))


@register_policy_loss("up")
def compute_policy_loss_up(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                           response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                           rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """UP (arXiv:2607.06987): a token with A > 0 takes the plain policy gradient -A pi / sg(pi), without the ratio to
    pi_old or a clip; the others vanilla's clipped and dual-clipped loss. pg_clipfrac is the fraction of all tokens that
    have A <= 0 and are clipped (verl divides by the A <= 0 tokens of each micro-batch, which makes it depend on how the
    mini-batch is split)."""
    log_ratio, negative, clipped, capped = _dual_clip(old_log_prob, log_prob, advantages, config)
    positive = -advantages * torch.exp(log_prob - log_prob.detach())  # 1 in value, the gradient of log pi
    token_losses = torch.where(advantages > 0, positive, negative)
    loss = _aggregate(token_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return loss, _metrics(masked_mean((clipped & (advantages <= 0)).float(), response_mask), masked_mean(-log_ratio, response_mask),
                          masked_mean(capped.float(), response_mask))


@register_policy_loss("dro")
def compute_policy_loss_dro(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                            response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                            rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """DRO (Direct Reward Optimization, as verl 0.9 has it): -(A log pi - beta/2 (log pi - log pi_old)^2), a plain policy
    gradient held near pi_old by a quadratic penalty on the log-ratio, beta = `policy_loss.dro_beta` (> 0, no default).
    Nothing is clipped: pg_clipfrac and pg_clipfrac_lower are 0 (verl reports only actor/ppo_kl)."""
    beta = getattr(getattr(config, "policy_loss", None), "dro_beta", None)
    if beta is None or not beta > 0:
        raise ConfigError(f"actor_rollout_ref.actor.policy_loss.dro_beta={beta} must be a positive number with "
                          "policy_loss.loss_mode=dro: the weight of its squared log-ratio penalty (verl has no default either)")
    log_ratio = log_prob - old_log_prob
    token_losses = -(log_prob * advantages - 0.5 * beta * log_ratio.square())
    loss = _aggregate(token_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return loss, _metrics(0.0, masked_mean(-log_ratio, response_mask))


def _dppo(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor,
          loss_agg_mode: str, config, rollout_is_weights: torch.Tensor | None,
          divergence: Callable[[torch.Tensor, torch.Tensor, float, float], torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    """-A sg(min(ratio, clip_ratio_c)) log pi on the tokens inside the trust region that `divergence(log p, log p_old,
    low, high)` marks (for A > 0, for A <= 0), with clip_ratio_low / clip_ratio_high as its bounds; pg_clipfrac: the
    tokens outside it; pg_clipfrac_lower: those inside whose ratio was truncated."""
    low, high = _clip_range(config)
    clip_c = getattr(config, "clip_ratio_c", 3.0)
    log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    inside = divergence(log_prob.detach(), old_log_prob, low, high)
    inside = torch.where(advantages > 0, inside[0], inside[1]).float()
    token_losses = -advantages * ratio.clamp(max=clip_c).detach() * log_prob * inside
    loss = _aggregate(token_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return loss, _metrics(masked_mean(1.0 - inside, response_mask), masked_mean(-log_ratio, response_mask),
                          masked_mean((ratio > clip_c).float() * inside, response_mask))


@register_policy_loss("dppo_tv")
def compute_policy_loss_dppo_tv(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                                rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """DPPO-Binary-TV (arXiv:2602.04879): the trust region bounds the change of the sampled token's probability,
    p - p_old <= clip_ratio_high where A > 0 and >= -clip_ratio_low elsewhere."""
    def divergence(log_p, log_p_old, low, high):
        change = log_p.exp() - log_p_old.exp()
        return change <= high, change >= -low

    return _dppo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights, divergence)


@register_policy_loss("dppo_kl")
def compute_policy_loss_dppo_kl(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                                response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                                rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """DPPO-Binary-KL (arXiv:2602.04879): the trust region bounds the KL between the Bernoulli distributions of
    "the sampled token or not" under pi_old and pi, KL <= clip_ratio_high where A > 0 (or p <= p_old) and
    <= clip_ratio_low elsewhere (or p >= p_old)."""
    def divergence(log_p, log_p_old, low, high):
        p, p_old = log_p.exp(), log_p_old.exp()
        kl = p_old * (log_p_old - log_p) + (1 - p_old) * torch.log((1.0 - p_old + 1e-8) / (1.0 - p + 1e-8))
        return (kl <= high) | (p <= p_old), (kl <= low) | (p >= p_old)

    return _dppo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights, divergence)


@register_policy_loss("topr")
def compute_policy_loss_topr(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                             response_mask: torch.Tensor, loss_agg_mode: str = "seq-mean-token-mean", config=None,
                             rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """TOPR, tapered off-policy REINFORCE (arXiv:2503.14286), as verl has it: -w A log pi with a constant weight w per
    sequence, 1 where the sequence's mean advantage is >= 0 and else its length-normalised ratio exp(mean log(pi/pi_old))
    (log clamped at 10) clamped to [policy_loss.topr_negative_ratio_lower, _upper]; always aggregated
    seq-mean-token-mean, as verl's. Nothing is clipped: the metrics are ppo_kl, the share of sequences with a negative
    mean advantage and the mean weight."""
    policy = getattr(config, "policy_loss", None)
    lower, upper = getattr(policy, "topr_negative_ratio_lower", 0.0), getattr(policy, "topr_negative_ratio_upper", 1.0)
    log_ratio = log_prob - old_log_prob
    lengths = response_mask.sum(-1).clamp(min=1)
    seq_ratio = ((log_ratio.detach() * response_mask).sum(-1) / lengths).clamp(max=10.0).exp()
    negative = (advantages * response_mask).sum(-1) / lengths < 0
    weight = torch.where(negative, seq_ratio.clamp(lower, upper), torch.ones_like(seq_ratio))
    token_losses = -advantages * log_prob * weight.unsqueeze(-1)
    loss = _aggregate(token_losses, response_mask, "seq-mean-token-mean", config, rollout_is_weights)
    return loss, {**_metrics(0.0, masked_mean(-log_ratio, response_mask)),
                  "actor/topr_negative_seq_frac": _float(negative.float().mean()),
                  "actor/topr_taper_weight_mean": _float(weight.mean())}


@register_policy_loss("cppo")
def compute_policy_loss_cppo(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                             response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config=None,
                             rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """CPPO (arXiv:2606.10968), as verl has it: DPPO's -A sg(min(ratio, clip_ratio_c)) log pi on the tokens kept by a
    cumulative budget on |pi - pi_old| along each response. Position t of T (the response width) weighs
    w_t = w_min + (1 - w_min)(T - t)/(T - 1); with Z_t = w_t |pi - pi_old| and S, W the sums of Z and w before t, token
    t is kept when Z_t <= min(delta, delta + b W - S) (delta: clip_ratio; b: k times the q-quantile of the response's
    |pi - pi_old|, clamped to [delta_b, 5 delta_b]) or when its ratio moves against its advantage (A (ratio - 1) <= 0).
    pg_clipfrac: the tokens dropped; pg_clipfrac_lower: those kept whose ratio clip_ratio_c truncates."""
    cppo = getattr(getattr(config, "policy_loss", None), "cppo", None)
    w_min, delta_b = getattr(cppo, "cppo_w_min", 0.8), getattr(cppo, "cppo_delta_b", 0.02)
    quantile, scale = getattr(cppo, "cppo_delta_b_q", 0.9), getattr(cppo, "cppo_delta_b_k", 1.0)
    delta, clip_c = getattr(config, "clip_ratio", 0.2), getattr(config, "clip_ratio_c", 3.0)
    log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    with torch.no_grad():
        mask = response_mask.to(ratio.dtype)
        change = (log_prob.exp() - old_log_prob.exp()).abs() * mask
        width = mask.shape[-1]
        position = torch.arange(1, width + 1, dtype=ratio.dtype, device=ratio.device)
        weight = (w_min + (1.0 - w_min) * ((width - position) / max(width - 1, 1)).clamp(0.0, 1.0)) * mask
        spent = weight * change
        spent_before, weight_before = spent.cumsum(-1) - spent, weight.cumsum(-1) - weight
        typical = torch.nanquantile(change.masked_fill(mask == 0, float("nan")), quantile, dim=-1)
        budget = torch.nan_to_num(scale * typical, nan=delta_b).clamp(delta_b, 5.0 * delta_b).unsqueeze(-1)
        limit = torch.minimum(torch.full_like(spent, delta), delta + budget * weight_before - spent_before)
        kept = ((advantages * (ratio - 1.0) <= 0) | (spent <= limit)).to(ratio.dtype) * mask
    token_losses = -advantages * ratio.clamp(max=clip_c).detach() * log_prob * kept
    loss = _aggregate(token_losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return loss, _metrics(masked_mean(1.0 - kept, response_mask), masked_mean(-log_ratio, response_mask),
                          masked_mean((ratio > clip_c).to(ratio.dtype) * kept, response_mask))
