"""reinforge: reinforcement-learning post-training of language models, driven like verl.

Four components, each a package with a small interface: `inference` (engines and rollouts),
`training` (models, the actor update, workers), `environment` (datasets and loaders), and
`algorithm` (advantages, policy losses, KL); plus `reward` (scorers and reward managers),
`distributed` (worker groups), `config` and `trainer` (the loop). See ARCHITECTURE.md.
"""

__version__ = "0.1.0"
