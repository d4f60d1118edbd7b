"""`reinforge merge` of a critic checkpoint: a token-classification model with one label that transformers loads.

(The actor, saved by 2 ranks, is merged in test_checkpoint_reshard.py.)"""

from __future__ import annotations

import json
import os

import torch

from reinforge.cli import main as cli_main
from reinforge.training.checkpoint_io import save_training_state


def test_merge_of_a_critic_writes_its_value_model(tiny_model_path, tmp_path):
    from transformers import AutoModelForTokenClassification

    torch.manual_seed(3)
    critic = AutoModelForTokenClassification.from_pretrained(tiny_model_path, num_labels=1)  # as load_value_model builds it
    save_training_state(str(tmp_path / "critic"), ["model"], critic, torch.optim.AdamW(critic.parameters()), {})

    umask = os.umask(0o022)
    try:
        assert cli_main(["merge", str(tmp_path / "critic"), str(tmp_path / "hf")]) == 0
    finally:
        os.umask(umask)
    # the weights as readable as the folder's other files (transformers writes them 0600), for others on a shared machine
    assert {file.name: file.stat().st_mode & 0o777 for file in (tmp_path / "hf").iterdir()}["model.safetensors"] == 0o644
    assert (tmp_path / "hf" / "config.json").stat().st_mode & 0o777 == 0o644
    merged = AutoModelForTokenClassification.from_pretrained(tmp_path / "hf")
    assert merged.config.num_labels == 1
    assert merged.state_dict().keys() == critic.state_dict().keys()
    for name, value in critic.state_dict().items():
        assert torch.equal(merged.state_dict()[name], value), name
    ids = torch.tensor([[5, 17, 42, 9]])
    critic.eval()
    assert torch.equal(merged(ids).logits, critic(ids).logits)  # the values


def test_merging_into_the_checkpoint_itself_is_refused_and_changes_nothing(tiny_model_path, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    actor = tmp_path / "actor"
    save_training_state(str(actor), ["model"], model, torch.optim.AdamW(model.parameters()), {})
    before = {p.relative_to(actor): p.read_bytes() for p in actor.rglob("*") if p.is_file()}
    for out in (actor, actor / "huggingface"):
        assert cli_main(["merge", str(actor), str(out)]) == 2
        assert "is the checkpoint folder itself or its huggingface/" in capsys.readouterr().err
    assert {p.relative_to(actor): p.read_bytes() for p in actor.rglob("*") if p.is_file()} == before


def test_verls_model_merger_command_line_works(tiny_model_path, tmp_path, capsys):
    """`python -m verl.model_merger merge --backend fsdp --local_dir ... --target_dir ...` with reinforge merge in front."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    actor = tmp_path / "global_step_1" / "actor"
    save_training_state(str(actor), ["model"], model, torch.optim.AdamW(model.parameters()), {})
    # what verl's own merger needs beside one rank's plain state dict, so that it reads this folder too
    assert json.loads((actor / "fsdp_config.json").read_text()) == {"FSDP_version": 2, "world_size": 1, "saved_by": "reinforge"}
    out = tmp_path / "merged"
    assert cli_main(["merge", "--backend", "fsdp", "--local_dir", str(actor), "--target_dir", str(out), "--use_cpu_initialization"]) == 0
    merged = AutoModelForCausalLM.from_pretrained(out)
    assert all(torch.equal(merged.state_dict()[name], value) for name, value in model.state_dict().items())
    assert cli_main(["merge", "--local_dir", str(actor), str(tmp_path / "beside")]) == 0  # a positional folder: the output
    assert (tmp_path / "beside" / "config.json").is_file()
    # verl's subcommand typed after reinforge merge: merge is the command itself
    assert cli_main(["merge", "merge", "--backend", "fsdp", "--local_dir", str(actor), "--target_dir", str(tmp_path / "sub")]) == 0
    assert (tmp_path / "sub" / "config.json").is_file() and not (tmp_path / "merge").exists()
    capsys.readouterr()
    for argv, message in (
        (["--backend", "megatron", "--local_dir", str(actor)], "reinforge saves checkpoints in the FSDP layout only"),
        (["--local_dir", str(actor), "--hf_upload_path", "me/model"], "writes a local folder only"),
        (["--target_dir", str(out)], "needs the checkpoint folder (.../global_step_<N>/actor) and the output folder"),
        ([str(actor)], "needs the checkpoint folder (.../global_step_<N>/actor) and the output folder"),
        ([str(actor), str(out), "--local_dir", str(tmp_path)], "beside --local_dir/--target_dir; give the folders one way"),
        (["test", "--backend", "fsdp", "--local_dir", str(actor), "--test_hf_dir", str(out)], "verl's `test` subcommand"),
        ([str(tmp_path / "absent"), str(out)], f"{tmp_path / 'absent'} does not exist"),
        ([str(actor.parent), str(out)], f"is a saved step; name its worker folder: {actor}"),
    ):
        assert cli_main(["merge", *argv]) == 2
        assert message in capsys.readouterr().err


def test_a_folder_holding_a_model_is_written_over_only_with_overwrite_and_an_unmakeable_one_is_named(
        tiny_model_path, tmp_path, capsys):
    """OUT may be the base model the run started from: merge leaves it as it was unless --overwrite is given; an OUT that
    cannot be made (a file in the way) is a message naming it, not a traceback."""
    import shutil

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # trained: differs from the base model
    actor = tmp_path / "actor"
    save_training_state(str(actor), ["model"], model, torch.optim.AdamW(model.parameters()), {})
    base = tmp_path / "base"
    shutil.copytree(tiny_model_path, base)
    before = {p.name: p.read_bytes() for p in base.iterdir() if p.is_file()}
    assert cli_main(["merge", str(actor), str(base)]) == 2
    assert f"the output folder {base} already holds a model (model.safetensors)" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in base.iterdir() if p.is_file()} == before
    assert cli_main(["merge", str(actor), str(base), "--overwrite"]) == 0
    merged = AutoModelForCausalLM.from_pretrained(base)
    assert all(torch.equal(merged.state_dict()[name], value) for name, value in model.state_dict().items())
    (tmp_path / "notes.txt").write_text("a file")
    for out in (tmp_path / "notes.txt", tmp_path / "notes.txt" / "hf"):
        assert cli_main(["merge", str(actor), str(out)]) == 2
        err = capsys.readouterr().err
        assert f"cannot make the output folder {out}" in err and "Traceback" not in err


def test_a_damaged_weights_file_is_named_with_merge_advice_not_resume_advice(tiny_model_path, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    actor = tmp_path / "global_step_3" / "actor"
    save_training_state(str(actor), ["model"], model, torch.optim.AdamW(model.parameters()), {})
    weights = actor / "model_world_size_1_rank_0.pt"
    weights.write_bytes(weights.read_bytes()[:1000])  # a copy cut short
    assert cli_main(["merge", str(actor), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert f"{weights} is damaged and cannot be read" in err and "Name a worker folder of a saved step" in err
    assert "resume" not in err and not (tmp_path / "hf" / "model.safetensors").exists()


def test_a_file_whose_bytes_changed_since_the_save_is_named_before_merging(tiny_model_path, tmp_path, capsys):
    """A flipped byte leaves the archive readable (torch.load loads the wrong weights): the save's checksums.json names it;
    so with a config.json cut short, which transformers would fail on."""
    from transformers import AutoModelForCausalLM

    from reinforge.trainer.checkpoint import write_checksums

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    step = tmp_path / "global_step_3"
    save_training_state(str(step / "actor"), ["model"], model, torch.optim.AdamW(model.parameters()), {})
    write_checksums(step)  # as save_checkpoint does before publishing the folder
    weights, config = step / "actor" / "model_world_size_1_rank_0.pt", step / "actor" / "huggingface" / "config.json"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert cli_main(["merge", str(step / "actor"), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert f"{weights} is damaged: its bytes are not those saved" in err and "Merge another saved step" in err
    assert not (tmp_path / "hf" / "model.safetensors").exists()
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    config.write_text(config.read_text()[:100])
    assert cli_main(["merge", str(step / "actor"), str(tmp_path / "hf")]) == 2
    assert f"{config} is damaged: its bytes are not those saved" in capsys.readouterr().err
    (step / "checksums.json").unlink()  # a folder without checksums (saved before they were written): transformers reads it
    assert cli_main(["merge", str(step / "actor"), str(tmp_path / "hf")]) == 2
    assert f"{config} is damaged and cannot be read" in capsys.readouterr().err
