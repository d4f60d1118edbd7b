"""Rewards: rule-based scorers, the data_source registry, custom reward functions, reward managers.

- `default_compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`
  routes to the built-in scorer of a data source (gsm8k, MATH, countdown, code); `register_scorer`
  adds more. Code data sources (codecontests, apps, codeforces, taco, primeintellect,
  livecodebench) run the response's program in `reinforge.reward.sandbox`: on Sandbox Fusion
  when `sandbox_fusion_url` is given, else in the local sandbox (docs/sandbox.md).
- `load_reward_function(config)` / `get_compute_score(config)` load the user's function from
  `custom_reward_function.path`.
- `make_reward_manager(name, tokenizer, compute_score, ...)` builds the manager that turns a
  Batch of responses into token-level rewards; `reward_manager_names()` lists the managers.

Learned reward models (a sequence classifier or a generative judge) are in `reinforge.reward.models`.
"""

from reinforge.reward.loading import get_compute_score, load_reward_function
from reinforge.reward.manager import make_reward_manager, register_reward_manager, reward_manager_names
from reinforge.reward.registry import default_compute_score, find_scorer, known_data_sources, register_scorer

__all__ = [
    "default_compute_score",
    "find_scorer",
    "get_compute_score",
    "known_data_sources",
    "load_reward_function",
    "make_reward_manager",
    "register_reward_manager",
    "register_scorer",
    "reward_manager_names",
]
