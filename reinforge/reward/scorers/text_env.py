"""Text environments (`env_agent` rows, data_source `text_env/<game>`): the score is the episode's reward.

The agent loop sums the environment's step rewards into `rollout_reward_scores["env_reward"]`,
which the reward manager passes in `extra_info` (docs/agents.md); a row without it scores 0.
"""

from __future__ import annotations

from typing import Any


def compute_score(solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    scores = (extra_info or {}).get("rollout_reward_scores") or {}
    return float(scores.get("env_reward", 0.0))
