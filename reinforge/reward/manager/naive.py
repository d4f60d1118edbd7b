"""The `naive` reward manager: one call of the reward function per response (verl's NaiveRewardManager).

How the function is called (options in `reward_model.reward_kwargs`):

- a sync function, no `timeout_s` (the default): in the training process, one row after another;
- a sync function with `timeout_s`: in one worker process (`reinforge.reward.manager.pool`),
  one row after another; a row past `timeout_s` seconds has its worker killed and scores 0.0
  (`reward/timeouts`). A thread could not be stopped, so the process is what makes the limit
  real; the price is that the function must be importable by module and name (a top-level
  function of a file, not a lambda), which is checked when the manager is made;
- an `async def` function: all rows concurrently in one event loop, at most `max_concurrency`
  (default 64) in flight, each cancelled after `timeout_s` seconds when set.

Results, errors and timeouts are handled as `reinforge.reward.manager.base` describes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reinforge.reward.manager.base import RewardManager, Sample, check_count, register_reward_manager


@register_reward_manager("naive")
class NaiveRewardManager(RewardManager):
    """Scores each response with one `compute_score` call; see the module docstring."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        timeout_s: float | None = None,
        max_concurrency: int = 64,
    ) -> None:
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, timeout_s)
        self.max_concurrency = check_count("max_concurrency", max_concurrency)

    def _compute(self, samples: list[Sample]) -> list[Any]:
        return self._call([sample.call_kwargs() for sample in samples], self.max_concurrency)
