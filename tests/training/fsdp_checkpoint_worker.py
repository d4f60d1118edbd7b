"""One rank of the 2-process checkpoint tests (run by test_checkpoint_reshard.py, never collected by pytest).

`python -m tests.training.fsdp_checkpoint_worker MODEL WORKDIR` with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set; every rank wraps the tiny model in FSDP2 (`fully_shard` per decoder layer, then the root)
on CPU with gloo, and then:

1. loads WORKDIR/full (saved by one rank) into a fresh sharded model;
2. trains another one AdamW step on fixed data and saves it with checkpoint_io into WORKDIR/sharded (each
   rank's extra state is {"rank": r}; rank 0 adds the tokenizer), and its model as verl saves one into
   WORKDIR/verl/actor (each rank's DTensor state dict, fsdp_config.json, huggingface/config.json). Rank 0 then writes WORKDIR/reference.pt
   (the full parameters and optimizer state gathered by torch's distributed-checkpoint API, the logits and
   greedy tokens of the sharded model) and, as the actor worker does with hf_model in save_contents, the
   full weights as a Hugging Face folder WORKDIR/hf_at_save;
3. loads WORKDIR/sharded into a fresh sharded model.

After 1 and 3 each rank writes WORKDIR/loaded_{full|sharded}_rank_{r}.pt: its local parameter and
optimizer-state shards and the extra state it got back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from reinforge.distributed.process_group import init_distributed, rank
from reinforge.training.checkpoint_io import full_model_state, load_training_state, save_training_state, write_hf_model

CONTENTS = ["model", "optimizer", "extra"]
PROMPT = [[5, 17, 42, 9, 33, 60]]


def sharded_model(model_path: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The tiny model sharded with FSDP2 the usual way (each decoder layer, then the root) and its AdamW."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))  # named: fully_shard's default mesh is on the GPU when one is present
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)


def local_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    names = {id(param): name for name, param in model.named_parameters()}
    return {"params": {name: param.to_local().detach().clone() for name, param in model.named_parameters()},
            "optim": {names[id(param)]: {key: value.to_local().clone() if hasattr(value, "to_local") else value.clone()
                                         for key, value in state.items()}
                      for param, state in optimizer.state.items()}}


def train_and_save(model_path: str, workdir: Path) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, optimizer = sharded_model(model_path)
    ids = torch.randint(3, model.config.vocab_size, (4, 12), generator=torch.Generator().manual_seed(1))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    save_training_state(str(workdir / "sharded"), CONTENTS, model, optimizer, {"rank": rank()})
    if rank() == 0:  # as the actor worker does
        AutoTokenizer.from_pretrained(model_path).save_pretrained(workdir / "sharded" / "huggingface")
    # the model part of a verl checkpoint, as verl's FSDP checkpoint manager writes it with FSDP2: each rank's sharded
    # state dict (DTensors) as it is, and fsdp_config.json and the Hugging Face config beside them
    verl = workdir / "verl" / "actor"
    verl.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), verl / f"model_world_size_2_rank_{rank()}.pt")
    if rank() == 0:
        (verl / "fsdp_config.json").write_text('{"FSDP_version": 2, "world_size": 2}')
        model.config.save_pretrained(verl / "huggingface")
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    params, optim = get_model_state_dict(model, options=full), get_optimizer_state_dict(model, optimizer, options=full)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor(PROMPT)).logits
        tokens = model.generate(torch.tensor(PROMPT), max_new_tokens=10, do_sample=False, pad_token_id=0)
    weights = full_model_state(model)  # what the actor worker writes to huggingface/ with hf_model in save_contents
    if rank() == 0:
        torch.save({"params": params, "optim": optim, "logits": logits, "tokens": tokens}, workdir / "reference.pt")
        write_hf_model(model.config, weights, workdir / "hf_at_save", AutoModelForCausalLM)


def load(model_path: str, workdir: Path, source: str) -> None:
    model, optimizer = sharded_model(model_path)
    extra = load_training_state(str(workdir / source), CONTENTS, model, optimizer, "cpu")
    torch.save({**local_shards(model, optimizer), "extra": extra}, workdir / f"loaded_{source}_rank_{rank()}.pt")


if __name__ == "__main__":
    from tests.training.fsdp_ranks import exit_rank

    model_path, workdir = sys.argv[1], Path(sys.argv[2])
    init_distributed("cpu")
    load(model_path, workdir, "full")
    train_and_save(model_path, workdir)
    load(model_path, workdir, "sharded")
    exit_rank()
