"""A default training run, then `reinforge report`: samples kept by the trainer, and the page renders in headless Chromium.

Console messages are read from Chromium's own log (`--enable-logging=stderr --v=0` prints every console
message and uncaught exception as a `CONSOLE` line); the page has no scripts, so any such line is a failure.
Host names resolve nowhere (`--host-resolver-rules`), so the page cannot lean on the network.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from reinforge.cli import main
from reinforge.report.rollouts import KEEP_ROWS, KEEP_STEPS
from tests.trainer import conftest as end_to_end

run_steps, small_run, task_files = end_to_end.run_steps, end_to_end.small_run, end_to_end.task_files  # the trainer's end-to-end fixtures
CHROMIUM = next((path for path in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser"))
                 if path and Path(path).exists()), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium)")


def render(page: Path, tmp_path: Path) -> tuple[list[str], np.ndarray]:
    """Open `page` in headless Chromium: (its console lines, the screenshot as grey pixels)."""
    shot = tmp_path / "screenshot.png"
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={tmp_path / 'chromium-profile'}", "--enable-logging=stderr", "--v=0",
               "--host-resolver-rules=MAP * ~NOTFOUND", "--window-size=1200,1600", f"--screenshot={shot}", page.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert shot.is_file(), f"chromium wrote no screenshot (exit {done.returncode}):\n{done.stderr[-2000:]}"
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return console, np.asarray(Image.open(shot).convert("L"))


@needs_chromium
def test_the_console_check_catches_errors(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text('<html><body><p>x</p><script>console.error("boom"); not_defined();</script></body></html>')
    console, _ = render(page, tmp_path)
    assert any('"boom"' in line for line in console) and any("not_defined is not defined" in line for line in console)


@needs_chromium
def test_a_default_run_reports_curves_samples_and_renders_without_console_errors(run_steps, tmp_path, capsys):
    run_dir = tmp_path / "run"
    (run_dir / "rollouts").mkdir(parents=True)
    (run_dir / "rollouts" / "9.jsonl").write_text('{"score": 1.0, "step": 9}\n')  # left by an earlier, longer run here
    run_steps("trainer.total_training_steps=4", "trainer.test_freq=4", "actor_rollout_ref.rollout.n=9",
              run_dir=run_dir)
    kept = sorted(int(f.stem) for f in (run_dir / "rollouts").glob("*.jsonl"))
    assert kept == [4 - KEEP_STEPS + i for i in range(1, KEEP_STEPS + 1)]
    last = [json.loads(line) for line in (run_dir / "rollouts" / "4.jsonl").read_text().splitlines()]
    assert len(last) == 2 * KEEP_ROWS  # 2 prompts x 9 = 18 responses a step: the 8 best and the 8 worst
    assert {r["step"] for r in last} == {4} and all(r["gts"] and r["input"] for r in last)

    assert main(["report", str(run_dir)]) == 0
    page = run_dir / "report" / "report.html"
    assert str(page.resolve()) in capsys.readouterr().out
    for name in ("reward", "validation", "response_length", "kl", "entropy", "clipfrac", "grad_norm", "lr", "timing",
                 "throughput"):
        assert (run_dir / "report" / f"{name}.png").stat().st_size > 1000, name
    best = max(last, key=lambda r: r["score"])
    assert f"{best['score']:.4g}" in page.read_text()

    console, pixels = render(page, tmp_path)
    assert console == [], "console messages:\n" + "\n".join(console)
    assert pixels.std() > 20 and (pixels < 128).mean() > 0.01, "the screenshot is blank"
