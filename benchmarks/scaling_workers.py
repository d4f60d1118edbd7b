"""The same GRPO run on 1 worker (in-process) and on 2 Ray workers with FSDP2, side by side.

    python benchmarks/scaling_workers.py                 # small model, 6 steps each, 2 warm-up
    python benchmarks/scaling_workers.py --model medium --steps 4

Each configuration is a real `python -m reinforge train` run of the same command line (the
grpo_step_vs_trl.py step: 8 prompts x 8 samples x 64 tokens, fp32, one update per step), differing
only in `trainer.n_gpus_per_node` (1: the local worker group; 2: two Ray actors on CPU, gloo,
FSDP2). The runs alternate, one configuration after the other, so that load from other processes
hits both alike. Reported per configuration: process start to first step (imports, Ray, workers),
and the median step time after warm-up with its phases from metrics.jsonl; then the speed-up.

What 2 CPU cores can show: two workers each get one core (OMP threads are set to cores / workers),
so the best case is the one-process time on two cores, i.e. no gain; the figure measures what the
data-parallel machinery costs (splitting, gathering, the gradient all-reduce, the engine replica's
weight sync), not the speed-up a GPU per worker gives.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_step_vs_trl import NEW_TOKENS, PROMPTS, REWARD_SOURCE, SAMPLES, SIZES  # noqa: E402

PHASES = ("gen", "update_actor", "update_weights")


def command(model_path: Path, train_file: Path, run_dir: Path, workers: int, steps: int) -> list[str]:
    reward = run_dir.parent / "trivial_reward.py"
    reward.write_text(REWARD_SOURCE)
    return [
        sys.executable, "-m", "reinforge", "train",
        f"actor_rollout_ref.model.path={model_path}", f"data.train_files={train_file}", f"data.val_files={train_file}",
        f"trainer.default_local_dir={run_dir}", f"custom_reward_function.path={reward}", f"data.train_batch_size={PROMPTS}",
        "data.max_prompt_length=64", f"data.max_response_length={NEW_TOKENS}", "data.shuffle=false",
        "algorithm.adv_estimator=grpo", f"actor_rollout_ref.rollout.n={SAMPLES}", "actor_rollout_ref.rollout.ignore_eos=true",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}", "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1", f"trainer.total_training_steps={steps}",
        "trainer.device=cpu", f"trainer.n_gpus_per_node={workers}", "trainer.logger=[console]",
    ]


def run_once(model_path: Path, train_file: Path, tmp: Path, workers: int, steps: int, warmup: int) -> dict:
    run_dir = tmp / f"run-{workers}-{time.monotonic_ns()}"
    start = time.perf_counter()
    result = subprocess.run(command(model_path, train_file, run_dir, workers, steps), capture_output=True, text=True)
    total = time.perf_counter() - start
    if result.returncode:
        sys.exit(f"{workers} worker(s) failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in records if "timing_s/step" in r][warmup:]
    step_total = sum(r["timing_s/step"] for r in records if "timing_s/step" in r)
    row = {"step": statistics.median(r["timing_s/step"] for r in timed), "start": total - step_total,
           "tokens_per_s": statistics.median(r["perf/throughput"] for r in timed)}
    for phase in PHASES:
        row[phase] = statistics.median(r.get(f"timing_s/{phase}", 0.0) for r in timed)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(SIZES), default="small")
    parser.add_argument("--steps", type=int, default=6, help="steps per run, warm-up included")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="runs per configuration, alternating")
    args = parser.parse_args()

    from reinforge.environment.tasks import write_task_files
    from reinforge.training.tiny_model import TinyModelSpec, ensure_tiny_model

    model_path, train_file = ensure_tiny_model(TinyModelSpec(**SIZES[args.model])), write_task_files()[0]
    print(f"{args.model} model, {PROMPTS}x{SAMPLES} samples x {NEW_TOKENS} tokens, {os.cpu_count()} cores, "
          f"{args.steps} steps per run ({args.warmup} warm-up), {args.repeats} runs each", flush=True)
    rows: dict[int, list[dict]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="scaling-bench-") as tmp:
        for repeat in range(args.repeats):
            for workers in ((1, 2) if repeat % 2 == 0 else (2, 1)):
                rows[workers].append(run_once(model_path, train_file, Path(tmp), workers, args.steps, args.warmup))
                print(f"  run {repeat + 1}, {workers} worker(s): step {rows[workers][-1]['step']:.2f} s", flush=True)
    print(f"\n{'workers':>8} {'start s':>8} {'step s':>7} {'tok/s':>7} " + " ".join(f"{p + ' s':>15}" for p in PHASES))
    medians = {}
    for workers, runs in rows.items():
        medians[workers] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        m = medians[workers]
        print(f"{workers:>8} {m['start']:>8.1f} {m['step']:>7.2f} {m['tokens_per_s']:>7.0f} "
              + " ".join(f"{m[p]:>15.2f}" for p in PHASES))
    print(f"\n2 workers vs 1: step time x{medians[1]['step'] / medians[2]['step']:.2f} (above 1: faster)")


if __name__ == "__main__":
    main()
