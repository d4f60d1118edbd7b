"""GRPO steps on one GPU with the actor computing in bf16 (verl's default on CUDA) and in fp32.

    python benchmarks/gpu_precision.py                     # a Qwen2.5-0.5B-shaped model, 4 steps per arm
    python benchmarks/gpu_precision.py --steps 6 --new-tokens 512

The model has Qwen2.5-0.5B's shape (24 layers, hidden 896, 14 heads with 2 key/value heads, MLP 4864) with
random weights and the 32k tokenizer of `grpo_step_vs_trl.py`'s medium model, built locally (no download).
Each arm is one `reinforge train` process on the built-in add-one prompts: 16 prompts x 8 samples, exactly
`--new-tokens` new tokens (rollout.ignore_eos), the hf engine, fp32 weights and optimizer, no KL. The arms
differ in one key: `actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype` unset (bf16, the
default) or fp32. Reported: medians over the steps after the first, of the step, generation and actor
update times, and the GPU memory peak (`perf/max_memory_allocated_gb`).

`--device cpu` only checks that the script runs (with a small model): on the CPU both arms compute in fp32.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from grpo_step_vs_trl import REWARD_SOURCE, SIZES  # benchmarks/grpo_step_vs_trl.py: its medium model's tokenizer, its reward

SHAPE = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2)
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
ARMS = {"bf16 (default)": [], "fp32": ["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32"]}
REPORTED = {"step s": "timing_s/step", "generate s": "timing_s/gen", "update_actor s": "timing_s/update_actor",
            "GPU peak GB": "perf/max_memory_allocated_gb"}


def build_model(folder: Path, shape: dict) -> Path:
    """A Qwen2 model of `shape` with random weights and the medium benchmark model's tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from reinforge.training.tiny_model import TinyModelSpec, ensure_tiny_model

    tokenizer_source = ensure_tiny_model(TinyModelSpec(**SIZES["medium"]))
    base = json.loads((tokenizer_source / "config.json").read_text())
    config = Qwen2Config(vocab_size=base["vocab_size"], max_position_embeddings=2048, tie_word_embeddings=True,
                         eos_token_id=base["eos_token_id"], pad_token_id=base["pad_token_id"], **shape)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (tokenizer_source / name).exists():
            shutil.copy(tokenizer_source / name, folder / name)
    return folder


def run_arm(model: Path, train_file: str, work: Path, name: str, extra: list[str], args) -> list[dict]:
    run_dir = work / name.split()[0]
    reward = work / "reward.py"
    reward.write_text(REWARD_SOURCE)
    command = [sys.executable, "-m", "reinforge", "train", f"actor_rollout_ref.model.path={model}",
               f"data.train_files={train_file}", f"custom_reward_function.path={reward}", "data.train_batch_size=16",
               "data.max_prompt_length=64", f"data.max_response_length={args.new_tokens}", "algorithm.adv_estimator=grpo",
               "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.rollout.ignore_eos=true",
               "actor_rollout_ref.actor.ppo_mini_batch_size=16", "actor_rollout_ref.actor.optim.lr=1e-6",
               "actor_rollout_ref.model.enable_gradient_checkpointing=false", "trainer.val_before_train=false",
               "trainer.test_freq=-1", f"trainer.total_training_steps={args.steps}", f"trainer.device={args.device}",
               f"trainer.default_local_dir={run_dir}", *extra]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [s for s in steps if "timing_s/step" in s]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="steps per arm (the first is a warm-up)")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args()
    import torch

    from reinforge.environment.tasks import write_task_files

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA GPU visible to torch: this benchmark compares bf16 and fp32 compute on one (--device cpu only "
                 "checks that it runs)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = build_model(work / "model", SHAPE if args.device == "cuda" else SMALL)
        train_file = write_task_files()[0]
        print(f"{torch.cuda.get_device_name() if args.device == 'cuda' else 'CPU'}; 16 prompts x 8 samples "
              f"x {args.new_tokens} tokens, medians of steps 2-{args.steps}")
        print("| arm | " + " | ".join(REPORTED) + " |\n|---|" + "---|" * len(REPORTED))
        for name, extra in ARMS.items():
            timed = run_arm(model, train_file, work, name, extra, args)[1:] or [{}]
            cells = [statistics.median(s[key] for s in timed) if key in timed[0] else float("nan") for key in REPORTED.values()]
            print(f"| {name} | " + " | ".join(f"{value:.2f}" for value in cells) + " |")


if __name__ == "__main__":
    main()
