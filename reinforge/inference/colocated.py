"""What the vLLM and SGLang engines share, none of it needing a GPU: weights and the sync protocol.

Both engines run in the training process and hold their own copy of the policy's weights on the
same GPU as the actor. Three things follow, implemented here once:

- Weight names. The engine loads Hugging Face checkpoint names (`model.layers.0.mlp.up_proj.weight`);
  the actor's state dict may carry wrapper prefixes (`_orig_mod.` from torch.compile,
  `_fsdp_wrapped_module.`, `_checkpoint_wrapped_module.`), which `hf_weight_name` strips. A tied
  output embedding is the same tensor as the input embedding and is sent once.
- Buckets. The actor's weights go to the engine in buckets of at most
  `rollout.update_weights_bucket_megabytes`, each tensor cast to the engine's dtype (and, when
  FSDP2 shards it, gathered) only when its bucket is built, so the push never holds a second full
  copy of the model on the GPU.
- The sync protocol (`ColocatedEngine`): `update_weights(source)` after a training update only
  notes that the engine's copy is stale; the next `wake()` takes the weights memory back, pushes
  the buckets, then takes the KV cache back; generation runs; `sleep()` (with
  `rollout.free_cache_engine`) releases the engine's memory while the actor trains.
"""

from __future__ import annotations

import importlib
from abc import abstractmethod
from collections.abc import Iterable, Iterator
from types import ModuleType

import torch
from packaging.version import InvalidVersion, Version

from reinforge.config.rollout_schema import check_engine_kwargs
from reinforge.distributed.process_group import full_tensor
from reinforge.errors import ConfigError
from reinforge.inference.engine import GenerationOutput, InferenceEngine, SamplingParams

WRAPPER_PREFIXES = ("_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")

NamedTensors = Iterable[tuple[str, torch.Tensor]]


def hf_weight_name(name: str) -> str:
    """The Hugging Face checkpoint name of a state-dict key: the wrapper prefixes removed wherever they sit."""
    for prefix in WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


class ModuleWeights:
    """The current weights of `module` under Hugging Face names, read anew at every iteration.

    An engine keeps this object and iterates it whenever its copy must be refreshed (after an update,
    or after a sleep that discarded its weights); the tensors are the module's own, not copies.
    Tensors that share memory (tied input and output embeddings) are yielded once, under the first name.
    """

    def __init__(self, module: torch.nn.Module):
        self.module = module

    def tensors(self) -> Iterator[tuple[str, torch.Tensor, bool]]:
        """(name, tensor, owned): the module's own tensors (owned), or in a subclass also tensors computed for this
        iteration (training/lora.py's merged weights), which cannot be tied to others."""
        return ((name, tensor, True) for name, tensor in self.module.state_dict().items())

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        seen: set[tuple[int, tuple[int, ...]]] = set()
        for name, tensor, owned in self.tensors():
            if owned:  # a computed tensor's memory may be reused by the next one: only the module's own can be tied
                local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
                key = (local.data_ptr(), tuple(tensor.shape))
                if local.numel() and key in seen:
                    continue
                seen.add(key)
            yield hf_weight_name(name), tensor


def weight_buckets(named_tensors: NamedTensors, bucket_bytes: int,
                   dtype: torch.dtype | None = None) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Lists of (name, tensor) of at most `bucket_bytes` each (a tensor larger than that goes alone).

    Each tensor is gathered (FSDP2) and cast to `dtype` (floating tensors only) as its bucket fills, so
    at most one bucket of converted tensors exists at a time."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named_tensors:
        tensor = full_tensor(tensor)
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


class ColocatedEngine(InferenceEngine):
    """An engine with its own copy of the weights on the training GPU: the sync protocol around generation.

    Subclasses say how to release and resume memory by tag, how to load one bucket, and how to generate.
    `keeps_weights_asleep` says whether the engine's weights survive `sleep()` (vLLM's level 1 sleep
    keeps them in CPU memory; SGLang discards them and they are pushed again on wake).
    """

    keeps_weights_asleep = True
    cache_tags: tuple[str, ...] = ("kv_cache",)  # what `wake` resumes after the weights

    def __init__(self, free_cache_engine: bool, bucket_bytes: int, dtype: torch.dtype):
        super().__init__()
        self.free_cache_engine = free_cache_engine
        self.bucket_bytes = bucket_bytes
        self.dtype = dtype
        self.asleep = False
        self.synced = False  # the engine's weights equal the source's (a fresh engine holds dummy or stale weights)
        self.source: NamedTensors | None = None

    # ---- what each engine implements -------------------------------------------------------------
    @abstractmethod
    def _release(self) -> None:
        """Free the engine's GPU memory (KV cache, and weights unless kept)."""

    @abstractmethod
    def _resume(self, tags: tuple[str, ...]) -> None:
        """Take back the memory of `tags` ("weights", then the KV cache's tags)."""

    def _before_push(self) -> None:
        """Prepare the engine for a push (SGLang 0.5.21+ opens a weight-update session)."""

    @abstractmethod
    def _load_bucket(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        """Copy one bucket of (HF name, tensor) into the engine's model."""

    @abstractmethod
    def _after_push(self) -> None:
        """Forget what was cached with the old weights (prefix / KV cache)."""

    @abstractmethod
    def _generate(self, prompts: list[list[int]], params: SamplingParams, max_tokens: list[int],
                  seeds: list[int | None]) -> list[GenerationOutput]:
        """The engine's batched generation, one request per prompt with its own token limit and sampling seed."""

    # ---- the protocol ------------------------------------------------------------------------------
    def update_weights(self, named_tensors: NamedTensors) -> None:
        """Take `named_tensors` (e.g. `ModuleWeights(actor)`) as the weights to generate with; they are pushed
        at the next `wake()`. The engine may iterate it again later, so pass an object that reads the
        current weights at each iteration rather than a one-shot generator."""
        self.source = named_tensors
        self.synced = False

    def wake(self) -> None:
        """Weights memory back, the weights pushed if stale, then the KV cache back. A no-op when awake and in sync."""
        if not self.asleep and self.synced:
            return
        if self.asleep:
            self._resume(("weights",))
        if not self.synced:
            self.push_weights()
        if self.asleep:
            self._resume(self.cache_tags)
            self.asleep = False

    def sleep(self) -> None:
        """Release the engine's memory for training (only with rollout.free_cache_engine)."""
        if self.free_cache_engine and not self.asleep:
            self._release()
            self.asleep = True
            self.synced = self.synced and self.keeps_weights_asleep

    def push_weights(self) -> None:
        """Send the source's weights in buckets, then drop the caches computed with the old ones."""
        if self.source is None:
            raise RuntimeError("the engine has no weights to generate with: call update_weights(ModuleWeights(actor)) first")
        self._before_push()
        for bucket in weight_buckets(self.source, self.bucket_bytes, self.dtype):
            self._load_bucket(bucket)
        self._after_push()
        self.synced = True

    def generate_batch(self, prompts: list[list[int]], params: SamplingParams, max_tokens: list[int] | None = None,
                       seeds: list[int | None] | None = None, multi_modal: list[dict | None] | None = None) -> list[GenerationOutput]:
        if multi_modal is not None and any(multi_modal):
            raise ConfigError("prompts with images are generated by the hf engine only in this version; set "
                              "actor_rollout_ref.rollout.name=hf")
        if not prompts:
            return []
        self.wake()
        return self._generate(prompts, params, max_tokens or [params.max_tokens] * len(prompts),
                              seeds or [params.seed] * len(prompts))


def engine_kwargs_for(name: str, engine_kwargs: dict) -> dict:
    """The user's pass-through arguments for engine `name`, nested as verl nests them
    (`rollout.engine_kwargs.vllm.kv_cache_dtype=fp8`); other engines' sections are ignored."""
    check_engine_kwargs(engine_kwargs, name)
    section = engine_kwargs.get(name) or {}
    if not isinstance(section, dict):
        raise ConfigError(f"actor_rollout_ref.rollout.engine_kwargs.{name}={section!r} must be a mapping of argument names to values")
    return {key: value for key, value in section.items() if value is not None}  # verl's configs ship nulls: the engine's default


def engine_dtype_name(rollout_dtype: str | None) -> str:
    """The dtype name vLLM and SGLang take for rollout.dtype (reinforge's bf16/fp32 short names spelled out; null: bfloat16)."""
    return {None: "bfloat16", "bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}.get(rollout_dtype, rollout_dtype)


def engine_dtype(name: str) -> torch.dtype:
    """The torch dtype of the engine's dtype name (`engine_dtype_name`'s, or the user's engine_kwargs dtype, as torch
    spells it: bfloat16, float32, float16, half, float); the actor's weights are cast to it when pushed."""
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ConfigError(f"actor_rollout_ref.rollout.dtype={name!r} is not a dtype the weights can be cast to: use bf16 or "
                          "fp32 (or a torch dtype name such as bfloat16, float16 in rollout.engine_kwargs.<engine>.dtype)")
    return dtype


# the oldest releases the adapters work with (pyproject.toml's extras): SGLang before 0.5.11 pins a transformers older
# than reinforge's 5.4, and before 0.5.5 it returns up to 5 of the prompt's tokens at the start of `output_ids`
OLDEST = {"vllm": "0.11", "sglang": "0.5.11"}


def import_engine(name: str) -> ModuleType:
    """The engine's package, or a ConfigError saying which extra installs it (or that its release is too old)."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise ConfigError(f"actor_rollout_ref.rollout.name={name} needs the {name} package, which is not installed "
                          f"({exc}): pip install 'reinforge[{name}]', or use actor_rollout_ref.rollout.name=hf") from exc
    try:
        release = Version(getattr(module, "__version__", OLDEST[name]))
    except InvalidVersion:  # a source build's "dev"
        return module
    if release.release < Version(OLDEST[name]).release:  # a pre-release or dev build of the oldest passes
        raise ConfigError(f"actor_rollout_ref.rollout.name={name}: {name} {release} is installed, and reinforge works with "
                          f"{name} {OLDEST[name]} or newer: pip install 'reinforge[{name}]'")
    return module


def finish_reason(engine: str, reason: str | None, detail: object = None) -> str:
    """"stop" or "length", as the engine reported it. Any other reason (vLLM's and SGLang's "abort", vLLM's "error") is
    a request the engine gave up on: an error, not a response cut at its token limit."""
    if reason in ("stop", "length"):
        return reason
    raise RuntimeError(f"{engine} ended a request with finish reason {reason!r}" + (f" ({detail})" if detail else "")
                       + ": the response is not complete; see the engine's log above")


def stop_token_ids(params: SamplingParams, eos_token_ids: tuple[int, ...]) -> list[int]:
    """The tokens that end a response: the model's EOS tokens and the request's stop tokens, none with ignore_eos,
    as in the hf engine. Passed explicitly, so the engine stops where the hf engine would, whatever its own
    tokenizer or generation config says."""
    if params.ignore_eos:
        return []
    return list(dict.fromkeys([*eos_token_ids, *params.stop_token_ids]))
