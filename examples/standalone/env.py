"""ENVIRONMENT: where prompts come from and how responses are scored.

Change this file for another task: replace `write_task_files()` in `Env.__init__` with the paths
of your verl-schema parquet/JSONL files and, if their data_source has no built-in scorer, pass
your own `compute_score` to `Env`.
"""

from __future__ import annotations

from types import SimpleNamespace

from reinforge.batch import Batch
from reinforge.config.schema import DataConfig
from reinforge.environment.dataloader import PromptLoader
from reinforge.environment.dataset import collate_fn, create_rl_dataset
from reinforge.environment.tasks import write_task_files
from reinforge.reward import default_compute_score, make_reward_manager


class Env:
    def __init__(self, tokenizer, batch_size: int = 16, compute_score=default_compute_score, seed: int = 0):
        train_file, val_file = write_task_files()  # the built-in digit task, in verl's schema
        config = DataConfig(max_prompt_length=64)
        collate = collate_fn(tokenizer.pad_token_id)
        self.train = PromptLoader(create_rl_dataset(str(train_file), config, tokenizer), batch_size, collate,
                                  shuffle=True, seed=seed)
        self.val = PromptLoader(create_rl_dataset(str(val_file), config, tokenizer), 128, collate,
                                shuffle=False, seed=seed, drop_last=False)
        self.reward = make_reward_manager("naive", tokenizer, compute_score)
        self._batches = iter(())

    def next_prompts(self) -> Batch:
        """The next batch of prompts (input_ids, attention_mask, position_ids, data_source, ...)."""
        batch = next(self._batches, None)
        if batch is None:
            self._batches = iter(self.train)
            batch = next(self._batches)
        return Batch.from_dict(batch)

    def score(self, trajectories: Batch):
        """(batch, response_len) token rewards: each response's score on its last token."""
        return self.reward(trajectories)


def defaults() -> SimpleNamespace:
    return SimpleNamespace(steps=60, batch_size=16, n=8, response_length=10, lr=1e-3)
