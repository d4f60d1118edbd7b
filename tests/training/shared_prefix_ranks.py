"""One rank of the FSDP2 check in test_shared_prefix.py (run as a script by each spawned rank).

`update_gradients(model, batch, share_prompt)` runs one actor update with SGD at lr 0 and returns the whole
gradient (gathered from the FSDP2 shards) and the actor. As a script, each rank joins the process group from
RANK/WORLD_SIZE/MASTER_*, shards the model (with gradient checkpointing, the actor's default), trains on its half
of `grouped_batch` with prompt sharing (and records whether it shared), then computes log-probs of rows in which
only rank 0's prompt repeats (the ranks must agree on the plain forward, or their collectives would fall out of
step), and saves all that to <out>/rank<r>.pt.
"""

from __future__ import annotations

import os
import sys

import torch
from transformers import AutoModelForCausalLM

from reinforge.batch import Batch
from reinforge.config.engine_schema import FSDPConfig
from reinforge.config.schema import ActorConfig
from reinforge.distributed.process_group import full_tensor, init_distributed, world_size
from reinforge.training.actor import Actor
from reinforge.training.fsdp import shard_model
from reinforge.training.model import enable_gradient_checkpointing
from reinforge.training.shared_prefix import shared_prompt_logits

SAMPLES = 4  # rollout.n: rank r holds group r of a 2-group batch
UNEVEN_ROWS = ([0, 1, 2, 3], [0, 4])  # a forward pass in which only rank 0's prompt repeats


def grouped_batch(vocab: int, seed: int = 0) -> Batch:
    """2 prompts x 4 samples (the second prompt left-padded), responses of different lengths, GRPO-like advantages."""
    g = torch.Generator().manual_seed(seed)
    prompt_len, response_len, rows = 6, 5, 2 * SAMPLES
    prompts = torch.randint(3, vocab, (2, prompt_len), generator=g).repeat_interleave(SAMPLES, 0)
    prompt_mask = torch.ones(rows, prompt_len, dtype=torch.long)
    prompt_mask[SAMPLES:, :2] = 0
    responses = torch.randint(3, vocab, (rows, response_len), generator=g)
    response_mask = (torch.arange(response_len) < torch.arange(rows)[:, None] % response_len + 1).long()
    attention_mask = torch.cat([prompt_mask, response_mask], 1)
    return Batch({"input_ids": torch.cat([prompts * prompt_mask, responses], 1), "attention_mask": attention_mask,
                  "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0), "responses": responses,
                  "response_mask": response_mask, "advantages": torch.randn(rows, 1, generator=g) * response_mask})


def update_gradients(model: torch.nn.Module, batch: Batch, share_prompt: bool) -> dict:
    cfg = ActorConfig(ppo_mini_batch_size=2, clip_ratio_low=0.2, clip_ratio_high=0.2, entropy_coeff=0.01, grad_clip=1e9)
    actor = Actor(model, cfg, torch.optim.SGD(model.parameters(), lr=0.0), share_prompt=share_prompt)
    actor.update_policy(batch, temperature=1.0, rollout_n=SAMPLES)
    gradient = torch.cat([full_tensor(p.grad).flatten() for p in model.parameters()])
    return {"gradient": gradient, "actor": actor}


def checkpointed_shards(model_path: str) -> tuple[int, torch.nn.Module]:
    """This rank (joined from RANK/WORLD_SIZE/MASTER_*) and the model at `model_path`, checkpointed and sharded."""
    init_distributed("cpu")
    model = AutoModelForCausalLM.from_pretrained(model_path).train()
    enable_gradient_checkpointing(model)
    return int(os.environ["RANK"]), shard_model(model, FSDPConfig(), "cpu")


if __name__ == "__main__":
    from tests.training.fsdp_ranks import exit_rank

    model_path, out_dir = sys.argv[1:]
    rank, model = checkpointed_shards(model_path)
    batch = grouped_batch(model.config.vocab_size)
    mine = batch.chunk(world_size())[rank]
    with torch.no_grad():
        shared = shared_prompt_logits(model, mine["input_ids"], mine["attention_mask"], mine["position_ids"],
                                      mine["responses"].shape[1]) is not None
    result = update_gradients(model, mine, share_prompt=True)
    uneven = batch.index(UNEVEN_ROWS[rank])
    log_probs, _ = result.pop("actor").compute_log_prob(uneven, 1.0, None)
    torch.save({**result, "shared": shared, "uneven_log_probs": log_probs}, f"{out_dir}/rank{rank}.pt")
    exit_rank()
