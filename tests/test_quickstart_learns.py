"""The quickstart, exactly as a user runs it (`reinforge train`, no arguments), must learn.

About 45 seconds on 2 cores, model build included; it is part of the suite on purpose: this is
the promise the README makes.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

KEY = "val-core/reinforge/add_one/acc/mean@1"


def test_default_run_doubles_validation_reward_and_gains_at_least_0_3(tmp_path):
    result = subprocess.run([sys.executable, "-m", "reinforge", "train"], capture_output=True, text=True, cwd=tmp_path,
                            timeout=900, env={**os.environ, "REINFORGE_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = Path(tmp_path) / "checkpoints" / "reinforge" / "quickstart"
    assert f"run folder {run_dir}" in result.stdout
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    vals = [(r["step"], r[KEY]) for r in records if KEY in r]
    (first_step, initial), (last_step, final) = vals[0], vals[-1]
    assert (first_step, last_step) == (0, 400)
    assert final >= 2 * initial and final >= initial + 0.3, vals
    steps = [r for r in records if "timing_s/step" in r]
    assert len(steps) == 400 and steps[-1]["critic/score/mean"] > steps[0]["critic/score/mean"]
    assert (run_dir / "global_step_400" / "actor" / "model_world_size_1_rank_0.pt").is_file()
