"""Performance figures of a training update: model FLOPs and the device's peak for MFU
(`perf/mfu/actor`), and memory in use (`perf/cpu_memory_used_gb`, CUDA peaks).

The estimate is verl's (`FlopsCounter`): a forward and backward pass costs 6 FLOPs per weight
that multiplies each token, plus the attention score and value products, 12 · seq_len² · head_dim
· heads per layer for each sequence (forward 4, backward 8):

    flops = 6 · N · Σ seq_len  +  12 · Σ seq_len² · head_dim · heads · layers

N counts the matrix weights a token goes through: per layer the q, k, v and output projections
(hidden · (q + k + v + heads·head_dim)) and the MLP (3 · hidden · intermediate for gated
MLPs: SwiGLU/GeGLU; for mixture-of-experts layers the top-k experts plus the router), and the
embedding and LM head (2 · vocab · hidden, counted even when tied, as verl does). N and the layer
shapes are read from the Hugging Face config's standard attribute names (`hidden_size`,
`num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`, `head_dim`,
`intermediate_size`, `vocab_size`, and `num_experts_per_tok`/`moe_intermediate_size` with
`num_experts` or `num_local_experts` for MoE), so Llama, Qwen2/3, Mistral, Gemma and their MoE
variants are covered without a per-architecture table (of a multimodal model, its text config; a
field given per layer counts as its mean). A config without those attributes gives
no estimate, and no MFU is logged rather than a wrong one. Sliding-window attention is counted as
full attention (an upper bound on its FLOPs).

Peak FLOP/s: `trainer.peak_flops` when set (per device); otherwise, on CUDA, the dense BF16 peak
of the GPU from `DEVICE_PEAK_FLOPS` matched by name; otherwise (CPU, or a GPU not in the table)
none, and MFU is not logged: a CPU's peak depends on its cores, clock and vector units, which
only the user knows.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch

# dense BF16 tensor-core peak per device, FLOP/s (vendor datasheets; the same values verl uses)
DEVICE_PEAK_FLOPS = {
    "GB200": 2.5e15,
    "B200": 2.25e15,
    "MI300X": 1336e12,
    "H100": 989e12,
    "H800": 989e12,
    "H200": 989e12,
    "H20": 148e12,
    "A100": 312e12,
    "A800": 312e12,
    "L40S": 362.05e12,
    "L40": 181.05e12,
    "A40": 149.7e12,
    "L20": 119.5e12,
    "L4": 121e12,
    "A10G": 70e12,
    "RTX 4090": 165.2e12,
    "RTX 3090": 71e12,
}
GATED_MLP_MATRICES = 3  # gate, up and down projections (SwiGLU/GeGLU), as in the causal LMs this estimate covers


@dataclass(frozen=True)
class ModelShape:
    """What the estimates read from a Hugging Face config."""

    hidden: int
    layers: int
    heads: int
    head_dim: int
    vocab: int
    layer_weights: int  # the matrix weights one token passes through in one layer (active experts only)


def config_field(config, name: str):
    """A config field as one number (a per-layer list: its mean); None when absent, or when transformers refuses to
    read a field set per layer as one value (it raises)."""
    try:
        value = getattr(config, name, None)
    except Exception:
        return None
    if isinstance(value, (list, tuple)):
        return round(sum(value) / len(value)) if value and all(isinstance(v, int | float) for v in value) else None
    return value


def model_shape(hf_config) -> ModelShape | None:
    """The shapes of the language model a config describes (of a multimodal config, its text config:
    `get_text_config()`); None when it lacks the standard names."""
    getter = getattr(hf_config, "get_text_config", None)
    config = getter() if callable(getter) else hf_config
    hidden, layers, heads, vocab = (config_field(config, name) for name in ("hidden_size", "num_hidden_layers",
                                                                      "num_attention_heads", "vocab_size"))
    if not (hidden and layers and heads and vocab):
        return None
    kv_heads = config_field(config, "num_key_value_heads") or heads
    head_dim = config_field(config, "head_dim") or hidden // heads
    attention = hidden * (heads * head_dim + 2 * kv_heads * head_dim + heads * head_dim)
    top_k = config_field(config, "num_experts_per_tok")
    experts = config_field(config, "num_experts") or config_field(config, "num_local_experts")
    intermediate = config_field(config, "intermediate_size")
    if top_k and experts:
        expert_size = config_field(config, "moe_intermediate_size") or intermediate
        if not expert_size:
            return None
        mlp = hidden * top_k * expert_size * GATED_MLP_MATRICES + hidden * experts
    elif intermediate:
        mlp = hidden * intermediate * GATED_MLP_MATRICES
    else:
        return None
    return ModelShape(hidden, layers, heads, head_dim, vocab, attention + mlp)


def dense_weights(hf_config) -> int | None:
    """N: the matrix weights one token passes through (active experts only); None when the config lacks the standard names."""
    shape = model_shape(hf_config)
    return None if shape is None else _dense_weights(shape)


def _dense_weights(shape: ModelShape) -> int:
    return shape.layer_weights * shape.layers + 2 * shape.vocab * shape.hidden  # embedding and LM head, as verl counts


def training_flops(hf_config, seq_lens: Sequence[int]) -> float | None:
    """Forward + backward FLOPs of one pass over sequences of these lengths (None: unknown architecture)."""
    shape = model_shape(hf_config)
    if shape is None:
        return None
    square_sum = sum(int(n) * int(n) for n in seq_lens)
    attention = 12 * square_sum * shape.head_dim * shape.heads * shape.layers
    return 6 * _dense_weights(shape) * sum(int(n) for n in seq_lens) + attention


def device_peak_flops(device: str | torch.device, configured: float | None = None) -> float | None:
    """Peak FLOP/s of one device: the configured value, else the table's for a known CUDA GPU, else None."""
    if configured:
        return float(configured)
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    for key in sorted(DEVICE_PEAK_FLOPS, key=len, reverse=True):  # "H200" before "H20", "L40S" before "L40"
        if key in name:
            return DEVICE_PEAK_FLOPS[key]
    return None


def mfu(flops: float | None, seconds: float, peak_flops: float | None, n_devices: int = 1) -> float | None:
    """Achieved FLOP/s over the devices' peak; None when either is unknown."""
    if flops is None or peak_flops is None or seconds <= 0:
        return None
    return flops / seconds / (peak_flops * n_devices)


def process_memory_gb() -> float:
    """This process's resident memory in GiB (Linux: current RSS from /proc; elsewhere: peak RSS)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024**3
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 1024**3 if sys.platform == "darwin" else peak / 1024**2  # bytes on macOS, KiB elsewhere


def compute_memory_metrics(device: str | torch.device) -> dict[str, float]:
    """perf/cpu_memory_used_gb (this process's RSS); on CUDA also perf/max_memory_allocated_gb and
    perf/max_memory_reserved_gb (the peaks since the process started, as torch reports them)."""
    metrics = {"perf/cpu_memory_used_gb": process_memory_gb()}
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        metrics["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated(device) / 1024**3
        metrics["perf/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved(device) / 1024**3
    return metrics
