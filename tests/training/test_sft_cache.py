"""The fine-tuned models reinforge caches (the quickstart's copier) survive two first runs at once."""

from __future__ import annotations

import subprocess
import sys

BUILD = """
import sys
from pathlib import Path
from reinforge.environment.tasks import pretraining_examples
from reinforge.training.sft import ensure_finetuned
base, target = Path(sys.argv[1]), Path(sys.argv[2])
ensure_finetuned(base, target, pretraining_examples, 30, lr=3e-3, batch_size=16, seed=0)
print((target / "config.json").is_file())
"""


def test_two_processes_building_the_same_finetuned_model_both_get_it(tiny_model_path, tmp_path):
    target = tmp_path / "models" / "copier"
    runs = [subprocess.Popen([sys.executable, "-c", BUILD, str(tiny_model_path), str(target)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-2000:]
        assert out.strip() == "True"
    assert (target / "model.safetensors").is_file()
    assert not [p.name for p in target.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left behind
