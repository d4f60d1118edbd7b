"""A driver whose two ranks sleep past trainer.hang_dump_s, run as its own process by test_ray_group.py so that the
test reads everything this driver's console shows (Ray forwards the workers' stderr there)."""

import sys
import time
from pathlib import Path

import ray

sys.path.insert(0, str(Path(__file__).parent))
import dummy_workers  # noqa: E402

from reinforge.config import load_config  # noqa: E402
from reinforge.distributed import open_worker_pool  # noqa: E402

if __name__ == "__main__":
    ray.cloudpickle.register_pickle_by_value(dummy_workers)
    config, _ = load_config(["trainer.device=cpu", "trainer.n_gpus_per_node=2", "trainer.hang_dump_s=2"])
    pool = open_worker_pool(config)
    try:
        print(pool.group("probe", dummy_workers.Probe, "hang").sleep(3.5), flush=True)
        time.sleep(3)  # Ray's log monitor forwards the workers' dumps within about a second
    finally:
        pool.close()
