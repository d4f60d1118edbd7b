"""Metrics of a training step under verl's names, and a timer for its phases.

Every name is listed with its meaning in docs/metrics.md (a test checks that each key a run logs
is documented there). Timing follows verl: `timing_s/<phase>` is wall time, and
`timing_per_token_ms/<phase>` divides it by the response tokens for `gen` and by all prompt and
response tokens for the passes over whole sequences. Memory is the process's own: resident memory
(`perf/cpu_memory_used_gb`; verl reports the whole machine's used memory under this name) and, on
CUDA, torch's peak allocated and reserved memory; the workers measure it (`reinforge/training/perf.py`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from reinforge.algorithm.core import masked_mean, masked_sum
from reinforge.batch import Batch
from reinforge.trainer.val_metrics import NUMBER_TYPES


@contextmanager
def timer(name: str, timing: dict[str, float]) -> Iterator[None]:
    """Add the wall time of the block to timing[name] (seconds)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timing[name] = timing.get(name, 0.0) + time.perf_counter() - start


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    """mean, max and min of `values` (nan when it is empty)."""
    values = values.float()
    if not values.numel():
        return {f"{prefix}/{stat}": float("nan") for stat in ("mean", "max", "min")}
    return {f"{prefix}/mean": values.mean().item(), f"{prefix}/max": values.max().item(), f"{prefix}/min": values.min().item()}


def compute_data_metrics(batch: Batch, max_response_length: int, max_prompt_length: int) -> dict[str, float]:
    """critic/score, critic/rewards, critic/advantages, critic/returns, response_length, response_length_non_aborted,
    response/aborted_ratio, prompt_length (the lengths with clip_ratio: the share at the limit); with a critic also
    critic/values and critic/vf_explained_var.

    As verl: the lengths count the attention mask (a multi-turn conversation's tool and user tokens too; rejected
    tokens too), a response of no tokens is aborted, and the scores and rewards are those of the responses that
    were not (nan, with a warning, when none is left); the advantages, returns and values are over the response
    mask's tokens (nan when it has none, so the keys stay the same from step to step)."""
    response_mask = batch["response_mask"].bool()
    prompt_width = batch["prompts"].shape[1]
    prompt_length = batch["attention_mask"][:, :prompt_width].sum(-1).float()
    response_length = batch["attention_mask"][:, prompt_width:].sum(-1).float()
    aborted = response_length == 0
    valid_adv = batch["advantages"][response_mask]
    valid_ret = batch["returns"][response_mask]
    if aborted.all():
        print(f"reinforge: warning: all {len(batch)} responses of this step are empty (aborted): critic/score/*, "
              "critic/rewards/* and response_length_non_aborted/* are nan", file=sys.stderr, flush=True)
    metrics = {
        **_stats("critic/score", batch["token_level_scores"].sum(-1)[~aborted]),
        **_stats("critic/rewards", batch["token_level_rewards"].sum(-1)[~aborted]),
        **_stats("critic/advantages", valid_adv),
        **_stats("critic/returns", valid_ret),
        **_stats("response_length", response_length),
        "response_length/clip_ratio": (response_length >= max_response_length).float().mean().item(),
        **_stats("response_length_non_aborted", response_length[~aborted]),
        "response_length_non_aborted/clip_ratio": (response_length[~aborted] >= max_response_length).float().mean().item(),
        "response/aborted_ratio": aborted.float().mean().item(),
        **_stats("prompt_length", prompt_length),
        "prompt_length/clip_ratio": (prompt_length >= max_prompt_length).float().mean().item(),
    }
    if "__num_turns__" in batch:
        metrics.update(agent_metrics(batch))
    if "values" in batch:
        valid_values = batch["values"][response_mask]
        metrics.update(_stats("critic/values", valid_values))
        # 1 - Var(G - V) / Var(G): the share of the returns' variance the critic explains (nan without tokens)
        metrics["critic/vf_explained_var"] = (1.0 - torch.var(valid_ret - valid_values) / (torch.var(valid_ret) + 1e-5)).item() \
            if valid_ret.numel() else float("nan")
    return metrics


def agent_metrics(batch: Batch) -> dict[str, float]:
    """Of a multi-turn rollout: num_turns/* (verl's), tool_call_counts/*, tool_errors/*, interaction_errors/*, and the
    mean seconds a conversation spent generating and in tools (timing_s/agent_loop/*).

    Each is over the rows whose loop reports it: a batch that mixes loops (tool_agent rows beside env_agent rows) has
    tool metrics over its tool_agent rows."""
    metrics = _stats("num_turns", torch.tensor([float(t) for t in batch["__num_turns__"]]))
    rows = list(batch["agent_metrics"]) if "agent_metrics" in batch else []
    for key, name in (("tool_calls", "tool_call_counts"), ("tool_errors", "tool_errors"), ("interaction_errors", "interaction_errors")):
        values = [float(row[key]) for row in rows if key in row]
        if values:
            metrics.update(_stats(name, torch.tensor(values)))
    for key, name in (("generate_s", "generate_sequences"), ("tool_s", "tool_calls")):
        values = [row[key] for row in rows if key in row]
        if values:
            metrics[f"timing_s/agent_loop/{name}/mean"] = sum(values) / len(values)
    return metrics


# verl's token counts for timing_per_token_ms: generation produces the response tokens; these passes
# read every prompt and response token. Other phases (reward, old_log_prob, testing, ...) get only timing_s.
PER_TOKEN_PHASES = ("ref", "values", "adv", "update_critic", "update_actor")


def compute_timing_metrics(batch: Batch, timing: dict[str, float]) -> dict[str, float]:
    """timing_s/<phase> for every timed phase; timing_per_token_ms/<phase> for gen (per response token: the
    response's attention mask, so a multi-turn response's tool and user tokens count, as generating them took part
    of the time) and for the passes of PER_TOKEN_PHASES (per prompt + response token), as verl counts them (0 when
    there are no tokens)."""
    attention = batch["attention_mask"]
    tokens = {"gen": int(attention[:, batch["prompts"].shape[1]:].sum()), **dict.fromkeys(PER_TOKEN_PHASES, int(attention.sum()))}
    metrics = {f"timing_s/{name}": seconds for name, seconds in timing.items()}
    for name, seconds in timing.items():
        if name in tokens:
            metrics[f"timing_per_token_ms/{name}"] = 1000 * seconds / tokens[name] if tokens[name] else 0.0
    return metrics


def compute_throughput_metrics(batch: Batch, step_seconds: float, n_devices: int = 1) -> dict[str, float]:
    """perf/total_num_tokens (prompt + response), perf/time_per_step, perf/throughput (tokens/s/device)."""
    total = int(batch["attention_mask"].sum())
    return {
        "perf/total_num_tokens": total,
        "perf/time_per_step": step_seconds,
        "perf/throughput": total / max(step_seconds, 1e-9) / n_devices,
    }


def variance_proxy_metrics(batch: Batch, grad_norm: float | None) -> dict[str, float]:
    """verl's variance_proxy/* when the batch carries the actor's sum of squared probabilities (sum_pi_squared: the
    optimal-token-baseline estimators, or actor.calculate_sum_pi_squared), else nothing.

    A trajectory's score-norm proxy is W = sum over its tokens of 1 - 2 pi_t + sum_v pi_t(v)^2 (pi_t: the old
    probability of the sampled token), times rho_t^2 under rollout importance weights; its scalar advantage a is the
    token mean of its advantages. proxy2_total_power = mean(a^2 max(W, 0)) (with weights: mean(rho-bar^2 a^2 W') with
    W' the unweighted W and rho-bar the token mean of rho), an estimate of E||g_tau||^2; proxy1_signal_strength =
    actor/grad_norm^2 (the batch gradient's ||g||^2); proxy3_pure_noise = max(0, (proxy2 - proxy1) / (N - 1)) over
    the batch's N trajectories; expected_a_squared = mean(a^2) and expected_w = mean(W). As in verl, a trajectory
    without a token (aborted, or rejected whole by rollout_rs) counts in the means with a = W = 0, and in N."""
    if not all(key in batch for key in ("sum_pi_squared", "old_log_probs", "advantages")):
        return {}
    mask = batch["response_mask"].float()
    signal = grad_norm ** 2 if grad_norm is not None else None
    per_token = 1 - 2 * batch["old_log_probs"].exp() + batch["sum_pi_squared"]
    weights = batch.get("rollout_is_weights")
    if weights is not None:
        per_token = per_token * weights ** 2
    a = masked_mean(batch["advantages"], mask, -1)
    w = masked_sum(per_token, mask, -1)
    if weights is None:
        total = (a ** 2 * w.clamp(min=0)).mean()
    else:  # the weights come back out of W, and their token mean goes in per trajectory
        unweighted = masked_sum(per_token / (weights ** 2).clamp(min=1e-10), mask, -1).clamp(min=0)
        total = (masked_mean(weights, mask, -1) ** 2 * a ** 2 * unweighted).mean()
    count = mask.shape[0]
    noise = max(0.0, (float(total) - signal) / (count - 1)) if signal is not None and count > 1 else 0.0
    return {"variance_proxy/proxy1_signal_strength": signal if signal is not None else 0.0,
            "variance_proxy/proxy2_total_power": float(total), "variance_proxy/proxy3_pure_noise": noise,
            "variance_proxy/expected_a_squared": float((a ** 2).mean()), "variance_proxy/expected_w": float(w.mean())}


def extra_info_metrics(extra_info: dict[str, list], gdpo_keys: list | None = None) -> dict[str, float]:
    """reward/<key>/mean for each numeric extra key a reward function returned (besides score); for the rewards GDPO
    normalises (`gdpo_keys`), verl's gdpo/<key>/mean, std (population), max and min too."""
    metrics = {}
    for key, values in extra_info.items():
        numbers = [float(v) for v in values if isinstance(v, NUMBER_TYPES)]
        if key != "score" and numbers:
            metrics[f"reward/{key}/mean"] = sum(numbers) / len(numbers)
        if key in (gdpo_keys or ()) and numbers:
            array = np.asarray(numbers)
            metrics.update({f"gdpo/{key}/mean": float(array.mean()), f"gdpo/{key}/std": float(array.std()),
                            f"gdpo/{key}/max": float(array.max()), f"gdpo/{key}/min": float(array.min())})
    return metrics


def seqlen_balance_metrics(lengths: torch.Tensor, world_size: int) -> dict[str, float]:
    """verl's global_seqlen/*, logged with trainer.balance_batch: the tokens (prompt and response) per rank if the batch
    were cut into world_size consecutive pieces (min, max, minmax_diff, mean) and per rank as balanced (balanced_min,
    balanced_max; reinforge/distributed/layout.py)."""
    from reinforge.distributed.layout import dp_order

    lengths = lengths.long()
    plain = lengths.view(world_size, -1).sum(-1)
    balanced = lengths[torch.as_tensor(dp_order(lengths.numpy(), world_size, True))].view(world_size, -1).sum(-1)
    return {"global_seqlen/min": int(plain.min()), "global_seqlen/max": int(plain.max()),
            "global_seqlen/minmax_diff": int(plain.max() - plain.min()), "global_seqlen/balanced_min": int(balanced.min()),
            "global_seqlen/balanced_max": int(balanced.max()), "global_seqlen/mean": float(lengths.sum()) / world_size}
