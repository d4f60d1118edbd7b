import pytest

from reinforge.config.schema import TrainerConfig
from reinforge.errors import ConfigError
from reinforge.trainer.checkpoint import TRACKER, resume_folder, save_checkpoint


def write_marker(folder):
    folder.mkdir(parents=True)
    (folder / "state.txt").write_text(folder.name)


def test_save_publishes_folder_then_tracker_and_keeps_the_newest(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, write_marker, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([TRACKER, "global_step_2", "global_step_3"])
    assert (tmp_path / TRACKER).read_text().strip() == "3"
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path))) == tmp_path / "global_step_3"


def test_a_failed_write_leaves_the_previous_checkpoint_and_tracker(tmp_path):
    save_checkpoint(tmp_path, 1, write_marker)

    def crash(folder):
        folder.mkdir()
        raise OSError("disk full")

    with pytest.raises(OSError):
        save_checkpoint(tmp_path, 2, crash)
    assert (tmp_path / TRACKER).read_text().strip() == "1"
    assert not (tmp_path / "global_step_2").exists()
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path))) == tmp_path / "global_step_1"


def test_resume_modes(tmp_path):
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path))) is None  # nothing saved yet
    save_checkpoint(tmp_path, 5, write_marker)
    assert resume_folder(TrainerConfig(default_local_dir=str(tmp_path), resume_mode="disable")) is None
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
