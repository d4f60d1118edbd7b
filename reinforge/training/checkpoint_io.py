"""A worker's checkpoint files in verl's layout, written by every rank and read back on any number of ranks.

    model_world_size_{W}_rank_{r}.pt        the model state of rank r of W
    optim_world_size_{W}_rank_{r}.pt        the optimizer state (AdamW's exp_avg/exp_avg_sq, step, param groups)
    extra_state_world_size_{W}_rank_{r}.pt  what the worker adds: the scheduler, rank r's RNG streams
    huggingface/                            the model's config (rank 0), and what the actor adds
    fsdp_config.json                        W=1 only: {"FSDP_version": 2, "world_size": 1, "saved_by": "reinforge"}, what verl's model merger
                                            needs to read the folder

With one rank (W=1) the files are torch's plain full state dicts, loadable with `torch.load` alone.
With W > 1 (an FSDP2 model) each rank writes only its own shards: every DTensor of the sharded
state dicts becomes a record {SHARD_DIM: d, "local": this rank's piece, "shape": the full shape},
and anything replicated is written whole by every rank. The files are plain tensors and dicts, so
they load without torch.distributed; concatenating the W pieces along d in rank order gives the full
tensor (FSDP2 shards dim 0 in torch.chunk order). The optimizer state of W > 1 is keyed by parameter
name (torch.distributed.checkpoint's form); that of W = 1 by parameter index (torch's own).

Loading reads all W' files of whatever W' the folder was saved with, reassembles full tensors, and
sets them into this run's model and optimizer: plain `load_state_dict` with one rank, the
distributed-checkpoint setters (each rank keeps its shard of the full tensor) with several. So a
checkpoint resumes on another number of ranks (reshard). The extra state is per rank: with W' == W
each rank restores its own; otherwise every rank restores rank 0's (the scheduler is the same on
every rank; the RNG streams then restart from rank 0's, so a resharded run is not bit-for-bit the run
it would have been with W' ranks).

`read_full_model_state` and `write_hf_model` are what `reinforge merge` uses (merge.py). They also read verl's
own FSDP2 checkpoints, whose rank files hold DTensors: their local shards are joined by placement, as verl's
merger joins them (a tied lm_head, which verl's state dict holds twice, is written once).
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
import sys
from pathlib import Path

import numpy as np
import torch

from reinforge.distributed.process_group import all_reduce, rank, world_size
from reinforge.errors import ConfigError
from reinforge.trainer.checkpoint import UNREADABLE, damaged, save_torch
from reinforge.training.lora import SAVED_PREFIX

SAVED_BY = "reinforge"  # in fsdp_config.json, which verl writes too: tells a reinforge checkpoint from a verl one
SHARD_DIM = "reinforge_shard_dim"  # marks a record holding one rank's piece of a tensor sharded along that dim
PARTS = {"model": "model", "optimizer": "optim", "extra": "extra_state"}  # save/load_contents entry -> file prefix
RANK_FILE = re.compile(r"^(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$")


def file_name(prefix: str, ranks: int, index: int) -> str:
    return f"{prefix}_world_size_{ranks}_rank_{index}.pt"


# ---- saving -------------------------------------------------------------------------------------
def save_training_state(folder: str, contents: list, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                        extra: dict, lora_only: bool = False) -> Path:
    """This rank's model, optimizer and `extra` under `folder` (as `contents` asks), plus the HF config (rank 0);
    `lora_only` (checkpoint.save_lora_only): of a model with LoRA adapters, only what trains.

    Every rank of the group calls it (with several ranks the state dicts are collectives)."""
    path = Path(folder)
    ranks, index = world_size(), rank()
    _agreed_write(lambda: path.mkdir(parents=True, exist_ok=True), path)
    if "model" in contents:
        state = model_state(model, ranks, lora_only)
        _agreed_write(lambda: save_torch(state, path / file_name("model", ranks, index)), path)
        del state  # before the optimizer's state is gathered: one of the two in memory at a time
    if "optimizer" in contents:
        state = optimizer_state(model, optimizer, ranks)
        _agreed_write(lambda: save_torch(state, path / file_name("optim", ranks, index)), path)
    if "extra" in contents:
        _agreed_write(lambda: save_torch(extra, path / file_name("extra_state", ranks, index)), path)
    if index == 0:
        model.config.save_pretrained(path / "huggingface")
    if ranks == 1 and "model" in contents:  # verl's model merger reads one rank's plain tensors given this file
        (path / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1, "saved_by": SAVED_BY}))
    return path


def _agreed_write(write, path: Path) -> None:
    """`write()`, after which every rank learns whether all of them wrote: a filesystem failure (a full disk) on any
    rank raises on all (OSError on the others), so none goes on into a later collective that the others have left."""
    from reinforge.trainer.checkpoint import os_error_in

    failure = None
    try:
        write()
    except Exception as error:
        if os_error_in(error) is None:  # not the filesystem: a bug, which ends the run
            raise
        failure = error
    code = int(all_reduce([float(os_error_in(failure).errno or -1) if failure else 0.0], "max")[0])
    if failure is not None:
        raise failure
    if code:
        raise OSError(code if code > 0 else None, f"{os.strerror(code) if code > 0 else 'a write failed'} on another rank",
                      str(path))


def model_state(model: torch.nn.Module, ranks: int, lora_only: bool = False) -> dict:
    """The state dict this rank writes: the full one with one rank, its shard records with several. A model with LoRA
    adapters writes its keys under peft's names (SAVED_PREFIX first, as verl's rank files, which verl's model merger
    reads), and with `lora_only` only the adapters and what else trains (a critic's value head)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    state = to_shard_records(model.state_dict() if ranks == 1 else get_model_state_dict(model))
    if not any(".lora_A." in name for name in state):
        return state
    if lora_only:
        trained = {name for name, param in model.named_parameters() if param.requires_grad}
        state = {name: tensor for name, tensor in state.items() if ".lora_" in name or name in trained}
    return {SAVED_PREFIX + name: tensor for name, tensor in state.items()}


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, ranks: int) -> dict:
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return to_shard_records(optimizer.state_dict() if ranks == 1 else get_optimizer_state_dict(model, optimizer))


def to_shard_records(tree, copies: dict | None = None):
    """`tree` (nested dicts, lists, tuples) as a checkpoint file holds it: each DTensor replaced by this rank's shard
    record, every other tensor on the CPU (as verl's files: torch.load reads them without a GPU; CPU tensors as they
    are). A tensor that appears under two names (tied embeddings, also as two DTensors over the same local memory)
    gets one copy, which torch.save then writes once."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    copies = {} if copies is None else copies

    def once(tensor: torch.Tensor, always: bool) -> torch.Tensor:
        if not always and tensor.device.type == "cpu":
            return tensor
        key = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride())
        if key not in copies:
            copies[key] = tensor.detach().to("cpu", copy=True)
        return copies[key]

    if isinstance(tree, DTensor):
        if tree.device_mesh.ndim != 1 or type(tree.placements[0]) not in (Shard, Replicate):
            raise NotImplementedError(f"checkpoints hold 1-D sharded or replicated tensors, not {tree.placements} "
                                      f"on a {tree.device_mesh.ndim}-D mesh")
        local = once(tree.to_local(), always=True)  # a copy: it views FSDP's padded storage, which torch.save would write whole
        if isinstance(tree.placements[0], Replicate):
            return local
        return {SHARD_DIM: tree.placements[0].dim, "local": local, "shape": list(tree.shape)}
    if isinstance(tree, torch.Tensor):
        return once(tree, always=False)
    if isinstance(tree, dict):
        return {key: to_shard_records(value, copies) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_shard_records(value, copies) for value in tree)
    return tree


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full state dict on CPU: gathered from every rank (a collective; rank 0 gets it, the others an empty
    dict) with several ranks, the model's own with one."""
    if world_size() == 1:
        return to_shard_records(model.state_dict())
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def write_hf_model(config, state_dict: dict[str, torch.Tensor], out_dir: Path, model_class,
                   trust_remote_code: bool = False) -> None:
    """`state_dict` as a Hugging Face model folder (config.json and safetensors) of `model_class` built from
    a copy of `config` on the meta device (nothing is allocated or initialised: the weights come from `state_dict`;
    the copy because `save_pretrained` sets the dtype and architectures of the config it is given)."""
    dtype = next(value.dtype for value in state_dict.values() if value.is_floating_point())
    with torch.device("meta"):
        model = model_class.from_config(copy.deepcopy(config), dtype=dtype, trust_remote_code=trust_remote_code)
    tied = getattr(model, "_tied_weights_keys", None)
    if getattr(config, "tie_word_embeddings", False) and isinstance(tied, dict):  # a verl checkpoint holds them twice
        state_dict = {name: value for name, value in state_dict.items() if name not in tied or tied[name] not in state_dict}
    model.save_pretrained(out_dir, state_dict=state_dict, safe_serialization=True)
    umask = _umask()
    for file in Path(out_dir).glob("*.safetensors"):  # written private (0600) by the save: readable as the umask allows,
        file.chmod(0o666 & ~umask)  # as the folder's other files are, for the other users of a shared machine


def _umask() -> int:
    """The process's umask, read without setting it (Linux's /proc), else set and set back (a moment another thread's
    new file could be made with)."""
    try:
        return int(next(line for line in Path("/proc/self/status").read_text().splitlines()
                        if line.startswith("Umask:")).split()[1], 8)
    except (OSError, StopIteration, IndexError, ValueError):
        umask = os.umask(0o077)
        os.umask(umask)
        return umask


def seed_rngs(seed: int) -> None:
    """Start this process's random streams (torch, numpy, Python) from `seed`: the driver and every worker process do,
    so what draws from them (a user's tool, environment or loss) repeats, and a resumed run's saved streams are the
    straight run's."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """This process's random streams (torch, numpy, Python, and this rank's CUDA device), for a checkpoint's extra state."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()  # this rank's device: the visible GPUs may differ on resume
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


# ---- loading ------------------------------------------------------------------------------------
def load_training_state(folder: str, contents: list, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                        device: str, key: str = "actor_rollout_ref.actor") -> dict | None:
    """Restore what `save_training_state` wrote, with any number of ranks then and now; returns the extra state
    (None when not loaded). `key` is the config section whose checkpoint.load_contents is `contents`, for messages."""
    path = Path(folder)
    parts = [content for content in ("model", "optimizer", "extra") if content in contents]
    if not parts:
        raise ConfigError(f"{key}.checkpoint.load_contents={list(contents)} names nothing to resume {path} from: a run resumes "
                          f"from model, optimizer and extra (hf_model is an export); save them (checkpoint.save_contents) "
                          "or start afresh in another trainer.default_local_dir")
    elsewhere = "trainer.resume_from_path at a global_step_<N> folder that reinforge saved, or start afresh in another trainer.default_local_dir"
    advice = f"Point {elsewhere}"
    saved = [part for part in parts if path.is_dir() and any(path.glob(f"{PARTS[part]}_world_size_*_rank_*.pt"))]
    if saved and saved != parts:  # saved with fewer save_contents than this run loads
        advice = (f"If it was saved without them (checkpoint.save_contents), resume from it with "
                  f"{key}.checkpoint.load_contents=[{','.join(saved)}]; if they were lost, point {elsewhere}")
    saved_ranks = saved_world_size(path, [PARTS[part] for part in parts], advice)
    ranks = world_size()
    if "model" in contents:
        check_same_architecture(path, model)
        state = read_full(path, "model", saved_ranks, device)
        check_same_adapters(path, state, model, "critic.model" if key == "critic" else "actor_rollout_ref.model")
        strict = not lora_only_state(path, state, model)
        if ranks == 1:
            model.load_state_dict(state, strict=strict)
        else:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

            set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=strict))
    if "optimizer" in contents:
        names = optimizer_param_names(model, optimizer)
        state = read_full(path, "optim", saved_ranks, device)
        check_same_optimizer(path, state, optimizer, key)
        if saved_ranks == 1:
            state = optimizer_by_name(state, names)
        if ranks == 1:
            optimizer.load_state_dict(optimizer_by_index(state, names))
        else:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

            set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
    if "extra" in contents:
        own = rank() if saved_ranks == ranks else 0
        return torch.load(path / file_name("extra_state", saved_ranks, own), weights_only=False)
    return None


def check_same_adapters(path: Path, state: dict, model: torch.nn.Module, section: str) -> None:
    """ConfigError when the checkpoint's LoRA adapters (training/lora.py) are not the ones `model` has: none against
    some, or another rank or other layers; torch would list missing and unexpected keys."""
    def adapters(names_shapes) -> dict[str, int]:  # adapted layer -> rank
        return {name.split(".lora_A.")[0]: shape[0] for name, shape in names_shapes if ".lora_A." in name}

    saved = adapters((name, tuple(tensor.shape)) for name, tensor in state.items())
    current = adapters((name, tuple(tensor.shape)) for name, tensor in model.state_dict().items())
    if saved == current:
        if saved:
            from reinforge.training.lora import check_same_scaling

            check_same_scaling(path, model, section)
        return
    fresh = "or start afresh in another trainer.default_local_dir"
    if not saved:
        raise ConfigError(f"the checkpoint {path} was saved without LoRA adapters and this run adds them ({section}.lora_rank="
                          f"{next(iter(current.values()))}): resume it with {section}.lora_rank=0, {fresh}")
    if not current:
        raise ConfigError(f"the checkpoint {path} was saved with LoRA adapters of rank {next(iter(saved.values()))} and this "
                          f"run has none: resume it with {section}.lora_rank={next(iter(saved.values()))} and the same "
                          f"target_modules, {fresh}")
    raise ConfigError(f"the checkpoint {path} holds LoRA adapters of rank {sorted(set(saved.values()))} on {len(saved)} "
                      f"layers and this run's are of rank {sorted(set(current.values()))} on {len(current)}: resume it with "
                      f"the {section}.lora_rank and target_modules it was saved with, {fresh}")


def lora_only_state(path: Path, state: dict, model: torch.nn.Module) -> bool:
    """Whether `state` is a LoRA model's saved with checkpoint.save_lora_only (the adapters and what else trains), whose
    frozen base weights the model already holds from its folder; ConfigError when it lacks a trained tensor."""
    missing = set(model.state_dict()) - set(state)
    if not missing or not any(".lora_A." in name for name in state):
        return False
    trained = [name for name, param in model.named_parameters() if param.requires_grad and name in missing]
    if trained:
        raise ConfigError(f"the checkpoint {path} holds the LoRA adapters but not {trained[:3]}, which this run trains; it "
                          "was saved by another configuration: start afresh in another trainer.default_local_dir")
    return True


def check_same_optimizer(path: Path, state: dict, optimizer: torch.optim.Optimizer, key: str) -> None:
    """ConfigError when the saved optimizer state is another optimizer class's (its param groups hold other settings:
    SGD's momentum where AdamW has betas), which the optimizer could not load."""
    def settings(group: dict) -> set:
        return set(group) - {"params", "initial_lr"}

    saved, own = settings(state["param_groups"][0]), settings(optimizer.param_groups[0])
    if saved != own:
        raise ConfigError(f"{path}: the checkpoint's optimizer state is another optimizer's (its settings include "
                          f"{sorted(saved - own) or sorted(saved)}, not {sorted(own - saved) or sorted(own)} of "
                          f"{type(optimizer).__name__}); resume with the optimizer it was saved with ({key}.optim.optimizer), "
                          f"or with a fresh optimizer state: {key}.checkpoint.load_contents=[model,extra]")


def saved_world_size(path: Path, prefixes: list[str], advice: str) -> int:
    """The number of ranks that wrote the `prefixes` files in `path`; ConfigError (ending with `advice`) when
    there are none, when they come from different numbers of ranks, or when a rank's file is missing."""
    found: dict[str, dict[int, set[int]]] = {prefix: {} for prefix in prefixes}
    for file in path.glob("*_world_size_*_rank_*.pt") if path.is_dir() else ():
        if (match := RANK_FILE.match(file.name)) and match.group(1) in found:
            found[match.group(1)].setdefault(int(match.group(2)), set()).add(int(match.group(3)))
    missing = [file_name(prefix, world_size(), rank()) for prefix, sizes in found.items() if not sizes]
    if missing:
        raise ConfigError(f"{path} is not a checkpoint this run can load: it has no {', '.join(missing)} (nor the "
                          f"files of another number of ranks). {advice}")
    sizes = sorted({size for by_size in found.values() for size in by_size})
    if len(sizes) > 1:
        raise ConfigError(f"{path} holds checkpoint files of {' and '.join(map(str, sizes))} ranks mixed together; "
                          f"keep the files of one save only. {advice}")
    ranks = sizes[0]
    absent = [file_name(prefix, ranks, index) for prefix, by_size in found.items() for index in range(ranks)
              if index not in by_size[ranks]]
    if absent:
        raise ConfigError(f"{path} is an incomplete checkpoint of {ranks} ranks: {', '.join(absent)} "
                          f"{'is' if len(absent) == 1 else 'are'} missing. {advice}")
    return ranks


def read_full(path: Path, prefix: str, ranks: int, device: str = "cpu", damaged_advice: str | None = None) -> dict:
    """The full state in the `prefix` files of a checkpoint saved by `ranks` ranks (shard records, or the DTensors of a
    verl checkpoint, reassembled); a file that cannot be read is a CheckpointError ending with `damaged_advice` (by
    default, how to resume from another step)."""
    pieces = [load_rank_file(path / file_name(prefix, ranks, index), damaged_advice) for index in range(ranks)]
    state = merge_shard_records(pieces, f"{path / file_name(prefix, ranks, 0)} ... rank_{ranks - 1}.pt")
    if prefix == "model":  # a LoRA model's keys under peft's names (reinforge's and verl's): the model's own names
        state = {name.removeprefix(SAVED_PREFIX): tensor for name, tensor in state.items()}
    return state


def load_rank_file(file: Path, damaged_advice: str | None = None):
    """One rank's file, on the CPU (not the GPU: set_*_state_dict shards it). verl's files hold FSDP2 DTensors, which
    torch.load reads (weights only) once torch.distributed.tensor is imported; their device mesh names process groups
    that do not exist here, which torch warns about and which nothing needs: only their local shards are read."""
    import logging

    import torch.distributed.tensor  # noqa: F401

    mesh_log = logging.getLogger("torch.distributed.device_mesh")
    level = mesh_log.level
    mesh_log.setLevel(logging.ERROR)
    try:
        return torch.load(file, map_location="cpu")
    except UNREADABLE as error:
        raise damaged(file, error, damaged_advice) from error
    finally:
        mesh_log.setLevel(level)


def merge_shard_records(pieces: list, where: str):
    """The full tree from the same tree of every rank: shard records concatenated in rank order, anything else
    taken from rank 0; ConfigError naming `where` when the ranks' trees or pieces do not fit together."""
    first = pieces[0]
    dtensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)  # none can exist before its import
    if dtensor is not None and isinstance(first, dtensor):  # a verl checkpoint's: one shard per rank of a 1-D mesh
        return _merge_dtensor_shards(pieces, where)
    if isinstance(first, dict) and SHARD_DIM in first:
        full = torch.cat([piece["local"] for piece in pieces], dim=first[SHARD_DIM])
        if list(full.shape) != first["shape"]:
            raise ConfigError(f"{where}: the pieces of a tensor make shape {list(full.shape)}, not the saved "
                              f"{first['shape']}; the files come from different saves")
        return full
    if isinstance(first, dict):
        if any(not isinstance(piece, dict) or piece.keys() != first.keys() for piece in pieces):
            raise ConfigError(f"{where}: the ranks' files hold different entries; they come from different saves")
        return {key: merge_shard_records([piece[key] for piece in pieces], where) for key in first}
    if isinstance(first, (list, tuple)):
        return type(first)(merge_shard_records(list(column), where) for column in zip(*pieces, strict=True))
    return first


def _merge_dtensor_shards(pieces: list, where: str) -> torch.Tensor:
    """The full tensor of every rank's DTensor: local shards concatenated along the sharded dim (FSDP's Shard), or
    rank 0's (Replicate), as verl's model merger joins them; ConfigError for meshes of more dimensions."""
    first = pieces[0]
    if len(first.placements) != 1:
        raise ConfigError(f"{where}: a tensor sharded over a {len(first.placements)}-dimensional device mesh "
                          f"({first.placements}); reinforge reads FSDP checkpoints of one mesh dimension, as verl's FSDP "
                          "trainer saves them")
    placement = first.placements[0]
    shards = [piece._local_tensor for piece in pieces]
    full = torch.cat(shards, dim=placement.dim) if placement.is_shard() else shards[0]
    if tuple(full.shape) != tuple(first.shape):
        raise ConfigError(f"{where}: the shards of a tensor make shape {list(full.shape)}, not its {list(first.shape)}; "
                          "the files come from different saves")
    return full.contiguous()


def read_full_model_state(path: Path, advice: str) -> dict[str, torch.Tensor]:
    """The full model state dict of the checkpoint folder `path`, saved by any number of ranks; `advice` ends the
    error for files that are missing or damaged."""
    return read_full(path, "model", saved_world_size(path, ["model"], advice), damaged_advice=advice)


# ---- optimizer state: by parameter index (torch) and by parameter name (distributed checkpoint) ---
def optimizer_param_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The names of the optimizer's parameters in the order torch numbers them in its state dict."""
    names = {id(param): name for name, param in model.named_parameters()}
    return [names[id(param)] for group in optimizer.param_groups for param in group["params"]]


def optimizer_by_name(state: dict, names: list[str]) -> dict:
    return {"state": {names[index]: value for index, value in state["state"].items()},
            "param_groups": [{**group, "params": [names[index] for index in group["params"]]}
                             for group in state["param_groups"]]}


def optimizer_by_index(state: dict, names: list[str]) -> dict:
    index = {name: position for position, name in enumerate(names)}
    return {"state": {index[name]: value for name, value in state["state"].items()},
            "param_groups": [{**group, "params": [index[name] for name in group["params"]]}
                             for group in state["param_groups"]]}


ARCHITECTURE_KEYS = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "num_labels")


def check_same_architecture(folder: Path, model: torch.nn.Module) -> None:
    """ConfigError naming the checkpoint, the model and the differing sizes when the checkpoint in `folder` (its
    huggingface/config.json) was saved from a model of another shape than `model`; torch would only say "size mismatch"."""
    saved_file = folder / "huggingface" / "config.json"
    if not saved_file.is_file():
        return
    try:
        saved, current = json.loads(saved_file.read_text()), model.config.to_dict()
        if not isinstance(saved, dict):
            raise ValueError(f"it holds a JSON {type(saved).__name__}, not a model config")
    except (ValueError, OSError) as error:  # a JSON or UTF-8 decoding error is a ValueError
        raise damaged(saved_file, error) from error
    differ = [f"{key} {saved[key]} (checkpoint) vs {current.get(key)} (model)" for key in ARCHITECTURE_KEYS
              if key in saved and saved[key] != current.get(key)]
    if differ:
        raise ConfigError(
            f"the checkpoint {folder} was saved from a different model than {model.config._name_or_path or 'this run'}'s: "
            f"{'; '.join(differ)}. Resume with the model the checkpoint was trained from (actor_rollout_ref.model.path / "
            "critic.model.path), or start afresh in another trainer.default_local_dir"
        )
