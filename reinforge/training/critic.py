"""The value maths of PPO on one model: per-token values, and the clipped value-loss update.

`values[:, t]` estimates the return from the state before response token t (the logit at the
position that predicts token t), as in verl. The update runs the actor's machinery
(`minibatch.py`): `ppo_epochs` passes of mini-batches (`critic.ppo_mini_batch_size` prompts x
rollout.n trajectories) split into micro-batches (rows or a token budget, trimmed of all-padding
columns) whose gradients accumulate, each micro-batch's
loss normalised by the mini-batch's totals, so micro-batching does not change the gradient. On several
data-parallel ranks the totals and metrics are global, as in the actor.
"""

from __future__ import annotations

import torch

from reinforge.algorithm import compute_value_loss, masked_mean
from reinforge.batch import Batch
from reinforge.config.schema import CriticConfig
from reinforge.distributed.process_group import all_reduce_dict, world_size
from reinforge.training.minibatch import (
    FORWARD_KEYS,
    backward_if_finite,
    clip_and_step,
    eval_mode,
    forward_in_micro_batches,
    global_batch_info,
    micro_batch_mean,
    micro_batch_rows,
    run_epochs,
    trim_padding,
)
from reinforge.training.packing import packed_values, packing_for


def response_values(model: torch.nn.Module, batch: Batch, pack: bool = False) -> torch.Tensor:
    """The value of the state before each response token, (batch, response_len), fp32; with `pack`
    (critic.model.use_remove_padding) from a forward without padding where that costs less (`packing.py`)."""
    packing = packing_for(model, batch, pack)
    if packing is not None:
        return packed_values(model, packing)
    width = batch["responses"].shape[1]
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"], use_cache=False)
    return out.logits[:, -width - 1:-1, 0].float()


class Critic:
    def __init__(self, model: torch.nn.Module, config: CriticConfig, optimizer: torch.optim.Optimizer | None = None,
                 device: str | None = None):
        """`device`: where inputs go; by default the parameters' (FSDP's CPU offload keeps them on the CPU)."""
        self.model, self.config, self.optimizer = model, config, optimizer
        self.pack = config.model.use_remove_padding
        self.device = torch.device(device) if device else next(model.parameters()).device

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        """Values for every row, in forward micro-batches, without gradients; 0 on masked positions."""
        cfg = self.config
        max_tokens = cfg.forward_max_token_len_per_gpu if cfg.use_dynamic_bsz else None
        with eval_mode(self.model):
            values, = forward_in_micro_batches(batch, cfg.forward_micro_batch_size_per_gpu, max_tokens, self.device,
                                               lambda micro: (response_values(self.model, micro, self.pack),))
        return values * batch["response_mask"]

    def update_critic(self, batch: Batch, rollout_n: int) -> dict[str, float]:
        """Run the critic's PPO epochs over `batch` (needs `values` and `returns`); returns critic/* metrics."""
        cfg = self.config
        mini_size = cfg.ppo_mini_batch_size * rollout_n // world_size()  # this rank's share of each mini-batch
        micro_size = cfg.ppo_micro_batch_size_per_gpu or mini_size
        max_tokens = cfg.ppo_max_token_len_per_gpu if cfg.use_dynamic_bsz else None
        return run_epochs(batch, [*FORWARD_KEYS, "response_mask", "values", "returns"], mini_size, cfg.ppo_epochs,
                          cfg.shuffle, "critic", lambda mini: self._optimizer_step(mini, micro_size, max_tokens))

    def _optimizer_step(self, mini: Batch, micro_size: int, max_tokens: int | None) -> tuple[dict[str, float], bool]:
        cfg = self.config
        info = global_batch_info(mini["response_mask"], cfg.loss_scale_factor)
        metrics = {"critic/vf_loss": 0.0}
        per_micro = []  # each micro-batch's vf_clipfrac and vpred_mean: verl averages them over micro-batches, unweighted
        self.optimizer.zero_grad(set_to_none=True)
        loss_finite = True
        for rows in micro_batch_rows(mini, micro_size, max_tokens):
            micro = mini.index(rows).to(self.device)
            mask = micro["response_mask"].float()
            trimmed = trim_padding(micro)
            vpreds = trimmed.widen(response_values(self.model, trimmed.batch, self.pack))
            vf_loss, vf_clipfrac = compute_value_loss(vpreds, micro["returns"], micro["values"], mask, cfg.cliprange_value,
                                                      cfg.loss_agg_mode, **info)
            loss_finite &= backward_if_finite(vf_loss)
            metrics["critic/vf_loss"] += vf_loss.item() / info["dp_size"]  # shares of micro-batches and ranks
            per_micro.append({"critic/vf_clipfrac": vf_clipfrac.item(),
                              "critic/vpred_mean": masked_mean(vpreds.detach(), mask).item()})
        metrics.update(micro_batch_mean(per_micro, info["dp_size"]))
        metrics = all_reduce_dict(metrics)
        metrics["critic/loss"] = metrics["critic/vf_loss"]  # verl logs the critic's whole loss under this name too
        metrics["critic/grad_norm"], stepped = clip_and_step(self.model, self.optimizer, cfg.grad_clip, loss_finite)
        return metrics, stepped
