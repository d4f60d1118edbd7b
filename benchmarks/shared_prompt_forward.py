"""The actor update with a group's prompt computed once (actor_rollout_ref.model.share_prompt_forward) vs per row.

    python benchmarks/shared_prompt_forward.py [--repeats 7] [--gradient-checkpointing]

One GRPO update (forward, loss, backward; SGD at lr 0, so the weights stay the same) of
grpo_step_vs_trl.py's small model shape on 8 prompts x 8 samples, prompts of 22 tokens, responses of
64 (every third one 32), one micro-batch: the shape of that benchmark's update. The two settings
alternate within one process (the order swapped every repeat) and the medians of the process's
CPU time and of wall time are printed, with the tokens each forward runs through the model and
the largest gradient difference between them (the same update, so float rounding only).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from reinforge.batch import Batch
from reinforge.config.schema import ActorConfig
from reinforge.training.actor import Actor
from reinforge.training.tiny_model import TinyModelSpec, ensure_tiny_model

SMALL = TinyModelSpec(vocab_size=512, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2)
PROMPTS, SAMPLES, PROMPT_LEN, RESPONSE_LEN = 8, 8, 22, 64


def grpo_batch(vocab: int) -> Batch:
    g = torch.Generator().manual_seed(0)
    rows = PROMPTS * SAMPLES
    prompts = torch.randint(3, vocab, (PROMPTS, PROMPT_LEN), generator=g).repeat_interleave(SAMPLES, 0)
    responses = torch.randint(3, vocab, (rows, RESPONSE_LEN), generator=g)
    response_mask = torch.ones_like(responses)
    response_mask[::3, RESPONSE_LEN // 2:] = 0
    attention_mask = torch.cat([torch.ones_like(prompts), response_mask], 1)
    return Batch({"input_ids": torch.cat([prompts, responses], 1), "attention_mask": attention_mask,
                  "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0), "responses": responses,
                  "response_mask": response_mask, "advantages": torch.randn(rows, 1, generator=g) * response_mask})


def timed_update(actor: Actor, batch: Batch) -> tuple[float, float, torch.Tensor]:
    """(CPU seconds, wall seconds, the gradient) of one update."""
    cpu, wall = time.process_time(), time.perf_counter()
    actor.update_policy(batch, temperature=1.0, rollout_n=SAMPLES)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu, wall, torch.cat([p.grad.flatten() for p in actor.model.parameters()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations in the backward")
    args = parser.parse_args()
    path = ensure_tiny_model(SMALL)
    model = AutoModelForCausalLM.from_pretrained(path).train()
    if args.gradient_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    batch = grpo_batch(AutoConfig.from_pretrained(path).vocab_size)
    cfg = ActorConfig(ppo_mini_batch_size=PROMPTS, clip_ratio_low=0.2, clip_ratio_high=0.2, grad_clip=1e30)
    actors = {share: Actor(model, cfg, torch.optim.SGD(model.parameters(), lr=0.0), share_prompt=share)
              for share in (False, True)}
    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    gradients = {}
    for share in (False, True):  # warm-up
        gradients[share] = timed_update(actors[share], batch)[2]
    for repeat in range(args.repeats):
        for share in ((False, True) if repeat % 2 == 0 else (True, False)):
            cpu, wall, _ = timed_update(actors[share], batch)
            times[share].append((cpu, wall))
    rows, length = batch["input_ids"].shape
    tokens = {False: rows * length, True: PROMPTS * (PROMPT_LEN - 1) + rows * RESPONSE_LEN}
    print(f"torch threads {torch.get_num_threads()}, gradient checkpointing {args.gradient_checkpointing}, "
          f"{args.repeats} alternating repeats, medians")
    for share in (False, True):
        cpu = statistics.median(c for c, _ in times[share])
        wall = statistics.median(w for _, w in times[share])
        print(f"share_prompt_forward={str(share).lower():5}  cpu {cpu:.3f} s  wall {wall:.3f} s  tokens {tokens[share]}")
    error = ((gradients[True] - gradients[False]).abs().max() / gradients[False].abs().max()).item()
    print(f"gradient: largest difference {error:.1e} of the largest entry")


if __name__ == "__main__":
    main()
