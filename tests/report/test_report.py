"""`reinforge report` on run folders written here: the plotted data are the metrics, gaps are noted, bad folders are errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from reinforge.cli import main
from reinforge.errors import UserError
from reinforge.report import write_report
from reinforge.report.plots import build_panels
from reinforge.report.runs import best_and_worst, load_run


def write_run(folder: Path, rewards: list[float], val: dict[int, float] | None = None, extra: dict | None = None,
              samples: dict[int, list[float]] | None = None) -> Path:
    """A run folder: one record per step (reward, timing: gen 1 s, update_actor 2 s), validation at the steps in `val`."""
    folder.mkdir(parents=True)
    lines = []
    for step, reward in enumerate(rewards, start=1):
        record = {"step": step, "critic/score/mean": reward, "timing_s/gen": 1.0, "timing_s/update_actor": 2.0,
                  "timing_s/step": 3.0, "actor/entropy": 5.0 - step, **(extra or {})}
        if val and step in val:
            record["val-core/gsm8k/reward/mean@1"] = val[step]
        lines.append(json.dumps(record))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "config.yaml").write_text("trainer:\n  project_name: demo\n  rollout_data_dir: null\n")
    for step, scores in (samples or {}).items():
        rollouts = folder / "rollouts"
        rollouts.mkdir(exist_ok=True)
        (rollouts / f"{step}.jsonl").write_text("".join(
            json.dumps({"input": f"q{step}-{i}", "output": f"a<{score}>", "gts": "7", "score": score, "step": step}) + "\n"
            for i, score in enumerate(scores)))
    return folder


def panel(panels, name):
    return next(p for p in panels if p.name == name)


def test_reward_lines_are_the_logged_values_of_each_run_with_a_legend(tmp_path):
    runs = [load_run(write_run(tmp_path / "a", [0.1, 0.4, 0.3])), load_run(write_run(tmp_path / "b", [0.2, 0.5]))]
    axes = panel(build_panels(runs), "reward").figure.axes[0]
    assert axes.get_xlabel() == "training step" and "critic/score/mean" in axes.get_ylabel()
    assert [line.get_label() for line in axes.lines] == ["a", "b"]
    assert list(axes.lines[0].get_xdata()) == [1, 2, 3] and list(axes.lines[0].get_ydata()) == [0.1, 0.4, 0.3]
    assert list(axes.lines[1].get_xdata()) == [1, 2] and list(axes.lines[1].get_ydata()) == [0.2, 0.5]
    assert [t.get_text() for t in axes.get_legend().get_texts()] == ["a", "b"]


def test_validation_uses_only_the_steps_that_validated(tmp_path):
    run = load_run(write_run(tmp_path / "a", [0.1, 0.2, 0.3, 0.4], val={2: 0.25, 4: 0.75}))
    (line,) = panel(build_panels([run]), "validation").figure.axes[0].lines
    assert list(line.get_xdata()) == [2, 4] and list(line.get_ydata()) == [0.25, 0.75]
    assert line.get_label() == "val-core/gsm8k/reward/mean@1"


def test_timing_bars_stack_the_phases_and_leave_out_the_step_total(tmp_path):
    run = load_run(write_run(tmp_path / "a", [0.1, 0.2]))
    axes = panel(build_panels([run]), "timing").figure.axes[0]
    tops = {}
    for patch in axes.patches:  # gen (1 s) at the bottom, update_actor (2 s) on top: the stack is 3 s, not 6 s with the total
        step = round(patch.get_x() + patch.get_width() / 2)
        tops[step] = max(tops.get(step, 0.0), patch.get_y() + patch.get_height())
    assert tops == {1: pytest.approx(3.0), 2: pytest.approx(3.0)}
    assert sorted(t.get_text() for t in axes.get_legend().get_texts()) == ["gen", "update_actor"]


def test_missing_metrics_skip_their_plot_with_a_note(tmp_path):
    run_dir = write_run(tmp_path / "a", [0.1, 0.2])
    panels = build_panels([load_run(run_dir)])
    grad = panel(panels, "grad_norm")
    assert grad.figure is None and "actor/grad_norm" in grad.note
    page = write_report([run_dir]).read_text()
    assert "skipped: no run logged actor/grad_norm" in page
    assert not (run_dir / "report" / "grad_norm.png").exists()
    assert (run_dir / "report" / "reward.png").stat().st_size > 0


def test_pngs_are_not_blank_and_the_page_embeds_them(tmp_path):
    run_dir = write_run(tmp_path / "a", [0.1, 0.9, 0.5], val={3: 0.5})
    page = write_report([run_dir], tmp_path / "out").read_text()
    for name in ("reward", "validation", "entropy", "timing"):
        pixels = np.asarray(Image.open(tmp_path / "out" / f"{name}.png").convert("L"))
        assert (pixels < 128).mean() > 0.005, f"{name}.png is (nearly) blank"  # axes, text and curves are dark
    embedded = re.findall(r'src="data:image/png;base64,', page)
    assert len(embedded) == 4
    assert not re.search(r'(src|href)="(?!data:)', page) and "<script" not in page and "url(" not in page


def test_samples_section_shows_the_best_and_worst_of_the_latest_steps(tmp_path):
    samples = {1: [0.99], 2: [0.5, 0.1], 3: [0.9, 0.0, 0.3], 4: [0.2, 0.8]}  # step 1 is older than the latest 3 steps
    run = load_run(write_run(tmp_path / "a", [0.1] * 4, samples=samples))
    assert sorted(s["step"] for s in run.samples) == [2, 2, 3, 3, 3, 4, 4]
    best, worst = best_and_worst(run.samples, 2)
    assert [s["score"] for s in best] == [0.9, 0.8] and [s["score"] for s in worst] == [0.0, 0.1]
    page = write_report([tmp_path / "a"]).read_text()
    assert "a&lt;0.9&gt;" in page and "a&lt;0.99&gt;" not in page  # escaped, and only from the latest steps


def test_control_characters_of_a_response_are_shown_as_control_pictures(tmp_path):
    run_dir = write_run(tmp_path / "a", [0.1], samples={1: [0.5]})
    rollouts = run_dir / "rollouts" / "1.jsonl"
    record = json.loads(rollouts.read_text())
    record["output"] = "nul\x00 bell\x07 tab\tend"
    rollouts.write_text(json.dumps(record) + "\n")
    page = write_report([run_dir]).read_text()
    assert "nul\u2400 bell\u2407 tab\tend" in page
    assert not any(ord(char) < 32 and char not in "\t\n\r" for char in page)  # HTML allows no other C0 controls


def test_a_response_repeated_across_steps_is_shown_once():
    samples = [{"input": "q", "output": "a", "score": 1.0, "step": step} for step in (1, 2, 3)]
    samples += [{"input": "q", "output": "b", "score": 0.5, "step": 3}, {"input": "r", "output": "a", "score": 0.0, "step": 2},
                {"input": "r", "output": "a", "score": 0.0, "step": 3}]
    best, worst = best_and_worst(samples, 2)
    assert [(s["input"], s["output"], s["step"]) for s in best] == [("q", "a", 3), ("q", "b", 3)]
    assert [(s["input"], s["output"], s["step"]) for s in worst] == [("r", "a", 3)]


def test_a_run_that_only_validated_gets_a_report(tmp_path):
    run_dir = tmp_path / "val_only"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 0, "val-core/gsm8k/reward/mean@1": 0.25,
                                                       "timing_s/testing": 4.0}) + "\n")
    page = write_report([run_dir]).read_text()
    panels = build_panels([load_run(run_dir)])
    assert panel(panels, "validation").figure is not None and panel(panels, "reward").figure is None
    assert "skipped: no run logged critic/score/mean" in page and "No rollout samples" in page


def summary_row(page: str) -> list[str]:
    """The cells of the summary table's first run row."""
    row = re.search(r"<table><tr><th>run</th>.*?</tr><tr>(.*?)</tr>", page, re.S).group(1)
    return [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>.*?</td>", row)]


def test_the_summary_counts_the_steps_time_and_last_values_of_an_rl_and_an_sft_run(tmp_path):
    rl = write_report([write_run(tmp_path / "rl", [0.1, 0.4, 0.3], val={3: 0.625})]).read_text()
    assert summary_row(rl)[2:] == ["3", "0.3", "gsm8k/reward/mean@1 0.625", "9.0"]  # 3 steps of 3 s
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in (
        {"step": 1, "train/loss": 2.0, "train/time(s)": 1.5}, {"step": 2, "train/loss": 1.5, "train/time(s)": 2.0},
        {"step": 2, "val/loss": 1.75})))
    assert summary_row(write_report([sft]).read_text())[2:] == ["2", "–", "val/loss 1.75", "3.5"]


def test_the_command_prints_the_report_path_and_overlays_runs(tmp_path, capsys):
    a, b = write_run(tmp_path / "x" / "run", [0.1, 0.2]), write_run(tmp_path / "y" / "run", [0.3, 0.4])
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    assert str((tmp_path / "cmp" / "report.html").resolve()) in capsys.readouterr().out
    page = (tmp_path / "cmp" / "report.html").read_text()
    assert str(a) in page and str(b) in page  # same folder names: told apart by their paths


def test_a_folder_that_is_not_a_run_exits_2_with_a_clear_message(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "is not a run folder: it has no metrics.jsonl" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "config.yaml").write_text("trainer: {}\n")  # a run that stopped before its first step
    assert main(["report", str(tmp_path)]) == 2
    assert "is the folder of a run that logged no step (it has config.yaml, no metrics.jsonl)" in capsys.readouterr().err


def test_an_out_folder_that_cannot_be_made_exits_2_naming_it(tmp_path, capsys):
    run_dir = write_run(tmp_path / "a", [0.1, 0.2])
    (tmp_path / "afile").write_text("")
    assert main(["report", str(run_dir), "--out", str(tmp_path / "afile" / "sub")]) == 2
    assert f"--out {tmp_path / 'afile' / 'sub'}: cannot create the report folder (Not a directory)" in capsys.readouterr().err


def test_nan_and_inf_steps_leave_a_gap_marked_with_crosses_and_a_note(tmp_path):
    run_dir = write_run(tmp_path / "a", [0.1, 0.2, 0.3, 0.4])
    metrics = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    records[1]["critic/score/mean"], records[2]["critic/score/mean"] = "nan", "-inf"  # as the trainer writes them
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    reward = panel(build_panels([load_run(run_dir)]), "reward")
    line, crosses = reward.figure.axes[0].lines
    assert list(line.get_xdata()) == [1, 2, 3, 4]
    values = list(line.get_ydata())
    assert values[0] == 0.1 and np.isnan(values[1]) and values[2] == float("-inf") and values[3] == 0.4  # a gap, not a join
    assert list(crosses.get_xdata()) == [2, 3] and crosses.get_marker() == "x"
    assert reward.note == "not finite (red crosses, gaps in the line): critic/score/mean: step 2 nan, step 3 -inf"
    page = write_report([run_dir]).read_text()
    assert "critic/score/mean: step 2 nan, step 3 -inf" in page
    assert panel(build_panels([load_run(run_dir)]), "entropy").note == ""  # finite everywhere: no note


def test_a_broken_metrics_line_names_the_file_and_line_but_a_cut_last_line_is_tolerated(tmp_path):
    run_dir = write_run(tmp_path / "a", [0.1, 0.2])
    metrics = run_dir / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 3, "critic/sc')  # a run still writing
    assert len(load_run(run_dir).records) == 2
    metrics.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(UserError, match=r"metrics.jsonl, line 2: not JSON"):
        load_run(run_dir)
    metrics.write_bytes(b'{"step": 1}\n\xff\xfe\n')
    with pytest.raises(UserError, match=r"metrics.jsonl is not text"):
        load_run(run_dir)
    metrics.write_text('{"step": "x", "critic/score/mean": 1.0}\n{"step": 2, "critic/score/mean": 0.5}\n')
    assert load_run(run_dir).series("critic/score/mean") == ([2], [0.5])  # a record without a step number is not plotted
    (run_dir / "config.yaml").write_text("- a list\n- not a config\n")
    with pytest.raises(UserError, match=r"config.yaml holds a list, not the mapping of config keys the trainer writes"):
        load_run(run_dir)


def test_every_plotted_metric_is_one_reinforge_logs():
    """A plot of a name no run logs stays empty without a word: each panel's keys are rows of docs/metrics.md."""
    from reinforge.report.plots import LINE_PANELS
    from tests.trainer.test_metrics_documented import DOC, documented_patterns

    patterns = documented_patterns(DOC.read_text())
    undocumented = [key for panel in LINE_PANELS for key in panel.keys if not any(p.match(key) for p in patterns)]
    assert not undocumented
