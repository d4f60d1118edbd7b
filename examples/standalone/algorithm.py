"""ALGORITHM and the main loop: run this file.

    python examples/standalone/algorithm.py [--steps 60]

GRPO in a dozen lines: sample n responses per prompt, score them, centre and scale each
response's reward within its prompt's group, and take a PPO-clip step. Each of the other three
files is one component; this one composes them, with no trainer class in the way.
"""

from __future__ import annotations

import argparse

import torch
from env import Env, defaults
from inference import Inference
from training import Training, load_policy

from reinforge.algorithm import compute_grpo_outcome_advantage
from reinforge.batch import Batch


def validate(env: Env, inference: Inference) -> float:
    scores = [env.score(inference.generate(Batch.from_dict(prompts), greedy=True)).sum(-1) for prompts in env.val]
    return torch.cat(scores).mean().item()


def main() -> None:
    cfg = defaults()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=cfg.steps)
    args = parser.parse_args()
    torch.manual_seed(0)

    model, tokenizer = load_policy()
    env = Env(tokenizer, batch_size=cfg.batch_size)
    inference = Inference(model, tokenizer, cfg.response_length)
    training = Training(model, cfg.lr, prompts_per_update=cfg.batch_size, n=cfg.n)

    print(f"validation reward before: {validate(env, inference):.3f}")
    for step in range(1, args.steps + 1):
        prompts = env.next_prompts()
        prompts["uid"] = [f"{step}-{i}" for i in range(len(prompts))]
        batch = inference.generate(prompts, n=cfg.n)
        rewards = env.score(batch)
        batch["advantages"], _ = compute_grpo_outcome_advantage(rewards, batch["response_mask"].float(), batch["uid"])
        metrics = training.update(batch)
        print(f"step {step}: reward {rewards.sum(-1).mean():.3f}  entropy {metrics['actor/entropy']:.3f}")
    print(f"validation reward after: {validate(env, inference):.3f}")


if __name__ == "__main__":
    main()
