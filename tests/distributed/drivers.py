"""Drivers run as processes of their own by the Ray tests, so that a test reads everything a driver's console shows
(Ray forwards the workers' stderr there) and each driver connects to Ray once (`python drivers.py hang|join`)."""

import sys
import time
from pathlib import Path

import ray
import torch

sys.path.insert(0, str(Path(__file__).parent))
import dummy_workers  # noqa: E402

from reinforge.batch import Batch  # noqa: E402
from reinforge.config import load_config  # noqa: E402
from reinforge.distributed import open_worker_pool  # noqa: E402


def hang() -> None:
    """Two ranks sleep 3.5 s past trainer.hang_dump_s=2."""
    config, _ = load_config(["trainer.device=cpu", "trainer.n_gpus_per_node=2", "trainer.hang_dump_s=2"])
    pool = open_worker_pool(config)
    try:
        print(pool.group("probe", dummy_workers.Probe, "hang").sleep(3.5), flush=True)
        time.sleep(3)  # Ray's log monitor forwards the workers' dumps within about a second
    finally:
        pool.close()


def join() -> None:
    """One rank, on the cluster RAY_ADDRESS names: prints the cluster joined, the rank's RANK, and whether the driver is
    still connected after the pool closed."""
    config, _ = load_config(["trainer.device=cpu"])
    pool = open_worker_pool(config)
    try:
        print("joined", ray.get_runtime_context().gcs_address, flush=True)
        out = pool.group("probe", dummy_workers.Probe, "joined").describe(Batch({"x": torch.arange(2)}, {"name": ["a", "b"]}))
        print("ranks", ",".join(out["RANK"]), "world", ",".join(out["WORLD_SIZE"]), flush=True)
    finally:
        pool.close()
    print("connected after close", ray.is_initialized(), flush=True)


if __name__ == "__main__":
    ray.cloudpickle.register_pickle_by_value(dummy_workers)
    {"hang": hang, "join": join}[sys.argv[1]]()
