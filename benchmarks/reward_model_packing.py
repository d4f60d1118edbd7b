"""A classifier reward model's scores of 64 sequences, packed without padding (reward_model.model.use_remove_padding) vs padded.

    python benchmarks/reward_model_packing.py [--repeats 7]

The reward model has the small benchmark model's shape (hidden 256, 4 layers, vocabulary 512) with one label; the
64 sequences (prompt + response, as the reward model reads them) have lengths uniform in 16-160 tokens, then skewed
(most short, a few long). The two settings alternate in one process (the order swapped every repeat); the medians of
the process's CPU time are printed with the largest score difference between them (float rounding only).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from reinforge.reward.models.classifier import ClassifierInputs, right_padded, sequence_scores

ROWS = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, num_labels=1, pad_token_id=0, max_position_embeddings=512)
    model = LlamaForSequenceClassification(config).eval()
    draw = torch.Generator().manual_seed(0)
    cases = {"uniform 16-160": torch.randint(16, 161, (ROWS,), generator=draw),
             "skewed": (16 + torch.distributions.Exponential(1 / 30).sample((ROWS,)).clamp(max=144)).long()}
    print(f"torch threads {torch.get_num_threads()}, {args.repeats} alternating repeats, medians of CPU time")
    for name, lengths in cases.items():
        ids, mask = right_padded([torch.randint(1, 512, (int(n),), generator=draw).tolist() for n in lengths], 0)
        inputs = ClassifierInputs(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0), None, [False] * ROWS)
        scores = {pack: sequence_scores(model, inputs, pack=pack) for pack in (False, True)}  # warm-up, and the scores
        times: dict[bool, list[float]] = {False: [], True: []}
        for repeat in range(args.repeats):
            for pack in ((False, True) if repeat % 2 == 0 else (True, False)):
                start = time.process_time()
                sequence_scores(model, inputs, pack=pack)
                times[pack].append(time.process_time() - start)
        print(f"{name}: {int(mask.sum())} tokens in {mask.numel()} padded columns; padded {statistics.median(times[False]):.3f} s, "
              f"packed {statistics.median(times[True]):.3f} s; largest score difference "
              f"{(scores[True] - scores[False]).abs().max():.1e}")


if __name__ == "__main__":
    main()
