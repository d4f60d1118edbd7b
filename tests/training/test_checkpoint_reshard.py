"""Checkpoints saved by 2 FSDP2 ranks load on 1 and on 2, those of 1 rank on 2; `reinforge merge` writes an HF model.

Two gloo processes (tests/training/fsdp_checkpoint_worker.py) load a checkpoint saved here by one rank,
train the tiny model one AdamW step and save it sharded, and load that back. The reference for the
sharded checkpoint is what torch's distributed-checkpoint API gathers from the 2-rank run (and the greedy
tokens the sharded model generates); for the one-rank checkpoint, the plain full state dicts it holds.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reinforge.cli import main as cli_main
from reinforge.errors import ConfigError
from reinforge.training.checkpoint_io import load_training_state, optimizer_param_names, save_training_state

REPO = Path(__file__).resolve().parents[2]
CONTENTS = ["model", "optimizer", "extra"]


def run_ranks(model_path: Path, workdir: Path, ranks: int = 2) -> None:
    """Run the worker module in `ranks` processes joined by gloo; fail with their output if one fails."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    procs = []
    for index in range(ranks):
        env = {**os.environ, "RANK": str(index), "LOCAL_RANK": str(index), "WORLD_SIZE": str(ranks),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.training.fsdp_checkpoint_worker", str(model_path),
                                       str(workdir)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outputs = [proc.communicate(timeout=120)[0].decode() for proc in procs]
    for index, proc in enumerate(procs):
        assert proc.returncode == 0, f"rank {index} failed:\n{outputs[index]}"


def plain_model(model_path: Path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    return model, torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.1)


@pytest.fixture(scope="module")
def workdir(tiny_model_path, tmp_path_factory) -> Path:
    """full/ (one rank, one AdamW step here), then what the 2 ranks wrote: sharded/, reference.pt, loaded_*.pt."""
    folder = tmp_path_factory.mktemp("reshard")
    model, optimizer = plain_model(tiny_model_path)
    ids = torch.randint(3, model.config.vocab_size, (3, 10), generator=torch.Generator().manual_seed(2))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    save_training_state(str(folder / "full"), CONTENTS, model, optimizer, {"rank": "single"})
    run_ranks(tiny_model_path, folder)
    return folder


def test_checkpoint_of_two_ranks_loads_on_one(workdir, tiny_model_path):
    reference = torch.load(workdir / "reference.pt")
    model, optimizer = plain_model(tiny_model_path)
    extra = load_training_state(str(workdir / "sharded"), CONTENTS, model, optimizer, "cpu")

    assert extra == {"rank": 0}  # 2 ranks saved, 1 loads: rank 0's extra state
    for name, value in model.state_dict().items():
        assert torch.equal(value, reference["params"][name]), name
    names = optimizer_param_names(model, optimizer)
    assert len(optimizer.state) == len(names) == len(reference["optim"]["state"])
    for param, name in zip(optimizer.param_groups[0]["params"], names, strict=True):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(optimizer.state[param][key], reference["optim"]["state"][name][key]), (name, key)
    assert optimizer.param_groups[0]["weight_decay"] == 0.1 and optimizer.param_groups[0]["lr"] == 1e-3


def test_a_rank_file_holds_its_shards_and_tied_weights_once(workdir):
    pieces = torch.load(workdir / "sharded" / "model_world_size_2_rank_1.pt")
    reference = torch.load(workdir / "reference.pt")
    assert pieces.keys() == reference["params"].keys()
    for name, piece in pieces.items():
        assert piece["shape"] == list(reference["params"][name].shape) and piece["reinforge_shard_dim"] == 0, name
    embedding, head = pieces["model.embed_tokens.weight"]["local"], pieces["lm_head.weight"]["local"]
    assert embedding.untyped_storage().data_ptr() == head.untyped_storage().data_ptr()  # the tiny model ties them


def test_checkpoints_of_one_and_of_two_ranks_load_on_two_as_shards_of_the_full_tensors(workdir, tiny_model_path):
    model, optimizer = plain_model(tiny_model_path)
    names = optimizer_param_names(model, optimizer)
    single = {"params": torch.load(workdir / "full" / "model_world_size_1_rank_0.pt"),
              "optim": {names[index]: state for index, state in
                        torch.load(workdir / "full" / "optim_world_size_1_rank_0.pt")["state"].items()}}
    reference = torch.load(workdir / "reference.pt")
    expected = {"full": single, "sharded": {"params": reference["params"], "optim": reference["optim"]["state"]}}
    for source in ("full", "sharded"):
        for index in range(2):
            loaded = torch.load(workdir / f"loaded_{source}_rank_{index}.pt", weights_only=False)
            assert loaded["extra"] == ({"rank": "single"} if source == "full" else {"rank": index}), source
            for name, shard in loaded["params"].items():
                assert torch.equal(shard, expected[source]["params"][name].chunk(2)[index]), (source, index, name)
            assert loaded["optim"].keys() == expected[source]["optim"].keys()
            for name, state in loaded["optim"].items():
                full = expected[source]["optim"][name]
                assert torch.equal(state["step"], full["step"])
                for key in ("exp_avg", "exp_avg_sq"):
                    assert torch.equal(state[key], full[key].chunk(2)[index]), (source, index, name, key)


def test_merge_writes_a_model_that_transformers_loads_and_that_generates_like_the_trained_one(workdir, tmp_path, capsys,
                                                                                             tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reference = torch.load(workdir / "reference.pt")
    assert cli_main(["merge", str(workdir / "sharded"), str(tmp_path / "hf")]) == 0
    assert "Hugging Face model written to" in capsys.readouterr().out

    assert (tmp_path / "hf" / "model.safetensors").is_file()
    for folder in (tmp_path / "hf", workdir / "hf_at_save"):  # merged afterwards; written at save time by 2 ranks
        merged = AutoModelForCausalLM.from_pretrained(folder)
        for name, value in merged.state_dict().items():
            assert torch.equal(value, reference["params"][name]), (folder, name)
        prompt = reference["tokens"][:, :6]
        torch.testing.assert_close(merged(prompt).logits, reference["logits"], rtol=1e-5, atol=1e-6)
        tokens = merged.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=0)
        assert torch.equal(tokens, reference["tokens"]), folder
    text = "What is 41 plus 1?<|im_end|>"
    assert AutoTokenizer.from_pretrained(tmp_path / "hf")(text).input_ids == tokenizer(text).input_ids


def test_merge_reads_a_verl_checkpoint_of_dtensor_shards(workdir, tmp_path):
    """verl's FSDP2 checkpoint holds each rank's DTensors; reinforge merge joins their shards as verl's model merger does
    (and writes a tied lm_head once): the trained weights exactly."""
    from torch.distributed.tensor import DTensor
    from transformers import AutoModelForCausalLM

    reference = torch.load(workdir / "reference.pt")
    shard = torch.load(workdir / "verl" / "actor" / "model_world_size_2_rank_1.pt")
    assert all(isinstance(value, DTensor) for value in shard.values())
    assert cli_main(["merge", "--backend", "fsdp", "--local_dir", str(workdir / "verl" / "actor"),
                     "--target_dir", str(tmp_path / "hf")]) == 0
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    for name, value in merged.state_dict().items():
        assert torch.equal(value, reference["params"][name]), name


def test_incomplete_or_mixed_checkpoints_and_non_checkpoints_are_refused(workdir, tmp_path, capsys):
    partial = tmp_path / "partial"
    shutil.copytree(workdir / "sharded", partial)
    (partial / "optim_world_size_2_rank_1.pt").unlink()
    with pytest.raises(ConfigError, match="incomplete checkpoint of 2 ranks: optim_world_size_2_rank_1.pt is missing"):
        load_training_state(str(partial), CONTENTS, None, None, "cpu")

    torch.save({}, partial / "optim_world_size_1_rank_0.pt")  # left over from a save by one rank
    with pytest.raises(ConfigError, match="files of 1 and 2 ranks mixed together"):
        load_training_state(str(partial), CONTENTS, None, None, "cpu")

    (tmp_path / "notes").mkdir()
    assert cli_main(["merge", str(tmp_path / "notes"), str(tmp_path / "out")]) == 2
    assert "is not a reinforge checkpoint folder: it has no huggingface/config.json" in capsys.readouterr().err
