"""The `sglang` engine: SGLang's offline `sglang.Engine` in the training process, on the actor's GPU
(`pip install 'reinforge[sglang]'`).

The rollout settings translate to `sglang.Engine` server arguments (`sglang_engine_kwargs`: vLLM's
names become SGLang's, e.g. gpu_memory_utilization -> mem_fraction_static, enforce_eager ->
disable_cuda_graph), then `rollout.engine_kwargs.sglang.*` is passed through and wins. Requests go
in as `input_ids` with one sampling-parameter dict each and `return_logprob=True`; the output's
`output_ids` and `meta_info.output_token_logprobs` become a GenerationOutput. Weights are pushed in
buckets with `Engine.update_weights_from_tensor` (inside `begin_weight_update` / `end_weight_update`
from SGLang 0.5.21, which loads tensors only in such a session), then the KV cache is flushed
(`Engine.flush_cache`). With `rollout.free_cache_engine` the engine starts with `enable_memory_saver`,
and `release_memory_occupation` frees weights and KV cache during training; the weights are pushed
again on wake.

Every `sglang.Engine` method runs SGLang's asyncio event loop until its call completes, which Python
refuses in a thread where another loop runs, as one does in reinforge's rollouts and agent loops
(`asyncio.run`, inference/rollout.py). So the engine's methods are called from one thread of their
own, which runs the loop the engine chose when it was made; the training thread waits for each.
(Called from the main thread, SGLang would also take over SIGTERM when its first request starts, and
a graceful stop would not run.)

Nothing here imports sglang until an `SGLangEngine` is built.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from reinforge.config.schema import RolloutConfig
from reinforge.inference.colocated import (
    ColocatedEngine,
    engine_dtype,
    engine_dtype_name,
    engine_kwargs_for,
    finish_reason,
    import_engine,
    stop_token_ids,
)
from reinforge.inference.engine import GenerationOutput, SamplingParams


def sglang_engine_kwargs(rollout: RolloutConfig, model_path: str, seed: int, trust_remote_code: bool = False,
                         longest: int | None = None) -> dict[str, Any]:
    """`sglang.Engine(**kwargs)` for these rollout settings; `rollout.engine_kwargs.sglang` overrides any of them.
    `longest`: the context length when rollout.max_model_len is null (the longest prompt plus response_length)."""
    kwargs: dict[str, Any] = {
        "model_path": model_path,
        "tp_size": rollout.tensor_model_parallel_size,
        "dtype": engine_dtype_name(rollout.dtype),
        "random_seed": seed,
        "mem_fraction_static": rollout.gpu_memory_utilization,
        "disable_cuda_graph": rollout.enforce_eager,
        "chunked_prefill_size": rollout.max_num_batched_tokens if rollout.enable_chunked_prefill else -1,
        "max_running_requests": rollout.max_num_seqs,
        "enable_memory_saver": rollout.free_cache_engine,
        "load_format": rollout.load_format,
        "trust_remote_code": trust_remote_code,
        "log_level": "error" if rollout.disable_log_stats else "info",
    }
    if (rollout.max_model_len or longest) is not None:
        kwargs["context_length"] = rollout.max_model_len or longest
    kwargs.update(engine_kwargs_for("sglang", rollout.engine_kwargs))
    return kwargs


def sglang_sampling_params(params: SamplingParams, max_tokens: int, eos_token_ids: tuple[int, ...]) -> dict[str, Any]:
    """One request's sampling-parameter dict. SGLang turns top-k off with -1 and samples greedily at temperature 0."""
    return {
        "n": 1,
        "max_new_tokens": max_tokens,
        "temperature": 0.0 if params.greedy else params.temperature,
        "top_p": 1.0 if params.greedy else params.top_p,
        "top_k": params.top_k if params.top_k > 0 and not params.greedy else -1,
        "ignore_eos": params.ignore_eos,
        "stop_token_ids": stop_token_ids(params, eos_token_ids),
        "no_stop_trim": True,  # the stop token stays in the response, as the hf engine keeps it
    }  # no per-row seed: SGLang reads `sampling_seed` only with deterministic inference on, and not before 0.5.3


def sglang_output(output: dict) -> GenerationOutput:
    """One `Engine.generate` result dict as a GenerationOutput."""
    meta = output["meta_info"]
    token_ids = [int(token) for token in output["output_ids"]]
    log_probs = [float(entry[0]) for entry in meta.get("output_token_logprobs") or []]
    if len(log_probs) != len(token_ids):
        raise RuntimeError(f"SGLang returned {len(log_probs)} log-probs for {len(token_ids)} tokens; this SGLang version "
                           "does not return output_token_logprobs as reinforge expects")
    reason = meta.get("finish_reason") or {}
    return GenerationOutput(token_ids, log_probs, finish_reason("SGLang", reason.get("type"), reason.get("message")))


class SGLangEngine(ColocatedEngine):
    keeps_weights_asleep = False  # release_memory_occupation discards the weights
    cache_tags = ("kv_cache", "cuda_graph")

    def __init__(self, engine_kwargs: dict[str, Any], eos_token_ids: list[int], free_cache_engine: bool, bucket_bytes: int):
        super().__init__(free_cache_engine, bucket_bytes, engine_dtype(engine_kwargs["dtype"]))
        sglang = import_engine("sglang")
        self.eos_token_ids = tuple(eos_token_ids)
        self.engine = sglang.Engine(**engine_kwargs)  # in this thread: SGLang handles its processes' start-up signals here
        self._caller = ThreadPoolExecutor(1, "sglang")  # every call after (module docstring)
        self.sessions = hasattr(self.engine, "begin_weight_update")  # SGLang 0.5.21+

    def _call(self, method: str, **kwargs: Any) -> Any:
        return self._caller.submit(getattr(self.engine, method), **kwargs).result()

    def _loaded(self, method: str, **kwargs: Any) -> None:
        done = self._call(method, **kwargs)
        success, message = done if isinstance(done, tuple) else (True, "")
        if not success:  # a failed load would leave stale weights generating every later rollout
            raise RuntimeError(f"SGLang did not load the actor's weights ({method}): {message}")

    def _release(self) -> None:
        self._call("release_memory_occupation", tags=["weights", *self.cache_tags])  # exactly what _resume takes back

    def _resume(self, tags: tuple[str, ...]) -> None:
        self._call("resume_memory_occupation", tags=list(tags))

    def _before_push(self) -> None:
        if self.sessions:
            self._loaded("begin_weight_update")

    def _load_bucket(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        self._loaded("update_weights_from_tensor", named_tensors=bucket, flush_cache=False)

    def _after_push(self) -> None:
        if self.sessions:
            self._loaded("end_weight_update")
        self._call("flush_cache")

    def _generate(self, prompts: list[list[int]], params: SamplingParams, max_tokens: list[int],
                  seeds: list[int | None]) -> list[GenerationOutput]:
        sampling = [sglang_sampling_params(params, limit, self.eos_token_ids) for limit in max_tokens]  # seeds: see above
        outputs = self._call("generate", input_ids=prompts, sampling_params=sampling, return_logprob=True)
        return [sglang_output(output) for output in outputs]
