"""The `batch` reward manager: one call of the reward function for the whole batch (verl's BatchRewardManager).

The function is called once, with lists and the manager's other options:

    compute_score(data_sources=[...], solution_strs=[...], ground_truths=[...], extra_infos=[...], **reward_kwargs)

`reward_kwargs` are every `reward_model.reward_kwargs` except `timeout_s`, which is the
manager's own. Use it when scoring a batch at once is cheaper than row by row (a model, a
remote service). Decided behaviours:

- There is no default batch function: `custom_reward_function.path` must name one. A function
  that cannot take these keyword arguments is a ConfigError when the manager is made.
- The function returns a list (a tuple or a 1-d numpy array also do) with one result per row,
  in row order; each result is checked like a `naive` result (a number, or a dict with "score";
  anything else fails only its row). Anything that is not such a sequence, or has the wrong
  length, is a RewardError naming the function: it is a bug to fix, not a bad row.
- If the call raises, every row scores 0.0 and counts in `reward/errors`; the traceback is
  printed once. A reinforge `UserError` raised by the function stops the call instead.
- `timeout_s` limits the whole call: an `async def` function is cancelled, a sync one runs in a
  worker process that is killed (so the function must be a top-level function of a file). Every
  row then scores 0.0 and counts in `reward/timeouts`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from reinforge.errors import ConfigError, RewardError
from reinforge.reward.manager.base import KWARGS, RewardManager, Sample, register_reward_manager
from reinforge.reward.manager.calls import function_name
from reinforge.reward.registry import default_compute_score

_LIST_ARGS = ("data_sources", "solution_strs", "ground_truths", "extra_infos")


@register_reward_manager("batch")
class BatchRewardManager(RewardManager):
    """Scores the whole batch with one `compute_score` call on lists; see the module docstring."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable[..., Any] | None = None,
        reward_fn_key: str = "data_source",
        timeout_s: float | None = None,
        **reward_kwargs: Any,
    ) -> None:
        if compute_score is None or compute_score is default_compute_score:
            raise ConfigError(
                "reward_model.reward_manager=batch calls the reward function once with lists: "
                f"fn({', '.join(_LIST_ARGS)}, **reward_kwargs) returning one score per response. The built-in "
                "scorers score one response at a time; set custom_reward_function.path (and .name) to a batch function, "
                "or use reward_model.reward_manager=naive"
            )
        self.reward_kwargs = reward_kwargs
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, timeout_s)
        self._call_error: BaseException | None = None  # the exception of the last call, when the whole call failed

    def _compute(self, samples: list[Sample]) -> list[Any]:
        kwargs = {"data_sources": [s.data_source for s in samples], "solution_strs": [s.solution_str for s in samples],
                  "ground_truths": [s.ground_truth for s in samples], "extra_infos": [s.extra_info for s in samples],
                  **self.reward_kwargs}
        [result] = self._call([kwargs], max_concurrency=1)
        self._call_error = result if isinstance(result, BaseException) else None
        if self._call_error is not None:
            return [result] * len(samples)
        return self._checked(result, len(samples))

    def _checked(self, result: Any, rows: int) -> list[Any]:
        """The per-row results of a call; RewardError when the function broke the list contract."""
        if isinstance(result, np.ndarray) and result.ndim == 1:
            result = result.tolist()
        if not isinstance(result, (list, tuple)):
            raise RewardError(
                f"the batch reward function {function_name(self.compute_score)} returned {type(result).__name__} "
                f"{_short(result)}; it must return a list with one score (a number or a dict with 'score') per response"
            )
        if len(result) != rows:
            raise RewardError(
                f"the batch reward function {function_name(self.compute_score)} returned {len(result)} scores for "
                f"{rows} responses; it must return one per response, in the order of solution_strs"
            )
        return list(result)

    def _check_signature(self, fn: Callable[..., Any]) -> None:
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):  # builtins and some callables have none to check
            return
        try:
            signature.bind(**dict.fromkeys(_LIST_ARGS), **self.reward_kwargs)
        except TypeError as error:
            raise ConfigError(
                f"reward_model.reward_manager=batch calls the reward function as fn({', '.join(_LIST_ARGS)}, "
                f"**{KWARGS}) with {KWARGS} (timeout_s excluded) {sorted(self.reward_kwargs)}; {function_name(fn)} has "
                f"the parameters {signature}, which do not accept that: {error}"
            ) from None

    def _where(self, sample: Sample, error: BaseException) -> str:
        if error is self._call_error:
            return "in its call for the whole batch; every row scores 0.0"
        return super()._where(sample, error)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
