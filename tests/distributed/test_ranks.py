"""How many ranks a config asks for, where they get their GPUs, and how a rank's failure is printed (no Ray started)."""

import re

import pytest
import torch

from reinforge import cli
from reinforge.config import load_config, unused_settings
from reinforge.distributed.process_group import check_cpu_ranks, world_size_of
from reinforge.errors import ConfigError, RankError


def test_n_gpus_per_node_null_is_every_visible_gpu_on_cuda_and_one_process_on_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    config, _ = load_config(["trainer.device=cuda", "trainer.nnodes=2"])
    assert config.trainer.n_gpus_per_node == 4 and world_size_of(config) == 8
    config, _ = load_config(["trainer.device=cpu"])
    assert config.trainer.n_gpus_per_node == 1 and world_size_of(config) == 1
    config, _ = load_config(["trainer.device=cpu", "trainer.n_gpus_per_node=4"])
    assert world_size_of(config) == 4


def test_more_gpus_than_this_machine_has_is_a_config_error(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"trainer.n_gpus_per_node=8 but this machine has 2 visible GPU\(s\)"):
        load_config(["trainer.device=cuda", "trainer.n_gpus_per_node=8"])
    config, _ = load_config(["trainer.device=cuda", "trainer.n_gpus_per_node=8", "trainer.nnodes=2"])
    assert config.trainer.n_gpus_per_node == 8  # other nodes' GPUs cannot be counted from here: Ray places them


def test_cuda_without_a_gpu_is_a_config_error(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(ConfigError, match="trainer.device=cuda but no CUDA GPU is visible"):
        load_config(["trainer.device=cuda"])
    with pytest.raises(ConfigError, match="trainer.n_gpus_per_node=null means every GPU of this machine, but it has none"):
        load_config(["trainer.device=cuda", "trainer.nnodes=2"])


def test_more_processes_on_a_node_than_gpus_is_a_config_error(monkeypatch):
    """torchrun --nproc_per_node=2 (reinforge sft) on a machine with one GPU: a message, not set_device's traceback."""
    from reinforge.distributed.process_group import init_distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"local rank 1 of 2 ranks has no GPU of its own: 1 visible on this node.*"
                                          r"torchrun --nproc_per_node.*trainer.device=cpu"):
        init_distributed("cuda")


def test_cpu_ranks_need_a_torch_whose_fsdp2_trains_over_gloo(monkeypatch):
    """torch 2.6's FSDP2 fails on CPU ranks (its CPU stream has no record_event); 2.7 and 2.8 sum the ranks' gradients
    (2 ranks' grad_norm 10.398 against one process's 5.199 in tests/training/test_fsdp.py): refused, naming the version."""
    for version in ("2.6.0+cu124", "2.8.0"):
        monkeypatch.setattr(torch, "__version__", version)
        with pytest.raises(ConfigError, match=rf"^2 ranks on the CPU need torch 2\.9 or newer, and this is torch {re.escape(version)}, "
                                              r"whose FSDP2 over gloo does not train correctly there: upgrade torch, or train on one"):
            check_cpu_ranks(2)
        check_cpu_ranks(1)  # one rank shards nothing
    for version in ("2.9.1", "2.9.0a0+50eac811a6.nv25.09", "2.9.0rc1"):  # a release, NGC's build, a candidate
        monkeypatch.setattr(torch, "__version__", version)
        check_cpu_ranks(2)


def test_ray_settings_are_noted_as_unused_only_when_the_run_stays_in_process(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    keys_set = ["trainer.device=cpu", "+ray_kwargs.ray_init.num_cpus=4", "trainer.hang_dump_s=60"]
    config, keys = load_config(keys_set)
    notes = "\n".join(unused_settings(config, keys))
    assert "ray_kwargs.ray_init.num_cpus: one rank" in notes and "trainer.hang_dump_s: one rank" in notes
    config, keys = load_config([*keys_set, "trainer.n_gpus_per_node=2"])
    assert not [line for line in unused_settings(config, keys) if "ray" in line or "hang" in line]


def test_a_rank_error_prints_the_rank_and_the_workers_traceback_first_exit_1(monkeypatch, capsys):
    def failing_train(args):
        raise RankError("rank 1, actor_rollout_ref.generate_sequences raised ValueError: boom\n\n"
                        "the worker's traceback:\nTraceback (most recent call last):\nValueError: boom")

    monkeypatch.setattr(cli, "_train", failing_train)
    assert cli.main(["train"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("reinforge: error: rank 1, actor_rollout_ref.generate_sequences raised ValueError: boom")
    assert "the worker's traceback:\nTraceback" in err and "cli.py" not in err  # the driver's own frames only with --debug


def test_gpu_ranks_see_their_nodes_gpus_with_their_own_at_local_rank():
    ray_group = pytest.importorskip("reinforge.distributed.ray_group")
    nodes = [("10.0.0.1", ["3"]), ("10.0.0.1", ["5"]), ("10.0.0.2", ["0"]), ("10.0.0.2", ["1"])]  # Ray's GPU ids per rank
    envs = ray_group.rank_envs(nodes, 2, 29500)
    assert [env["RANK"] for env in envs] == ["0", "1", "2", "3"]
    assert [env["LOCAL_RANK"] for env in envs] == ["0", "1", "0", "1"]
    assert [env["CUDA_VISIBLE_DEVICES"] for env in envs] == ["3,5", "3,5", "0,1", "0,1"]
    assert {(env["WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"]) for env in envs} == {("4", "10.0.0.1", "29500")}
    cpu = ray_group.rank_envs([("10.0.0.1", []), ("10.0.0.1", [])], 2, 29500)
    assert "CUDA_VISIBLE_DEVICES" not in cpu[0] and [env["LOCAL_RANK"] for env in cpu] == ["0", "1"]


RANK_THAT_EXITS = """
import atexit, sys
import torch, torch.distributed as dist
atexit.register(lambda: print("group left before teardown:", not dist.is_initialized(), flush=True))  # runs last
from reinforge.distributed.process_group import init_distributed
init_distributed("cpu")
dist.all_reduce(torch.ones(1))
if dist.get_rank() == 0 and sys.argv[1] == "fail":
    raise SystemExit("rank 0 stops")
try:
    dist.all_reduce(torch.ones(1))
except RuntimeError as e:
    print("other rank gone:", type(e).__name__, flush=True)
"""


@pytest.mark.parametrize("how", ["finish", "fail"])
def test_a_rank_leaves_its_process_group_when_it_exits(tmp_path, how):
    """Every rank destroys the group at exit (gloo's threads left to the interpreter's teardown can abort a rank that
    has finished: SIGABRT, "terminate called without an active exception"); a rank that stops early leaves the others
    an error to report, not a collective that waits forever."""
    from tests.training.test_fsdp import rank_outputs, start_ranks

    script = tmp_path / "rank.py"
    script.write_text(RANK_THAT_EXITS)
    procs = start_ranks(str(script), how)
    outputs = rank_outputs(procs, timeout=120)
    assert [proc.returncode for proc in procs] == ([0, 0] if how == "finish" else [1, 0]), outputs
    assert all("group left before teardown: True" in out for out in outputs), outputs
    assert ("other rank gone" in outputs[1]) == (how == "fail"), outputs


def test_a_cluster_that_cannot_be_reached_or_is_missing_for_several_nodes_is_named_before_ray_starts(monkeypatch, tmp_path):
    """ray.init would wait minutes for an address that does not answer; several nodes without a cluster would all be
    this machine. Both are ConfigErrors before Ray starts (no Ray started here)."""
    import socket

    pytest.importorskip("ray")
    from reinforge.distributed.ray_group import _check_cluster

    for name in ("RAY_ADDRESS", "TMPDIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    config, _ = load_config(["trainer.nnodes=2"])
    with pytest.raises(ConfigError, match=r"trainer.nnodes=2 spreads the ranks over that many machines of a Ray cluster, "
                                          r"but no cluster is named"):
        _check_cluster(config, "local")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    with pytest.raises(ConfigError, match=rf"^RAY_ADDRESS=127.0.0.1:{port}: the Ray cluster at 127.0.0.1:{port} cannot be "
                                          r"reached \(Connection refused\)"):
        _check_cluster(config, f"127.0.0.1:{port}")
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}")  # left by a cluster that has stopped
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    with pytest.raises(ConfigError, match=r"the address .*ray_current_cluster holds\) cannot be reached .*`ray stop` clears it"):
        _check_cluster(config, "auto")
    with socket.create_server(("127.0.0.1", 0)) as listening:
        _check_cluster(config, f"127.0.0.1:{listening.getsockname()[1]}")  # it answers: Ray's to join
    single, _ = load_config([])
    _check_cluster(single, "local")
