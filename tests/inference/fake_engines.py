"""Stand-ins for the `vllm` and `sglang` packages: record every call, generate from a fixed rule.

The rule (both fakes): the i-th response token to a prompt is `(last prompt token + i + 1) % 100 + 10`,
with log-prob `-(i + 1) / 10`; a response ends after a stop token (finish reason "stop") or at its
token limit ("length"). The pushed weights land in `weights`, a name -> tensor dict, and each
pushed bucket's names in `buckets`. The methods (and `FakeSamplingParams`) take the real libraries'
argument names, so a misspelled argument fails here as it would there. What was checked against the
libraries' own source (vLLM 0.11.0 and 0.33.0, SGLang 0.5.5 and 0.5.23) is mirrored:

- `vllm.LLM` and `sglang.Engine` take only the engine arguments named in LLM_ARGS and SERVER_ARGS (the
  real ones are dataclasses: an unknown name is a TypeError);
- every `sglang.Engine` method runs the engine's own asyncio loop to completion (`loop.run_until_complete`, the
  loop chosen when the engine was made), so a call from a thread where another loop runs fails as it does
  with SGLang, and `update_weights_from_tensor` answers (success, message);
- `FakeSGLangSessionEngine` is SGLang 0.5.21+, which loads tensors only between `begin_weight_update()` and
  `end_weight_update()`.
"""

from __future__ import annotations

import asyncio
import threading
import types
from types import SimpleNamespace

import torch

# names both vLLM 0.11.0 and 0.33.0 accept (EngineArgs fields or LLM.__init__ parameters): what reinforge passes, and
# what the tests pass through engine_kwargs (swap_space is not one: 0.33 has no such argument)
LLM_ARGS = {"model", "tokenizer", "tensor_parallel_size", "dtype", "seed", "gpu_memory_utilization", "enforce_eager",
            "max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill", "enable_sleep_mode", "load_format",
            "disable_log_stats", "trust_remote_code", "logprobs_mode", "max_model_len", "hf_config_path", "kv_cache_dtype"}
# ServerArgs fields of SGLang 0.5.5 and 0.5.23 that reinforge or the tests pass
SERVER_ARGS = {"model_path", "tokenizer_path", "tp_size", "dtype", "random_seed", "mem_fraction_static", "disable_cuda_graph",
               "chunked_prefill_size", "max_running_requests", "enable_memory_saver", "load_format", "trust_remote_code",
               "log_level", "context_length", "attention_backend"}


def known_arguments(kwargs: dict, names: set[str], what: str) -> None:
    unknown = sorted(set(kwargs) - names)
    if unknown:
        raise TypeError(f"{what}.__init__() got an unexpected keyword argument {unknown[0]!r}")


def fake_response(prompt: list[int], max_tokens: int, stop: list[int]) -> tuple[list[int], list[float], str]:
    tokens, log_probs = [], []
    for i in range(max_tokens):
        token = (prompt[-1] + i + 1) % 100 + 10
        tokens.append(token)
        log_probs.append(-(i + 1) / 10)
        if token in stop:
            return tokens, log_probs, "stop"
    return tokens, log_probs, "length"


class Recorder:
    def __init__(self, log: list):
        self.log = log
        self.weights: dict[str, torch.Tensor] = {}
        self.buckets: list[list[str]] = []

    def load(self, weights) -> None:
        weights = list(weights)
        self.buckets.append([name for name, _ in weights])
        for name, tensor in weights:
            self.weights[name] = tensor.detach().clone()
        self.log.append(("load", len(weights)))


class FakeSamplingParams:
    def __init__(self, *, n=1, max_tokens=16, temperature=1.0, top_p=1.0, top_k=0, logprobs=None, ignore_eos=False,
                 stop_token_ids=None, detokenize=True, seed=None):
        self.kwargs = dict(n=n, max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, logprobs=logprobs,
                           ignore_eos=ignore_eos, stop_token_ids=stop_token_ids, detokenize=detokenize, seed=seed)


class FakeLLM(Recorder):
    """vllm.LLM: sleep/wake_up/collective_rpc/reset_prefix_cache/generate."""

    instances: list[FakeLLM] = []

    def __init__(self, model, **kwargs):
        known_arguments(kwargs, LLM_ARGS, "EngineArgs")
        super().__init__(FakeLLM.log)
        self.kwargs = {"model": model, **kwargs}
        self.sampling: list[dict] = []
        FakeLLM.instances.append(self)

    def sleep(self, level=1):
        self.log.append(("sleep", level))

    def wake_up(self, tags=None):
        self.log.append(("wake_up", tuple(tags)))

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        worker = SimpleNamespace(model_runner=SimpleNamespace(model=SimpleNamespace(load_weights=self.load)))
        return [method(worker, *args, **(kwargs or {}))]

    def reset_prefix_cache(self):
        self.log.append(("reset_prefix_cache",))

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.log.append(("generate", len(prompts)))
        outputs = []
        for prompt, params in zip(prompts, sampling_params, strict=True):
            self.sampling.append(params.kwargs)
            tokens, log_probs, reason = fake_response(prompt["prompt_token_ids"], params.kwargs["max_tokens"],
                                                      params.kwargs["stop_token_ids"])
            entries = [{token: SimpleNamespace(logprob=lp, rank=1)} for token, lp in zip(tokens, log_probs, strict=True)]
            completion = SimpleNamespace(token_ids=tokens, logprobs=entries, finish_reason=reason)
            outputs.append(SimpleNamespace(outputs=[completion]))
        return outputs


class FakeSGLangEngine(Recorder):
    """sglang.Engine: release/resume_memory_occupation, update_weights_from_tensor, flush_cache, generate."""

    instances: list[FakeSGLangEngine] = []

    def __init__(self, **kwargs):
        known_arguments(kwargs, SERVER_ARGS, "ServerArgs")
        super().__init__(FakeSGLangEngine.log)
        self.kwargs = kwargs
        self.sampling: list[dict] = []
        self.threads: set[str] = set()  # the threads the methods were called from
        try:  # as Engine.__init__ picks its loop
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
        self.chosen_loop: asyncio.AbstractEventLoop | None = None
        FakeSGLangEngine.instances.append(self)

    def _run(self, work):
        """As each Engine method does: the work as a coroutine, to completion on the engine's loop, whose first request
        picks the loop the tokenizer manager's tasks live on (a later request from another loop is refused)."""
        async def call():
            loop = asyncio.get_running_loop()
            self.chosen_loop = self.chosen_loop or loop
            assert loop is self.chosen_loop, "Please ensure only one event loop is ever used with SGLang"
            self.threads.add(threading.current_thread().name)
            return work()
        return self.loop.run_until_complete(call())

    def release_memory_occupation(self, tags=None):
        return self._run(lambda: self.log.append(("release", tags)))

    def resume_memory_occupation(self, tags=None):
        return self._run(lambda: self.log.append(("resume", tuple(tags))))

    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True):
        def update():
            self.load(named_tensors)
            if flush_cache:
                self.log.append(("flush_cache",))
            return True, "Succeeded to update model weights."
        return self._run(update)

    def flush_cache(self):
        return self._run(lambda: self.log.append(("flush_cache",)))

    def generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob=False):
        assert return_logprob, "reinforge needs the log-probs"

        def generate():
            self.log.append(("generate", len(input_ids)))
            results = []
            for prompt_ids, params in zip(input_ids, sampling_params, strict=True):
                self.sampling.append(params)
                tokens, log_probs, reason = fake_response(prompt_ids, params["max_new_tokens"], params["stop_token_ids"])
                results.append({"output_ids": tokens, "meta_info": {
                    "finish_reason": {"type": reason},
                    "output_token_logprobs": [(lp, token, None) for token, lp in zip(tokens, log_probs, strict=True)],
                }})
            return results
        return self._run(generate)


class FakeSGLangSessionEngine(FakeSGLangEngine):
    """SGLang 0.5.21+: tensors load only inside a weight-update session; outside one the update answers (False, why)."""

    session = False

    def begin_weight_update(self, selector="all"):
        def begin():
            self.log.append(("begin_weight_update",))
            self.session = True
            return True, "Success"
        return self._run(begin)

    def end_weight_update(self):
        def end():
            self.log.append(("end_weight_update",))
            self.session = False
            return True, "Success"
        return self._run(end)

    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True):
        if not self.session:
            return False, "update_weights_from_tensor must run between begin_weight_update() and end_weight_update()"
        return super().update_weights_from_tensor(named_tensors, load_format, flush_cache)


def fake_vllm(log: list) -> types.ModuleType:
    FakeLLM.log, FakeLLM.instances = log, []
    return types.SimpleNamespace(LLM=FakeLLM, SamplingParams=FakeSamplingParams, __version__="0.33.0")


def fake_sglang(log: list, version: str = "0.5.23") -> types.ModuleType:
    FakeSGLangEngine.log, FakeSGLangEngine.instances = log, []
    sessions = version == "dev" or tuple(int(part) for part in version.split(".")[:3] if part.isdigit()) >= (0, 5, 21)
    return types.SimpleNamespace(Engine=FakeSGLangSessionEngine if sessions else FakeSGLangEngine, __version__=version)
