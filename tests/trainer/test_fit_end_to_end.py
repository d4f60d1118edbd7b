"""A few GRPO steps end-to-end on CPU: metrics, validation, checkpoints (exact resume: test_exact_resume.py)."""

import json
import re
import shutil
from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.environment.tasks import write_task_files
from reinforge.errors import ConfigError
from reinforge.trainer.main import run


@pytest.fixture(scope="module")
def task_files(cache_dir):
    return write_task_files()


def overrides(model, files, run_dir, *extra):
    train, val = files
    return [
        f"actor_rollout_ref.model.path={model}", f"data.train_files={train}", f"data.val_files={val}",
        "data.max_samples=64", "data.max_val_samples=8", "data.train_batch_size=4", "data.max_prompt_length=48",
        "data.max_response_length=6", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false", "trainer.total_training_steps=4",
        "trainer.test_freq=2", "trainer.save_freq=2", f"trainer.default_local_dir={run_dir}", *extra,
    ]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def train_steps(run_dir: Path) -> dict[int, dict]:
    return {r["step"]: r for r in records(run_dir) if "timing_s/step" in r}


def test_grpo_steps_write_metrics_validation_and_checkpoints(tiny_model_path, task_files, tmp_path, capsys):
    run_dir = tmp_path / "run"
    config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
                                         f"trainer.validation_data_dir={tmp_path / 'val'}", "trainer.log_val_generations=2"))
    run(config, keys)
    log = capsys.readouterr().out
    startup = [line for line in log.splitlines() if "first step begins" in line]  # the startup breakdown, once
    assert len(startup) == 1 and log.count("reinforge: first step took") == 1
    assert re.search(r"begins [\d.]+s after start \(imports [\d.]+s, run folder [\d.]+s, data [\d.]+s, reward [\d.]+s, "
                     r"models [\d.]+s, resume, trackers and validation before training [\d.]+s\)", startup[0]), startup[0]

    steps = train_steps(run_dir)
    assert sorted(steps) == [1, 2, 3, 4]
    for name in ("critic/score/mean", "actor/pg_loss", "actor/entropy", "actor/kl_loss", "actor/grad_norm", "actor/lr",
                 "response_length/mean", "timing_s/gen", "timing_s/step", "timing_s/ref", "perf/throughput",
                 "training/global_step", "actor/pg_clipfrac", "actor/ppo_kl"):
        assert all(name in s for s in steps.values()), name
    # two mini-batches per step: the second is off-policy, so old log-probs were computed
    assert all("timing_s/old_log_prob" in s for s in steps.values())
    assert all(0.0 <= s["critic/score/mean"] <= 1.0 for s in steps.values())
    assert all(s["response_length/max"] <= 6 for s in steps.values())

    vals = [r for r in records(run_dir) if "val-core/reinforge/add_one/acc/mean@1" in r]
    assert [r["step"] for r in vals] == [0, 2, 4]  # before training, then every test_freq

    assert (run_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "4"
    for step in (2, 4):
        actor = run_dir / f"global_step_{step}" / "actor"
        assert (actor / "model_world_size_1_rank_0.pt").is_file()
        assert (actor / "optim_world_size_1_rank_0.pt").is_file()
        assert (actor / "huggingface" / "config.json").is_file()
        assert (run_dir / f"global_step_{step}" / "data.pt").is_file()
    assert "actor_rollout_ref" in (run_dir / "config.yaml").read_text()

    rollouts = [json.loads(line) for line in (tmp_path / "rollouts" / "3.jsonl").read_text().splitlines()]
    assert len(rollouts) == 8 and set(rollouts[0]) == {"input", "output", "gts", "score", "acc", "step"}  # acc: verl's, of a plain number
    assert rollouts[0]["step"] == 3 and "Add 1:" in rollouts[0]["input"]
    assert sorted(p.name for p in (tmp_path / "val").iterdir()) == ["0.jsonl", "2.jsonl", "4.jsonl"]


def test_a_failing_reward_function_scores_zero_and_is_counted(tiny_model_path, task_files, tmp_path, capfd):
    reward_file = tmp_path / "flaky_reward.py"
    reward_file.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if extra_info['index'] % 2:\n"
        "        raise ValueError('cannot parse ' + repr(solution_str))\n"
        "    return {'score': 1.0, 'parsed': True}\n"
    )
    run_dir = tmp_path / "run"
    config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, f"custom_reward_function.path={reward_file}",
                                         "trainer.total_training_steps=2", "trainer.val_before_train=false"))
    run(config, keys)
    steps = train_steps(run_dir)
    assert all(s["reward/errors"] > 0 for s in steps.values())
    assert all(0 < s["critic/score/mean"] < 1 and s["reward/parsed/mean"] == 1.0 for s in steps.values())
    assert capfd.readouterr().err.count("ValueError: cannot parse") == 1  # the first traceback, once per run


@pytest.mark.parametrize("val_before_train", ["true", "false"])  # false: verl would train a whole run
def test_val_only_validates_once_and_exits(tiny_model_path, task_files, tmp_path, val_before_train):
    run_dir = tmp_path / "val"
    config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, "trainer.val_only=true",
                                         f"trainer.val_before_train={val_before_train}"))
    metrics = run(config, keys)
    # the built-in scorer returns plain numbers: acc is the core variable (verl's reward loop), reward an aux one
    assert sorted(metrics) == ["timing_s/testing", "val-aux/reinforge/add_one/reward/mean@1", "val-core/reinforge/add_one/acc/mean@1"]
    assert [r["step"] for r in records(run_dir)] == [0] and not train_steps(run_dir)


def test_lengths_past_the_models_positions_are_warned_about(tiny_model_path, task_files, tmp_path, capsys):
    """The tiny model has 1024 positions; override_config gives it 40, under 48 + 6: warned at start, the run goes on."""
    for positions, warned in ((None, False), (40, True)):
        extra = [f"+actor_rollout_ref.model.override_config.max_position_embeddings={positions}"] if positions else []
        config, keys = load_config(overrides(tiny_model_path, task_files, tmp_path / str(positions), "trainer.val_only=true",
                                             *extra))
        assert run(config, keys)
        err = capsys.readouterr().err
        assert ("warning: data.max_prompt_length + data.max_response_length = 48 + 6 is more than the model's "
                "max_position_embeddings=40") in err if warned else "max_position_embeddings" not in err


def test_val_only_without_validation_data_is_refused_at_start(tiny_model_path, task_files, tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.val_only=True validates once and exits, but data.val_files is not set"):
        load_config(overrides(tiny_model_path, task_files, tmp_path / "run", "trainer.val_only=true", "data.val_files=null"))


def test_metrics_file_restarts_with_the_run(tiny_model_path, task_files, tmp_path):
    run_dir = tmp_path / "run"
    config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, "trainer.total_training_steps=3",
                                         "trainer.save_freq=1", "trainer.test_freq=-1", "trainer.val_before_train=false"))
    run(config, keys)
    assert [r["step"] for r in records(run_dir)] == [1, 2, 3]
    # resuming from an earlier checkpoint drops the records after it; the finished run has nothing to do
    config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, "trainer.total_training_steps=3",
                                         "trainer.resume_mode=resume_path", f"trainer.resume_from_path={run_dir / 'global_step_1'}",
                                         "trainer.save_freq=1", "trainer.test_freq=-1"))
    run(config, keys)
    assert [r["step"] for r in records(run_dir)] == [1, 2, 3]
    config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, "trainer.total_training_steps=3",
                                         "trainer.resume_mode=disable", "trainer.save_freq=-1", "trainer.test_freq=-1",
                                         "trainer.val_before_train=false", "trainer.total_training_steps=2"))
    saved_config = (run_dir / "config.yaml").read_text()
    with pytest.raises(ConfigError, match=r"holds the checkpoints of an earlier run \(global_step_1, global_step_2, "
                                          r"global_step_3\), which trainer.resume_mode=disable would write over"):
        run(config, keys)  # before anything is written
    assert [r["step"] for r in records(run_dir)] == [1, 2, 3] and (run_dir / "config.yaml").read_text() == saved_config
    for folder in run_dir.glob("global_step_*"):  # with the checkpoints gone, a fresh run starts the metrics anew
        shutil.rmtree(folder)
    run(config, keys)
    assert [r["step"] for r in records(run_dir)] == [1, 2]  # a fresh run does not append to an old one


def test_relative_dump_folders_are_written_absolute_so_the_report_finds_them_from_anywhere(tiny_model_path, task_files,
                                                                                            tmp_path, monkeypatch):
    from reinforge.report.runs import load_run

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "runs" / "rel"
    config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, "trainer.total_training_steps=1",
                                         "trainer.rollout_data_dir=dumps/roll", "trainer.validation_data_dir=dumps/val"))
    run(config, keys)
    saved = (run_dir / "config.yaml").read_text()
    assert f"rollout_data_dir: {tmp_path / 'dumps' / 'roll'}\n" in saved
    assert f"validation_data_dir: {tmp_path / 'dumps' / 'val'}\n" in saved
    assert (tmp_path / "dumps" / "roll" / "1.jsonl").is_file()
    monkeypatch.chdir(tmp_path / "runs")  # the report is read from elsewhere
    assert load_run(run_dir).samples


TIMES = ("timing_s/", "timing_per_token_ms/", "perf/")


def test_a_step_saved_but_not_logged_is_logged_on_resuming(tiny_model_path, task_files, tmp_path):
    """A run stopped after saving step N but before logging it (in step N's validation, which follows the save as in
    verl) would have lost step N's record for good: resuming logs it from the step folder, validated as it would have
    been, also when N was the last step (the run had 'nothing to do' before)."""
    run_dir = tmp_path / "run"
    config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, "trainer.total_training_steps=2",
                                         "trainer.save_freq=1", "trainer.test_freq=1", "trainer.val_before_train=false"))
    run(config, keys)
    whole = records(run_dir)
    assert [r["step"] for r in whole] == [1, 2] and "val-core/reinforge/add_one/acc/mean@1" in whole[1]
    untimed = [{k: v for k, v in r.items() if not k.startswith(TIMES)} for r in whole]
    for cut in (1, 0):  # as a kill during the validation of step 2 (the last), then of step 1 (resume_path to it)
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        (run_dir / "metrics.jsonl").write_text("".join(line + "\n" for line in lines[:cut]))
        extra = [] if cut else ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={run_dir / 'global_step_1'}"]
        config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, "trainer.total_training_steps=2",
                                             "trainer.save_freq=1", "trainer.test_freq=1", *extra))
        run(config, keys)
        again = records(run_dir)
        assert [r["step"] for r in again] == [1, 2]
        assert [{k: v for k, v in r.items() if not k.startswith(TIMES)} for r in again] == untimed
        assert again[0]["timing_s/save_checkpoint"] == whole[0]["timing_s/save_checkpoint"]  # the saved record's own


def test_a_resumed_run_ends_with_the_validation_reward_from_the_runs_first_validation(tiny_model_path, task_files,
                                                                                      tmp_path, capsys):
    """The closing line compares the whole run's first and last validations (metrics.jsonl), not this process's."""
    run_dir = tmp_path / "run"
    for steps in (2, 4):  # validations at steps 0 and 2, then (resumed at 3) at 4
        config, keys = load_config(overrides(tiny_model_path, task_files, run_dir, f"trainer.total_training_steps={steps}",
                                             "trainer.val_before_train=false" if steps == 4 else "trainer.val_before_train=true"))
        run(config, keys)
    out = capsys.readouterr().out
    validations = {r["step"]: r["val-aux/reinforge/add_one/reward/mean@1"] for r in records(run_dir)
                   if "val-aux/reinforge/add_one/reward/mean@1" in r}
    assert sorted(validations) == [0, 2, 4]
    assert out.strip().splitlines()[-1] == (f"reinforge: validation reward {validations[0]:.3f} (step 0) -> "
                                            f"{validations[4]:.3f} (step 4)")
