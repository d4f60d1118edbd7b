"""Shared by the policy-loss golden tests: how to call a loss, and numpy references written from docs/algorithms.md.

The references are independent of the implementation: plain numpy loops over the formulas.
"""

import numpy as np
import torch

from reinforge.algorithm import get_policy_loss_fn
from reinforge.config.schema import ActorConfig

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum"]
ALL_LOSSES = ["vanilla", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "cispo", "up", "dppo_tv", "dppo_kl", "dro",
              "topr", "cppo"]
CLIPFRAC, KL, LOWER = "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"


def actor_cfg(policy_loss=None, **fields):
    """An ActorConfig with the given fields (set as attributes, so a field the schema lacks still reaches the loss)."""
    cfg = ActorConfig()
    for key, value in fields.items():
        setattr(cfg, key, value)
    for key, value in (policy_loss or {}).items():
        setattr(cfg.policy_loss, key, value)
    return cfg


def call(name, old, lp, adv, mask, mode="token-mean", cfg=None):
    fn = get_policy_loss_fn(name)
    loss, metrics = fn(old_log_prob=old, log_prob=lp, advantages=adv, response_mask=mask, loss_agg_mode=mode,
                       config=cfg if cfg is not None else actor_cfg())
    assert torch.is_tensor(loss) and loss.dim() == 0
    return loss, metrics


def leaf(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, requires_grad=True)


def grad_of(loss, lp):
    (g,) = torch.autograd.grad(loss, lp)
    assert torch.isfinite(g).all()
    return g


# ------------------------------------------------------------------------------ numpy references
def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def mmean(v, m):
    return float((v * m).sum() / m.sum())


def np_agg(loss, m, mode):
    total = (loss * m).sum()
    rows = m.sum(-1)
    s = (rows > 0).sum()
    if mode == "token-mean":
        return total / m.sum()
    if mode == "seq-mean-token-sum":
        return total / s
    if mode == "seq-mean-token-mean":
        return sum((loss[i] * m[i]).sum() / rows[i] for i in range(len(m)) if rows[i] > 0) / s
    if mode == "seq-mean-token-sum-norm":
        return total / s / m.shape[-1]
    if mode == "token-sum":
        return total
    raise AssertionError(mode)


def np_loss(name, old, lp, a, m, mode, low=0.2, high=0.2, c=3.0, tau_pos=1.0, tau_neg=1.05, kl_ratio=0.3, kl_coef=0.1,
            dro_beta=0.5, delta=0.2, topr=(0.0, 1.0), cppo=(0.8, 0.02, 0.9, 1.0)):
    """(loss, metrics) from the formulas in the brief/doc, one loss at a time."""
    x_raw = lp - old
    if name == "topr":  # per sequence: weight 1, or for a negative mean advantage the clamped length-normalised ratio
        n = np.maximum(m.sum(-1), 1)
        ratio = np.exp(np.minimum((m * x_raw).sum(-1) / n, 10.0))
        negative = (m * a).sum(-1) / n < 0
        w = np.where(negative, np.clip(ratio, *topr), 1.0)
        return np_agg(-a * lp * w[:, None], m, "seq-mean-token-mean"), {
            CLIPFRAC: 0.0, LOWER: 0.0, KL: mmean(-x_raw, m), "actor/topr_negative_seq_frac": float(negative.mean()),
            "actor/topr_taper_weight_mean": float(w.mean())}
    if name == "cppo":  # token by token along each response: the budget spent so far decides
        w_min, delta_b, q, k = cppo
        ratio = np.exp(np.clip(x_raw, -20, 20))
        change = np.abs(np.exp(lp) - np.exp(old))
        rows, width = m.shape
        keep = np.zeros_like(m)
        for i in range(rows):
            valid = [change[i, t] for t in range(width) if m[i, t]]
            budget = min(max(k * np.quantile(valid, q), delta_b), 5 * delta_b) if valid else delta_b
            spent = weights = 0.0
            for t in range(width):
                if not m[i, t]:
                    continue
                w = w_min + (1 - w_min) * min(max((width - (t + 1)) / max(width - 1, 1), 0.0), 1.0)
                z = w * change[i, t]
                keep[i, t] = a[i, t] * (ratio[i, t] - 1) <= 0 or z <= min(delta, delta + budget * weights - spent)
                spent, weights = spent + z, weights + w
        tok = -a * np.minimum(ratio, c) * lp * keep
        return np_agg(tok, m, mode), {CLIPFRAC: mmean(1 - keep, m), LOWER: mmean((ratio > c) * keep, m),
                                      KL: mmean(-np.clip(x_raw, -20, 20), m)}
    if name == "dro":
        return np_agg(-(lp * a - 0.5 * dro_beta * x_raw ** 2), m, mode), {CLIPFRAC: 0.0, LOWER: 0.0, KL: mmean(-x_raw, m)}
    if name == "vanilla":
        x = np.clip(x_raw, -20, 20)
        ratio = np.exp(x)
        l1, l2 = -a * ratio, -a * np.clip(ratio, 1 - low, 1 + high)
        c1 = np.maximum(l1, l2)
        l3 = -a * c
        c2 = np.minimum(l3, c1)
        tok = np.where(a < 0, c2, c1)
        return np_agg(tok, m, mode), {CLIPFRAC: mmean(l2 > l1, m), LOWER: mmean((c1 > l3) & (a < 0), m), KL: mmean(-x, m)}
    if name == "gspo":
        seq = (m * x_raw).sum(-1) / np.maximum(m.sum(-1), 1)
        s = np.exp(np.minimum(seq, 10.0))[:, None] * np.ones_like(a)
        l1, l2 = -a * s, -a * np.clip(s, 1 - low, 1 + high)
        tok = np.maximum(l1, l2)
        return np_agg(tok, m, mode), {CLIPFRAC: mmean(l2 > l1, m), LOWER: 0.0, KL: mmean(-x_raw, m)}
    if name == "sapo":
        x = np.clip(x_raw, -20, 20)
        ratio = np.exp(x)
        tau = np.where(a > 0, tau_pos, tau_neg)
        gate = sigmoid(tau * (ratio - 1)) * 4 / tau
        return np_agg(-gate * a, m, "seq-mean-token-mean"), {CLIPFRAC: 0.0, LOWER: 0.0, KL: mmean(-x, m)}
    if name == "gpg":
        return np_agg(-lp * a, m, mode), {}
    if name == "cispo":
        ratio = np.exp(np.clip(x_raw, -20, 20))
        cr = np.clip(ratio, 1 - low, 1 + high)
        return np_agg(-cr * a * lp, m, mode), {CLIPFRAC: mmean(ratio != cr, m), LOWER: 0.0}
    if name == "geo_mean":
        sgn = np.sign(a)
        xc = np.clip(x_raw, -low, high)
        xmin = sgn * np.minimum(sgn * x_raw, sgn * xc)
        n = m.sum(-1)
        ratio = np.exp((m * xmin).sum(-1) / (n + 1e-8))
        abar = (m * a).sum(-1) / (n + 1e-8)
        loss = (-abar * ratio).sum() / (n > 0).sum()
        clipped = x_raw != xc
        return loss, {CLIPFRAC: mmean(clipped & (a > 0), m), LOWER: mmean(clipped & (a < 0), m), KL: mmean(-x_raw, m)}
    if name == "up":
        x = np.clip(x_raw, -20, 20)
        ratio = np.exp(x)
        l1, l2 = -a * ratio, -a * np.clip(ratio, 1 - low, 1 + high)
        c1 = np.maximum(l1, l2)
        l3 = -a * c
        tok = np.where(a > 0, -a, np.where(a < 0, np.minimum(l3, c1), c1))  # A > 0: -A pi / sg(pi), valued -A
        return np_agg(tok, m, mode), {CLIPFRAC: mmean((l2 > l1) & (a <= 0), m), LOWER: mmean((c1 > l3) & (a < 0), m),
                                      KL: mmean(-x, m)}
    if name in ("dppo_tv", "dppo_kl"):
        x = np.clip(x_raw, -20, 20)
        ratio = np.exp(x)
        p, po = np.exp(lp), np.exp(old)
        if name == "dppo_tv":
            up_ok, down_ok = p - po <= high, p - po >= -low
        else:
            kl = po * np.log(po / p) + (1 - po) * np.log((1 - po + 1e-8) / (1 - p + 1e-8))
            up_ok, down_ok = (kl <= high) | (p <= po), (kl <= low) | (p >= po)
        inside = np.where(a > 0, up_ok, down_ok)
        tok = -a * np.minimum(ratio, c) * lp * inside
        return np_agg(tok, m, mode), {CLIPFRAC: mmean(~inside, m), LOWER: mmean((ratio > c) & inside, m), KL: mmean(-x, m)}
    if name == "kl_cov":
        ratio = np.exp(x_raw)
        tok = -a * ratio
        valid = np.argwhere(m > 0)
        av = np.array([a[i, t] for i, t in valid])
        lv = np.array([lp[i, t] for i, t in valid])
        cov = (av - av.mean()) * (lv - lv.mean())
        k = max(1, int(len(valid) * kl_ratio))
        for j in np.argsort(-cov)[:k]:
            i, t = valid[j]
            tok[i, t] += kl_coef * abs(x_raw[i, t])
        return np_agg(tok, m, mode), {KL: mmean(np.abs(x_raw), m)}
    raise AssertionError(name)


def random_batch(seed, dtype=torch.float64, all_masked_row=True):
    rng = np.random.default_rng(seed)
    b, width = 5, 6
    m = np.array([[1, 1, 1, 1, 1, 1],
                  [1, 1, 1, 0, 0, 0],
                  [1, 0, 1, 1, 0, 0],
                  [1, 0, 0, 0, 0, 0],
                  [0, 0, 0, 0, 0, 0] if all_masked_row else [1, 1, 0, 0, 0, 0]], dtype=np.float64)
    lp = -rng.uniform(0.1, 3.0, size=(b, width))
    x = rng.uniform(-0.5, 0.5, size=(b, width))
    a = rng.normal(size=(b, width))
    old = lp - x
    return old, lp, a, m
