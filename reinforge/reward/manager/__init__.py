"""Reward managers: turn a Batch of generated responses into token-level rewards.

A reward manager decodes each response, calls the reward function (verl's contract
`compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`) and writes
each score at the last valid response token of a `(batch, response_len)` float32 tensor.
Managers are chosen by `reward_model.reward_manager`; their options come from
`reward_model.reward_kwargs`:

| manager | calls the reward function                               | options (default)                                  |
|---------|---------------------------------------------------------|----------------------------------------------------|
| naive   | once per response, in this process (async: concurrently) | timeout_s (none), max_concurrency (64)            |
| dapo    | as naive, plus DAPO's overlong reward shaping            | as naive, max_resp_len, overlong_buffer_cfg        |
| batch   | once for the whole batch, with lists                     | timeout_s (none, per call), the rest go to the function |
| prime   | once per response, in a pool of worker processes         | num_processes (min(8, CPUs)), timeout_s (300)      |
| trl     | TRL's reward functions, each once for the whole batch    | timeout_s (none, per call); chosen for them        |
| openrlhf | an OpenRLHF reward function, once per response, in threads | timeout_s (none, per call), max_concurrency (32); chosen for it |

Every manager isolates failures: a row whose function raises, returns a non-score or runs past
`timeout_s` scores 0.0 and is counted (`reward/errors`, `reward/timeouts`, always reported);
the first of each kind is printed with its row and data source. Details: `base` (the shared
steps), `calls` (inline and async calls), `pool` (worker processes that can be killed), and
one module per manager. Managers do not load reward functions (`reinforge.reward.loading`)
and do not run learned reward models.
"""

from reinforge.reward.manager.base import RewardManager, make_reward_manager, register_reward_manager, reward_manager_names
from reinforge.reward.manager.batch import BatchRewardManager
from reinforge.reward.manager.dapo import DAPORewardManager, OverlongBuffer
from reinforge.reward.manager.naive import NaiveRewardManager
from reinforge.reward.manager.openrlhf import OpenRLHFRewardManager
from reinforge.reward.manager.prime import PrimeRewardManager
from reinforge.reward.manager.trl import TRLRewardManager

__all__ = [
    "BatchRewardManager",
    "DAPORewardManager",
    "NaiveRewardManager",
    "OpenRLHFRewardManager",
    "OverlongBuffer",
    "PrimeRewardManager",
    "RewardManager",
    "TRLRewardManager",
    "make_reward_manager",
    "register_reward_manager",
    "reward_manager_names",
]
