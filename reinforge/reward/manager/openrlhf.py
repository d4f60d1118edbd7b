"""The `openrlhf` reward manager: reward functions written for OpenRLHF (`--remote_rm_url reward_func.py`), called as
OpenRLHF calls them.

    reward_func(queries, prompts, labels) -> {"rewards": ..., "scores": ..., "extra_logs": {...}}, or the rewards alone

OpenRLHF's remote reward server (an http(s) URL in `custom_reward_function.path`, `OpenRLHFRewardServer`) is called
the same way, the arguments POSTed as JSON (`query`, `prompts`, `labels`) and its JSON answer read as the result.
OpenRLHF (0.9.1 and later) calls the function once per response, positionally, with lists of one:

- `queries`: the prompt and the response as the model read and wrote them, their token ids decoded together with their
  special tokens (the response's EOS included), as OpenRLHF decodes them; `query[len(prompt):]` is the response for
  tokenizers whose text is the concatenation of their tokens' (byte-level BPE: Qwen, Llama 3), as OpenRLHF's users take it;
- `prompts`: the prompt text the model read (after the chat template, or `data.input_template`), decoded the same way;
- `labels`: the row's label (the column `data.label_key` names, which becomes the row's `reward_model.ground_truth`;
  without it, the row's ground truth, as the file has it: None stays None), "" for a row without one, as OpenRLHF
  without `--label_key`.

The result is a dict with `rewards` (the reward: a number, or a tensor or list of one) and optionally `scores` (the
reward when absent or None, as in OpenRLHF) and `extra_logs` (name -> one value), each kept as an extra key (`scores`
and the extra log's name: rollout dumps, `reward/<name>/mean`; `algorithm.filter_groups.metric=scores` filters groups
on the scores, as OpenRLHF's dynamic filtering does), or the reward alone (a number, tensor or list of one, as
OpenRLHF 0.8.0 and before took it). A call that raises, or returns anything else, fails its row (0.0,
`reward/errors`, the first one printed), as the `naive` manager's (OpenRLHF's step fails on it). Calls run in up to
`reward_model.reward_kwargs.max_concurrency` threads (32), as OpenRLHF runs them in threads, or, with
`reward_kwargs.timeout_s`, each limited to it in a worker process; an `async def` function's calls are awaited in one
event loop, `max_concurrency` at a time, each cancelled at `timeout_s`. A function written for OpenRLHF is told by its
first parameter, `queries` (`is_openrlhf_reward`), or by its name, `reward_func`; `reinforge.reward.loading` wraps it in
an `OpenRLHFRewardFunction`, and the trainer then uses this manager in place of `naive`.
"""

from __future__ import annotations

import http.client
import inspect
import json
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from reinforge.batch import Batch
from reinforge.errors import ConfigError
from reinforge.reward.manager.base import RewardManager, Sample, ScoreFunctionError, check_count, register_reward_manager
from reinforge.reward.manager.calls import (
    COMPLETION_PARAMETERS,
    VERL_PARAMETERS,
    call_coroutines,
    call_inline,
    is_async,
    run_coroutine,
)


def is_openrlhf_reward(fn: Callable[..., Any]) -> bool:
    """Whether `fn` is written for OpenRLHF: `queries` its first parameter (OpenRLHF passes it first, by position), and
    no `solution_str` (verl's) or `completions` (TRL's, whose data may have a `queries` column)."""
    try:
        parameters = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return bool(parameters) and parameters[0] == "queries" \
        and not (VERL_PARAMETERS | COMPLETION_PARAMETERS) & set(parameters)


class OpenRLHFRewardFunction:
    """A reward function written for OpenRLHF, called as OpenRLHF calls it: `func(queries, prompts, labels)`,
    positionally (a third parameter named otherwise takes the labels); an awaitable result is awaited. Picklable, so
    a worker process of `timeout_s` may call it."""

    def __init__(self, func: Callable[..., Any]) -> None:  # checked by reinforge.reward.loading: three positionals
        self.func = func

    def __call__(self, queries: list[str], prompts: list[str], labels: list[Any]) -> Any:
        result = self.func(queries, prompts, labels)
        return run_coroutine(result) if inspect.isawaitable(result) else result


class OpenRLHFRewardServer:
    """OpenRLHF's remote reward server (`--remote_rm_url http://host:port/get_reward`, as `openrlhf.cli.serve_rm` serves
    one), called as OpenRLHF calls it: each call POSTs `{"query": queries, "prompts": prompts, "labels": labels}` as JSON
    (not through a proxy of the environment, as OpenRLHF's client) and returns the JSON object the server answers, read
    as a reward function's result; tried `TRIES` times, `PAUSE_S` apart, as OpenRLHF tries, each connection and read
    within `timeout_s` (`reward_kwargs.timeout_s`, else OpenRLHF's 180 s). Picklable."""

    TRIES, PAUSE_S = 5, 1.0

    def __init__(self, url: str, timeout_s: float = 180.0) -> None:
        self.url, self.timeout_s = url, timeout_s

    def __call__(self, queries: list[str], prompts: list[str], labels: list[Any]) -> Any:
        try:
            body = json.dumps({"query": queries, "prompts": prompts, "labels": labels}, default=_json_value).encode()
        except TypeError as error:
            raise ScoreFunctionError(f"the label {labels[0]!r} cannot be sent to the reward server {self.url} as JSON "
                                     f"({error})") from None
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"}, method="POST")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for attempt in range(1, self.TRIES + 1):
            try:
                with opener.open(request, timeout=self.timeout_s) as response:
                    answer = json.loads(response.read())
                break
            except (OSError, ValueError, http.client.HTTPException) as error:  # refused, timed out, an error status, ...
                if attempt == self.TRIES:
                    raise RewardServerError(f"the reward server {self.url} did not answer after {self.TRIES} tries "
                                            f"{self.PAUSE_S:g} s apart: {type(error).__name__}: {error}") from None
                time.sleep(self.PAUSE_S)
        if not isinstance(answer, dict):
            raise ScoreFunctionError(f"the reward server {self.url} answered {type(answer).__name__} {answer!r:.80}; it "
                                     "must answer a JSON object with 'rewards', as OpenRLHF's do")
        return answer


def _json_value(value: Any) -> Any:
    """A numpy value of a label as JSON can hold it; TypeError for anything else JSON cannot."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not a JSON type")


class RewardServerError(Exception):
    """The reward server did not answer a call (its row fails, as when a reward function raises)."""


@dataclass
class OpenRLHFSample(Sample):
    """A row with what OpenRLHF's call gives besides the label (its ground_truth): the decoded prompt and prompt +
    response."""

    prompt: str = ""
    query: str = ""


@register_reward_manager("openrlhf")
class OpenRLHFRewardManager(RewardManager):
    """Scores each response with a reward function written for OpenRLHF; see the module docstring."""

    needs_ground_truth = False
    missing_ground_truth = ""  # a row without a label is given "", as OpenRLHF without --label_key gives

    def __init__(self, tokenizer: Any, num_examine: int = 0, compute_score: Callable[..., Any] | None = None,
                 reward_fn_key: str = "data_source", timeout_s: float | None = None, max_concurrency: int = 32) -> None:
        if not isinstance(compute_score, OpenRLHFRewardFunction):
            raise ConfigError(
                "reward_model.reward_manager=openrlhf calls a reward function written for OpenRLHF, "
                "reward_func(queries, prompts, labels) returning {'rewards': ...}; set custom_reward_function.path (and "
                ".name, default reward_func when the file has no compute_score) to one, or use reward_model.reward_manager=naive")
        self.max_concurrency = check_count("max_concurrency", max_concurrency)
        server = isinstance(compute_score.func, OpenRLHFRewardServer)  # timeout_s: its requests' (in threads, no process)
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, timeout_s, processes=0 if server else None)
        if server and self.timeout_s is not None:
            compute_score.func.timeout_s = self.timeout_s
        self.who = f"the reward server {compute_score.func.url}" if server else "the OpenRLHF reward function"

    def _check_signature(self, fn: Callable[..., Any]) -> None:  # checked when it was loaded
        return

    def _samples(self, batch: Batch) -> list[Sample]:
        samples = super()._samples(batch)
        prompts = batch["prompts"]  # (batch, prompt_len), left-padded
        prompt_mask = batch["attention_mask"][:, : prompts.shape[1]].bool()
        out, texts = [], {}
        for sample in samples:
            i = sample.row
            prompt_ids = prompts[i][prompt_mask[i]].tolist()
            ids = prompt_ids + batch["responses"][i, : sample.response_length].tolist()
            key = tuple(prompt_ids)  # the rollout.n responses to a prompt share its text: decoded once
            if key not in texts:
                texts[key] = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
            out.append(OpenRLHFSample(**vars(sample), prompt=texts[key],
                                      query=self.tokenizer.decode(ids, skip_special_tokens=False)))  # as one, as OpenRLHF
        return out

    def _compute(self, samples: list[Sample]) -> list[Any]:
        calls = [{"queries": [s.query], "prompts": [s.prompt], "labels": [s.ground_truth]} for s in samples]
        func = self.compute_score.func
        if is_async(func):  # awaited together in one event loop (a module-level semaphore or client is tied to one)
            async def call(queries: list, prompts: list, labels: list) -> Any:
                return await func(queries, prompts, labels)

            results = call_coroutines(call, calls, self.max_concurrency, self.timeout_s)
        elif self._pool is not None:  # timeout_s: in the worker process
            results = self._pool.map(calls)
        else:  # in threads, as OpenRLHF's asyncio.to_thread calls overlap (a function waiting on a server)
            with ThreadPoolExecutor(min(self.max_concurrency, len(calls) or 1), thread_name_prefix="reinforge-reward") as pool:
                results = list(pool.map(lambda call: call_inline(self.compute_score, [call])[0], calls))
        return [result if isinstance(result, BaseException) else _as_result(result, self.who) for result in results]


def _as_result(result: Any, who: str) -> Any:
    """One call's result as the base manager reads it: the reward alone as a number; a dict as {"score": rewards,
    "scores": ..., **extra_logs}; a ScoreFunctionError (the row fails) for anything else."""
    try:
        if not isinstance(result, dict):
            return _one(result, "the reward", who)
        if "rewards" not in result:
            raise ScoreFunctionError(f"{who} returned a dict without 'rewards' (keys: "
                                     f"{', '.join(map(str, result)) or 'none'}); it must hold the reward under 'rewards'")
        out = {"score": _one(result["rewards"], "'rewards'", who)}
        out["scores"] = out["score"] if result.get("scores") is None else _one(result["scores"], "'scores'", who)  # as OpenRLHF
        logs = result.get("extra_logs") or {}
        if not isinstance(logs, dict):
            raise ScoreFunctionError(f"{who} returned 'extra_logs' of type {type(logs).__name__}; "
                                     "it must be a dict of name -> value")
        for name, value in logs.items():
            if name in out or name == "score":
                raise ScoreFunctionError(f"{who} logged {name!r} in 'extra_logs', a name reinforge "
                                         "records itself (score, scores); log it under another name")
            out[str(name)] = _one(value, f"'extra_logs'[{name!r}]", who)
        return out
    except ScoreFunctionError as error:
        return error


def _one(value: Any, what: str, who: str) -> Any:
    """The single value of a call for one query: a number, or a tensor, array, list or tuple of one element; numpy and
    torch numbers as Python's."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if not isinstance(value, (np.ndarray, list, tuple)):
        return value
    count = value.size if isinstance(value, np.ndarray) else len(value)
    if count == 1:
        return _one(value.reshape(-1)[0] if isinstance(value, np.ndarray) else value[0], what, who)
    raise ScoreFunctionError(f"{who} returned {count} values as {what} for one query (it is called "
                             "once per response, with lists of one, as OpenRLHF calls it); return one")

