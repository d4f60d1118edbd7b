"""One rank of the FSDP2 check in test_packing.py (run as a script by each spawned rank).

Each rank joins the process group from RANK/WORLD_SIZE/MASTER_*, shards the model (with gradient checkpointing,
the actor's default), runs one packed actor update (SGD at lr 0) on its half of `varied_batch`, then the log-probs
of rows that only rank 0 packs (rank 1's are all as long: a padded forward beside a packed one), and saves the whole
gradient, those log-probs and its count of packed forwards to <out>/rank<r>.pt.
"""

from __future__ import annotations

import sys

import torch

from reinforge.config.schema import ActorConfig
from reinforge.distributed.process_group import full_tensor, world_size
from reinforge.training import actor as actor_module
from reinforge.training.actor import Actor
from tests.training.shared_prefix_ranks import checkpointed_shards
from tests.training.test_packing import varied_batch

UNEVEN_ROWS = ([0, 1, 2, 3], [0, 0, 0, 0])  # rank 0's rows pack, rank 1's (all 14 tokens) do not


def update_gradient(model: torch.nn.Module, batch, pack: bool) -> tuple[torch.Tensor, Actor]:
    cfg = ActorConfig(ppo_mini_batch_size=8, clip_ratio_low=0.2, clip_ratio_high=0.2, entropy_coeff=0.01, grad_clip=1e9)
    actor = Actor(model, cfg, torch.optim.SGD(model.parameters(), lr=0.0), share_prompt=False, pack=pack)
    actor.update_policy(batch, temperature=1.0, rollout_n=1)
    return torch.cat([full_tensor(p.grad).flatten() for p in model.parameters()]), actor


if __name__ == "__main__":
    from tests.training.fsdp_ranks import exit_rank

    model_path, out_dir = sys.argv[1:]
    rank, model = checkpointed_shards(model_path)
    batch = varied_batch(model.config.vocab_size, seed=4)
    packed = []
    forward = actor_module.packed_logits
    actor_module.packed_logits = lambda *args: packed.append(1) or forward(*args)
    gradient, actor = update_gradient(model, batch.chunk(world_size())[rank], pack=True)
    log_probs, _ = actor.compute_log_prob(batch.index(UNEVEN_ROWS[rank]), 1.0, None)
    torch.save({"gradient": gradient, "uneven_log_probs": log_probs, "packed_forwards": len(packed)}, f"{out_dir}/rank{rank}.pt")
    exit_rank()
