"""`reinforge eval`: score a file of generated responses per data source (verl's main_eval).

As verl's script does: every response of a row (column `data.response_key`, a list) is scored with the reward
function called as fn(data_source, response, ground_truth) (by position: any parameter names), the ground truth being the row's
`data.reward_model_key` column's 'ground_truth'; a row's score is the mean of its responses' scores (mean@n), and
`test_score/<data_source>` is the mean of the row scores of that data source (every row counts once, whatever
its number of responses). The metrics are printed as verl prints them, one dict; verl has no key for a metrics
file, so none is written.

Where it differs, and why:
- without `custom_reward_function.path` each row is scored by the built-in scorer of its data source (verl's
  script needs a file);
- the reward function is called in this process, one response after another (verl: a Ray task per row); a call
  that raises, or returns something that is not a score, scores 0 and is counted, its first traceback printed, as
  in training (reinforge/reward/manager/base.py); a dict result's 'score' is the score;
- columns, rows without a ground truth and empty response lists are DataErrors that name the column or row.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from reinforge.config.evaluation_schema import EvaluationConfig, unused_evaluation_settings
from reinforge.environment.data_files import preview
from reinforge.errors import ConfigError, DataError, RewardError
from reinforge.reward.manager.base import Sample
from reinforge.reward.manager.calls import function_name
from reinforge.reward.manager.naive import NaiveRewardManager


class ResponseScorer(NaiveRewardManager):
    """The naive manager's calls, result checks and failure reports, over response texts instead of a token Batch. The
    function is called as verl's main_eval calls it, fn(data_source, response, ground_truth) by position: its first
    three parameters get them, whatever their names."""

    def __init__(self, compute_score: Callable[..., Any]) -> None:
        self.parameters = ("data_source", "solution_str", "ground_truth")
        super().__init__(tokenizer=None, compute_score=compute_score)

    def score(self, samples: list[Sample]) -> tuple[list[float], dict[str, int]]:
        """Each response's score (0.0 for a failed call), and the counts of failed calls."""
        scores, _, _, metrics = self._parse(samples, self._watched_compute(samples))
        return scores, metrics

    def _counted_in(self, kind: str) -> str:
        return "the count of failed calls printed at the end"

    def _compute(self, samples: list[Sample]) -> list[Any]:
        return self._call([dict(zip(self.parameters, (s.data_source, s.solution_str, s.ground_truth), strict=True))
                           for s in samples], self.max_concurrency)

    def _check_signature(self, fn: Callable[..., Any]) -> None:
        """The names of the parameters that take the three positional arguments; RewardError when it cannot take them."""
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            return
        positional = [p.name for p in signature.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
        if len(positional) >= 3 and all(p.kind is not p.POSITIONAL_ONLY for p in signature.parameters.values()):
            self.parameters = tuple(positional[:3])
        try:
            signature.bind(**dict.fromkeys(self.parameters))
        except TypeError as error:
            raise RewardError(f"the reward function {function_name(fn)} has the parameters {signature}, but reinforge eval "
                              f"calls it as verl's main_eval does, fn(data_source, response, ground_truth) ({error}). Define "
                              f"it as def {getattr(fn, '__name__', 'fn')}(data_source, solution_str, ground_truth, "
                              "extra_info=None)") from None

    def _where(self, sample: Sample, error: BaseException) -> str:
        return f"on a response of row {sample.row} (data_source={sample.data_source!r}); that response scores 0.0"

    def _warn_slow(self, responses: int, seconds: float) -> None:
        print(f"reinforge: warning: the reward function {function_name(self.compute_score)} has been scoring {responses} "
              f"responses for {seconds:g} s; it may be stuck (Ctrl-C stops reinforge eval)", file=sys.stderr, flush=True)


def run_evaluation(config: EvaluationConfig, user_keys: list[str]) -> dict[str, float]:
    """Score every response of `data.path`; returns (and prints) {'test_score/<data_source>': mean score}."""
    from reinforge.environment.data_files import read_rows
    from reinforge.reward import default_compute_score, load_reward_function
    from reinforge.reward.manager.calls import function_name
    from reinforge.reward.manager.openrlhf import OpenRLHFRewardFunction
    from reinforge.reward.manager.trl import TRLRewardFunctions

    start = time.perf_counter()
    data = config.data
    for line in unused_evaluation_settings(user_keys):
        print(f"reinforge: note: {line}", flush=True)
    file = Path(data.path).expanduser()
    if not file.is_file():
        what = "is a folder" if file.is_dir() else "does not exist"
        raise DataError(f"data.path={data.path}: {file.resolve()} {what}; set data.path to the parquet file of responses "
                        "(reinforge generate's data.output_path)")
    compute_score = load_reward_function(config) or default_compute_score
    if isinstance(compute_score, (TRLRewardFunctions, OpenRLHFRewardFunction)):
        what = "TRL (completions, ...)" if isinstance(compute_score, TRLRewardFunctions) else "OpenRLHF (queries, ...)"
        raise ConfigError(f"custom_reward_function.name: {function_name(compute_score)} is a reward function written for "
                          f"{what}, which reinforge train calls; reinforge eval calls a verl one, "
                          "compute_score(data_source, solution_str, ground_truth, extra_info) per response")
    rows, columns = read_rows(str(file))
    if not rows:  # nothing to score is no score: a generation step that wrote nothing must not pass as evaluated
        raise DataError(f"data.path={data.path}: the file holds no rows, so there is nothing to score")
    for key in ("response_key", "data_source_key", "reward_model_key"):
        column = getattr(data, key)
        if column not in columns:
            raise DataError(f"{data.path}: no column {column!r} (data.{key}); its columns are {', '.join(columns)}. Set "
                            f"data.{key} to the column that holds it")
    samples, owners = _samples(rows, data, str(data.path))
    if compute_score is default_compute_score:
        _check_scorers(rows, data, str(data.path))
    scorer = ResponseScorer(compute_score)
    scores, failures = scorer.score(samples)

    row_scores: list[list[float]] = [[] for _ in rows]
    for owner, score in zip(owners, scores, strict=True):
        row_scores[owner].append(score)
    by_source: dict[Any, list[float]] = {}
    for row, values in zip(rows, row_scores, strict=True):
        by_source.setdefault(row.get(data.data_source_key), []).append(float(np.mean(values)))
    metrics = {f"test_score/{source}": float(np.mean(means)) for source, means in by_source.items()}  # numpy's sums, as verl
    failed = failures["reward/errors"] + failures["reward/timeouts"]
    if samples and failed == len(samples):  # the function is broken, not the responses: no score to report
        raise RewardError(f"the reward function {function_name(compute_score)} failed on all {failed} responses of "
                          f"{data.path} ({failures['reward/errors']} errors, {failures['reward/timeouts']} timeouts; the "
                          "first is printed above), so every score would be 0; fix the function and run again")
    print(f"reinforge: scored {len(samples)} responses of {len(rows)} rows ({len(by_source)} data source(s)) with "
          f"{function_name(compute_score)} in {time.perf_counter() - start:.1f} s"
          + (f"; {failed} call(s) failed and scored 0" if failed else ""), flush=True)
    print(metrics, flush=True)
    return metrics


def _samples(rows: list[dict[str, Any]], data: Any, where: str) -> tuple[list[Sample], list[int]]:
    """One sample per response of every row, and the row each belongs to; DataError naming the row of a bad value."""
    samples, owners = [], []
    for number, row in enumerate(rows):
        responses = row.get(data.response_key)
        if isinstance(responses, str):  # one response per row
            responses = [responses]
        if not isinstance(responses, (list, tuple)) or not responses or not all(isinstance(r, str) for r in responses):
            raise DataError(f"{where}: row {number}, column {data.response_key!r} (data.response_key): expected a non-empty "
                            f"list of response strings, got {preview(responses)}")
        reward_model = row.get(data.reward_model_key)
        if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
            raise DataError(f"{where}: row {number}, column {data.reward_model_key!r} (data.reward_model_key): expected a "
                            f"dict with a 'ground_truth' key (verl's schema), got {preview(reward_model)}")
        source = row.get(data.data_source_key)
        for response in responses:
            samples.append(Sample(row=number, data_source=source, solution_str=response,
                                          ground_truth=reward_model["ground_truth"], extra_info=None,
                                          response_length=len(response)))
            owners.append(number)
    return samples, owners


def _check_scorers(rows: list[dict[str, Any]], data: Any, where: str) -> None:
    """Without a custom reward function: RewardError naming the first row whose data source has no built-in scorer."""
    from reinforge.reward import find_scorer

    seen: set[str] = set()
    for number, row in enumerate(rows):
        source = row.get(data.data_source_key)
        if repr(source) in seen:  # repr: a value may be unhashable
            continue
        seen.add(repr(source))
        try:
            find_scorer(source)
        except RewardError as exc:
            raise RewardError(f"{where}: row {number}, column {data.data_source_key!r} (data.data_source_key): {exc}") from None
