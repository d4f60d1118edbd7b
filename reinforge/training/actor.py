"""The policy maths on one model: log-probs of responses, and the PPO-style update.

`Actor` knows nothing of generation, rewards or advantages' origin. It takes a Batch of
trajectories with `advantages` (and, when a KL loss is on, `ref_log_prob`) and runs
`ppo_epochs` passes of mini-batches (`ppo_mini_batch_size` prompts x rollout.n trajectories),
each split into micro-batches whose gradients accumulate. Each micro-batch's loss is scaled by
its share of the mini-batch (`agg_scale`), so the accumulated gradient equals one full
mini-batch step whatever the micro-batch size.

When the update is on-policy (one epoch, one mini-batch) and the batch carries no
`old_log_probs`, the old log-probs are the detached log-probs of the update's own forward pass:
they are the same numbers, and a second forward pass is saved.
"""

from __future__ import annotations

import math

import torch

from reinforge.algorithm import agg_loss, agg_scale, get_policy_loss_fn, kl_penalty
from reinforge.algorithm.core import entropy_from_logits
from reinforge.batch import Batch
from reinforge.config.schema import ActorConfig

FORWARD_KEYS = ("input_ids", "attention_mask", "position_ids", "responses")


def response_log_probs(model: torch.nn.Module, batch: Batch, temperature: float,
                       with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob (and entropy) of each response token, (batch, response_len), under logits / temperature."""
    responses = batch["responses"]
    width = responses.shape[1]
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"], use_cache=False, logits_to_keep=width + 1)
    logits = out.logits[:, :-1, :].float()  # (batch, response_len, vocab): position t predicts response token t
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = logits.gather(-1, responses.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    entropy = None
    if with_entropy:
        entropy = entropy_from_logits(logits)
    return log_probs, entropy


class Actor:
    def __init__(self, model: torch.nn.Module, config: ActorConfig, optimizer: torch.optim.Optimizer | None = None):
        self.model, self.config, self.optimizer = model, config, optimizer
        self.device = next(model.parameters()).device

    @torch.no_grad()
    def compute_log_prob(self, batch: Batch, temperature: float, micro_batch_size: int | None,
                         with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropy) for every row, in micro-batches, without gradients."""
        was_training = self.model.training
        self.model.eval()
        try:
            pieces = [response_log_probs(self.model, micro.select(FORWARD_KEYS).to(self.device), temperature, with_entropy)
                      for micro in batch.split(micro_batch_size or len(batch))]
        finally:
            self.model.train(was_training)
        log_probs = torch.cat([p[0] for p in pieces]).cpu()
        entropy = torch.cat([p[1] for p in pieces]).cpu() if with_entropy else None
        return log_probs, entropy

    def update_policy(self, batch: Batch, temperature: float, rollout_n: int) -> dict[str, float]:
        """Run the PPO epochs over `batch`; returns verl's actor/* metrics averaged over optimizer steps."""
        cfg = self.config
        mini_size = cfg.ppo_mini_batch_size * rollout_n
        micro_size = cfg.ppo_micro_batch_size_per_gpu or mini_size
        on_policy = cfg.ppo_epochs == 1 and len(batch) <= mini_size and "old_log_probs" not in batch
        policy_loss_fn = get_policy_loss_fn(cfg.policy_loss.loss_mode)
        keys = [*FORWARD_KEYS, "response_mask", "advantages"]
        keys += [k for k in ("old_log_probs", "ref_log_prob") if k in batch]
        if cfg.use_kl_loss and "ref_log_prob" not in batch:
            raise ValueError("use_kl_loss needs ref_log_prob in the batch (the reference worker computes it)")

        totals: dict[str, float] = {}
        steps = 0
        for _ in range(cfg.ppo_epochs):
            data = batch.select(keys)
            if cfg.shuffle:
                data = data.index(torch.randperm(len(data)))
            for mini in data.split(mini_size):
                mini_metrics = self._optimizer_step(mini, micro_size, temperature, on_policy, policy_loss_fn)
                for key, value in mini_metrics.items():
                    totals[key] = totals.get(key, 0.0) + value
                steps += 1
        return {key: value / steps for key, value in totals.items()}

    def _optimizer_step(self, mini: Batch, micro_size: int, temperature: float, on_policy: bool, policy_loss_fn) -> dict[str, float]:
        cfg = self.config
        global_tokens = int(mini["response_mask"].sum())
        global_seqs = len(mini)
        metrics: dict[str, float] = {}

        def add(key: str, value: float, weight: float) -> None:
            metrics[key] = metrics.get(key, 0.0) + value * weight

        self.optimizer.zero_grad(set_to_none=True)
        for micro in mini.split(micro_size):
            micro = micro.to(self.device)
            mask = micro["response_mask"].float()
            log_prob, entropy = response_log_probs(self.model, micro, temperature, with_entropy=True)
            old_log_prob = log_prob.detach() if on_policy else micro["old_log_probs"]
            pg_loss, pg_metrics = policy_loss_fn(
                old_log_prob=old_log_prob, log_prob=log_prob, advantages=micro["advantages"],
                response_mask=mask, loss_agg_mode=cfg.loss_agg_mode, config=cfg,
            )
            scale = agg_scale(mask, cfg.loss_agg_mode, global_tokens, global_seqs)
            share = float(mask.sum()) / max(global_tokens, 1)  # metrics are token means over the mini-batch
            loss = pg_loss
            entropy_term = agg_loss(entropy, mask, cfg.loss_agg_mode)
            if cfg.entropy_coeff:
                loss = loss - cfg.entropy_coeff * entropy_term
            if cfg.use_kl_loss:
                kl_term = agg_loss(kl_penalty(log_prob, micro["ref_log_prob"], cfg.kl_loss_type), mask, cfg.loss_agg_mode)
                loss = loss + cfg.kl_loss_coef * kl_term
                add("actor/kl_loss", kl_term.item(), share)
            (loss * scale).backward()
            add("actor/pg_loss", pg_loss.item(), share)
            add("actor/entropy", entropy_term.item(), share)
            for key, value in pg_metrics.items():
                add(key, value, share)

        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        if math.isfinite(grad_norm.item()):
            self.optimizer.step()
            metrics["actor/nonfinite_grad_skipped"] = 0.0
        else:
            self.optimizer.zero_grad(set_to_none=True)
            metrics["actor/nonfinite_grad_skipped"] = 1.0
        metrics["actor/grad_norm"] = grad_norm.item()
        if cfg.use_kl_loss:
            metrics["actor/kl_coef"] = cfg.kl_loss_coef
        return metrics
