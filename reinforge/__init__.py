"""reinforge: reinforcement-learning post-training of language models, driven like verl.

Four components, each a package with a small interface: `inference` (engines and rollouts),
`training` (models, the actor update, workers), `environment` (datasets and loaders), and
`algorithm` (advantages, policy losses, KL); plus `reward` (scorers and reward managers),
`distributed` (worker groups), `config` and `trainer` (the loop). See ARCHITECTURE.md.
"""

import os
import sys

__version__ = "0.1.0"

# CPU threads wait for work asleep, not spinning: on a machine whose cores are shared (other jobs, a reward
# sandbox, the data loader) a spinning OpenMP thread steals the core its peer needs, and every small op of a
# decoding step then waits a scheduler tick (measured: 64x64-token generation, 2 cores, load 6: 28 s spinning,
# 1.5 s passive). OpenMP reads this when torch loads, so it can only be set before; the user's value wins.
if "torch" not in sys.modules:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
