"""The `prime` reward manager: rows scored in parallel worker processes (verl's PrimeRewardManager).

Each row is one call of the reward function (`compute_score(data_source, solution_str,
ground_truth, extra_info)`, as `naive`), run in a pool of `num_processes` worker processes
(default min(8, CPU count)), one call per worker at a time. A call still running `timeout_s`
seconds (default 300, verl's value; null for no limit) after it reached its worker has the
worker killed, with everything it started, and a fresh worker takes its place: the row scores
0.0 and counts in `reward/timeouts`. So scorers that execute code or call solvers cannot stall
training. `async def` functions are awaited inside the worker.

`remote` (verl 0.9's) is the same with `num_workers` processes (`reward.num_workers`, 8) and no time limit.

The workers live from the first call until `close()` or the end of the process; the function
reaches them by module and name (see `reinforge.reward.manager.pool`), so it must be a top-level
function of a file (a functools.partial of one is fine); this is checked when the manager is
made. Unlike verl's, results may be dicts with a "score" and extra keys, as in `naive`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from reinforge.reward.manager.base import RewardManager, Sample, check_count, register_reward_manager


@register_reward_manager("prime")
class PrimeRewardManager(RewardManager):
    """Scores each response in a pool of worker processes with a per-row time limit; see the module docstring."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        num_processes: int | None = None,
        timeout_s: float | None = 300.0,
    ) -> None:
        self.num_processes = check_count("num_processes", min(8, os.cpu_count() or 1) if num_processes is None else num_processes)
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, timeout_s, processes=self.num_processes)

    def _compute(self, samples: list[Sample]) -> list[Any]:
        return self._pool.map([sample.call_kwargs() for sample in samples])


@register_reward_manager("remote")
class RemoteRewardManager(PrimeRewardManager):
    """verl 0.9's `remote` manager: `prime`'s worker processes (for scorers that are unsafe in threads, such as
    math-verify's), `num_workers` of them (`reward.num_workers`, 8) and no time limit by default."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        num_workers: int = 8,
        timeout_s: float | None = None,
    ) -> None:
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, check_count("num_workers", num_workers), timeout_s)
