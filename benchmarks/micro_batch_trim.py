"""What trimming micro-batches of their all-padding columns, and token-budget micro-batches, save in an actor update.

One synthetic GRPO mini-batch (64 trajectories, prompts of 12-32 tokens left-padded to 32, responses
right-padded to 64 with lengths drawn from `--lengths`: `uniform` 4-64 or `skewed`, each 4-16 tokens
or, with probability 1/8, 64) on the benchmark's small model (hidden 256, 4 layers, vocabulary 512,
`grpo_step_vs_trl.py`'s recipe). For each way of forming micro-batches it reports the token
columns the forwards compute (the sum over micro-batches of rows x columns kept; the model's FLOPs
are proportional to it, up to attention's quadratic part) and the median process CPU time of one
update (forward, backward, SGD at lr 0 so every update starts from the same weights) and of one
log-prob pass, the variants run in turn, `--repeats` rounds, the order rotated each round.
"Untrimmed" is the path before trimming: every micro-batch forwards every column. "Packed" lays each
micro-batch's sequences end to end without padding (`use_remove_padding`, training/packing.py). "Sorted" hands
the update its rows ordered by length (not something reinforge does: it shows what micro-batches
of similar lengths would save, the gradient being the same in any order).

    python benchmarks/micro_batch_trim.py [--lengths uniform|skewed] [--repeats 5] [--threads 1] [--only packed,...]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

ROWS, PROMPT, RESPONSE = 64, 32, 64
VARIANTS = {  # name: (trim, ppo_micro_batch_size_per_gpu, ppo_max_token_len_per_gpu, rows sorted by length first,
    #                  packed without padding: use_remove_padding)
    "untrimmed, micro 64": (False, None, None, False, False),
    "trimmed, micro 64": (True, None, None, False, False),
    "untrimmed, micro 8": (False, 8, None, False, False),
    "trimmed, micro 8": (True, 8, None, False, False),
    "dynamic 1024 tok": (True, None, 1024, False, False),
    "dynamic 2048 tok": (True, None, 2048, False, False),
    "trimmed, micro 8, sorted": (True, 8, None, True, False),
    "packed, micro 64": (True, None, None, False, True),
    "packed, micro 8": (True, 8, None, False, True),
    "packed, dynamic 2048 tok": (True, None, 2048, False, True),
}


def synthetic_batch(vocab: int, lengths: str, seed: int = 0):
    from reinforge.batch import Batch

    g = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(12, PROMPT + 1, (ROWS,), generator=g)
    if lengths == "uniform":
        response_lens = torch.randint(4, RESPONSE + 1, (ROWS,), generator=g)
    else:
        short = torch.randint(4, 17, (ROWS,), generator=g)
        response_lens = torch.where(torch.rand(ROWS, generator=g) < 1 / 8, torch.full_like(short, RESPONSE), short)
    columns = torch.arange(PROMPT + RESPONSE)
    attention = ((columns >= PROMPT - prompt_lens[:, None]) & (columns < PROMPT + response_lens[:, None])).long()
    responses = torch.randint(3, vocab, (ROWS, RESPONSE), generator=g)
    response_mask = attention[:, PROMPT:]
    return Batch({
        "input_ids": torch.cat([torch.randint(3, vocab, (ROWS, PROMPT), generator=g), responses], 1),
        "attention_mask": attention, "position_ids": (attention.cumsum(-1) - 1).clamp(min=0), "responses": responses,
        "response_mask": response_mask, "advantages": torch.randn(ROWS, 1, generator=g) * response_mask,
    })


def token_columns(batch, size: int | None, max_tokens: int | None, trim: bool, pack: bool, pair: float) -> int:
    """Sum over the micro-batches of rows x columns forwarded (packed rows x their length when packed)."""
    from reinforge.training.minibatch import micro_batch_rows, trim_padding
    from reinforge.training.packing import plan_packing

    total = 0
    for rows in micro_batch_rows(batch, size, max_tokens):
        micro = batch.index(rows)
        trimmed = trim_padding(micro).batch
        packing = plan_packing(trimmed, pair) if pack else None
        total += packing.input_ids.numel() if packing is not None else \
            len(rows) * (trimmed["input_ids"].shape[1] if trim else micro["input_ids"].shape[1])
    return total


def no_trim(micro):
    from reinforge.training.minibatch import FORWARD_KEYS, Trimmed

    return Trimmed(micro.select(FORWARD_KEYS), micro["attention_mask"][:, -micro["responses"].shape[1]:].bool())


def by_length(batch):
    return batch.index(batch["attention_mask"].sum(-1).argsort())


def timed_update(base, batch, trim: bool, size: int | None, max_tokens: int | None, sort: bool,
                 pack: bool) -> tuple[float, float]:
    """CPU seconds of one actor update and of one log-prob pass."""
    batch = by_length(batch) if sort else batch
    from reinforge.config.schema import ActorConfig
    from reinforge.training import actor as actor_module
    from reinforge.training import minibatch

    model = copy.deepcopy(base).train()
    config = ActorConfig(ppo_mini_batch_size=ROWS, ppo_micro_batch_size_per_gpu=size, use_dynamic_bsz=max_tokens is not None,
                         ppo_max_token_len_per_gpu=max_tokens or 1, clip_ratio_low=0.2, clip_ratio_high=0.2)
    actor = actor_module.Actor(model, config, torch.optim.SGD(model.parameters(), lr=0.0), pack=pack)
    saved = actor_module.trim_padding, minibatch.trim_padding
    if not trim:
        actor_module.trim_padding = minibatch.trim_padding = no_trim
    try:
        start = time.process_time()
        actor.update_policy(batch, temperature=1.0, rollout_n=1)
        update = time.process_time() - start
        start = time.process_time()
        actor.compute_log_prob(batch, 1.0, size, max_tokens=max_tokens)
        return update, time.process_time() - start
    finally:
        actor_module.trim_padding, minibatch.trim_padding = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", choices=("uniform", "skewed"), default="uniform")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", help="comma-separated words: run only the variants whose names hold one of them")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from grpo_step_vs_trl import prepare  # the benchmark's small model
    from transformers import AutoModelForCausalLM

    path, _, _ = prepare("small")
    base = AutoModelForCausalLM.from_pretrained(path)
    batch = synthetic_batch(base.config.vocab_size, args.lengths)
    real = int(batch["attention_mask"].sum())
    print(f"{ROWS} rows, {real} real tokens of {ROWS * (PROMPT + RESPONSE)} columns, "
          f"response lengths mean {batch['response_mask'].sum(-1).float().mean():.1f} of {RESPONSE} ({args.lengths})")
    variants = {name: v for name, v in VARIANTS.items()
                if not args.only or any(word in name for word in args.only.split(","))}
    times = {name: ([], []) for name in variants}
    names = list(variants)
    timed_update(base, batch, *VARIANTS[names[0]])  # warm-up
    for round_ in range(args.repeats):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            update, forward = timed_update(base, batch, *variants[name])
            times[name][0].append(update)
            times[name][1].append(forward)
    from reinforge.training.packing import pair_cost

    pair = pair_cost(base.config)
    baseline = token_columns(batch, None, None, False, False, pair)
    print(f"{'variant':<26}{'micro-batches':>14}{'token columns':>15}{'update CPU s':>14}{'log-prob CPU s':>16}")
    from reinforge.training.minibatch import micro_batch_rows

    for name, (trim, size, max_tokens, sort, pack) in variants.items():
        columns = token_columns(by_length(batch) if sort else batch, size, max_tokens, trim, pack, pair)
        print(f"{name:<26}{len(micro_batch_rows(batch, size, max_tokens)):>14}{columns:>9} ({columns / baseline:.2f})"
              f"{statistics.median(times[name][0]):>14.3f}{statistics.median(times[name][1]):>16.3f}")


if __name__ == "__main__":
    main()
