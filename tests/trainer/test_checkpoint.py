import errno
import json
import os
import re
from pathlib import Path

import pytest
import torch

from reinforge.config.schema import TrainerConfig
from reinforge.errors import CheckpointError, ConfigError
from reinforge.trainer.checkpoint import TRACKER, check_resume_folder, resume_folder, save_checkpoint


def write_marker(folder):
    folder.mkdir(parents=True)
    (folder / "state.txt").write_text(folder.name)


def test_save_publishes_folder_then_tracker_and_keeps_the_newest(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, write_marker, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, "global_step_2", "global_step_3"])
    assert (tmp_path / TRACKER).read_text().strip() == "3"
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path))) == tmp_path / "global_step_3"


def test_a_full_disk_skips_the_save_and_leaves_every_checkpoint_as_it_was(tmp_path, capsys):
    save_checkpoint(tmp_path, 1, write_marker)
    save_checkpoint(tmp_path, 2, write_marker)

    def disk_full(folder):
        write_marker(folder)
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "model.pt"))

    assert save_checkpoint(tmp_path, 3, disk_full, keep=1) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, "global_step_1", "global_step_2"])  # keep=1 deleted nothing
    assert (tmp_path / TRACKER).read_text().strip() == "2"
    warning = capsys.readouterr().err
    assert warning.count("\n") == 1 and "step 3: checkpoint not saved, the disk is full" in warning
    assert "No space left on device" in warning and "global_step_2" in warning and "trainer.default_local_dir" in warning
    assert save_checkpoint(tmp_path, 4, write_marker, keep=1) == tmp_path / "global_step_4"  # space again: saving goes on
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, "global_step_4"])


def test_a_full_disk_while_saving_a_step_again_keeps_the_old_copy(tmp_path):
    save_checkpoint(tmp_path, 1, write_marker)

    def too_big(folder):
        raise OSError(errno.EFBIG, "File too large")

    assert save_checkpoint(tmp_path, 1, too_big) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, "global_step_1"])
    assert (tmp_path / "global_step_1" / "state.txt").read_text() == ".global_step_1.tmp"  # as first written


def test_other_write_errors_stop_the_run_with_a_clear_message(tmp_path):
    save_checkpoint(tmp_path, 1, write_marker)

    def denied(folder):
        raise PermissionError(errno.EACCES, "Permission denied", str(folder))

    with pytest.raises(CheckpointError, match=r"step 2: cannot write the checkpoint in .*Permission denied.*latest checkpoint is "
                                              r"global_step_1.*trainer.default_local_dir is writable"):
        save_checkpoint(tmp_path, 2, denied)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, "global_step_1"])


def test_retention_keeps_the_newest_actor_and_critic_checkpoints(tmp_path):
    def actor_and_critic(folder):
        for role in ("actor", "critic"):
            write_marker(folder / role)

    for step in range(1, 6):
        save_checkpoint(tmp_path, step, actor_and_critic, keep=3, keep_critic=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, "global_step_3", "global_step_4", "global_step_5"])
    assert [(tmp_path / f"global_step_{s}" / "critic").is_dir() for s in (3, 4, 5)] == [False, True, True]
    assert all((tmp_path / f"global_step_{s}" / "actor" / "state.txt").is_file() for s in (3, 4, 5))
    assert not list(tmp_path.rglob(".*"))  # nothing hidden left half deleted


def test_retention_never_deletes_the_new_checkpoint_nor_higher_steps(tmp_path):
    def actor_and_critic(folder):
        for role in ("actor", "critic"):
            write_marker(folder / role)

    for step in (2, 4):  # an earlier run's checkpoints
        save_checkpoint(tmp_path, step, actor_and_critic)
    # a fresh run in the same folder (resume_mode=disable) saves step 1: it stays, and so do the other run's steps 2 and 4
    assert save_checkpoint(tmp_path, 1, actor_and_critic, keep=2, keep_critic=1) == tmp_path / "global_step_1"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, "global_step_1", "global_step_2", "global_step_4"])
    assert all((tmp_path / f"global_step_{s}" / "critic").is_dir() for s in (1, 2, 4))
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path))) == tmp_path / "global_step_1"
    # older steps are still pruned down to `keep` with the new one, whichever run saved them
    save_checkpoint(tmp_path, 3, actor_and_critic, keep=2, keep_critic=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, "global_step_2", "global_step_3", "global_step_4"])
    assert [(tmp_path / f"global_step_{s}" / "critic").is_dir() for s in (2, 3, 4)] == [False, True, True]


def resumable(folder, *leave_out):
    """A step folder as reinforge saves it (the rank files' contents aside), without the names in `leave_out`."""
    for name in ("actor", "critic"):
        if name not in leave_out:
            write_marker(folder / name)
            torch.save({}, folder / name / "model_world_size_1_rank_0.pt")
    if "data.pt" not in leave_out:
        torch.save({}, folder / "data.pt")
    if "trainer_state.json" not in leave_out:
        step = int(re.search(r"global_step_(\d+)", folder.name).group(1))  # the staging folder's name too
        (folder / "trainer_state.json").write_text(json.dumps({"global_steps": step, "kl_ctrl": {"value": 0.001}}))
    return folder


def test_a_damaged_checkpoint_file_is_named_before_anything_loads(tmp_path):
    """A file cut short (a save killed in a copy, a disk fault) or overwritten: a CheckpointError naming it, not a traceback
    from torch.load or json after the models have loaded."""
    damage = [("actor/model_world_size_1_rank_0.pt", lambda f: f.write_bytes(f.read_bytes()[:100])),
              ("critic/model_world_size_1_rank_0.pt", lambda f: f.write_bytes(b"")),
              ("data.pt", lambda f: f.write_bytes(f.read_bytes()[:-30])),
              ("trainer_state.json", lambda f: f.write_text("garbage")),
              ("trainer_state.json", lambda f: f.write_text("[1, 2]")),
              ("trainer_state.json", lambda f: f.write_text("{}"))]
    for step, (name, spoil) in enumerate(damage, start=1):
        folder = resumable(tmp_path / f"global_step_{step}")
        check_resume_folder(folder, critic=True)
        spoil(folder / name)
        with pytest.raises(CheckpointError, match=rf"^{re.escape(str(folder / name))} is damaged and cannot be read .*Resume "
                                                  rf"an earlier step than global_step_{step} \(trainer.resume_mode=resume_path"):
            check_resume_folder(folder, critic=True)


ADVICE = r"trainer.resume_mode=resume_path trainer.resume_from_path=.*or start afresh in another trainer.default_local_dir"


def test_a_resume_folder_missing_files_gets_a_message_naming_them(tmp_path):
    check_resume_folder(resumable(tmp_path / "global_step_1"), critic=True)
    check_resume_folder(resumable(tmp_path / "global_step_2", "critic"), critic=False)
    cases = [(["trainer_state.json"], "trainer_state.json"), (["data.pt"], "data.pt"), (["actor", "data.pt"], "actor/, data.pt"),
             (["critic"], r"critic/ \(this run trains a critic\)")]
    for step, (leave_out, named) in enumerate(cases, start=3):
        folder = resumable(tmp_path / f"global_step_{step}", *leave_out)
        with pytest.raises(ConfigError, match=rf"^{re.escape(str(folder))} is not a checkpoint this run can load: it has no "
                                              rf"{named}\. .*{ADVICE}"):
            check_resume_folder(folder, critic=True)
    empty = tmp_path / "global_step_9"
    empty.mkdir()
    with pytest.raises(ConfigError, match="it has no actor/, data.pt, trainer_state.json. "):
        check_resume_folder(empty, critic=False)


def test_a_verl_checkpoint_is_named_as_one(tmp_path):
    folder = resumable(tmp_path / "global_step_5", "trainer_state.json")  # verl's step folder: no trainer_state.json,
    (folder / "actor" / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))  # this in actor/
    with pytest.raises(ConfigError, match=rf"{re.escape(str(folder))} is not a checkpoint this run can load: it is a verl checkpoint .*"
                                          rf"reinforge resumes only its own checkpoints.*{ADVICE}"):
        check_resume_folder(folder, critic=False)


def test_resuming_a_checkpoint_with_a_file_deleted_stops_with_a_clear_message(run_steps, tmp_path):
    run_dir = tmp_path / "run"
    run_steps("trainer.save_freq=2", run_dir=run_dir)
    for deleted in ("trainer_state.json", "data.pt"):
        file = run_dir / "global_step_2" / deleted
        kept = file.read_bytes()
        file.unlink()
        with pytest.raises(ConfigError, match=rf"global_step_2 is not a checkpoint this run can load: it has no {deleted}\. "):
            run_steps("trainer.total_training_steps=3", run_dir=run_dir)
        file.write_bytes(kept)


def test_a_model_only_checkpoint_names_the_load_contents_that_resume_it(run_steps, tmp_path):
    run_dir = tmp_path / "run"
    run_steps("trainer.save_freq=2", "actor_rollout_ref.actor.checkpoint.save_contents=[model]", run_dir=run_dir)
    with pytest.raises(ConfigError, match=r"global_step_2/actor is not a checkpoint this run can load: it has no optim_world_size_1_rank_0.pt, "
                                          r"extra_state_world_size_1_rank_0.pt .* resume from it with "
                                          r"actor_rollout_ref.actor.checkpoint.load_contents=\[model\]; if they were lost, point trainer.resume_from_path"):
        run_steps("trainer.total_training_steps=3", run_dir=run_dir)
    steps = run_steps("trainer.total_training_steps=3", "actor_rollout_ref.actor.checkpoint.load_contents=[model]", run_dir=run_dir)
    assert 3 in steps  # the advice works


def test_the_command_that_saved_a_model_only_checkpoint_resumes_from_it(run_steps, tmp_path, capsys):
    """load_contents follows save_contents (verl's ${.save_contents}): relaunching the same command resumes."""
    run_dir, model_only = tmp_path / "run", ["trainer.save_freq=2", "actor_rollout_ref.actor.checkpoint.save_contents=[model]"]
    run_steps(*model_only, run_dir=run_dir)
    assert not list((run_dir / "global_step_2" / "actor").glob("optim_*"))
    capsys.readouterr()
    steps = run_steps("trainer.total_training_steps=3", *model_only, run_dir=run_dir)
    assert 3 in steps and "global_step_2 (step 2); continuing at step 3" in capsys.readouterr().out


def test_a_checkpoint_of_the_huggingface_export_alone_is_refused_on_resume_with_what_to_do(run_steps, tmp_path):
    from reinforge.config import load_config

    config, _ = load_config(["actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"])
    assert config.actor_rollout_ref.actor.checkpoint.load_contents == ["model", "optimizer", "extra"]  # the export is not loaded
    run_dir, export_only = tmp_path / "run", ["trainer.save_freq=2", "actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]"]
    run_steps(*export_only, run_dir=run_dir)
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.checkpoint.load_contents=\[\] names nothing to resume .*"
                                          r"global_step_2/actor from"):
        run_steps("trainer.total_training_steps=3", *export_only, run_dir=run_dir)


def test_resuming_with_another_optimizer_class_is_refused_naming_the_keys(run_steps, tmp_path):
    run_dir = tmp_path / "run"
    sgd = ["actor_rollout_ref.actor.optim.optimizer=SGD", "actor_rollout_ref.actor.optim.override_optimizer_config={momentum: 0.9}"]
    run_steps("trainer.save_freq=2", *sgd, run_dir=run_dir)
    with pytest.raises(ConfigError, match=r"global_step_2/actor: the checkpoint's optimizer state is another optimizer's \(its "
                                          r"settings include \[.*'momentum'.*\], not \[.*'betas'.*\] of AdamW\); resume with the "
                                          r"optimizer it was saved with \(actor_rollout_ref.actor.optim.optimizer\)"):
        run_steps("trainer.total_training_steps=3", run_dir=run_dir)
    assert 3 in run_steps("trainer.total_training_steps=3", *sgd, run_dir=run_dir)  # the same optimizer resumes


def test_what_a_killed_save_leaves_is_cleaned_up(tmp_path):
    save_checkpoint(tmp_path, 2, write_marker)
    save_checkpoint(tmp_path, 4, write_marker)
    write_marker(tmp_path / ".global_step_6.tmp")  # an abandoned save of step 6 (second Ctrl-C, SIGKILL)
    write_marker(tmp_path / ".global_step_1.deleting")  # retention killed while deleting step 1
    write_marker(tmp_path / ".global_step_4.old")  # killed after publishing step 4 again, before deleting its old copy
    write_marker(tmp_path / ".global_step_3.old")  # killed between moving step 3 aside and publishing its new copy
    (tmp_path / f".{TRACKER}.tmp").write_text("9")
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path))) == tmp_path / "global_step_4"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, "global_step_2", "global_step_3", "global_step_4"])
    assert (tmp_path / "global_step_3" / "state.txt").read_text() == ".global_step_3.old"  # put back
    assert (tmp_path / "global_step_4" / "state.txt").read_text() == ".global_step_4.tmp"  # the published copy stays
    write_marker(tmp_path / ".global_step_5.tmp")
    save_checkpoint(tmp_path, 6, write_marker)  # the next save tidies up too
    assert not list(tmp_path.glob(".*"))


def test_resume_modes(tmp_path):
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path))) is None  # nothing saved yet
    save_checkpoint(tmp_path, 5, write_marker)
    with pytest.raises(ConfigError, match="holds the checkpoints of an earlier run"):  # test below
        resume_folder(TrainerConfig(default_local_dir=str(tmp_path), resume_mode="disable"))
    picked = resume_folder(TrainerConfig(resume_mode="resume_path", resume_from_path=str(tmp_path / "global_step_5")))
    assert picked == tmp_path / "global_step_5"
    with pytest.raises(ConfigError, match="not an existing global_step_<N> folder"):
        resume_folder(TrainerConfig(resume_mode="resume_path", resume_from_path=str(tmp_path / "global_step_9")))
    (tmp_path / TRACKER).write_text("7\n")
    with pytest.raises(ConfigError, match="names step '7'"):
        resume_folder(TrainerConfig(default_local_dir=str(tmp_path)))


def test_saving_a_step_again_survives_a_crash_between_the_renames(tmp_path):
    save_checkpoint(tmp_path, 1, write_marker)
    save_checkpoint(tmp_path, 1, write_marker)  # again: replaced, no leftovers
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, "global_step_1"])
    # the state a crash right after moving the old copy aside would leave
    (tmp_path / "global_step_1").rename(tmp_path / ".global_step_1.old")
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path))) == tmp_path / "global_step_1"
    assert (tmp_path / "global_step_1" / "state.txt").is_file()


def test_a_run_folder_that_cannot_be_written_is_named_with_its_key(tmp_path, capsys):
    from reinforge.cli import main

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["train", f"trainer.default_local_dir={blocker / 'run'}", "trainer.total_training_steps=1"]) == 2
    err = capsys.readouterr().err
    assert f"trainer.default_local_dir={blocker / 'run'}: cannot write the run folder" in err and "Traceback" not in err


def test_a_worker_process_failure_names_the_resume_point(run_steps, tmp_path, monkeypatch):
    """A rank that dies (RankError) ends the run; the message says where the same command continues from."""
    from reinforge.errors import RankError
    from reinforge.trainer.ppo_trainer import RLTrainer

    run_steps("trainer.save_freq=1", "trainer.total_training_steps=2")

    def died(self):
        raise RankError("rank 1, actor_rollout_ref.generate_sequences: the worker process died (SIGKILL)")

    monkeypatch.setattr(RLTrainer, "fit", died)
    with pytest.raises(RankError, match=r"worker process died \(SIGKILL\)\n\nresume point: .*global_step_2; run the same "
                                        r"command again to continue from it"):
        run_steps("trainer.total_training_steps=4")
    with pytest.raises(RankError, match="no checkpoint saved yet: the same command starts afresh"):
        run_steps(run_dir=tmp_path / "fresh")


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_a_one_rank_gpu_checkpoint_holds_cpu_tensors_with_tied_weights_once(tiny_model_path, tmp_path):
    """As verl's (offload_to_cpu): torch.load reads it without a GPU, and resuming puts it back on the GPU."""
    import torch
    from transformers import AutoModelForCausalLM

    from reinforge.training.checkpoint_io import load_training_state, save_training_state

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(input_ids=torch.tensor([[5, 6, 7, 8]], device="cuda"), labels=torch.tensor([[5, 6, 7, 8]], device="cuda")).loss.backward()
    optimizer.step()
    save_training_state(str(tmp_path), ["model", "optimizer", "extra"], model, optimizer, {"step": 1})
    state = torch.load(tmp_path / "model_world_size_1_rank_0.pt")
    optim = torch.load(tmp_path / "optim_world_size_1_rank_0.pt")
    tensors = [*state.values(), *(v for s in optim["state"].values() for v in s.values() if isinstance(v, torch.Tensor))]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    assert all(torch.equal(state[name], value.cpu()) for name, value in model.state_dict().items())
    if model.config.tie_word_embeddings:
        assert state["lm_head.weight"].data_ptr() == state["model.embed_tokens.weight"].data_ptr()
    fresh = AutoModelForCausalLM.from_pretrained(tiny_model_path).cuda()
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    assert load_training_state(str(tmp_path), ["model", "optimizer", "extra"], fresh, fresh_optimizer, "cuda") == {"step": 1}
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values(), strict=True))
    assert all(p.device.type == "cuda" for p in fresh.parameters())


def test_a_fresh_start_never_writes_over_saved_checkpoints(tmp_path):
    """resume_mode=disable in a folder holding checkpoints would write over them: it stops, naming the steps; resume_mode=auto
    resumes the newest of them when the tracker file is missing, rather than start afresh over them."""
    for step in (1, 2, 3, 4):
        resumable(tmp_path / f"global_step_{step}")
    with pytest.raises(ConfigError, match=r"holds the checkpoints of an earlier run \(global_step_1, global_step_2, "
                                          r"global_step_3 \.\.\. global_step_4\), which trainer.resume_mode=disable"):
        resume_folder(TrainerConfig(default_local_dir=str(tmp_path), resume_mode="disable"))
    # without the tracker (a folder copied without it, a kill between a first save and its tracker): the newest step;
    # the file is written back by one process of a torchrun only (the others would race it)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RANK", "1")
        assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path))) == tmp_path / "global_step_4"
        assert not (tmp_path / TRACKER).exists()
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path))) == tmp_path / "global_step_4"
    assert (tmp_path / TRACKER).read_text() == "4\n"  # written back, for the next reader
    (tmp_path / TRACKER).write_text("")
    with pytest.raises(ConfigError, match=rf"{TRACKER} should hold the step of the latest checkpoint, but holds ''"):
        resume_folder(TrainerConfig(default_local_dir=str(tmp_path)))
    (tmp_path / TRACKER).write_text("4")
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path))) == tmp_path / "global_step_4"
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path / "new"), resume_mode="disable")) is None


def test_a_run_folder_is_held_by_one_run_at_a_time(tmp_path):
    """A second run in a folder a run is training in would write over its checkpoints and metrics: it stops, naming the
    process; the folder is free again when that process ends (killed included) or its run ends."""
    import subprocess
    import sys

    from reinforge.trainer.run_folder import hold_run_folder

    code = ("import sys, time\nfrom pathlib import Path\nfrom reinforge.trainer.run_folder import hold_run_folder\n"
            "with hold_run_folder(Path(sys.argv[1]), 'x'):\n    print('held', flush=True)\n    time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=rf"^trainer.default_local_dir=run is in use by another reinforge run "
                                              rf"\(process {holder.pid}\); wait for it to end"):
            with hold_run_folder(tmp_path, "run"):
                pass
    finally:
        holder.kill()
        holder.wait()
    for _ in range(2):  # free once the holder is gone, and again after a run of this process ends
        with hold_run_folder(tmp_path, "run"):
            assert (tmp_path / ".reinforge.lock").read_text() == f"{os.getpid()}\n"


def test_a_file_system_without_locks_trains_unguarded_with_a_warning(tmp_path, monkeypatch, capsys):
    import fcntl

    from reinforge.trainer.run_folder import hold_run_folder

    def no_locks(*args):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)  # as on a network mount without flock
    ran = []
    with hold_run_folder(tmp_path, "run"):
        ran.append(True)
    assert ran and "warning: cannot lock the run folder" in capsys.readouterr().err


# ------------------------------------------------------------------------------------- damage the save's checks find
def saved(tmp_path, step=2):
    """A step saved through save_checkpoint (so with its checksums.json), resumable."""
    save_checkpoint(tmp_path, step, lambda folder: resumable(folder))
    return tmp_path / f"global_step_{step}"


def test_the_checksums_name_a_file_whose_bytes_changed_or_that_is_gone(tmp_path):
    from reinforge.trainer.checkpoint import CHECKSUMS, verify_files

    folder = saved(tmp_path)
    listed = json.loads((folder / CHECKSUMS).read_text())
    assert sorted(listed) == ["actor/model_world_size_1_rank_0.pt", "actor/state.txt", "critic/model_world_size_1_rank_0.pt",
                              "critic/state.txt", "data.pt", "trainer_state.json"]
    assert listed["trainer_state.json"]["bytes"] == (folder / "trainer_state.json").stat().st_size
    check_resume_folder(folder, critic=True)  # as saved
    weights = folder / "actor" / "model_world_size_1_rank_0.pt"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte: the archive still reads (torch.load would load it)
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=re.escape(f"{weights} is damaged: its bytes are not those saved")):
        check_resume_folder(folder, critic=True)
    weights.unlink()
    with pytest.raises(CheckpointError, match=re.escape(f"{weights} is damaged: it is gone, but the checkpoint was saved "
                                                        f"with it ({CHECKSUMS} lists it)")):
        check_resume_folder(folder, critic=True)
    verify_files([tmp_path / "elsewhere.pt"])  # a file of no saved step: nothing to check against


def test_a_trainer_state_whose_step_is_not_its_folders_is_refused(tmp_path):
    folder = resumable(tmp_path / "global_step_4")
    for state in ({"global_steps": 3, "kl_ctrl": {"value": 0.1}}, {"global_steps": -5, "kl_ctrl": {"value": 0.1}}):
        (folder / "trainer_state.json").write_text(json.dumps(state))
        with pytest.raises(CheckpointError, match=re.escape(f"trainer_state.json is damaged and cannot be read (ValueError: "
                                                            f"it holds step {state['global_steps']}, its folder is global_step_4)")):
            check_resume_folder(folder, critic=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_steps": 4, "kl_ctrl": {}}))
    with pytest.raises(CheckpointError, match=re.escape("trainer_state.json is damaged and cannot be read (KeyError: 'value')")):
        check_resume_folder(folder, critic=True)


def test_a_tracker_that_is_a_folder_or_not_text_and_no_tracker_beside_an_empty_step(tmp_path):
    resumable(tmp_path / "global_step_2")
    (tmp_path / "global_step_6").mkdir()  # empty: no checkpoint, though the newest
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path))) == tmp_path / "global_step_2"
    (tmp_path / TRACKER).write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=re.escape(f"{TRACKER} should hold the step of the latest checkpoint, but holds "
                                                    "'\ufffd\ufffd\\x00'")):
        resume_folder(TrainerConfig(default_local_dir=str(tmp_path)))
    (tmp_path / TRACKER).unlink()
    (tmp_path / TRACKER).mkdir()
    with pytest.raises(ConfigError, match=re.escape(f"{TRACKER} should be the file holding the step of the latest "
                                                    "checkpoint, but it is a folder")):
        resume_folder(TrainerConfig(default_local_dir=str(tmp_path)))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, "global_step_2", "global_step_6"])  # nothing left


def test_a_file_this_user_may_not_read_is_named_as_such(tmp_path, monkeypatch):
    folder = resumable(tmp_path / "global_step_1")
    blocked = folder / "actor" / "model_world_size_1_rank_0.pt"
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != blocked and access(path, mode))  # root reads all
    with pytest.raises(CheckpointError, match=re.escape(f"cannot read {blocked}: Permission denied; give this user read "
                                                        "access to it")):
        check_resume_folder(folder, critic=True)


def test_a_full_disk_the_tokenizers_library_reports_is_a_full_disk():
    from reinforge.trainer.checkpoint import os_error_in

    error = os_error_in(Exception("No space left on device (os error 28)"))  # how tokenizers (Rust) raises it
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert os_error_in(Exception("a bug (os error in the message of a subclass)")) is None


def test_a_step_record_that_cannot_be_read_says_its_metrics_are_not_logged(tmp_path, capsys):
    from reinforge.trainer.checkpoint import STEP_RECORD, read_step_record

    (tmp_path / STEP_RECORD).write_text('{"step": 4, "actor/')
    assert read_step_record(tmp_path) is None
    assert "metrics.json cannot be read (JSONDecodeError: " in capsys.readouterr().err
    assert read_step_record(tmp_path / "none") is None and capsys.readouterr().err == ""  # saved before records were kept


def test_the_checksums_are_found_from_a_relative_path_and_what_is_not_loaded_is_not_checked(tmp_path, monkeypatch):
    from reinforge.trainer.checkpoint import CHECKSUMS, verify_files

    folder = saved(tmp_path)
    critic = folder / "critic" / "model_world_size_1_rank_0.pt"
    critic.write_bytes(critic.read_bytes() + b"\0")
    monkeypatch.chdir(folder / "critic")  # reinforge merge . from inside the worker folder
    with pytest.raises(CheckpointError, match="model_world_size_1_rank_0.pt is damaged: its bytes are not those saved"):
        verify_files([Path("model_world_size_1_rank_0.pt")])
    check_resume_folder(folder, critic=False)  # a run without a critic does not read it
    check_resume_folder(folder, critic=True, loads={"critic": ["optimizer"]})  # nor one that loads only its optimizer
    with pytest.raises(CheckpointError):
        check_resume_folder(folder, critic=True)
    (folder / CHECKSUMS).write_text("[1, 2]")
    with pytest.raises(CheckpointError, match=re.escape(f"{CHECKSUMS} is damaged and cannot be read (ValueError: it holds a "
                                                        "JSON list, not the files' checksums)")):
        check_resume_folder(folder, critic=False)
