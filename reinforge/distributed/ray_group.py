"""Ray worker groups: one Ray actor per rank hosts every colocated role's worker.

`RayPool(config)` joins the Ray cluster named by RAY_ADDRESS or ray_kwargs.ray_init.address, or
starts one in this process, and reserves trainer.nnodes x trainer.n_gpus_per_node ranks: on cuda
one placement group per node (STRICT_PACK, as verl) of one GPU per rank; on cpu the same with one
CPU per rank (worker processes for tests and laptops). One `WorkerHost` actor runs on each rank's
bundle. Before any worker is built, each host gets the torch.distributed environment of
reinforge/distributed/process_group.py (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR = rank 0's node,
MASTER_PORT = a free port there) and imports the user's algorithm.custom_modules, so that the
estimators and losses they register resolve in the workers as in the driver.

`pool.group(role, WorkerClass, *args)` builds one worker per host and returns a `RayWorkerGroup`,
the `WorkerGroup` the trainer calls exactly as in local mode; all roles of a pool share each
host's process (verl's colocation of actor+rollout+ref with the critic and the reward model).

Failures: the first rank whose call raises ends the wait, and the driver raises a `RankError`
that starts with that rank, role and method and holds the worker's own traceback (a `UserError`
raised in a worker is re-raised as itself, so the command line prints it as a user error). A hang
watchdog (trainer.hang_dump_s) has every rank dump its Python stacks into the run's log after that
long inside one call, and the driver name the ranks that have not answered.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from reinforge.config.schema import Config
from reinforge.distributed.process_group import ray_address, world_size_of
from reinforge.distributed.worker_group import WorkerGroup, WorkerPool
from reinforge.errors import ConfigError, RankError, UserError, without_colours
from reinforge.trainer.checkpoint import plain_os_errors

# the workers' logs as quiet as the driver's (trainer/main.py): no per-file progress bars or advisory warnings
QUIET_ENV = {"TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
PLACEMENT_TIMEOUT_S = 120  # how long Ray may take to find the GPUs of every node before the run gives up


@ray.remote
class WorkerHost:
    """One rank's process: the workers of every role placed on it, called by role and method name."""

    def __init__(self):
        self.workers: dict[str, Any] = {}

    def node(self) -> tuple[str, list[str], int]:
        """This actor's node IP, the ids of the GPUs Ray gave it, and its pid."""
        gpus = ray.get_runtime_context().get_accelerator_ids().get("GPU", [])
        return ray.util.get_node_ip_address(), [str(gpu) for gpu in gpus], os.getpid()

    def free_port(self) -> int:
        """A TCP port free on this node now (rank 0's: torch.distributed's rendezvous)."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            return sock.getsockname()[1]

    def setup(self, env: dict[str, str], workdir: str, custom_modules: list[str]) -> None:
        """The rank's environment, the driver's working directory (relative paths in the config mean the same here,
        when that folder exists on this node) and the user's algorithm modules, before any worker is built."""
        from reinforge.algorithm import import_custom_modules

        os.environ.update(env)
        if os.path.isdir(workdir):
            os.chdir(workdir)
        import_custom_modules(custom_modules)

    def add_worker(self, role: str, worker_cls: type, args: tuple, kwargs: dict) -> None:
        self.workers[role] = worker_cls(*args, **kwargs)

    def call(self, role: str, method: str, args: tuple, kwargs: dict, hang_dump_s: float) -> Any:
        """`method` of the role's worker; its Python stacks go to stderr (the run's log) every `hang_dump_s` seconds
        it runs (0: never)."""
        if hang_dump_s > 0:
            faulthandler.dump_traceback_later(hang_dump_s, repeat=True, file=sys.stderr)
        try:
            with plain_os_errors():  # a full disk reaches the driver as the OSError, which torch's wrapper would lose
                return getattr(self.workers[role], method)(*args, **kwargs)
        finally:
            if hang_dump_s > 0:
                faulthandler.cancel_dump_traceback_later()


class RayPool(WorkerPool):
    """trainer.nnodes x trainer.n_gpus_per_node ranks, one WorkerHost actor each; `close()` releases them all and
    disconnects from Ray when this pool connected."""

    def __init__(self, config: Config):
        trainer = config.trainer
        self.hang_dump_s = trainer.hang_dump_s
        self.owns_ray = _init_ray(config)
        self.hosts: list = []
        self.placement_groups: list[PlacementGroup] = []
        try:
            _check_cluster_resources(config)
            self.placement_groups = _reserve(trainer.nnodes, trainer.n_gpus_per_node, trainer.device)
            self.hosts = [
                WorkerHost.options(num_cpus=1, num_gpus=1 if trainer.device == "cuda" else 0,
                                   scheduling_strategy=PlacementGroupSchedulingStrategy(
                                       placement_group=group, placement_group_bundle_index=index)).remote()
                for group in self.placement_groups for index in range(trainer.n_gpus_per_node)
            ]
            self.nodes = self.gather([host.node.remote() for host in self.hosts], "starting the worker processes")
            port = self.gather([self.hosts[0].free_port.remote()], "finding a free port on rank 0's node")[0]
            envs = rank_envs([(ip, gpus) for ip, gpus, _ in self.nodes], trainer.n_gpus_per_node, port)
            self.gather([host.setup.remote({**QUIET_ENV, **env}, os.getcwd(), list(config.algorithm.custom_modules or []))
                         for host, env in zip(self.hosts, envs, strict=True)], "setting up the worker processes")
        except BaseException:
            self.close()
            raise
        print(f"reinforge: {len(self.hosts)} ranks on Ray ({trainer.device}): {self._describe(range(len(self.hosts)))}",
              flush=True)

    def group(self, role: str, worker_cls: type, *args, **kwargs) -> RayWorkerGroup:
        self.gather([host.add_worker.remote(role, worker_cls, args, kwargs) for host in self.hosts],
                    f"{role} ({worker_cls.__name__}) construction")
        return RayWorkerGroup(self, role, worker_cls)

    def gather(self, refs: list, what: str) -> list:
        """The results of `refs` (one per rank, in rank order). The first rank to fail ends the wait with its error;
        every trainer.hang_dump_s seconds without an answer the ranks still running are named."""
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        pending, started = list(refs), time.monotonic()
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=self.hang_dump_s or None)
            if not done:
                print(f"reinforge: warning: {what} has not returned after {time.monotonic() - started:.0f}s on "
                      f"{self._describe([rank_of[ref] for ref in pending])}; each of them dumps its Python stacks into this "
                      "log (lines prefixed with its pid) every trainer.hang_dump_s seconds", file=sys.stderr, flush=True)
            for ref in done:
                try:
                    _raise_failure(ref, rank_of[ref], what)
                except RankError as error:
                    if not isinstance(error.__cause__, OSError):
                        raise
                    # a filesystem failure, which the ranks raise together (checkpoint_io's agreed writes): theirs first
                    finished, _ = ray.wait(pending, num_returns=len(pending), timeout=60)
                    for other in finished:
                        with contextlib.suppress(RayTaskError, RayActorError):
                            ray.get(other)
                    raise
        return ray.get(refs)

    def _describe(self, ranks) -> str:
        nodes = getattr(self, "nodes", None)
        if nodes is None:
            return "ranks " + ", ".join(map(str, ranks))
        return "ranks " + ", ".join(f"{rank} (pid {nodes[rank][2]} on {nodes[rank][0]})" for rank in ranks)

    def close(self) -> None:
        for host in self.hosts:
            ray.kill(host)
        for group in self.placement_groups:
            remove_placement_group(group)
        self.hosts, self.placement_groups = [], []
        if self.owns_ray:
            ray.shutdown()
            self.owns_ray = False


class RayWorkerGroup(WorkerGroup):
    """One role's view of a RayPool: its worker on every rank, called through the pool's hosts."""

    def __init__(self, pool: RayPool, role: str, worker_cls: type):
        self.pool, self.role, self.worker_cls = pool, role, worker_cls

    @property
    def world_size(self) -> int:
        return len(self.pool.hosts)

    def _call_all(self, method: str, per_rank_args: list[tuple[tuple, dict]]) -> list[Any]:
        refs = [host.call.remote(self.role, method, args, kwargs, self.pool.hang_dump_s)
                for host, (args, kwargs) in zip(self.pool.hosts, per_rank_args, strict=True)]
        return self.pool.gather(refs, f"{self.role}.{method}")


def rank_envs(nodes: list[tuple[str, list[str]]], per_node: int, master_port: int) -> list[dict[str, str]]:
    """Each rank's torch.distributed environment from its (node IP, GPU ids), ranks in order, `per_node` per node.

    On GPUs a rank sees every GPU of its node's ranks (CUDA_VISIBLE_DEVICES), its own at index LOCAL_RANK, as
    torchrun would give it (Ray alone would show each actor only its own GPU)."""
    envs = []
    for rank, (_, gpus) in enumerate(nodes):
        first = rank - rank % per_node
        env = {"RANK": str(rank), "WORLD_SIZE": str(len(nodes)), "LOCAL_RANK": str(rank % per_node),
               "LOCAL_WORLD_SIZE": str(per_node), "MASTER_ADDR": nodes[0][0], "MASTER_PORT": str(master_port)}
        node_gpus = [gpu for _, ids in nodes[first:first + per_node] for gpu in ids]
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(node_gpus)
        envs.append(env)
    return envs


def _init_ray(config: Config) -> bool:
    """Connect to the configured cluster, or start one here; False when this process was already connected."""
    if ray.is_initialized():
        return False
    kwargs = {key: value for key, value in (config.ray_kwargs.get("ray_init") or {}).items() if value is not None}
    # "local" starts a new Ray: ray.init() without an address would join whatever `ray start` left on this machine
    kwargs["address"] = ray_address(config) or "local"
    _check_cluster(config, kwargs["address"])
    if kwargs["address"] == "local" and config.trainer.device == "cpu":
        # a rank reserves one logical CPU: as many worker processes as asked, even on a machine with fewer cores
        kwargs.setdefault("num_cpus", max(os.cpu_count() or 1, world_size_of(config)))
    if threading.current_thread() is not threading.main_thread():  # only the main thread can hold a signal
        ray.init(**kwargs)
        return True
    held = []  # a Ctrl-C during ray.init, raised once it returns: interrupted inside, Ray's exit could crash the process
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        ray.init(**kwargs)
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        ray.shutdown()
        raise KeyboardInterrupt
    return True


def _check_cluster(config: Config, address: str) -> None:
    """Before ray.init: a ConfigError for trainer.nnodes > 1 with no cluster named (a Ray of the run's own is this one
    machine), and for a named cluster that does not answer (ray.init would wait for it, minutes, saying nothing of ours)."""
    given = "RAY_ADDRESS" if os.environ.get("RAY_ADDRESS") else "ray_kwargs.ray_init.address"
    if address == "local":
        if config.trainer.nnodes > 1:
            raise ConfigError(
                f"trainer.nnodes={config.trainer.nnodes} spreads the ranks over that many machines of a Ray cluster, but no "
                "cluster is named (RAY_ADDRESS or ray_kwargs.ray_init.address), and the Ray a run starts on its own is this "
                "machine alone. Start a cluster (`ray start --head` on one machine, `ray start --address=<head-ip>:6379` "
                "on the others; docs/distributed.md) and set RAY_ADDRESS=<head-ip>:6379, or run with trainer.nnodes=1")
        return
    target, where = address, ""
    if address == "auto":  # Ray reads the address of the cluster last started on this machine from this file
        current = Path(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp") / "ray" / "ray_current_cluster"
        if not current.is_file():
            return  # Ray says itself that no cluster runs here
        target, where = current.read_text().strip(), f" (the address {current} holds)"
    host, _, port = target.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # an address of another form: Ray's to read
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as error:
        stale = " (a cluster started here that has stopped? `ray stop` clears it)" if where else ""
        raise ConfigError(f"{given}={address}: the Ray cluster at {target}{where} cannot be reached "
                          f"({error.strerror or error}){stale}. Start it (`ray start --head{'' if where else f' --port={port}'}`), "
                          f"correct the address, or unset {given} to run on this machine with a Ray of the run's own") from None


def _check_cluster_resources(config: Config) -> None:
    """ConfigError when the cluster has fewer GPUs (CPUs on cpu) in all than the run's ranks."""
    trainer = config.trainer
    kind = "GPU" if trainer.device == "cuda" else "CPU"
    have, need = ray.cluster_resources().get(kind, 0), world_size_of(config)
    if have < need:
        raise ConfigError(
            f"trainer.nnodes={trainer.nnodes} x trainer.n_gpus_per_node={trainer.n_gpus_per_node} asks for {need} "
            f"{kind}s but the Ray cluster{' at ' + ray_address(config) if ray_address(config) else ''} has {have:g}; "
            "lower trainer.n_gpus_per_node or trainer.nnodes, or add nodes (`ray start --address=<head>:6379` on each)")


def _reserve(nnodes: int, per_node: int, device: str) -> list[PlacementGroup]:
    """One STRICT_PACK placement group per node: `per_node` bundles of one GPU (one CPU on cpu) on a single node."""
    bundle = {"CPU": 1, "GPU": 1} if device == "cuda" else {"CPU": 1}
    groups = [placement_group([dict(bundle)] * per_node, strategy="STRICT_PACK") for _ in range(nnodes)]
    try:
        ray.get([group.ready() for group in groups], timeout=PLACEMENT_TIMEOUT_S)
    except GetTimeoutError:
        for group in groups:
            remove_placement_group(group)
        raise ConfigError(
            f"Ray could not place {nnodes} node(s) of trainer.n_gpus_per_node={per_node} ranks ({bundle} each, all of a "
            f"node's ranks on one machine) within {PLACEMENT_TIMEOUT_S}s; the cluster has {ray.available_resources()} "
            "free. Every node must have trainer.n_gpus_per_node free GPUs") from None
    return groups


def _raise_failure(ref, rank: int, what: str) -> None:
    """Re-raise a rank's failure in the driver: a UserError as itself, anything else as a RankError that starts with the
    rank and call and holds the worker's traceback (and an OSError as its cause)."""
    try:
        ray.get(ref)
    except RayTaskError as exc:
        cause = exc.cause
        if isinstance(cause, UserError):
            cause.worker_traceback = f"rank {rank}, {what}: {_worker_traceback(exc)}"  # what --debug shows of the user's code
            raise cause from None
        # an OSError stays its cause, so the driver can tell a full disk during a save (trainer/checkpoint.py)
        raise RankError(f"rank {rank}, {what} raised {type(cause).__name__}: {cause}\n\n"
                        f"the worker's traceback:\n{_worker_traceback(exc)}") from (cause if isinstance(cause, OSError) else None)
    except RayActorError as exc:
        raise RankError(f"rank {rank}, {what}: the worker process died ({without_colours(str(exc))})") from None


def _worker_traceback(exc: RayTaskError) -> str:
    """The remote traceback of a RayTaskError as Python prints one, without Ray's header line about the actor."""
    lines = without_colours(str(exc)).splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("  File ")), 0)
    return "\n".join(["Traceback (most recent call last):", *lines[start:]])
