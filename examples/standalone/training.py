"""TRAINING: the policy model, its optimizer, and one PPO-clip update per call."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from reinforge.batch import Batch
from reinforge.config.schema import ActorConfig
from reinforge.training.actor import Actor
from reinforge.training.tiny_model import ensure_tiny_model


def load_policy(path: str | None = None):
    """(model, tokenizer); the tiny model reinforge builds itself when no path is given."""
    path = path or ensure_tiny_model()
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


class Training:
    def __init__(self, model, lr: float, prompts_per_update: int, n: int):
        config = ActorConfig(ppo_mini_batch_size=prompts_per_update, clip_ratio_low=0.2, clip_ratio_high=0.2)
        self.n = n
        self.actor = Actor(model.train(), config, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0))

    def update(self, trajectories: Batch) -> dict[str, float]:
        """One policy step on trajectories carrying `advantages`; returns actor/* metrics."""
        return self.actor.update_policy(trajectories, temperature=1.0, rollout_n=self.n)
