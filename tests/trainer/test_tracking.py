"""trainer.logger: name checks, the console line, and each tracker written for real and read back offline."""

import io
import json
import math
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.config.schema import Config
from reinforge.errors import ConfigError
from reinforge.trainer.tracking import Tracking, check_loggers, generations_markdown
from reinforge.trainer.tracking.console import ConsoleLogger, use_colour
from reinforge.trainer.tracking.mlflow_logger import mlflow_key

STEPS = {1: {"critic/score/mean": 0.25, "actor/pg_loss": -1.5, "val-core/gsm8k/acc/mean@4": 0.5},
         2: {"critic/score/mean": 0.75, "actor/pg_loss": float("nan"), "note": "text stays in metrics.jsonl"}}
SAMPLES = [{"input": "1+1=", "output": "2", "gts": "2", "score": 1.0, "step": 2},
           {"input": "a|b", "output": "line\nbreak", "gts": "x", "score": 0.0, "step": 2}]


def small_config() -> Config:
    config = Config()
    config.trainer.project_name, config.trainer.experiment_name = "proj", "exp1"
    return config


def write_run(run_dir: Path, logger: str) -> None:
    tracking = Tracking(run_dir, [logger], total_steps=2, config=small_config())
    for step, metrics in STEPS.items():
        tracking.log(metrics, step)
    tracking.log_generations(SAMPLES, 2)
    tracking.close()


# ---- names and packages ---------------------------------------------------------------------
def test_unknown_logger_lists_the_valid_names():
    with pytest.raises(ConfigError, match="'neptune' is not a logger; choose from console, file, jsonl, tensorboard, "
                                          "wandb, mlflow, swanlab, trackio"):
        load_config(["trainer.logger=[console,neptune]"])


@pytest.mark.parametrize("logger, module, command", [("wandb", "wandb", "pip install wandb"),
                                                     ("mlflow", "mlflow", "pip install mlflow-skinny"),
                                                     ("tensorboard", "tensorboard", "pip install tensorboard"),
                                                     ("swanlab", "swanlab", "pip install swanlab"),
                                                     ("trackio", "trackio", "pip install trackio")])
def test_missing_tracker_package_fails_at_start_with_the_pip_command(monkeypatch, logger, module, command):
    monkeypatch.setitem(sys.modules, module, None)  # what an uninstalled package looks like to import and find_spec
    with pytest.raises(ConfigError, match=f"trainer.logger: '{logger}' needs .* run `{command}`"):
        load_config([f"trainer.logger=[console,{logger}]"])


def test_logger_may_be_a_bare_string_as_in_verl():
    assert load_config(["trainer.logger=console"])[0].trainer.logger == ["console"]
    assert load_config(["trainer.logger=[console,jsonl,file]"])[0].trainer.logger == ["console", "jsonl", "file"]
    check_loggers(["console", "file", "jsonl", "tensorboard", "wandb", "mlflow", "swanlab", "trackio"])  # all installed in CI


def test_tracking_is_verls_deprecated_alias_of_wandb(capsys):
    assert load_config(["trainer.logger=[console,tracking]"])[0].trainer.logger == ["console", "wandb"]
    assert "trainer.logger: 'tracking' is deprecated (as in verl); it means 'wandb'" in capsys.readouterr().out


def test_a_run_without_trackers_imports_none_of_them(tmp_path):
    code = ("import sys; from reinforge.trainer.tracking import Tracking\n"
            f"t = Tracking({str(tmp_path)!r}, ['console', 'file'], 1); t.log({{'x': 1.0}}, 1); t.close()\n"
            "print(sorted(m for m in ('wandb', 'mlflow', 'swanlab', 'trackio', 'tensorboard', 'torch.utils.tensorboard') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == "[]"


# ---- metrics.jsonl and the console -----------------------------------------------------------
def test_metrics_jsonl_is_strict_json_with_non_finite_values_as_strings(tmp_path):
    tracking = Tracking(tmp_path, [], total_steps=2)
    for step, metrics in STEPS.items():
        tracking.log(metrics, step)
    tracking.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 1, "critic/score/mean": 0.25, "actor/pg_loss": -1.5, "val-core/gsm8k/acc/mean@4": 0.5},
        {"step": 2, "critic/score/mean": 0.75, "actor/pg_loss": "nan", "note": "text stays in metrics.jsonl"}]


def test_a_resumed_run_keeps_its_earlier_steps_and_drops_a_line_cut_short_by_a_kill(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "x": 1}\n\n{"step": 2, "x": 2}\n{"step": 3, "x": 3}\n{"step": 4, "x')
    tracking = Tracking(tmp_path, [], total_steps=5, initial_step=2)  # resumed from the checkpoint of step 2
    tracking.log({"x": 30.0}, 3)
    tracking.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"step": 1, "x": 1}, {"step": 2, "x": 2}, {"step": 3, "x": 30.0}]


def test_a_tracker_that_fails_to_start_closes_the_ones_already_started(tmp_path, monkeypatch):
    import reinforge.trainer.tracking as tracking_module

    closed = []

    class Started:
        def close(self):
            closed.append("tensorboard")

    def open_tracker(name, *args):
        if name == "wandb":
            raise RuntimeError("wandb could not start")
        return Started()

    monkeypatch.setattr(tracking_module, "_open_tracker", open_tracker)
    with pytest.raises(RuntimeError, match="wandb could not start"):
        Tracking(tmp_path, ["tensorboard", "wandb"], total_steps=1)
    assert closed == ["tensorboard"]


class _Terminal:
    def isatty(self):
        return True


def test_colour_only_on_a_terminal_without_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(sys, "stdout", _Terminal())
    assert use_colour()
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour()
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # captured or piped output is not a terminal
    assert not use_colour()


def test_console_step_line_is_aligned_and_plain_off_a_terminal():
    console = ConsoleLogger(total_steps=10)
    metrics = {"critic/score/mean": 0.5, "response_length/mean": 4.0, "actor/kl_loss": 0.01, "actor/entropy": 1.2345,
               "timing_s/step": 0.5}
    assert console.step_line(metrics, 3) == "step  3/10 | reward 0.500 | resp_len   4.0 | kl 0.0100 | entropy 1.234 | 0.50s"
    assert len(console.step_line(metrics, 3)) == len(console.step_line(metrics, 10))
    # no reference model: the column is the update's KL to the old policy, named as such
    del metrics["actor/kl_loss"]
    metrics["actor/ppo_kl"] = -2e-5
    assert "| ppo_kl -0.0000 |" in console.step_line(metrics, 3)
    # a critic warm-up step: the actor did not update, so there is no entropy or KL of its to show (not "entropy nan")
    warmup = {"critic/score/mean": 0.5, "response_length/mean": 4.0, "critic/vf_loss": 0.1, "timing_s/step": 0.5}
    assert console.step_line(warmup, 3) == ("step  3/10 | reward 0.500 | resp_len   4.0 | actor not updated "
                                            "(trainer.critic_warmup) | 0.50s")
    console.close()


def test_generations_markdown_escapes_cells():
    assert generations_markdown(SAMPLES).splitlines() == [
        "| step | input | output | ground truth | score |", "|---|---|---|---|---|",
        "| 2 | 1+1= | 2 | 2 | 1.0000 |", "| 2 | a\\|b | line<br>break | x | 0.0000 |"]


# ---- trackers, read back ---------------------------------------------------------------------
def test_tensorboard_scalars_and_samples_read_back(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("TENSORBOARD_DIR", raising=False)
    write_run(tmp_path, "tensorboard")
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("critic/score/mean")] == [(1, 0.25), (2, 0.75)]
    assert [(e.step, e.value) for e in events.Scalars("val-core/gsm8k/acc/mean@4")] == [(1, 0.5)]
    loss = events.Scalars("actor/pg_loss")
    assert (loss[0].step, loss[0].value, loss[1].step, math.isnan(loss[1].value)) == (1, -1.5, 2, True)
    assert "note" not in events.Tags()["scalars"]
    (text,) = events.Tensors("val/generations/text_summary")
    assert text.step == 2 and text.tensor_proto.string_val[0].decode() == generations_markdown(SAMPLES)


def test_tensorboard_dir_from_the_environment_as_in_verl(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "elsewhere"))
    write_run(tmp_path / "run", "tensorboard")
    assert list((tmp_path / "elsewhere").glob("events.out.tfevents.*")) and not (tmp_path / "run" / "tensorboard").exists()


def test_mlflow_local_file_store_read_back(tmp_path, monkeypatch):
    from mlflow.artifacts import load_dict
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "unset after the test")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")  # the logger must opt in to the file store itself
    write_run(tmp_path, "mlflow")
    client = MlflowClient((tmp_path / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    assert run.info.run_name == "exp1" and run.info.status == "FINISHED"
    history = {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
               for key in ("critic/score/mean", "val-core/gsm8k/acc/mean_at_4", "actor/pg_loss")}
    assert history["critic/score/mean"] == [(1, 0.25), (2, 0.75)]
    assert history["val-core/gsm8k/acc/mean_at_4"] == [(1, 0.5)]
    assert history["actor/pg_loss"][0] == (1, -1.5) and math.isnan(history["actor/pg_loss"][1][1])
    assert run.data.params["trainer.experiment_name"] == "exp1" and run.data.params["data.train_batch_size"] == "1024"
    assert load_dict(f"{run.info.artifact_uri}/val_generations/step_2.json") == SAMPLES


def test_mlflow_file_store_chosen_in_the_environment(tmp_path, monkeypatch):
    # MLflow 3 refuses file stores unless MLFLOW_ALLOW_FILE_STORE is set: a file URI or a path the user chose works too
    from mlflow.tracking import MlflowClient

    for uri in ((tmp_path / "as_uri").as_uri(), str(tmp_path / "as_path")):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
        write_run(tmp_path / "run", "mlflow")
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        client = MlflowClient(uri)
        assert [run.info.run_name for run in client.search_runs([client.get_experiment_by_name("proj").experiment_id])] == ["exp1"]
    assert not (tmp_path / "run" / "mlruns").exists()


def test_wandb_mode_disabled_writes_nothing(tmp_path, monkeypatch, capsys):
    for name in ("WANDB_API_KEY", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    write_run(tmp_path, "wandb")
    assert not (tmp_path / "wandb").exists()
    assert "wandb is disabled (WANDB_MODE=disabled)" in capsys.readouterr().out


def test_mlflow_keys_keep_slashes_and_rewrite_forbidden_characters():
    assert mlflow_key("val-core/gsm8k/acc/best@4/mean") == "val-core/gsm8k/acc/best_at_4/mean"
    assert mlflow_key("timing_s//gen (ms)%") == "timing_s/gen _ms__"


def _wandb_records(path: Path):
    """The records of a wandb offline run file: W&B's LevelDB-style log (7-byte file header, 32 KiB blocks,
    records as crc32/length/type chunks) holding wandb_internal_pb2.Record protobufs."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if kind == 0:  # block padding
            pos += left
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def test_wandb_offline_without_an_api_key_read_back(tmp_path, monkeypatch):
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc login either
    write_run(tmp_path, "wandb")
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    for _ in range(40):  # wandb's writer process may still be flushing the file when finish() returns
        history, run, kinds = {}, None, []
        for record in _wandb_records(run_file):
            kinds.append(record.WhichOneof("record_type"))
            if kinds[-1] == "history":
                row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                history[record.history.step.num] = row
            elif kinds[-1] == "run":
                run = record.run
        if run is not None and 2 in history:
            break
        time.sleep(0.25)
    assert run is not None, f"no run record in {run_file} ({run_file.stat().st_size} bytes); records: {kinds}"
    assert (run.project, run.display_name) == ("proj", "exp1")
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["trainer"]["experiment_name"] == "exp1" and config["data"]["train_batch_size"] == 1024
    assert {k: history[1][k] for k in STEPS[1]} == STEPS[1]
    assert history[2]["critic/score/mean"] == 0.75 and math.isnan(history[2]["actor/pg_loss"]) and "note" not in history[2]
    assert history[2]["val/generations/_type"] == "table-file"
    table = json.loads((run_file.parent / "files" / history[2]["val/generations/path"]).read_text())
    # verl's layout: one row per validation, the samples side by side
    assert table["columns"] == ["step", "input_1", "output_1", "score_1", "input_2", "output_2", "score_2"]
    assert table["data"] == [[2, *(s[name] for s in SAMPLES for name in ("input", "output", "score"))]]


def test_swanlab_offline_without_an_api_key_read_back(tmp_path, monkeypatch):
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    for name in ("SWANLAB_API_KEY", "SWANLAB_MODE", "SWANLAB_LOG_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    write_run(tmp_path, "swanlab")
    (run_file,) = (tmp_path / "swanlog").glob("run-*/run-*.swanlab")
    reader = DataStoreReader()
    reader.open(run_file)
    scalars, media, start = {}, {}, None
    for raw in reader:
        record = Record()
        record.ParseFromString(raw)
        if record.HasField("scalar"):
            scalars[(record.scalar.key, record.scalar.step)] = record.scalar.value.number
        elif record.HasField("media"):
            media[(record.media.key, record.media.step)] = record.media.value.items[0].filename
        elif record.HasField("start"):
            start = record.start
    reader.close()
    assert (start.project, start.name) == ("proj", "exp1")
    assert scalars[("critic/score/mean", 1)] == 0.25 and scalars[("critic/score/mean", 2)] == 0.75
    assert scalars[("val-core/gsm8k/acc/mean@4", 1)] == 0.5 and math.isnan(scalars[("actor/pg_loss", 2)])
    text = next(run_file.parent.glob(f"media/**/{media[('val/generations', 2)]}")).read_text()
    assert text == generations_markdown(SAMPLES)
    assert "experiment_name: exp1" in (run_file.parent / "files" / "config.yaml").read_text()


def test_trackio_run_read_back_from_its_local_store(tmp_path):
    """In a fresh process, so trackio reads TRACKIO_DIR (its store) when it is first imported."""
    code = ("import json, sys; from pathlib import Path; sys.path.insert(0, '.')\n"
            "from tests.trainer.test_tracking import write_run\n"
            f"write_run(Path({str(tmp_path / 'run')!r}), 'trackio')\n"
            "from trackio.sqlite_storage import SQLiteStorage\n"
            "print(json.dumps({'runs': SQLiteStorage.get_runs('proj'), 'logs': SQLiteStorage.get_logs('proj', 'exp1'),\n"
            "                  'config': SQLiteStorage.get_run_config('proj', 'exp1')}, default=str))")
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "store")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2], env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["runs"] == ["exp1"] and (tmp_path / "store" / "proj.db").is_file()
    scalars = {(key, log["step"]): value for log in got["logs"] for key, value in log.items() if key not in ("step", "timestamp")}
    assert scalars[("critic/score/mean", 1)] == 0.25 and scalars[("critic/score/mean", 2)] == 0.75
    assert scalars[("val-core/gsm8k/acc/mean@4", 1)] == 0.5 and math.isnan(float(scalars[("actor/pg_loss", 2)]))
    table = scalars[("val/generations", 2)]["_value"]
    assert table == [{"step": 2, **{f"{name}_{i + 1}": s[name] for i, s in enumerate(SAMPLES) for name in ("input", "output", "score")}}]
    assert got["config"]["trainer"]["experiment_name"] == "exp1"


# ---- a short training run ----------------------------------------------------------------------
def test_training_run_logs_to_tensorboard(run_steps, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "tb_run"
    steps = run_steps("trainer.logger=[console,tensorboard]", "trainer.test_freq=2", "trainer.log_val_generations=2",
                      run_dir=run_dir)
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    for key in ("critic/score/mean", "response_length/mean", "timing_s/step"):
        logged = [(e.step, e.value) for e in events.Scalars(key)]
        assert logged == [(step, pytest.approx(steps[step][key], rel=1e-6)) for step in (1, 2)]
    (text,) = events.Tensors("val/generations/text_summary")
    rows = text.tensor_proto.string_val[0].decode().splitlines()[2:]
    assert text.step == 2 and len(rows) == 2 and all(row.startswith("| 2 | ") for row in rows)


@pytest.mark.parametrize(("logger", "project", "rule"), [
    ("wandb", "my proj/x:y", "no / \\ # ? % : and at most 128 characters"),
    ("swanlab", "my proj", "letters, digits, _ - + . and at most 100 characters"),
])
def test_a_project_name_the_tracker_refuses_fails_at_the_config_check(logger, project, rule):
    check_loggers([logger], "GRPO-qwen2.5_7b")
    with pytest.raises(ConfigError) as error:
        load_config([f"trainer.logger=[console,{logger}]", f"trainer.project_name='{project}'"])
    assert str(error.value) == (f"trainer.project_name={project!r} is not a project name {logger} takes ({rule}); rename it, "
                                f"or remove {logger!r} from trainer.logger")


def test_a_tracker_that_refuses_its_run_is_a_config_error_naming_it(tmp_path, monkeypatch):
    """Past the checks (Tracking as a library): wandb's own refusal, raised before it starts any process."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = small_config()
    config.trainer.project_name = "my proj/x:y"
    with pytest.raises(ConfigError, match=r"^trainer.logger: wandb could not start its run \(trainer.project_name='my proj/x:y', "
                                          r"trainer.experiment_name='exp1'\): UsageError: Invalid project name"):
        Tracking(tmp_path, ["wandb"], total_steps=1, config=config)


def test_a_resumed_run_replaces_the_later_steps_in_tensorboard(tmp_path, monkeypatch):
    """Steps 3 and 4 logged, the run cut and resumed from its step-2 checkpoint: TensorBoard shows each step once, with
    the resumed run's values, as metrics.jsonl keeps them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("TENSORBOARD_DIR", raising=False)
    first = Tracking(tmp_path, ["tensorboard"], total_steps=4, config=small_config())
    for step in (1, 2, 3, 4):
        first.log({"critic/score/mean": float(step)}, step)
    first.close()
    time.sleep(1.1)  # event files are named by the second they are opened in
    resumed = Tracking(tmp_path, ["tensorboard"], total_steps=4, initial_step=2, config=small_config())
    for step in (3, 4):
        resumed.log({"critic/score/mean": 10.0 * step}, step)
    resumed.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("critic/score/mean")] == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]
    assert [json.loads(line)["critic/score/mean"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [
        1.0, 2.0, 30.0, 40.0]


def test_wandb_dir_from_the_environment(tmp_path, monkeypatch):
    import types

    calls = {}

    class Run:
        dir = str(tmp_path / "elsewhere" / "wandb" / "offline-run-x" / "files")

        def finish(self):
            pass

    fake = types.SimpleNamespace(init=lambda **kwargs: calls.update(kwargs) or Run(), Settings=lambda **kwargs: kwargs)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))
    from reinforge.trainer.tracking.wandb_logger import WandbLogger

    WandbLogger(tmp_path / "run", "proj", "exp1", {}).close()
    assert calls["dir"] == str(tmp_path / "elsewhere")
    monkeypatch.delenv("WANDB_DIR")
    WandbLogger(tmp_path / "run", "proj", "exp1", {}).close()
    assert calls["dir"] == str(tmp_path / "run")


def test_a_fresh_run_hides_no_other_runs_curves_in_a_shared_tensorboard_dir(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "shared"))
    first = Tracking(tmp_path / "a", ["tensorboard"], total_steps=3, config=small_config())
    for step in (1, 2, 3):
        first.log({"critic/score/mean": float(step)}, step)
    first.close()
    time.sleep(1.1)  # event files are named by the second they are opened in
    second = Tracking(tmp_path / "b", ["tensorboard"], total_steps=1, config=small_config())
    second.log({"critic/score/mean": 10.0}, 1)
    second.close()
    events = EventAccumulator(str(tmp_path / "shared"), size_guidance={"scalars": 0})
    events.Reload()
    assert sorted((e.step, e.value) for e in events.Scalars("critic/score/mean")) == [(1, 1.0), (1, 10.0), (2, 2.0), (3, 3.0)]
