"""Train/inference mismatch: measure it, and correct for it (verl's `algorithm.rollout_correction`).

The engine that samples a response (pi_rollout, e.g. a bf16 replica) and the model that trains on
it (pi_old, the fp32 actor) give the same tokens slightly different probabilities. With the
engine's per-token log-probs (`rollout_log_probs`) beside the actor's (`old_log_probs`) this
module computes, as pure functions of (batch, response_len) tensors:

- the mismatch metrics (`training/rollout_probs_diff_*`, `rollout_corr/kl`, perplexities, chi^2);
- truncated importance-sampling weights w = pi_old / pi_rollout, per token or per sequence
  (`rollout_is`, `rollout_is_threshold`), that the policy loss multiplies its token losses by;
- a rejection mask that drops tokens or whole sequences whose divergence estimate is out of
  bounds (`rollout_rs`, `rollout_rs_threshold`);
- the bypass-mode loss, where pi_rollout itself stands in for pi_old (`bypass_mode`, `loss_type`).

Every formula is in docs/algorithms.md, every metric name in docs/metrics.md. Ratios are taken in
log space and clamped to +-SAFETY_BOUND before `exp`, so a wild token cannot overflow.
"""

from __future__ import annotations

import math

import torch

from reinforge.algorithm.core import agg_loss, masked_mean, masked_sum

SAFETY_BOUND = 20.0  # exp(20) ~ 4.9e8: the largest ratio ever exponentiated
IS_LEVELS = ("token", "sequence")
LOSS_TYPES = ("ppo_clip", "reinforce")
# divergence estimators of rejection sampling, per token; k1's bounds are ratios, k2's and k3's upper bounds only
RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
              "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3", "binary_kl")


# ---- parsing the thresholds (validate.py calls these so that a bad value stops the run at start) --------------------
def parse_is_threshold(spec: float | str) -> tuple[float, float | None]:
    """`rollout_is_threshold` -> (upper, lower or None): a number truncates (TIS), "lower_upper" zeroes outside (IcePop)."""
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise ValueError("a number (e.g. 2.0) or a 'lower_upper' string (e.g. '0.5_5.0')")
    lower_text, _, upper_text = str(spec).strip().rpartition("_")
    try:
        upper, lower = float(upper_text), (float(lower_text) if lower_text else None)
    except ValueError:
        raise ValueError("a number (e.g. 2.0) or a 'lower_upper' string (e.g. '0.5_5.0')") from None
    if upper <= 0 or (lower is not None and not 0 < lower <= upper):
        raise ValueError("positive bounds with lower <= upper")
    return upper, lower


def parse_rs_options(rollout_rs: str) -> list[str]:
    """`rollout_rs` -> its options in order, without repeats; every option must be one of RS_OPTIONS."""
    options = list(dict.fromkeys(part.strip() for part in str(rollout_rs).split(",") if part.strip()))
    unknown = [opt for opt in options if opt not in RS_OPTIONS]
    if not options or unknown:
        raise ValueError(f"comma-separated options among {', '.join(RS_OPTIONS)}"
                         + (f" ({', '.join(unknown)} is not one)" if unknown else ""))
    return options


def parse_rs_thresholds(options: list[str], spec: float | str | None) -> dict[str, tuple[float | None, float]]:
    """`rollout_rs_threshold` -> {option: (lower or None, upper)}: one value shared by all options, or one per option.

    A k1 option takes ratio bounds "lower_upper" (a single value u means 1/u_u); k2, k3 and binary_kl one upper bound."""
    if spec is None or isinstance(spec, bool):
        raise ValueError("a threshold for every rollout_rs option (e.g. 2.0, or '0.5_2.0,0.01')")
    parts = [part.strip() for part in str(spec).split(",") if part.strip()]
    if len(parts) == 1:
        parts = parts * len(options)
    if len(parts) != len(options):
        raise ValueError(f"one threshold, or one per rollout_rs option ({len(options)}), separated by commas")
    bounds = {}
    for option, part in zip(options, parts, strict=True):
        lower_text, _, upper_text = part.rpartition("_")
        try:
            upper = float(upper_text)
            lower = float(lower_text) if lower_text else None
        except ValueError:
            raise ValueError(f"numbers, not {part!r} (for {option})") from None
        if option.endswith("k1"):
            lower = 1.0 / upper if lower is None else lower
            if not 0 < lower <= upper:
                raise ValueError(f"positive ratio bounds lower <= upper for {option}, not {part!r}")
        elif lower is not None or upper <= 0:
            raise ValueError(f"a single positive upper bound for {option}, not {part!r}")
        bounds[option] = (lower, upper)
    return bounds


# ---- the mismatch metrics ------------------------------------------------------------------------------------------
def rollout_probs_diff_metrics(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                               response_mask: torch.Tensor) -> dict[str, float]:
    """verl's training/rollout_probs_diff_{valid,max,mean,std} of |p_old - p_rollout| over response tokens, and
    training/rollout_actor_probs_pearson_corr of the two probabilities; {} when there is no response token."""
    keep = response_mask.bool()
    if not keep.any():
        return {}
    actor, rollout = old_log_probs.detach().float()[keep].exp(), rollout_log_probs.float()[keep].exp()
    diff = (actor - rollout).abs()
    pearson = torch.corrcoef(torch.stack([actor, rollout]))[0, 1] if len(diff) > 1 else torch.tensor(float("nan"))
    return {"training/rollout_probs_diff_valid": 1, "training/rollout_probs_diff_max": diff.max().item(),
            "training/rollout_probs_diff_mean": diff.mean().item(),
            "training/rollout_probs_diff_std": diff.std().item() if len(diff) > 1 else 0.0,
            "training/rollout_actor_probs_pearson_corr": pearson.item()}


def offpolicy_metrics(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                      response_mask: torch.Tensor) -> dict[str, float]:
    """How far pi_old is from pi_rollout on the sampled tokens (names without the rollout_corr/ prefix):
    KL(rollout || old) by k1 and k3, each policy's perplexity, their log difference and ratio, chi^2 per token and sequence."""
    old, rollout, mask = old_log_probs.detach().float(), rollout_log_probs.float(), response_mask.float()
    log_ratio = old - rollout
    safe = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    old_seq, rollout_seq = masked_mean(old, mask, -1), masked_mean(rollout, mask, -1)  # mean log-prob of each response
    log_ppl_diff = rollout_seq - old_seq
    return {
        "training_ppl": torch.exp(-old_seq).mean().item(), "training_log_ppl": (-old_seq).mean().item(),
        "kl": masked_mean(-log_ratio, mask).item(),
        "k3_kl": masked_mean(log_ratio.exp() - log_ratio - 1, mask).item(),
        "rollout_ppl": torch.exp(-rollout_seq).mean().item(), "rollout_log_ppl": (-rollout_seq).mean().item(),
        "log_ppl_diff": log_ppl_diff.mean().item(), "log_ppl_abs_diff": log_ppl_diff.abs().mean().item(),
        "log_ppl_diff_max": log_ppl_diff.max().item(), "log_ppl_diff_min": log_ppl_diff.min().item(),
        "ppl_ratio": log_ppl_diff.exp().mean().item(),
        "chi2_token": (masked_mean(safe.exp().square(), mask) - 1).item(),
        "chi2_seq": (torch.exp(2 * masked_sum(log_ratio, mask, -1).clamp(-SAFETY_BOUND, SAFETY_BOUND)).mean() - 1).item(),
    }


def mismatch_metrics(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                     response_mask: torch.Tensor) -> dict[str, float]:
    """What the trainer logs whenever both log-probs exist: training/rollout_probs_diff_* and rollout_corr/<off-policy>."""
    if not response_mask.bool().any():
        return {}
    return {**rollout_probs_diff_metrics(old_log_probs, rollout_log_probs, response_mask),
            **{f"rollout_corr/{k}": v for k, v in offpolicy_metrics(old_log_probs, rollout_log_probs, response_mask).items()}}


# ---- importance weights --------------------------------------------------------------------------------------------
def rollout_is_weights(log_ratio: torch.Tensor, response_mask: torch.Tensor, level: str, threshold: float | str,
                       batch_normalize: bool = False) -> tuple[torch.Tensor, dict[str, float]]:
    """Detached IS weights pi_old / pi_rollout (0 on padding) and their rollout_is_* metrics.

    `level` token: w_t = exp(log r_t); sequence: every token of a response gets exp(sum_t log r_t). A numeric
    `threshold` truncates w at it (TIS); "lower_upper" sets w to 0 outside [lower, upper] (IcePop).
    `batch_normalize` divides by the mean weight (over tokens, or over responses for sequence weights)."""
    upper, lower = parse_is_threshold(threshold)
    mask = response_mask.float()
    log_ratio = log_ratio.detach().float()
    if level == "token":
        level_log_ratio = log_ratio
    elif level == "sequence":
        level_log_ratio = masked_sum(log_ratio, mask, -1).unsqueeze(-1).expand_as(log_ratio)
    else:
        raise ValueError(f"rollout_is={level!r} is not one of {IS_LEVELS}")
    raw = level_log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp() * mask
    if lower is None:
        weights = raw.clamp(max=upper)
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    metrics = _is_metrics(weights, raw, level_log_ratio, mask, level, upper, lower)
    if batch_normalize:
        rows = mask.sum(-1) > 0
        mean = masked_mean(weights, mask) if level == "token" else masked_mean(weights, mask, -1)[rows].mean()
        if mean > 1e-8:
            weights = weights / mean
        metrics["rollout_is_batch_norm_factor"] = mean.item() if mean > 1e-8 else 1.0
    return weights, metrics


def _is_metrics(weights: torch.Tensor, raw: torch.Tensor, level_log_ratio: torch.Tensor, mask: torch.Tensor, level: str,
                upper: float, lower: float | None) -> dict[str, float]:
    """verl's rollout_is_* statistics: of the weights applied, of the raw ratios against the bounds, per response."""
    keep, rows = mask.bool(), mask.sum(-1) > 0
    low = 1.0 / upper if lower is None else lower
    mean = masked_mean(weights, mask)
    if level == "sequence":  # one ratio per response, measured in log space so a huge one is still counted
        seq_log_ratio = level_log_ratio[rows, 0]
        extremes = {"rollout_is_max": seq_log_ratio.max().clamp(max=SAFETY_BOUND).exp().item(),
                    "rollout_is_min": seq_log_ratio.min().exp().item(),
                    "rollout_is_ratio_fraction_high": (seq_log_ratio > math.log(upper)).float().mean().item(),
                    "rollout_is_ratio_fraction_low": (seq_log_ratio < math.log(low)).float().mean().item()}
    else:
        extremes = {"rollout_is_max": weights[keep].max().item(), "rollout_is_min": weights[keep].min().item(),
                    "rollout_is_ratio_fraction_high": masked_mean((raw > upper).float(), mask).item(),
                    "rollout_is_ratio_fraction_low": masked_mean((raw < low).float(), mask).item()}
    seq_weights, raw_seq = masked_mean(weights, mask, -1)[rows], masked_mean(raw, mask, -1)[rows]
    metrics = {
        "rollout_is_mean": mean.item(), **extremes,
        "rollout_is_std": masked_mean((weights - mean).square(), mask).sqrt().item(),
        "rollout_is_eff_sample_size": _effective_sample_size(weights, mean, mask),
        "rollout_is_seq_mean": seq_weights.mean().item(),
        "rollout_is_seq_std": seq_weights.std().item() if len(seq_weights) > 1 else 0.0,
        "rollout_is_seq_max": seq_weights.max().item(), "rollout_is_seq_min": seq_weights.min().item(),
        "rollout_is_seq_max_deviation": (seq_weights - 1).abs().max().item(),
        "rollout_is_seq_fraction_high": (raw_seq > upper).float().mean().item(),
        "rollout_is_seq_fraction_low": (raw_seq < low).float().mean().item(),
    }
    if lower is not None:
        metrics["rollout_is_oob_ratio"] = masked_mean(((raw < lower) | (raw > upper)).float(), mask).item()
    return metrics


# ---- rejection sampling --------------------------------------------------------------------------------------------
def rollout_rejection_mask(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor,
                           rollout_rs: str, threshold: float | str) -> tuple[torch.Tensor, dict[str, float]]:
    """`response_mask` with the rejected tokens set to 0, and the rollout_rs_* metrics.

    Per token, with log r = log pi_old - log pi_rollout (clamped): k1 = -log r, k2 = (log r)^2 / 2,
    k3 = r - 1 - log r. A token_* option judges each token; seq_sum/seq_mean/seq_max judge a response by the
    sum/mean/max of its tokens' values and keep or drop it whole. k1 is kept when log(lower) <= k1 <= log(upper),
    k2 and k3 when <= upper. binary_kl (KPop) judges each token by max(KL(P||Q), KL(Q||P)) of the Bernoulli
    distributions P = (p_old, 1 - p_old), Q = (p_rollout, 1 - p_rollout), kept when <= upper. A token survives
    only if every listed option keeps it."""
    options = parse_rs_options(rollout_rs)
    bounds = parse_rs_thresholds(options, threshold)
    mask = response_mask.float()
    valid, rows = mask.bool(), mask.sum(-1) > 0
    old, rollout = old_log_probs.detach().float(), rollout_log_probs.float()
    safe = (old - rollout).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    per_token = {"k1": -safe, "k2": 0.5 * safe.square(), "k3": safe.exp() - 1 - safe,
                 "kl": torch.maximum(_bernoulli_kl(old, rollout), _bernoulli_kl(rollout, old))}
    kept = torch.ones_like(mask, dtype=torch.bool)
    metrics: dict[str, float] = {}
    for option in options:
        level, estimator = ("token", "kl") if option == "binary_kl" else option.rsplit("_", 1)
        lower, upper = bounds[option]
        low, high = (math.log(lower), math.log(upper)) if estimator == "k1" else (None, upper)
        values = _level_statistic(per_token[estimator], mask, level)  # (batch, len), a response's value on each token
        keep = values <= high if low is None else (values >= low) & (values <= high)
        kept &= keep
        metrics.update(_rs_metrics(option, values, keep, mask, valid, rows, level, low, high))
    new_mask = response_mask * kept.to(response_mask.dtype)
    metrics["rollout_rs_masked_fraction"] = masked_mean((~kept).float(), mask).item()
    metrics["rollout_rs_seq_masked_fraction"] = (valid & ~kept).any(-1).float().mean().item()
    return new_mask, metrics


def _bernoulli_kl(log_p: torch.Tensor, log_q: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """KL((p, 1-p) || (q, 1-q)) per token, with p and q kept inside [eps, 1-eps] so no log sees 0."""
    p, q = log_p.exp().clamp(eps, 1 - eps), log_q.exp().clamp(eps, 1 - eps)
    return p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()


def _level_statistic(values: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    if level == "token":
        return values
    if level == "seq_sum":
        seq = masked_sum(values, mask, -1)
    elif level == "seq_mean":
        seq = masked_mean(values, mask, -1)
    else:  # seq_max (k2, k3 >= 0, so an empty response's 0 is harmless)
        seq = values.masked_fill(~mask.bool(), float("-inf")).max(-1).values.clamp(min=0.0)
    return seq.unsqueeze(-1).expand_as(values)


def _rs_metrics(option: str, values: torch.Tensor, keep: torch.Tensor, mask: torch.Tensor, valid: torch.Tensor,
                rows: torch.Tensor, level: str, low: float | None, high: float) -> dict[str, float]:
    """verl's rollout_rs_<option>_* statistics of the option's values: extremes and fractions over tokens for token
    options and over responses for seq_* options, the std of the values clipped to the bounds, per-response (mean)
    values, and what the option alone drops."""
    prefix = f"rollout_rs_{option}"
    judged = values[valid] if level == "token" else values[rows, 0]
    per_response = values[rows, 0] if level != "token" else masked_mean(values, mask, -1)[rows]
    clipped = values.clamp(low if low is not None else 0.0, high)
    metrics = {
        f"{prefix}_mean": masked_mean(values, mask).item(),
        f"{prefix}_max": judged.max().item(), f"{prefix}_min": judged.min().item(),
        f"{prefix}_fraction_high": (judged > high).float().mean().item(),
        f"{prefix}_fraction_low": (judged < low).float().mean().item() if low is not None else 0.0,
        f"{prefix}_std": masked_mean((clipped - masked_mean(clipped, mask)).square(), mask).sqrt().item(),
        f"{prefix}_seq_mean": per_response.mean().item(),
        f"{prefix}_seq_std": per_response.std().item() if len(per_response) > 1 else 0.0,
        f"{prefix}_seq_max": per_response.max().item(), f"{prefix}_seq_min": per_response.min().item(),
        f"{prefix}_seq_max_deviation": per_response.abs().max().item(),  # the ideal value of every statistic is 0
        f"{prefix}_seq_fraction_high": (per_response > high).float().mean().item(),
        f"{prefix}_masked_fraction": masked_mean((~keep).float(), mask).item(),
        f"{prefix}_seq_masked_fraction": (valid & ~keep).any(-1)[rows].float().mean().item(),
    }
    if low is not None:
        metrics[f"{prefix}_seq_fraction_low"] = (per_response < low).float().mean().item()
    return metrics


# ---- the whole correction ------------------------------------------------------------------------------------------
def correction_active(config) -> bool:
    """Whether `algorithm.rollout_correction` asks for weights or rejection (decoupled mode needs old log-probs for it)."""
    return config.rollout_is is not None or config.rollout_rs is not None


def compute_rollout_correction(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor,
                               config) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """(IS weights or None, response_mask after rejection, rollout_corr/* metrics) for `algorithm.rollout_correction`."""
    if not response_mask.bool().any():  # nothing to weigh or reject (e.g. a micro-batch of empty responses)
        return None, response_mask, {}
    log_ratio = old_log_probs.detach().float() - rollout_log_probs.float()
    weights, new_mask = None, response_mask
    metrics = offpolicy_metrics(old_log_probs, rollout_log_probs, response_mask)
    if config.rollout_is is not None:
        weights, is_metrics = rollout_is_weights(log_ratio, response_mask, config.rollout_is, config.rollout_is_threshold,
                                                 config.rollout_is_batch_normalize)
        metrics.update(is_metrics)
    if config.rollout_rs is not None:
        new_mask, rs_metrics = rollout_rejection_mask(old_log_probs, rollout_log_probs, response_mask, config.rollout_rs,
                                                      config.rollout_rs_threshold)
        metrics.update(rs_metrics)
    return weights, new_mask, {f"rollout_corr/{key}": value for key, value in metrics.items()}


def bypass_policy_loss(log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, advantages: torch.Tensor,
                       response_mask: torch.Tensor, loss_agg_mode: str, actor_config, correction,
                       ) -> tuple[torch.Tensor, dict[str, float]]:
    """The policy loss of bypass mode, where pi_rollout stands in for pi_old (no old-log-prob pass).

    The weights and rejection compare the current policy with pi_rollout. loss_type=ppo_clip: PPO's clipped
    surrogate with ratio pi_theta / pi_rollout, which already corrects, so no IS weights; rejected tokens leave
    the loss. loss_type=reinforce: -sg(w) A log pi_theta over the kept tokens. Returns verl's actor/* metrics
    and the rollout_corr/* ones."""
    from reinforge.algorithm.policy_loss import compute_policy_loss

    weights, kept_mask, metrics = compute_rollout_correction(log_prob, rollout_log_prob, response_mask, correction)
    if correction.loss_type == "ppo_clip":
        loss, pg_metrics = compute_policy_loss("vanilla", old_log_prob=rollout_log_prob, log_prob=log_prob,
                                               advantages=advantages, response_mask=kept_mask, loss_agg_mode=loss_agg_mode,
                                               config=actor_config, rollout_is_weights=None)
    else:
        token_losses = -advantages * log_prob * (weights if weights is not None else 1.0)
        loss = agg_loss(token_losses, kept_mask, loss_agg_mode, **getattr(actor_config, "global_batch_info", {}))
        pg_metrics = {"actor/ppo_kl": masked_mean(rollout_log_prob - log_prob.detach(), kept_mask).item()}
    return loss, {**pg_metrics, **metrics}


def _effective_sample_size(weights: torch.Tensor, mean: torch.Tensor, mask: torch.Tensor) -> float:
    """1 / E[(w / E[w])^2]: the fraction of the tokens the weights count in full; 0 when every weight is 0 (IcePop's
    band rejected every token; verl divides by zero there)."""
    second_moment = masked_mean((weights / (mean + 1e-8)).square(), mask).item()
    return 1.0 / second_moment if second_moment > 0 else 0.0
