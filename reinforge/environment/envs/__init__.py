"""Gym-style text environments for RL on games: `reset` -> observation, `step(action_text)` -> (observation, reward, done).

The `env_agent` loop (reinforge/inference/agent) runs one environment per row: the row's prompt
is the first observation, each model turn is an action, each later observation is sent back as
a user message. Environments are registered by name; a row picks one with
`extra_info.env_kwargs.name` (the other keys go to `reset`).
"""

from __future__ import annotations

import random
import re

from reinforge.registry import Registry

ENV_REGISTRY = Registry("text environment")  # name -> TextEnv subclass
register_env = ENV_REGISTRY.register


class TextEnv:
    """One episode at a time; `reset` starts one, `step` plays one action (the model's whole turn)."""

    def reset(self, seed: int | None = None, **kwargs) -> str:
        raise NotImplementedError

    def step(self, action: str) -> tuple[str, float, bool]:
        raise NotImplementedError


@register_env("guess_number")
class GuessNumberEnv(TextEnv):
    """Find a hidden integer in [low, high]: each guess is answered "higher", "lower" or "correct".

    Reward: 1.0 for the correct guess (the episode ends); an action without a number is answered
    with how to play and costs `invalid_penalty`. After `max_attempts` guesses the episode ends."""

    def reset(self, seed=None, low: int = 1, high: int = 8, max_attempts: int = 4, invalid_penalty: float = 0.0,
              target: int | None = None, **_) -> str:
        self.low, self.high, self.max_attempts, self.invalid_penalty = int(low), int(high), int(max_attempts), invalid_penalty
        self.target = int(target) if target is not None else random.Random(seed).randint(self.low, self.high)
        self.attempts = 0
        return self.instructions()

    def instructions(self) -> str:
        return f"Guess my number between {self.low} and {self.high}. Answer with one number."

    def step(self, action: str) -> tuple[str, float, bool]:
        self.attempts += 1
        found = re.findall(r"-?\d+", action)
        out_of_tries = self.attempts >= self.max_attempts
        if not found:
            return f"No number found. {self.instructions()}", -self.invalid_penalty, out_of_tries
        guess = int(found[-1])
        if guess == self.target:
            return "correct", 1.0, True
        return ("higher" if guess < self.target else "lower"), 0.0, out_of_tries


def make_env(name: str) -> TextEnv:
    """A new environment of the registered class `name` (ValueError listing the registered names)."""
    return ENV_REGISTRY.get(name)()


def guess_number_rows(n: int, seed: int = 0, low: int = 1, high: int = 8, max_attempts: int = 4) -> list[dict]:
    """`n` dataset rows (verl's schema) of the guess-the-number game, for the `env_agent` loop."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kwargs = {"name": "guess_number", "low": low, "high": high, "max_attempts": max_attempts,
                  "target": rng.randint(low, high)}
        rows.append({"data_source": "text_env/guess_number", "agent_name": "env_agent",
                     "prompt": [{"role": "user", "content": GuessNumberEnv().reset(**kwargs)}],
                     "reward_model": {"style": "env", "ground_truth": str(kwargs["target"])},
                     "extra_info": {"index": i, "env_kwargs": kwargs}})
    return rows
