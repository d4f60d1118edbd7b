"""The least time any framework can take for one GRPO step of a model, at this machine's fp32 matmul speed.

    python benchmarks/compute_floor.py [--model small|medium] [--prompt-tokens 22]

A step's matrix products are counted from the model's shape (every projection, the attention
scores and values, the LM head at the positions whose logits are needed) and timed at the
speed this machine runs fp32 products of the same shapes. Everything else (norms, RoPE,
softmax, the optimizer, Python) is left out, so the floor is below any real step: a framework
that wants to be k times faster than another needs the other's step / k to stay above it.

Work counted, as both frameworks do it in `grpo_step_vs_trl.py`: generation prefills each
distinct prompt once and decodes `rows` rows for `new_tokens` positions with a KV cache (logits
for the last position only); the update runs forward and backward (twice the forward's products:
gradients for the weights and for the inputs) over every row's prompt and response, logits at the
response positions. `shared prompt` is the update with each distinct prompt computed once.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int

    @classmethod
    def of(cls, model_dir: str | Path) -> Shape:
        c = json.loads((Path(model_dir) / "config.json").read_text())
        return cls(c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["num_attention_heads"],
                   c.get("num_key_value_heads") or c["num_attention_heads"], c["vocab_size"])

    def weight_products(self) -> list[tuple[int, int]]:
        """(in, out) of each decoder layer's projections: q, k, v, o, gate, up, down."""
        h, kv = self.hidden, self.hidden // self.heads * self.kv_heads
        return [(h, h), (h, kv), (h, kv), (h, h), (h, self.intermediate), (h, self.intermediate), (self.intermediate, h)]

    def token_flops(self) -> int:
        """Multiply-add FLOPs of one token through the decoder layers' projections (no attention, no LM head)."""
        return self.layers * sum(2 * i * o for i, o in self.weight_products())

    def attention_flops(self, context: int) -> int:
        """FLOPs of one token's attention over `context` earlier positions (scores and weighted values) in all layers."""
        return self.layers * 2 * 2 * self.hidden * context

    def head_flops(self) -> int:
        return 2 * self.hidden * self.vocab


@dataclass(frozen=True)
class StepWork:
    rows: int = 64
    distinct_prompts: int = 8
    prompt_tokens: int = 22
    new_tokens: int = 64


def step_flops(shape: Shape, work: StepWork, shared_prompt: bool = False) -> dict[str, float]:
    """FLOPs of the step's matrix products, by phase: prefill, decode, update (forward + backward)."""
    p, r = work.prompt_tokens, work.new_tokens
    causal = sum(range(1, p + 1))  # summed context lengths over a prompt's positions (causal: each sees itself and before)
    prefill = work.distinct_prompts * (p * shape.token_flops() + shape.attention_flops(1) * causal + shape.head_flops())
    # the prefill's logits give token 0; decode step t feeds token t at position p + t to get token t + 1
    decode = work.rows * sum(shape.token_flops() + shape.attention_flops(p + t + 1) + shape.head_flops() for t in range(r - 1))
    prompt_rows = work.distinct_prompts if shared_prompt else work.rows
    response_context = sum(p + t + 1 for t in range(r))
    forward = (prompt_rows * (p * shape.token_flops() + shape.attention_flops(1) * causal)
               + work.rows * (r * shape.token_flops() + shape.attention_flops(1) * response_context + r * shape.head_flops()))
    return {"prefill": prefill, "decode": decode, "update": 3 * forward}


def matmul_rate(m: int, k: int, n: int, seconds: float = 0.3) -> float:
    """This machine's fp32 FLOP/s for an (m, k) @ (k, n) product, best of repeated timings."""
    import torch

    a, b, out = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)  # into one output: no fresh pages to fault in
    torch.mm(a, b, out=out)
    best, spent = float("inf"), 0.0
    while spent < seconds:
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
    return 2 * m * k * n / best


def layer_rate(shape: Shape, m: int) -> float:
    """FLOP/s over one decoder layer's projections and the LM head with `m` rows (weighted by their FLOPs)."""
    products = [*shape.weight_products(), (shape.hidden, shape.vocab)]
    total = sum(i * o for i, o in products)
    return total / sum(i * o / matmul_rate(m, i, o) for i, o in products)


def floor(shape: Shape, work: StepWork) -> dict[str, float]:
    """Seconds for each phase's products at the measured rates (decode at `rows` rows per product, the rest at a
    whole micro-batch's tokens), the step's total, and the total with the update's prompts shared."""
    update_rows = work.rows * (work.prompt_tokens + work.new_tokens)
    decode_rate, batch_rate = layer_rate(shape, work.rows), layer_rate(shape, update_rows)
    flops = step_flops(shape, work)
    shared = step_flops(shape, work, shared_prompt=True)["update"]
    seconds = {"generate": flops["prefill"] / batch_rate + flops["decode"] / decode_rate, "update": flops["update"] / batch_rate}
    return {**seconds, "step": seconds["generate"] + seconds["update"],
            "step_shared_prompt": seconds["generate"] + shared / batch_rate,
            "decode_gflops_per_s": decode_rate / 1e9, "batch_gflops_per_s": batch_rate / 1e9}


def main() -> None:
    import torch
    from grpo_step_vs_trl import NEW_TOKENS, PROMPTS, SAMPLES, SIZES

    from reinforge.training.tiny_model import TinyModelSpec, ensure_tiny_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=list(SIZES), default="small")
    parser.add_argument("--prompt-tokens", type=int, default=22, help="prompt length (the add-one prompts have 22)")
    args = parser.parse_args()
    shape = Shape.of(ensure_tiny_model(TinyModelSpec(**SIZES[args.model])))
    work = StepWork(PROMPTS * SAMPLES, PROMPTS, args.prompt_tokens, NEW_TOKENS)
    result = floor(shape, work)
    print(f"{args.model}, {torch.get_num_threads()} torch threads: fp32 products at {result['decode_gflops_per_s']:.0f} GFLOP/s "
          f"(decode, {work.rows} rows) and {result['batch_gflops_per_s']:.0f} GFLOP/s (whole batch)")
    print(f"floor: generate {result['generate']:.2f} s + update {result['update']:.2f} s = step {result['step']:.2f} s "
          f"({result['step_shared_prompt']:.2f} s with the update's prompts shared)")


if __name__ == "__main__":
    main()
