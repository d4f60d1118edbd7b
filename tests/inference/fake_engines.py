"""Stand-ins for the `vllm` and `sglang` packages: record every call, generate from a fixed rule.

The rule (both fakes): the i-th response token to a prompt is `(last prompt token + i + 1) % 100 + 10`,
with log-prob `-(i + 1) / 10`; a response ends after a stop token (finish reason "stop") or at its
token limit ("length"). The pushed weights land in `weights`, a name -> tensor dict, and each
pushed bucket's names in `buckets`. The methods (and `FakeSamplingParams`) take the real libraries'
argument names, so a misspelled argument fails here as it would there; `vllm.LLM`'s own keyword
arguments are recorded as given and checked by the translation tests.
"""

from __future__ import annotations

import types
from types import SimpleNamespace

import torch


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
    """sglang.Engine: release/resume_memory_occupation, update_weights_from_tensor, generate."""

    instances: list[FakeSGLangEngine] = []

    def __init__(self, **kwargs):
        super().__init__(FakeSGLangEngine.log)
        self.kwargs = kwargs
        self.sampling: list[dict] = []
        FakeSGLangEngine.instances.append(self)

    def release_memory_occupation(self, tags=None):
        self.log.append(("release", tags))

    def resume_memory_occupation(self, tags=None):
        self.log.append(("resume", tuple(tags)))

    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True):
        self.load(named_tensors)
        if flush_cache:
            self.flush_cache()

    def flush_cache(self):
        self.log.append(("flush_cache",))

    def generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob=False):
        assert return_logprob, "reinforge needs the log-probs"
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


def fake_vllm(log: list) -> types.ModuleType:
    FakeLLM.log, FakeLLM.instances = log, []
    return types.SimpleNamespace(LLM=FakeLLM, SamplingParams=FakeSamplingParams)


def fake_sglang(log: list) -> types.ModuleType:
    FakeSGLangEngine.log, FakeSGLangEngine.instances = log, []
    return types.SimpleNamespace(Engine=FakeSGLangEngine)
