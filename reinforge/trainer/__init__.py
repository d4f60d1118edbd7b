"""The RL loop (ppo_trainer.py), validation, metrics, tracking and checkpoints; main.py assembles a run."""
