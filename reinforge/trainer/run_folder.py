"""The run folder itself: held by one run at a time (`hold_run_folder`), its resolved config written at the start
(`write_run_config`), and the error for a folder of the run that cannot be written (`unwritable`). The checkpoints in it
are trainer/checkpoint.py's."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

from reinforge.errors import ConfigError
from reinforge.trainer.checkpoint import _write_atomic

LOCK = ".reinforge.lock"  # held by the process training in the run folder


def unwritable(setting: str, run_dir: Path, error: OSError, key: str = "trainer.default_local_dir",
               what: str = "the run folder") -> ConfigError:
    """The error for a folder of the run that cannot be made or written (`key`=`setting`)."""
    return ConfigError(f"{key}={setting}: cannot write {what} {run_dir} ({error.strerror or error}: {error.filename}); "
                       f"point {key} at a writable folder")


@contextmanager
def hold_run_folder(run_dir: Path, setting: str):
    """`run_dir` made, and held by this process (an exclusive lock on its .reinforge.lock file, which the system releases
    when the process ends, however it ends) until the block ends: a second run started in it, which would write over the
    first's checkpoints or append to its metrics, stops with a ConfigError naming the process holding it."""
    import fcntl

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = open(run_dir / LOCK, "a+")  # noqa: SIM115  (closed below, after the block)
    except OSError as error:
        raise unwritable(setting, run_dir, error) from None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            raise ConfigError(f"trainer.default_local_dir={setting} is in use by another reinforge run (process {holder}); "
                              "wait for it to end, or give this run another trainer.default_local_dir") from None
        except OSError as error:  # a file system without locks (some network mounts): train, unguarded
            print(f"reinforge: warning: cannot lock the run folder {run_dir} ({error.strerror or error}); nothing stops "
                  "a second run from writing in it at the same time", file=sys.stderr, flush=True)
            yield
            return
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_run_config(run_dir: Path, config: dict, setting: str) -> None:
    """The run's resolved config as `run_dir`/config.yaml (`reinforge report` reads it), through a new file and a rename:
    a folder where files cannot be added fails here, at the start, with a ConfigError naming `setting`."""
    from omegaconf import OmegaConf

    try:
        _write_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(config)))
    except OSError as error:
        raise unwritable(setting, run_dir, error) from None
