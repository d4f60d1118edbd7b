"""Validation metrics per data source, with verl's names and semantics (`process_validation_metrics`).

Input: one entry per validation response: its data source, the prompt it answers (`uid`), and
its variables: `reward` (the summed reward on the response's tokens) and, as in verl, the reward's
extra information (`score`, the task score before any shaping, `acc`, `pred`, ...; a plain-number
result is `acc` alone, as verl's reward loop records it). Each data source has the variables its own
responses have values for (a source whose reward returns dicts without `acc` has no `acc`, even
when another source's does). A variable is numeric when all its values are
numbers or bools (None, a row of the source whose reward function failed, counts 0); others are
skipped. `pred` is the vote of majority voting and is not a variable itself.

For each data source, numeric variable and prompt with N responses (values v_1..v_N):

- `mean@N`, and for N > 1 `std@N` (population standard deviation).
- For N > 1 and k in 2, 4, 8, ... below N, and N: `best@k/mean`, `best@k/std`, `worst@k/mean`,
  `worst@k/std` by bootstrap as verl does: 1000 draws of k responses with replacement from the
  N, drawn by `numpy.random.RandomState(42)` restarted for every prompt, variable and k (verl
  re-seeds numpy's global generator the same way; here the global generator is left alone); the
  mean and population std over the draws of the largest (smallest) value in each draw.
- `maj@k/mean`, `maj@k/std` when the reward function returns `pred`: in each draw, the value
  of the response whose `pred` is the most frequent in the draw; on a tie, the `pred` that comes
  first in the draw; its first response's value (verl's `calc_maj_val`). As in verl, a prompt
  one of whose responses has no `pred` (None: a failed reward call, `strict_box_verify` without a
  box) takes no part in these, which average over the prompts that vote.
- For N > 1, `pass@k` for k in 1, 2, 4, ... below N, and N: the unbiased estimator 1 - C(N-c, k) / C(N, k)
  of the chance that at least one of k responses passes, c the responses with value >= 1 (full
  marks on 0/1 and -1/1 scores; `acc` true). verl has no pass@k; this is reinforge's addition.

Every metric is then averaged over the prompts of the data source. Names: `val-core/<ds>/<var>/<metric>`
for the core variable (`acc` when the data source has it, else `reward`) and the metrics
`mean@N`, `best@N/mean`, `best@N/std`, `maj@N/mean`, `maj@N/std` with N the largest number of
responses; every other metric is `val-aux/<ds>/<var>/<metric>` (verl's rule).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

N_BOOTSTRAP = 1000
PASS_THRESHOLD = 1.0
VOTE_KEY = "pred"
CHUNK_ELEMENTS = 1 << 22  # largest (prompts, draws, N) array built at once
CORE_PREFIXES = ("mean", "maj", "best")

NUMBER_TYPES = (bool, int, float, np.number, np.bool_)  # the reward_extra_info values that are averaged into metrics
Metrics = dict[str, dict[str, dict[str, float]]]  # data source -> variable -> metric name -> value


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): the chance that k of n responses drawn without replacement hold one of the c passing ones."""
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def bootstrap_sizes(n: int) -> list[int]:
    """verl's subset sizes for n responses: 2, 4, 8, ... below n, and n (none for n = 1)."""
    if n < 2:
        return []
    return [2 ** i for i in range(1, n.bit_length()) if 2 ** i < n] + [n]


def pass_sizes(n: int) -> list[int]:
    """The k of pass@k: 1, then the bootstrap sizes; none for n = 1 (pass@1 would repeat mean@1 for 0/1 values)."""
    return [1, *bootstrap_sizes(n)] if n > 1 else []


@functools.lru_cache(maxsize=64)
def bootstrap_draws(n: int, k: int, seed: int = 42) -> np.ndarray:
    """(N_BOOTSTRAP, k) indices into n responses, drawn with replacement: the draws verl's `bootstrap_metric` makes."""
    draws = np.random.RandomState(seed).randint(0, n, size=(N_BOOTSTRAP, k))
    draws.flags.writeable = False
    return draws


def majority_values(values: np.ndarray, votes: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """(prompts, draws): per prompt and draw, the value of the first response whose vote is the most frequent in the draw.

    `values` and `votes` are (prompts, N); votes are integers below N; ties go to the vote that appears first in the draw.
    The winner is the position j of the draw with the largest `count(vote_j) * (k + 1) - j`: a larger count always wins,
    and among equal counts the earliest position, which is the first response of the earliest vote.
    """
    prompts, n = votes.shape
    rows = prompts * len(draws)
    k = draws.shape[1]
    drawn = votes[:, draws].reshape(rows, k)  # one row per (prompt, draw)
    counts = np.bincount((np.arange(rows)[:, None] * n + drawn).ravel(), minlength=rows * n).reshape(rows, n)
    winner = np.argmax(np.take_along_axis(counts, drawn, axis=1) * (k + 1) - np.arange(k), axis=1)
    responses = draws[np.arange(rows) % len(draws), winner].reshape(prompts, len(draws))
    return np.take_along_axis(values, responses, axis=1)


def prompt_metrics(values: np.ndarray, votes: np.ndarray | None, seed: int = 42) -> dict[str, np.ndarray]:
    """The metrics of one variable for prompts with N responses each (see the module docstring), one per prompt.

    `values` is (prompts, N); `votes` is None or (prompts, N) integers below N, equal where the `pred`s are equal.
    """
    n = values.shape[1]
    metrics = {f"mean@{n}": values.mean(1)}
    if n > 1:
        metrics[f"std@{n}"] = values.std(1)
    for k in bootstrap_sizes(n):
        draws = bootstrap_draws(n, k, seed)
        chunk = max(1, CHUNK_ELEMENTS // (len(draws) * n))  # prompts at a time: bounds the (prompts, draws, N) arrays
        parts = [_bootstrap_chunk(values[i:i + chunk], None if votes is None else votes[i:i + chunk], draws)
                 for i in range(0, len(values), chunk)]
        for name in parts[0]:
            metrics[name] = np.concatenate([part[name] for part in parts])
    passed = (values >= PASS_THRESHOLD).sum(1)
    for k in pass_sizes(n):
        by_count = np.array([pass_at_k(n, c, k) for c in range(n + 1)])
        metrics[f"pass@{k}"] = by_count[passed]
    return metrics


def _bootstrap_chunk(values: np.ndarray, votes: np.ndarray | None, draws: np.ndarray) -> dict[str, np.ndarray]:
    """best@k, worst@k (and maj@k) mean and std over the draws, per prompt."""
    drawn = values[:, draws]  # (prompts, draws, k)
    k = draws.shape[1]
    picked = {f"best@{k}": drawn.max(2), f"worst@{k}": drawn.min(2)}
    if votes is not None:
        picked[f"maj@{k}"] = majority_values(values, votes, draws)
    out = {}
    for name, per_draw in picked.items():
        out[f"{name}/mean"], out[f"{name}/std"] = per_draw.mean(1), per_draw.std(1)
    return out


def process_validation_metrics(data_sources: Sequence[str], sample_uids: Sequence[Any], infos_dict: dict[str, Sequence[Any]],
                               seed: int = 42) -> Metrics:
    """{data_source: {variable: {metric: value averaged over prompts}}} (verl's function of the same name and result).

    `sample_uids` says which prompt each response answers; `infos_dict` maps each variable to one value per response
    (None where a response lacks it). A data source reports only the variables its own responses have: one source's
    reward returning `acc` gives no `acc` (of zeros) to another whose reward returns dicts without it.
    """
    prompts: dict[str, dict[Any, list[int]]] = defaultdict(dict)  # data source -> prompt -> its response rows
    for row, (source, uid) in enumerate(zip(data_sources, sample_uids, strict=True)):
        prompts[source].setdefault(uid, []).append(row)
    return {source: _source_metrics(by_prompt, infos_dict, seed) for source, by_prompt in prompts.items()}


def _source_metrics(by_prompt: dict[Any, list[int]], infos_dict: dict[str, Sequence[Any]],
                    seed: int) -> dict[str, dict[str, float]]:
    """{variable: {metric: value averaged over prompts}} of one data source, whose prompts' response rows are `by_prompt`.

    As in verl, where a source's variables are the keys its own reward results hold, a variable (or the `pred` vote) with
    no value in any of this source's responses is left out for it, instead of counting 0.
    """
    own = [row for rows in by_prompt.values() for row in rows]
    position = {row: i for i, row in enumerate(own)}  # row of infos_dict -> position among this source's rows
    numeric = {name: _as_numbers([values[row] for row in own]) for name, values in infos_dict.items() if name != VOTE_KEY}
    numeric = {name: values for name, values in numeric.items() if values is not None}
    votes = [infos_dict[VOTE_KEY][row] for row in own] if VOTE_KEY in infos_dict else None
    if votes is not None and all(vote is None for vote in votes):
        votes = None
    by_size: dict[int, list[list[int]]] = defaultdict(list)  # prompts with the same number of responses go together
    for rows in by_prompt.values():
        by_size[len(rows)].append([position[row] for row in rows])
    per_prompt: dict[str, dict[str, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
    for groups in by_size.values():
        # a prompt votes only when every one of its responses has a `pred` (verl skips maj@ for the others)
        voting = [group for group in groups if votes is not None and all(votes[i] is not None for i in group)]
        silent = [group for group in groups if not (votes is not None and all(votes[i] is not None for i in group))]
        for part, codes in ((voting, np.array([_vote_codes([votes[i] for i in group]) for group in voting])), (silent, None)):
            if not part:
                continue
            rows = np.array(part)  # (prompts, N)
            for name, values in numeric.items():
                for metric, per in prompt_metrics(values[rows], codes, seed).items():
                    per_prompt[name][metric].append(per)
    return {name: {metric: float(np.concatenate(parts).mean()) for metric, parts in by_metric.items()}
            for name, by_metric in per_prompt.items()}


def validation_metric_dict(metrics: Metrics) -> dict[str, float]:
    """Flat metric names: `val-core/...` for the core variable's headline metrics, `val-aux/...` for the rest."""
    out: dict[str, float] = {}
    for source, by_name in metrics.items():
        core = "acc" if "acc" in by_name else "reward"
        for name, by_metric in by_name.items():
            n_max = max(int(metric.split("@")[1].split("/")[0]) for metric in by_metric)
            for metric, value in by_metric.items():
                headline = name == core and metric.startswith(CORE_PREFIXES) and metric.split("/")[0].endswith(f"@{n_max}")
                out[f"{'val-core' if headline else 'val-aux'}/{source}/{name}/{metric}"] = value
    return out


def _as_numbers(values: Sequence[Any]) -> np.ndarray | None:
    """float64 values (bools 0/1, None 0), or None when a value is neither a number nor None, or all are None."""
    if not any(v is not None for v in values):
        return None
    if not all(v is None or isinstance(v, NUMBER_TYPES) for v in values):
        return None
    return np.array([0.0 if v is None else float(v) for v in values], dtype=np.float64)


def _vote_codes(votes: Sequence[Any]) -> list[int]:
    """The votes of one prompt as 0, 1, ... in order of first appearance (equal votes, equal codes; unhashable: by repr)."""
    codes: dict[Any, int] = {}
    out = []
    for vote in votes:
        try:
            hash(vote)
        except TypeError:
            vote = repr(vote)
        out.append(codes.setdefault(vote, len(codes)))
    return out
