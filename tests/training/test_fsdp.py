"""FSDP2 data-parallel training on 2 CPU ranks (gloo) equals the 1-process run on the whole batch.

Two processes (spawned with RANK/WORLD_SIZE/MASTER_* set, as a worker group sets them) each run
tests/training/fsdp_ranks.py on their half of a fixed batch of 8 trajectories, arranged so each
rank holds half of each of the 2 mini-batches; this process runs the same steps with world size 1
on the whole batch. Reference and old log-probs, values, every actor and critic metric of 3 updates
and the final parameters must agree within fp32 tolerance, and the engine's copy of the policy
must equal the sharded actor after update_weights. Then (fsdp_ranks.faults) a rank with fewer rows
for a forward pass, and a NaN loss on one rank only, must neither hang nor go wrong, and
(fsdp_ranks.dynamic_bsz) token-budget micro-batches on ranks whose token totals need different
counts run the same count and give the fixed micro-batches' log-probs and gradient norm.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoConfig

from reinforge.batch import Batch
from reinforge.distributed.layout import dp_order
from tests.training.fsdp_ranks import train

HERE = Path(__file__).parent
MINI_BATCH = 4  # ppo_mini_batch_size 2 x rollout.n 2, as in fsdp_ranks.run_config
ATOL = 2e-5


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_ranks(script: str, *args, ranks: int = 2) -> list[subprocess.Popen]:
    """Start `ranks` processes of tests/training/<script> with `args`, joined into one gloo process group."""
    port = str(free_port())
    return [subprocess.Popen([sys.executable, str(HERE / script), *map(str, args)],
                             env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(ranks),
                                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1",
                                  "PYTHONPATH": str(HERE.parent.parent)},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for r in range(ranks)]


def spawn_ranks(model_path: Path, batch: Batch, tmp_path: Path, ranks: int = 2) -> list[subprocess.Popen]:
    """Start `ranks` processes of fsdp_ranks.py, each to train on its chunk of `batch`."""
    batch_file = tmp_path / "batch.pt"
    torch.save(batch, batch_file)
    return start_ranks("fsdp_ranks.py", model_path, batch_file, tmp_path, ranks=ranks)


def rank_outputs(procs: list[subprocess.Popen], timeout: float = 240) -> list[str]:
    """Each rank's output once it has exited; on a timeout every rank is killed (none left running after the test)."""
    try:
        return [proc.communicate(timeout=timeout)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def rank_results(procs: list[subprocess.Popen], tmp_path: Path) -> list[dict]:
    for proc, output in zip(procs, rank_outputs(procs), strict=True):
        assert proc.returncode == 0, output[-4000:]
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(len(procs))]


def assert_metrics_close(got: list[dict], want: list[dict]) -> None:
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.keys() == w.keys(), (step, sorted(g.keys() ^ w.keys()))
        for key in w:
            assert math.isclose(g[key], w[key], rel_tol=1e-4, abs_tol=ATOL), (step, key, g[key], w[key])


def assert_params_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in want:
        assert torch.allclose(got[key], want[key], atol=ATOL, rtol=0), (key, (got[key] - want[key]).abs().max().item())


def test_two_ranks_train_like_one_process(tiny_model_path, trajectories, tmp_path):
    batch = trajectories(AutoConfig.from_pretrained(tiny_model_path).vocab_size, rows=8, seed=3)
    order = torch.as_tensor(dp_order([0] * len(batch), 2, balance=False))  # Dispatch.DP's layout: rank r's share of each mini-batch
    procs = spawn_ranks(tiny_model_path, batch.index(order), tmp_path)
    single = train(str(tiny_model_path), batch, world_size=1)  # while the ranks run
    ranks = rank_results(procs, tmp_path)

    for name in ("ref_log_prob", "old_log_probs", "values"):  # forward-only passes, rank 0's then rank 1's rows
        assert torch.allclose(torch.cat([r[name] for r in ranks]), single[name][order], atol=ATOL), name
    for role in ("actor", "critic"):
        assert ranks[0][f"{role}_metrics"] == ranks[1][f"{role}_metrics"]  # the global values on every rank
        assert_metrics_close(ranks[0][f"{role}_metrics"], single[f"{role}_metrics"])
        assert_params_close(ranks[0][role], single[role])
    assert single["actor_metrics"][-1]["actor/optimizer_steps"] == 2.0  # two mini-batches per update
    assert single["actor_metrics"][0]["actor/kl_loss"] != 0.0
    assert all(r["engine_equals_actor"] for r in ranks)
    for r in ranks:
        assert r["faults"] == {"uneven_matches": True, "nan_skipped": 2.0, "nan_unchanged": True}
    dynamic = [r["dynamic_bsz"] for r in ranks]
    assert [d["natural"] for d in dynamic] == [2, 1] and [d["used"] for d in dynamic] == [2, 2]
    assert all(d["log_probs_match"] for d in dynamic)
    fixed_norm, dynamic_norm = dynamic[0]["grad_norms"]
    assert dynamic[1]["grad_norms"] == dynamic[0]["grad_norms"] and fixed_norm > 0
    assert math.isclose(dynamic_norm, fixed_norm, rel_tol=1e-4), (dynamic_norm, fixed_norm)
