"""The `reinforge` command as a user runs it: exit status and messages."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def reinforge(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "reinforge", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, cwd=ROOT)


def test_dry_run_prints_config_and_batch_arithmetic_without_loading_a_model(tmp_path):
    result = reinforge("train", "--dry-run", "actor_rollout_ref.rollout.n=4", env={"REINFORGE_CACHE": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    values = dict(line.split()[:2] for line in result.stdout.split("# batch arithmetic")[1].splitlines()[1:] if line.strip()[:1].isalpha())
    assert "# resolved config" in result.stdout
    assert values["trajectories_per_step:"] == "64" and values["gradient_accumulation:"] == "1"
    assert not (tmp_path / "models").exists()  # nothing was built or loaded
    assert "# quickstart: GRPO on the built-in" in result.stdout
    ppo = reinforge("train", "--dry-run", "algorithm.adv_estimator=gae", env={"REINFORGE_CACHE": str(tmp_path)})
    assert "# quickstart: PPO with a critic (gae) on the built-in" in ppo.stdout  # the estimator in use, not always GRPO


def test_misspelt_key_fails_before_loading_with_a_suggestion():
    result = reinforge("train", "actor_rollout_ref.actor.optim.lrr=1e-6")
    assert result.returncode == 2
    assert "did you mean 'actor_rollout_ref.actor.optim.lr'" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_and_a_misspelt_key_answer_without_importing_torch():
    """Importing torch takes 1.5 s here; `--help` and the commonest mistake should not wait for it."""
    probe = ("import sys\nfrom reinforge.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
             "print('torch imported' if 'torch' in sys.modules else 'no torch')")
    for args in (["--help"], ["train", "actor_rollout_ref.actor.optim.lrr=1e-6"]):
        result = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert result.stdout.strip().splitlines()[-1] == "no torch", (args, result.stdout[-500:], result.stderr[-500:])


def test_missing_data_file_names_the_file(tiny_model_path, tmp_path):
    missing = tmp_path / "nope.parquet"
    result = reinforge("train", "algorithm.adv_estimator=grpo", f"actor_rollout_ref.model.path={tiny_model_path}",
                       f"data.train_files={missing}", f"trainer.default_local_dir={tmp_path / 'run'}")
    assert result.returncode == 2
    assert str(missing) in result.stderr and "Traceback" not in result.stderr


def test_missing_model_folder_is_a_clear_error(tmp_path):
    result = reinforge("train", "algorithm.adv_estimator=grpo", f"actor_rollout_ref.model.path={tmp_path / 'm'}",
                       f"data.train_files={tmp_path / 'd.parquet'}", "--dry-run")
    assert result.returncode == 0  # the dry run does not look at the model
    result = reinforge("train", "--traceback", "algorithm.adv_estimator=grpo", f"actor_rollout_ref.model.path={tmp_path / 'm'}",
                       f"data.train_files={tmp_path / 'd.parquet'}", f"trainer.default_local_dir={tmp_path / 'run'}")
    assert result.returncode == 2 and "Traceback" in result.stderr


def test_the_seed_command_line_runs_with_local_model_and_data(tiny_model_path, tmp_path):
    """verl's run_qwen3-8b.sh overrides, sizes and model swapped for local ones (examples/run_seed_command_cpu.sh)."""
    run_dir = tmp_path / "run"
    result = subprocess.run(
        ["bash", str(ROOT / "examples" / "run_seed_command_cpu.sh"), f"trainer.default_local_dir={run_dir}",
         "data.max_response_length=4", "data.val_files=null"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env={**os.environ, "MODEL": str(tiny_model_path), "DATA": str(tmp_path / "data"), "STEPS": "1",
             "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rollout.tensor_model_parallel_size: vLLM/SGLang setting" in result.stdout
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1] and "actor/kl_loss" in records[0]


def test_standalone_four_files_run(cache_dir, tiny_model_path):
    folder = ROOT / "examples" / "standalone"
    result = subprocess.run([sys.executable, "algorithm.py", "--steps", "2"], capture_output=True, text=True,
                            cwd=folder, timeout=600, env={**os.environ, "REINFORGE_CACHE": str(cache_dir)})
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("validation reward before:") and lines[-1].startswith("validation reward after:")
    assert [line.split(":")[0] for line in lines[1:-1]] == ["step 1", "step 2"]


def test_unknown_data_source_fails_before_training_naming_the_file(tiny_model_path, tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({"data_source": "my/task", "prompt": [{"role": "user", "content": "hi"}],
                                "reward_model": {"ground_truth": "x"}}) + "\n")
    result = reinforge("train", "algorithm.adv_estimator=grpo", f"actor_rollout_ref.model.path={tiny_model_path}",
                       f"data.train_files={data}", "data.train_batch_size=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
                       f"trainer.default_local_dir={tmp_path / 'run'}")
    assert result.returncode == 2
    assert str(data) in result.stderr and "no reward function for data_source 'my/task'" in result.stderr
    assert "custom_reward_function.path" in result.stderr and "step 1" not in result.stdout


def test_overrides_may_follow_options_and_one_config_file_is_named(tmp_path, capsys):
    """As Hydra takes them: `train a=1 --debug b=2` (a wrapper script that appends "$@" puts options first); --config
    beside --config-name would have read one of the two files only."""
    import pytest

    from reinforge.cli import main, parse_arguments

    args = parse_arguments(["train", "data.train_batch_size=8", "--debug", "trainer.seed=3", "--dry-run", "~trainer.logger"])
    assert args.overrides == ["data.train_batch_size=8", "trainer.seed=3", "~trainer.logger"] and args.dry_run and args.debug
    with pytest.raises(SystemExit):
        parse_arguments(["train", "--dry-run", "--bogus"])
    (tmp_path / "a.yaml").write_text("data:\n  train_batch_size: 4\n")
    (tmp_path / "b.yaml").write_text("data:\n  train_batch_size: 8\n")
    for argv, message in [(["--config", str(tmp_path / "a.yaml"), "--config-path", str(tmp_path), "--config-name", "b"],
                           f"--config {tmp_path / 'a.yaml'} and --config-name b both name a config file; give one"),
                          (["--config-path", str(tmp_path)], f"--config-path {tmp_path} needs --config-name")]:
        assert main(["train", "--dry-run", *argv]) == 2
        assert f"reinforge: error: {message}" in capsys.readouterr().err


def test_verls_packaged_config_names_are_the_defaults(tmp_path, monkeypatch, capsys):
    """verl's scripts name its packaged config (`--config-path=config --config-name=ppo_trainer.yaml`, the folder beside
    verl's entry point), which reinforge's defaults are; another backend's packaged config is refused, naming it; a file
    of that name where the user points wins."""
    from reinforge.cli import main

    monkeypatch.chdir(tmp_path)
    defaults = None
    for argv in (["--config-path=config", "--config-name=ppo_trainer.yaml"], ["--config-name", "ppo_trainer"], []):
        assert main(["train", "--dry-run", *argv]) == 0
        out = capsys.readouterr().out
        assert ("verl's packaged config, whose values are reinforge's defaults" in out) == bool(argv)
        resolved = out[out.index("# resolved config"):]
        assert defaults in (None, resolved)
        defaults = resolved
    assert main(["sft", "--dry-run", "--config-path=config", "--config-name=sft_trainer", "model.partial_pretrain=m",
                 "data.train_files=t.parquet"]) == 0
    assert main(["train", "--dry-run", "--config-path=config", "--config-name=ppo_megatron_trainer"]) == 2
    assert ("reinforge: error: --config-name=ppo_megatron_trainer is verl's packaged config for its Megatron-LM training "
            "backend; reinforge trains with FSDP2") in capsys.readouterr().err
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "ppo_trainer.yaml").write_text("data:\n  train_batch_size: 32\n")
    assert main(["train", "--dry-run", "--config-path=config", "--config-name=ppo_trainer"]) == 0
    assert "train_batch_size: 32" in capsys.readouterr().out
    assert main(["eval", "--dry-run", "--config-name=ppo_trainer"]) == 2  # not eval's: a file that is not there
    assert "config file not found: ppo_trainer.yaml" in capsys.readouterr().err


def test_a_full_or_read_only_disk_outside_a_checkpoint_stops_with_a_message(tmp_path, monkeypatch, capsys):
    """ENOSPC (or EROFS) writing metrics.jsonl or the rollout samples: exit status 2 naming the file, no traceback; any
    other OSError keeps its traceback (a bug)."""
    import errno

    import pytest

    import reinforge.cli as cli
    from reinforge.errors import writing

    target = tmp_path / "run" / "metrics.jsonl"

    def full_disk(args):
        with writing(target):  # as the tracker appends a record
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli, "parse_arguments", lambda argv: type("Args", (), {"func": staticmethod(full_disk), "debug": False})())
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert f"reinforge: error: cannot write {target}: No space left on device" in err and "Traceback" not in err

    def other(args):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(cli, "parse_arguments", lambda argv: type("Args", (), {"func": staticmethod(other), "debug": False})())
    with pytest.raises(OSError, match="Input/output error"):
        cli.main([])
