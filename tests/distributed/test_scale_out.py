"""Scale-out end to end: `reinforge train` on 2 Ray workers (FSDP2, gloo) trains like the 1-process run.

Four real CLI runs of the same command line on the tiny model (GRPO with a KL loss against the
reference, 2 mini-batches per step, micro-batches of 1, token-balanced layout):

- one:  1 process, 3 steps, a checkpoint after every step;
- two:  2 Ray workers, the same 3 steps;
- two_from_one: 2 workers resuming from one's step-2 checkpoint (saved by 1 process), training step 3;
- one_from_two: 1 process resuming from two's step-2 checkpoint (saved by 2 workers), training step 3.

Every metric of every step (wall-clock ones aside) and every parameter of the final actor must
agree within fp32 tolerance: rows are sampled with per-row seeds (the same tokens whichever rank
generates them), each rank trains on its share of every mini-batch, and the loss is normalised
by the global totals. Then `reinforge merge` turns two's sharded checkpoint into a Hugging Face
folder that transformers loads, with the trained weights and the same greedy tokens.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("ray")

from reinforge.environment.tasks import write_task_files  # noqa: E402
from reinforge.training.checkpoint_io import read_full_model_state  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trainer"))
from resume import is_wall_clock  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
         "    return sum(map(ord, solution_str)) % 7 / 7\n"


@pytest.fixture(scope="module")
def runs(tiny_model_path, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("scale_out")
    reward = root / "reward.py"
    reward.write_text(REWARD)
    train, val = write_task_files()
    common = [
        f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={train}", f"data.val_files={val}",
        f"custom_reward_function.path={reward}", "data.max_samples=32", "data.max_val_samples=3", "data.train_batch_size=4",
        "data.max_prompt_length=48", "data.max_response_length=6", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        # Adam divides by sqrt(v) + eps: with the default 1e-8 an entry whose gradient is near zero turns the rounding
        # differences of two summation orders (ranks vs micro-batches) into updates up to ~1e-2 x lr; 1e-6 keeps them
        # under 1e-4 x lr, so the comparison below measures the training, not the optimizer's division by ~0
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.eps=1e-6", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.1", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "algorithm.adv_estimator=grpo", "trainer.total_training_steps=3", "trainer.val_before_train=false",
        "trainer.test_freq=3", "trainer.save_freq=1", "trainer.device=cpu", "trainer.logger=[console]",
    ]

    def train(name: str, workers: int, *extra: str) -> Path:
        run_dir = root / name
        cmd = [sys.executable, "-m", "reinforge", "train", *common, f"trainer.n_gpus_per_node={workers}",
               f"trainer.default_local_dir={run_dir}", *extra]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        return run_dir

    one = train("one", 1)
    two = train("two", 2)
    resume = "trainer.resume_mode=resume_path"
    return {"one": one, "two": two,
            "two_from_one": train("two_from_one", 2, resume, f"trainer.resume_from_path={one / 'global_step_2'}"),
            "one_from_two": train("one_from_two", 1, resume, f"trainer.resume_from_path={two / 'global_step_2'}")}


# tokens per data-parallel rank, and the metrics verl averages over micro-batches (each rank's micro-batches hold other
# rows than one process's): the number of ranks is what these runs vary
PER_RANK = ("global_seqlen/", "actor/pg_clipfrac", "actor/ppo_kl", "critic/vf_clipfrac", "critic/vpred_mean")


def records(run_dir: Path) -> dict[int, dict]:
    """metrics.jsonl by step (a step's validation metrics are in its record), wall-clock and per-rank keys left out."""
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        out[record["step"]] = {k: v for k, v in record.items() if not is_wall_clock(k) and not k.startswith(PER_RANK)}
    return out


def assert_same_metrics(got: dict, want: dict, where: str) -> None:
    assert got.keys() == want.keys(), f"{where}: {sorted(got.keys() ^ want.keys())}"
    for key, value in want.items():
        if isinstance(value, float):
            assert math.isclose(got[key], value, rel_tol=RTOL, abs_tol=ATOL), f"{where} {key}: {got[key]} vs {value}"
        else:
            assert got[key] == value, f"{where} {key}: {got[key]} vs {value}"


def assert_same_actor(a: Path, b: Path) -> None:
    """The actor weights two checkpoints hold (saved by any number of ranks) agree within fp32 tolerance."""
    got, want = read_full_model_state(a / "actor", "test"), read_full_model_state(b / "actor", "test")
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        assert torch.allclose(got[name], tensor, rtol=0, atol=ATOL), (name, (got[name] - tensor).abs().max().item())


def test_two_ray_workers_train_like_one_process(runs):
    one, two = records(runs["one"]), records(runs["two"])
    assert sorted(one) == sorted(two) == [1, 2, 3]
    for step, want in one.items():
        assert_same_metrics(two[step], want, f"step {step}")
    assert one[3]["actor/optimizer_steps"] == 2.0 and one[3]["actor/kl_loss"] > 0
    assert any(key.startswith("val-core/") for key in one[3])  # the validation of step 3 (3 prompts: padded to 4 for 2 ranks)
    for step in (1, 2, 3):
        assert_same_actor(runs["two"] / f"global_step_{step}", runs["one"] / f"global_step_{step}")
    shards = sorted(p.name for p in (runs["two"] / "global_step_3" / "actor").glob("model_*.pt"))
    assert shards == ["model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    # the weights moved: a test comparing two untrained models would pass trivially
    start = read_full_model_state(runs["one"] / "global_step_1" / "actor", "test")
    end = read_full_model_state(runs["one"] / "global_step_3" / "actor", "test")
    assert max((end[k] - start[k]).abs().max().item() for k in start) > 1e-3


def test_each_worker_process_starts_its_random_streams_from_the_seed(runs):
    """Nothing in this run draws from numpy's or Python's stream, so each rank saves them as trainer.seed (1) starts them.
    Unseeded, a worker process started them from the OS's entropy: a resume did not continue what the straight run had."""
    numpy_state, python_state = np.random.RandomState(1).get_state(), random.Random(1).getstate()
    for rank in (0, 1):
        rng = torch.load(runs["two"] / "global_step_3" / "actor" / f"extra_state_world_size_2_rank_{rank}.pt",
                         weights_only=False)["rng"]
        assert rng["python"] == python_state, rank
        assert [np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
                for a, b in zip(rng["numpy"], numpy_state, strict=True)] == [True] * 5, rank


@pytest.mark.parametrize("resumed, saved_by", [("two_from_one", "one"), ("one_from_two", "two")])
def test_a_checkpoint_resumes_on_another_number_of_workers(runs, resumed, saved_by):
    got, want = records(runs[resumed]), records(runs["one"])
    assert sorted(got) == [3]  # it trained step 3 only, after the checkpoint of step 2
    assert_same_metrics(got[3], want[3], f"{resumed} step 3")
    assert_same_actor(runs[resumed] / "global_step_3", runs["one"] / "global_step_3")


def test_merge_of_a_two_worker_checkpoint_loads_in_transformers_and_generates_the_same_tokens(runs, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "merged"
    done = subprocess.run([sys.executable, "-m", "reinforge", "merge", str(runs["two"] / "global_step_3" / "actor"), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    merged = AutoModelForCausalLM.from_pretrained(out)
    trained = read_full_model_state(runs["one"] / "global_step_3" / "actor", "test")  # the 1-process actor's weights
    reference = AutoModelForCausalLM.from_pretrained(out)
    reference.load_state_dict(trained)
    for name, tensor in reference.state_dict().items():
        assert torch.allclose(merged.state_dict()[name], tensor, atol=ATOL, rtol=0), name
    prompt = torch.tensor([[5, 17, 42, 9, 3]])
    want = reference.generate(prompt, max_new_tokens=12, do_sample=False)
    assert torch.equal(merged.generate(prompt, max_new_tokens=12, do_sample=False), want)


@pytest.fixture(scope="module")
def image_runs(tiny_vl_model_path, brightness_rows, tmp_path_factory) -> dict[str, Path]:
    """The tiny Qwen2-VL model on rows with images and, one in four, without (tests/conftest.py's brightness task),
    REINFORCE++ with a KL loss against the reference and gradient checkpointing, on 1 process and on 2 Ray workers. One
    sample per prompt and no balancing, so each step's rows (text, image, image, image) go to rank 0 as (text, image)
    and to rank 1 as (image, image): rank 0's first micro-batch runs the stand-in image (training/actor.py)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("scale_out_images")
    (root / "reward.py").write_text(REWARD)
    rows = brightness_rows(16, 0)
    for row in rows[::4]:
        row["images"], row["prompt"] = [], [{"role": "user", "content": "Copy: 01"}]
    pq.write_table(pa.Table.from_pylist(rows), root / "train.parquet")
    pq.write_table(pa.Table.from_pylist(brightness_rows(4, 1)), root / "val.parquet")
    common = [
        f"actor_rollout_ref.model.path={tiny_vl_model_path}", f"data.train_files={root / 'train.parquet'}",
        f"data.val_files={root / 'val.parquet'}", f"custom_reward_function.path={root / 'reward.py'}",
        "data.train_batch_size=4", "data.max_prompt_length=48", "data.max_response_length=6", "actor_rollout_ref.rollout.n=1", "trainer.balance_batch=false",
        "data.shuffle=false",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.eps=1e-6", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.1", "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        "algorithm.adv_estimator=reinforce_plus_plus", "trainer.total_training_steps=2", "trainer.val_before_train=false",
        "trainer.test_freq=2", "trainer.save_freq=2", "trainer.device=cpu", "trainer.logger=[console]",
    ]
    out = {}
    for name, workers in (("one", 1), ("two", 2)):
        cmd = [sys.executable, "-m", "reinforge", "train", *common, f"trainer.n_gpus_per_node={workers}",
               f"trainer.default_local_dir={root / name}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        out[name] = root / name
    return out


def test_rows_with_and_without_images_train_on_two_ray_workers_like_on_one_process(image_runs):
    one, two = records(image_runs["one"]), records(image_runs["two"])
    assert sorted(one) == sorted(two) == [1, 2]
    for step, want in one.items():
        assert_same_metrics(two[step], want, f"step {step}")
    assert one[2]["actor/kl_loss"] > 0 and any(key.startswith("val-core/") for key in one[2])
    assert_same_actor(image_runs["two"] / "global_step_2", image_runs["one"] / "global_step_2")
