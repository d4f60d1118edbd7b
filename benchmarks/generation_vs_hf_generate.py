"""reinforge's hf engine against calling `model.generate` directly, on the same batch and model.

    python benchmarks/generation_vs_hf_generate.py [--model small|medium] [--repeats 5] [--new-tokens 64]

Same model (the small benchmark model of grpo_step_vs_trl.py by default), the same 64 prompts,
the same sampling (temperature 1, top-k and top-p off), at most 64 new tokens (`--new-tokens`), in
one process, alternating the two, medians reported. Two cases:

- equal lengths: EOS cannot end a response (the engine's `ignore_eos`, generate's `min_new_tokens`),
  so both produce exactly 64 x `--new-tokens` tokens: the engine's overhead over `generate`. With longer
  responses (`--new-tokens 512`) it also shows the cost of `generate`'s cache growing by
  concatenation, which the engine's preallocated cache does not pay.
- varying lengths: a bias on the EOS logit makes responses end after about 15 tokens on average
  (geometric lengths, as sampling gives), so most rows finish long before the longest one.
  `generate` keeps computing finished rows as padding; the engine drops them from the batch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import reinforge  # noqa: F401  (before torch: its CPU thread settings apply to both sides alike)

ROWS, EOS_BIAS = 64, 3.0


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    from reinforge.inference import HFEngine, SamplingParams
    from reinforge.training.tiny_model import TinyModelSpec, ensure_tiny_model

    sys.path.insert(0, os.path.dirname(__file__))
    from grpo_step_vs_trl import SIZES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=list(SIZES), default="small")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=64, help="the response length (equal lengths) or its limit")
    args = parser.parse_args()
    new_tokens = args.new_tokens
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    path = ensure_tiny_model(TinyModelSpec(**SIZES[args.model]))
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    eos = tokenizer.eos_token_id
    bias = {"on": False}

    def eos_bias(module, inputs, output):
        return output.index_add(-1, torch.tensor([eos]), torch.full((*output.shape[:-1], 1), EOS_BIAS)) if bias["on"] else output

    model.lm_head.register_forward_hook(eos_bias)
    messages = [[{"role": "user", "content": f"Add 1: {1000 + 37 * row}"}] for row in range(ROWS)]
    prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True) for m in messages]
    prompts = [p["input_ids"] if hasattr(p, "keys") else p for p in prompts]
    width = max(map(len, prompts))
    input_ids = torch.full((ROWS, width), tokenizer.pad_token_id)
    attention_mask = torch.zeros((ROWS, width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids):] = torch.tensor(ids)
        attention_mask[row, width - len(ids):] = 1
    engine = HFEngine(model, tokenizer.pad_token_id, [eos], seed=0)

    def run_engine(equal: bool) -> int:
        outputs = engine.generate_batch(prompts, SamplingParams(max_tokens=new_tokens, temperature=1.0, top_k=-1, top_p=1.0,
                                                                ignore_eos=equal))
        return sum(len(o.token_ids) for o in outputs)

    def run_generate(equal: bool) -> int:
        config = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens if equal else 0, do_sample=True,
                                  temperature=1.0, top_k=0, top_p=1.0, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)[:, width:]
        ended = (out == eos).int().cumsum(-1)
        return int(((ended == 0) | ((ended == 1) & (out == eos))).sum())  # tokens up to and including the first EOS

    load = os.getloadavg()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}; "
          f"{args.model} model; {ROWS} prompts x up to {new_tokens} tokens; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'case':<16}{'':<18}{'median s':>9}{'CPU s':>8}{'tokens':>8}{'tok/s':>8}")
    for case, equal in (("equal lengths", True), ("varying lengths", False)):
        bias["on"] = not equal
        times = {"reinforge engine": [], "model.generate": []}
        for index in range(args.repeats + 1):  # the first round warms up
            pairs = [("reinforge engine", run_engine), ("model.generate", run_generate)]
            for name, fn in pairs if index % 2 else pairs[::-1]:
                torch.manual_seed(index)
                start, cpu = time.perf_counter(), time.process_time()
                tokens = fn(equal)
                if index:
                    times[name].append((time.perf_counter() - start, time.process_time() - cpu, tokens))
        medians = {}
        for name, rows in times.items():
            wall, cpu, tokens = (statistics.median(r[i] for r in rows) for i in range(3))
            medians[name] = wall
            print(f"{case:<16}{name:<18}{wall:>9.2f}{cpu:>8.2f}{tokens:>8.0f}{tokens / wall:>8.0f}")
        overhead = medians["reinforge engine"] / medians["model.generate"] - 1
        print(f"{case:<16}engine vs generate: {overhead:+.1%} time")
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
