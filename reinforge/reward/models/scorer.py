"""The reward of a run with `reward_model.enable`: the reward model's score, plus a custom reward function's.

verl's reward managers return `rm_scores` as the reward whenever a reward model ran, without
calling the rule-based function; its newer reward loop instead leaves the combination to the
custom function. reinforge decides:

- no `custom_reward_function.path`: the reward is the reward model's score alone, on each
  response's last token (the built-in scorers are not called, so data sources need none);
- with `custom_reward_function.path`: the reward manager (`reward_model.reward_manager`, with its
  shaping) scores the responses with the function as usual and the reward model's score is
  added on the same token. To weight or gate the two, return the weighted rule part from the
  function; the reward model's part is added as is.

Either way the reward model's score of each row is reported as `reward_extra_info["rm_score"]`
(so `reward/rm_score/mean` in training and `val-aux/<data_source>/rm_score/mean@n` in
validation), next to the counts `reward/rm_truncated` and `reward/judge_parse_failures`; the
managers' `reward/errors` and `reward/timeouts` are always present too (0 without a manager).
`RewardModelScorer` is called like a reward manager, so the trainer, ReMax's greedy baseline and
validation use it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from reinforge.batch import Batch
from reinforge.distributed import WorkerGroup


class RewardModelScorer:
    """`scorer(batch, return_dict)` as a reward manager: reward model scores (+ `manager`'s when given)."""

    def __init__(self, rm_wg: WorkerGroup, manager: Callable[..., Any] | None = None):
        self.rm_wg = rm_wg
        self.manager = manager

    def __call__(self, batch: Batch, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        scored = self.rm_wg.compute_rm_score(batch)
        rm_scores = scored["rm_scores"]  # (batch, response_len)
        reward, extra = rm_scores, {}
        metrics = {"reward/errors": 0, "reward/timeouts": 0}  # a manager's failure counts: present (0) without one too
        if self.manager is not None:
            rule = self.manager(batch, return_dict=True)
            reward = rule["reward_tensor"] + rm_scores.to(rule["reward_tensor"].device)
            extra.update(rule.get("reward_extra_info", {}))
            metrics.update(rule.get("reward_metrics", {}))
        extra["rm_score"] = rm_scores.sum(-1).tolist()
        metrics["reward/rm_truncated"] = int(sum(scored["rm_truncated"]))
        if "judge_parse_failed" in scored:
            metrics["reward/judge_parse_failures"] = int(sum(scored["judge_parse_failed"]))
        if not return_dict:
            return reward
        return {"reward_tensor": reward, "reward_extra_info": extra, "reward_metrics": metrics}

    def close(self) -> None:
        """Close the reward manager as a manager is closed (it may hold worker processes)."""
        if self.manager is not None and hasattr(self.manager, "close"):
            self.manager.close()
