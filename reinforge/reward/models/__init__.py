"""Learned reward models (`reward_model.enable`): a sequence classifier or a generative judge.

- `RewardModelWorker` (worker.py): the reward model role, `init_model()` and
  `compute_rm_score(batch)` -> `rm_scores` (batch, response_len), created through a worker group.
- `RewardModelScorer` (scorer.py): called like a reward manager; the reward model's score, plus
  the custom reward function's when one is set.
- classifier.py: the classifier's inputs (the policy's ids, or the conversation rebuilt in the
  reward model's chat template) and scores; judge.py: the judge's template, generation and score
  parsing; rows.py: what both read from a trajectory Batch and where the score goes.

The user's guide is the "Reward models" section of docs/rewards.md.
"""

from reinforge.reward.models.scorer import RewardModelScorer
from reinforge.reward.models.worker import RewardModelWorker

__all__ = ["RewardModelScorer", "RewardModelWorker"]
