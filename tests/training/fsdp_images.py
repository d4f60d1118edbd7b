"""One rank of test_fsdp_images.py (run as a script by each spawned rank): the actor and reference of a tiny Qwen2-VL
on this rank's share of a batch whose rows with images all sit on rank 0 and rows without on rank 1.

`train(model_path, batch, world_size)` computes the reference and old log-probs and runs 2 updates (KL loss,
gradient checkpointing, micro-batches of one row), and returns them with the metrics and the final parameters
(gathered whole). As a script it joins the process group from RANK/WORLD_SIZE/MASTER_* and saves that to
<out>/rank<r>.pt.
"""

from __future__ import annotations

import sys

import torch

from reinforge.batch import Batch
from reinforge.config import load_config
from reinforge.training.workers import ActorRolloutRefWorker
from tests.training.fsdp_ranks import actor_overrides, comparable, exit_rank, full_state_dict

STEPS = 2


def train(model_path: str, batch: Batch, world_size: int) -> dict:
    config, _ = load_config([*actor_overrides(model_path, world_size), "actor_rollout_ref.actor.optim.eps=1e-6"])
    actor = ActorRolloutRefWorker(config)
    actor.init_model(STEPS)
    out = {"ref_log_prob": actor.compute_ref_log_prob(batch)["ref_log_prob"], "actor_metrics": []}
    batch["ref_log_prob"] = out["ref_log_prob"]
    for _ in range(STEPS):
        batch["old_log_probs"] = actor.compute_log_prob(batch)["old_log_probs"]
        out.setdefault("old_log_probs", batch["old_log_probs"])
        out["actor_metrics"].append(comparable(actor.update_actor(batch).meta_info["metrics"]))
    out["actor"] = full_state_dict(actor.actor.model)
    return out


if __name__ == "__main__":
    import os

    model_path, batch_file, out_dir = sys.argv[1:]
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    chunk = torch.load(batch_file, weights_only=False).chunk(world_size)[rank]
    torch.save(train(model_path, chunk, world_size), f"{out_dir}/rank{rank}.pt")
    exit_rank()
