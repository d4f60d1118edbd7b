"""The engine interface: token ids in, token ids and per-token log-probs out.

An engine turns prompts (lists of token ids) into responses. Two ways to call it:

- `generate_batch(prompts, params)`: a list of prompts at once (single-turn rollout);
- `await generate(prompt_ids, params)`: one request, as agent loops issue them. Concurrent
  requests are collected and run together as one batch, so many agent loops cost what one
  batched call costs.

Engines that hold their own copy of the weights receive them through `update_weights`; engines
sharing the GPU with training release memory with `sleep()` and take it back with `wake()`.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one response (n samples of a prompt are n requests)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    do_sample: bool = True
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None  # this request's own sampling seed (vLLM's per-request seed); None: the engine's RNG

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature == 0


@dataclass
class GenerationOutput:
    """One response: its tokens, their log-probs under the sampling distribution, why it ended."""

    token_ids: list[int]
    log_probs: list[float] = field(default_factory=list)
    finish_reason: str = "length"  # "stop" (a stop token, included in token_ids) or "length"


class InferenceEngine(ABC):
    """Base class of the generation engines: hf (hf.py), and vllm and sglang (over colocated.py)."""

    def __init__(self) -> None:
        self._pending: list[tuple[list[int], SamplingParams, asyncio.Future, dict | None]] = []
        self._flush_scheduled = False

    @abstractmethod
    def generate_batch(self, prompts: list[list[int]], params: SamplingParams, max_tokens: list[int] | None = None,
                       seeds: list[int | None] | None = None, multi_modal: list[dict | None] | None = None) -> list[GenerationOutput]:
        """Generate one response per prompt, all with the same sampling parameters.

        `max_tokens` gives each prompt its own token limit (each at most `params.max_tokens`; None: all
        `params.max_tokens`), and `seeds` its own sampling seed (None: `params.seed` for every prompt),
        so that requests differing only in their limit and seed run as one batch. A seeded response
        depends only on its prompt, its seed and the weights, not on the other prompts of the batch. `multi_modal`
        gives each prompt its images' inputs (environment/multimodal.py; None for a prompt without), passed only when
        some prompt has images (the hf engine takes them)."""

    async def generate(self, prompt_ids: list[int], params: SamplingParams, multi_modal: dict | None = None) -> GenerationOutput:
        """One request (with its images' inputs, if any); requests made concurrently in the same event loop run as one batch."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((list(prompt_ids), params, future, multi_modal))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        pending, self._pending, self._flush_scheduled = self._pending, [], False
        by_params: dict[SamplingParams, list[tuple[list[int], SamplingParams, asyncio.Future, dict | None]]] = {}
        for prompt, params, future, images in pending:  # requests that differ only in max_tokens and seed share a batch
            by_params.setdefault(replace(params, max_tokens=0, seed=None), []).append((prompt, params, future, images))
        for params, requests in by_params.items():
            limits = [request.max_tokens for _, request, _, _ in requests]
            seeds = [request.seed for _, request, _, _ in requests]
            images = [row_images for *_, row_images in requests]
            try:
                outputs = self.generate_batch([prompt for prompt, *_ in requests], replace(params, max_tokens=max(limits)),
                                              None if len(set(limits)) == 1 else limits,
                                              None if all(seed is None for seed in seeds) else seeds,
                                              **({"multi_modal": images} if any(images) else {}))
            except Exception as exc:  # every waiting request sees the engine's error
                for _, _, future, _ in requests:
                    future.set_exception(exc)
                continue
            for (_, _, future, _), output in zip(requests, outputs, strict=True):
                future.set_result(output)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new weights after a training update (no-op for engines sharing the actor's module)."""

    def sleep(self) -> None:
        """Free generation memory while training runs."""

    def wake(self) -> None:
        """Take generation memory back before generating."""

    def state_dict(self) -> dict:
        """Sampling RNG state (of requests without a seed), so a resumed run samples the same tokens."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
