"""INFERENCE: sample responses with the hf engine (token ids in, token ids and log-probs out)."""

from __future__ import annotations

from reinforge.batch import Batch
from reinforge.inference import HFEngine, SamplingParams, generate_sequences
from reinforge.inference.rollout import PROMPT_KEYS


class Inference:
    def __init__(self, model, tokenizer, response_length: int, seed: int = 0):
        self.engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], seed=seed)
        self.pad_token_id = tokenizer.pad_token_id
        self.response_length = response_length

    def generate(self, prompts: Batch, n: int = 1, greedy: bool = False) -> Batch:
        """n responses per prompt (rows interleaved: a a b b ...), prompts' other fields kept."""
        prompts = prompts.repeat(n, interleave=True)
        params = SamplingParams(max_tokens=self.response_length, do_sample=not greedy)
        return prompts.union(generate_sequences(self.engine, prompts.pop(PROMPT_KEYS), params, self.pad_token_id))
