"""The `vllm` engine: vLLM's offline `LLM` in the training process, on the actor's GPU (`pip install 'reinforge[vllm]'`).

The rollout settings translate to `vllm.LLM` arguments (`vllm_llm_kwargs`), then
`rollout.engine_kwargs.vllm.*` is passed through and wins. Requests go in as token ids and come
back as token ids with the log-prob of each sampled token (`logprobs=0`), computed by vLLM in
`processed_logprobs` mode: log softmax(logits / temperature), the actor's definition (with top-k or
top-p on, vLLM normalises over the tokens they keep, where the hf engine and the actor do not). Weights are pushed in buckets with `LLM.collective_rpc`, each bucket
loaded by the model's own `load_weights` (the Hugging Face names mapping onto vLLM's fused layers);
`VLLM_ENABLE_V1_MULTIPROCESSING=0` keeps the engine core in this process, so with
tensor_model_parallel_size=1 the buckets reach the model without a copy. With
`rollout.free_cache_engine` the engine starts with `enable_sleep_mode` and sleeps at level 1
during training (KV cache freed, weights kept in CPU memory).

Nothing here imports vllm until a `VLLMEngine` is built, so the translation functions run (and are
tested) without it.
"""

from __future__ import annotations

import os
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


def vllm_llm_kwargs(rollout: RolloutConfig, model_path: str, seed: int, trust_remote_code: bool = False,
                    longest: int | None = None) -> dict[str, Any]:
    """`vllm.LLM(**kwargs)` for these rollout settings; `rollout.engine_kwargs.vllm` overrides any of them.
    `longest`: the context length when rollout.max_model_len is null (the longest prompt plus response_length)."""
    kwargs: dict[str, Any] = {
        "model": model_path,
        "tensor_parallel_size": rollout.tensor_model_parallel_size,
        "dtype": engine_dtype_name(rollout.dtype),
        "seed": seed,
        "gpu_memory_utilization": rollout.gpu_memory_utilization,
        "enforce_eager": rollout.enforce_eager,
        "max_num_batched_tokens": rollout.max_num_batched_tokens,
        "max_num_seqs": rollout.max_num_seqs,
        "enable_chunked_prefill": rollout.enable_chunked_prefill,
        "enable_sleep_mode": rollout.free_cache_engine,
        "load_format": rollout.load_format,
        "disable_log_stats": rollout.disable_log_stats,
        "trust_remote_code": trust_remote_code,
        "logprobs_mode": "processed_logprobs",
    }
    if (rollout.max_model_len or longest) is not None:
        kwargs["max_model_len"] = rollout.max_model_len or longest
    kwargs.update(engine_kwargs_for("vllm", rollout.engine_kwargs))
    return kwargs


def vllm_sampling_kwargs(params: SamplingParams, max_tokens: int, eos_token_ids: tuple[int, ...],
                         seed: int | None = None) -> dict[str, Any]:
    """`vllm.SamplingParams(**kwargs)` of one request: one sample, its token limit, the sampled token's log-prob,
    token ids only (no detokenizing). vLLM turns top-k off with -1 and samples greedily at temperature 0."""
    return {
        "n": 1,
        "max_tokens": max_tokens,
        "temperature": 0.0 if params.greedy else params.temperature,
        "top_p": 1.0 if params.greedy else params.top_p,
        "top_k": params.top_k if params.top_k > 0 and not params.greedy else -1,
        "logprobs": 0,
        "ignore_eos": params.ignore_eos,
        "stop_token_ids": stop_token_ids(params, eos_token_ids),
        "detokenize": False,
    } | ({} if seed is None else {"seed": seed})  # the row's own seed (trainer.seed, step, row): ranks sample alike


def vllm_output(request_output: Any) -> GenerationOutput:
    """A `vllm.RequestOutput` (one sample) as a GenerationOutput: tokens, each one's log-prob, "stop" or "length"."""
    completion = request_output.outputs[0]
    token_ids = [int(token) for token in completion.token_ids]
    entries = completion.logprobs or []
    if len(entries) != len(token_ids):
        raise RuntimeError(f"vLLM returned {len(entries)} log-prob entries for {len(token_ids)} tokens; "
                           "this vLLM version does not return the sampled token's log-prob as reinforge expects")
    log_probs = [float(entry[token].logprob) for token, entry in zip(token_ids, entries, strict=True)]
    return GenerationOutput(token_ids, log_probs, finish_reason("vLLM", completion.finish_reason))


def load_weights_into_worker(worker: Any, bucket: list[tuple[str, torch.Tensor]]) -> None:
    """Run by `LLM.collective_rpc` on each vLLM worker: load one bucket with the model's `load_weights`."""
    worker.model_runner.model.load_weights(weights=bucket)


class VLLMEngine(ColocatedEngine):
    keeps_weights_asleep = True  # level 1 sleep keeps the weights in CPU memory

    def __init__(self, llm_kwargs: dict[str, Any], eos_token_ids: list[int], free_cache_engine: bool, bucket_bytes: int):
        super().__init__(free_cache_engine, bucket_bytes, engine_dtype(llm_kwargs["dtype"]))
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process: buckets by reference
        self.vllm = import_engine("vllm")
        self.eos_token_ids = tuple(eos_token_ids)
        self.llm = self.vllm.LLM(**llm_kwargs)

    def _release(self) -> None:
        self.llm.sleep(level=1)

    def _resume(self, tags: tuple[str, ...]) -> None:
        self.llm.wake_up(tags=list(tags))

    def _load_bucket(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        self.llm.collective_rpc(load_weights_into_worker, args=(bucket,))

    def _after_push(self) -> None:
        self.llm.reset_prefix_cache()

    def _generate(self, prompts: list[list[int]], params: SamplingParams, max_tokens: list[int],
                  seeds: list[int | None]) -> list[GenerationOutput]:
        sampling = [self.vllm.SamplingParams(**vllm_sampling_kwargs(params, limit, self.eos_token_ids, seed))
                    for limit, seed in zip(max_tokens, seeds, strict=True)]
        outputs = self.llm.generate([{"prompt_token_ids": prompt} for prompt in prompts], sampling, use_tqdm=False)
        return [vllm_output(output) for output in outputs]
