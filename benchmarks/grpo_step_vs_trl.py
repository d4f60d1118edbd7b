"""One GRPO step of reinforge against TRL's GRPOTrainer, on the same CPU, side by side.

    python benchmarks/grpo_step_vs_trl.py                  # both models, 5 timed steps each
    python benchmarks/grpo_step_vs_trl.py --model small --steps 3

Two models are built locally with the project's tiny-model recipe (training/tiny_model.py): a small
one (~4M parameters, vocabulary 512) and a medium one (~29M parameters, vocabulary 32k, where the
logits dominate memory). Both frameworks run the same GRPO step: the built-in add-one prompts,
8 prompts x 8 samples, exactly 64 new tokens (EOS cannot end a response: reinforge's
`rollout.ignore_eos`, TRL's `min_new_tokens`), temperature 1 with top-k and top-p off, fp32,
no KL term, one optimizer step per step with the same learning rate and the same trivial reward.

Each framework runs in its own child process (so each has its own peak memory); the parent
makes them take steps in turn, after a warm-up step each, so that load from other processes
hits both alike, and reports medians. Before timing it checks that the two do the same work:
the same gradient of one GRPO loss on one fixed batch (same weights, tokens and advantages),
and, every step, the same number of generated tokens.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import compute_floor  # benchmarks/compute_floor.py

SIZES = {  # TinyModelSpec fields
    "small": dict(vocab_size=512, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2),
    "medium": dict(vocab_size=32768, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                   num_attention_heads=8, num_key_value_heads=4),
}
PROMPTS, SAMPLES, NEW_TOKENS, LR = 8, 8, 64, 1e-6
REWARD_SOURCE = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
                "    return len(solution_str) % 7 / 7\n"


def trivial_reward(completions, **kwargs) -> list[float]:
    """TRL's side of REWARD_SOURCE."""
    return [len(text) % 7 / 7 for text in completions]


# ---- memory ---------------------------------------------------------------------------------------
def status_mb(field: str) -> float:
    """A memory line of /proc/self/status (VmRSS: resident now; VmHWM: the highest resident since the last reset)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field} line")


class PeakMemory:
    """The highest resident memory of the process while the `with` block runs, from the kernel's own high-water mark,
    and `ready`: the resident memory at the first block's start (the process set up, before its first step).

    Entering resets the mark (VmHWM) to the current resident memory (writing 5 to /proc/self/clear_refs), leaving
    reads it: every page counts, and no sampling thread competes with the measured code for the cores (a thread
    reading the memory every 3 ms, used until 2026-11-27, slowed the small model's step by about 6%).
    `PeakMemory.lifetime` is the process's highest resident memory so far, imports included: the mark before each
    reset and after each block."""

    lifetime = 0.0
    ready: float | None = None

    def __enter__(self):
        if PeakMemory.ready is None:
            PeakMemory.ready = status_mb("VmRSS")
        PeakMemory.lifetime = max(PeakMemory.lifetime, status_mb("VmHWM"))
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        self.start = status_mb("VmRSS")
        return self

    def __exit__(self, *exc):
        self.peak = status_mb("VmHWM")
        PeakMemory.lifetime = max(PeakMemory.lifetime, self.peak)


class Clock:
    """Seconds spent inside wrapped callables, by phase."""

    def __init__(self):
        self.spent: dict[str, float] = {}
        self.ends: dict[str, float] = {}

    def wrap(self, phase: str, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.ends[phase] = time.perf_counter()
                self.spent[phase] = self.spent.get(phase, 0.0) + self.ends[phase] - start
        return timed

    def reset(self):
        self.spent, self.ends = {}, {}


# ---- the two frameworks ---------------------------------------------------------------------------
def reinforge_config(model_path: str, train_file: str, run_dir: str):
    from reinforge.config import load_config

    Path(run_dir).mkdir(parents=True, exist_ok=True)
    reward = Path(run_dir) / "trivial_reward.py"
    reward.write_text(REWARD_SOURCE)
    config, keys = load_config([
        f"actor_rollout_ref.model.path={model_path}", f"data.train_files={train_file}", f"trainer.default_local_dir={run_dir}",
        f"custom_reward_function.path={reward}", f"data.train_batch_size={PROMPTS}", "data.max_prompt_length=64",
        f"data.max_response_length={NEW_TOKENS}", "data.shuffle=false", "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.rollout.n={SAMPLES}", "actor_rollout_ref.rollout.ignore_eos=true",
        "actor_rollout_ref.rollout.temperature=1.0", "actor_rollout_ref.rollout.top_k=-1", "actor_rollout_ref.rollout.top_p=1.0",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}", f"actor_rollout_ref.actor.optim.lr={LR}",
        "actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.total_training_steps=1000",
    ])
    return config, keys


class ReinforgeRunner:
    def __init__(self, model_path: str, train_file: str, run_dir: str):
        import reinforge.training.actor as actor_module
        from reinforge.distributed import LocalWorkerGroup
        from reinforge.environment.dataloader import PromptLoader
        from reinforge.environment.dataset import collate_fn, create_rl_dataset
        from reinforge.reward import get_compute_score, make_reward_manager
        from reinforge.trainer.ppo_trainer import RLTrainer
        from reinforge.training.model import load_tokenizer
        from reinforge.training.workers import ActorRolloutRefWorker

        config, _ = reinforge_config(model_path, train_file, run_dir)
        tokenizer = load_tokenizer(config)
        dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, is_train=True)
        loader = PromptLoader(dataset, PROMPTS, collate_fn(tokenizer.pad_token_id), shuffle=False, seed=0, drop_last=True,
                              batch_key="data.train_batch_size")
        reward_fn = make_reward_manager("naive", tokenizer, get_compute_score(config), reward_fn_key=config.data.reward_fn_key)
        workers = LocalWorkerGroup(ActorRolloutRefWorker, config, "actor_rollout")
        workers.init_model(1000)
        self.trainer = RLTrainer(config, workers, reward_fn, loader, None, tokenizer, 1000)
        self.clock = Clock()  # the log-prob forward inside the update: model forward + log-probs/entropy
        actor_module.response_logits = self.clock.wrap("forward", actor_module.response_logits)
        actor_module.log_probs_from_logits = self.clock.wrap("forward", actor_module.log_probs_from_logits)

    def step(self) -> dict:
        self.clock.reset()
        with PeakMemory() as memory:
            start, cpu = time.perf_counter(), time.process_time()
            metrics = self.trainer.train_step(next(self.trainer.prompt_stream))
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        self.trainer.global_steps += 1
        forward = self.clock.spent.get("forward", 0.0)
        return {"step": seconds, "cpu": cpu, "generate": metrics["timing_s/gen"], "forward": forward,
                "backward_optimizer": metrics["timing_s/update_actor"] - forward,
                "tokens": int(metrics["response_length/mean"] * PROMPTS * SAMPLES + 0.5),
                "step_memory_mb": memory.peak - PeakMemory.ready, "peak_rss_mb": PeakMemory.lifetime}


def trl_trainer(model_path: str, train_file: str, run_dir: str, max_steps: int, callbacks=()):
    import pyarrow.parquet as pq
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    rows = pq.read_table(train_file).to_pylist()
    prompts = [tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True) for row in rows]
    args = GRPOConfig(
        output_dir=run_dir, use_cpu=True, bf16=False, fp16=False, activation_checkpointing=False, beta=0.0,
        logging_steps=1, report_to=[], save_strategy="no", num_generations=SAMPLES, max_completion_length=NEW_TOKENS,
        per_device_train_batch_size=PROMPTS * SAMPLES, gradient_accumulation_steps=1, steps_per_generation=1,
        num_iterations=1, temperature=1.0, top_k=0, top_p=1.0, learning_rate=LR, max_steps=max_steps,
        shuffle_dataset=False, generation_kwargs={"min_new_tokens": NEW_TOKENS}, dataloader_num_workers=0,
        disable_tqdm=True, seed=0,
    )
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=trivial_reward, args=args, train_dataset=Dataset.from_dict({"prompt": prompts}),
                          processing_class=tokenizer, callbacks=list(callbacks))
    assert not trainer.model.is_gradient_checkpointing, "TRL must run without gradient checkpointing, as reinforge does"
    return trainer


def run_trl(conn, model_path: str, train_file: str, run_dir: str, max_steps: int) -> None:
    """TRL's own training loop, held at the start of each step until the parent says go.

    A step's figures go to the parent from the start of the next step, once TRL has done its per-step logging
    and waits, and the loop runs one step more than is timed, so that TRL does not end its loop (or log)
    while the parent has reinforge take a step."""
    from transformers import TrainerCallback

    clock = Clock()
    state = {}

    class StepGate(TrainerCallback):
        def on_step_begin(self, args, st, control, **kwargs):
            if "figures" in state:
                conn.send(state.pop("figures"))
            if conn.recv() != "step":
                raise SystemExit(0)
            clock.reset()
            state["memory"] = PeakMemory().__enter__()
            state["start"], state["cpu"] = time.perf_counter(), time.process_time()

        def on_step_end(self, args, st, control, **kwargs):
            end, cpu = time.perf_counter(), time.process_time() - state["cpu"]
            memory = state["memory"]
            memory.__exit__()
            step, generate, forward = end - state["start"], clock.spent["generate"], clock.spent["forward"]
            state["figures"] = {"step": step, "cpu": cpu, "generate": generate, "forward": forward,
                                "backward_optimizer": end - clock.ends["loss"], "tokens": state["tokens"],
                                "step_memory_mb": memory.peak - PeakMemory.ready, "peak_rss_mb": PeakMemory.lifetime}

    trainer = trl_trainer(model_path, train_file, run_dir, max_steps + 1, [StepGate()])
    generate_one_turn = trainer._generate_single_turn

    def counted(*args, **kwargs):
        completion_ids, logprobs = generate_one_turn(*args, **kwargs)
        state["tokens"] = sum(len(ids) for ids in completion_ids)
        return completion_ids, logprobs

    trainer._generate_single_turn = clock.wrap("generate", counted)
    trainer._get_per_token_logps_and_entropies = clock.wrap("forward", trainer._get_per_token_logps_and_entropies)
    trainer.compute_loss = clock.wrap("loss", trainer.compute_loss)
    conn.send({"ready": True})
    trainer.train()


def run_reinforge(conn, model_path: str, train_file: str, run_dir: str) -> None:
    runner = ReinforgeRunner(model_path, train_file, run_dir)
    conn.send({"ready": True})
    while conn.recv() == "step":  # and waits for "stop" after the last: its exit overlaps no timed step of TRL's
        conn.send(runner.step())


def child(target: str, thread_policy: str | None, conn, *args) -> None:
    # OpenMP's default wait policy for both, unless told
    os.environ.pop("OMP_WAIT_POLICY", None)
    if thread_policy:
        os.environ["OMP_WAIT_POLICY"] = thread_policy
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        {"reinforge": run_reinforge, "trl": run_trl, "gradcheck": gradient_check}[target](conn, *args)
    except SystemExit:  # told to stop
        raise
    except BaseException as exc:  # the parent reports it
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
        raise


# ---- same work: one GRPO loss gradient on one fixed batch -----------------------------------------
def gradient_check(conn, model_path: str, train_file: str, run_dir: str) -> None:
    """Gradient of one GRPO loss on a fixed batch under TRL's loss and reinforge's actor update, same weights."""
    import torch

    from reinforge.batch import Batch
    from reinforge.training.actor import Actor
    from reinforge.training.model import load_causal_lm

    trl = trl_trainer(model_path, train_file, run_dir, 1)
    tokenizer = trl.processing_class
    generator = torch.Generator().manual_seed(0)
    rows = PROMPTS * SAMPLES
    prompt = tokenizer("<|im_start|>user\nAdd 1: 3145<|im_end|>\n<|im_start|>assistant\n", return_tensors="pt")["input_ids"]
    prompt_ids = prompt.repeat(rows, 1)
    completion_ids = torch.randint(3, len(tokenizer), (rows, NEW_TOKENS), generator=generator)  # no special tokens
    completion_mask = torch.ones_like(completion_ids)
    completion_mask[::3, NEW_TOKENS // 2:] = 0  # some shorter responses
    advantages = torch.randn(rows, generator=generator)

    trl.model.train()
    trl.current_gradient_accumulation_steps = 1
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids), "completion_ids": completion_ids,
              "completion_mask": completion_mask, "advantages": advantages, "num_items_in_batch": completion_mask.sum().float()}
    trl._compute_loss(trl.model, inputs).backward()
    trl_grads = {name: p.grad.clone() for name, p in trl.model.named_parameters()}

    config, _ = reinforge_config(model_path, train_file, run_dir)
    model = load_causal_lm(config, "cpu", trainable=True)
    actor_cfg = config.actor_rollout_ref.actor
    actor_cfg.grad_clip = 1e30  # keep the raw gradient; SGD with lr 0 leaves the weights as they are
    actor = Actor(model, actor_cfg, torch.optim.SGD(model.parameters(), lr=0.0))
    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    attention_mask = torch.cat([torch.ones_like(prompt_ids), completion_mask], 1)
    actor.update_policy(Batch({
        "input_ids": input_ids, "attention_mask": attention_mask, "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "responses": completion_ids, "response_mask": completion_mask, "advantages": advantages[:, None] * completion_mask,
    }), temperature=1.0, rollout_n=SAMPLES)
    ours = torch.cat([p.grad.flatten() for _, p in model.named_parameters()]).double()
    theirs = torch.cat([trl_grads[name].flatten() for name, _ in model.named_parameters()]).double()
    conn.send({"max_abs_diff": float((ours - theirs).abs().max()), "max_abs_grad": float(theirs.abs().max()),
               "cosine": float(torch.nn.functional.cosine_similarity(ours, theirs, dim=0))})


def run_child(ctx, target, thread_policy, *args):
    parent, child_end = ctx.Pipe()
    process = ctx.Process(target=child, args=(target, thread_policy, child_end, *args))
    process.start()
    return process, parent


def receive(conn, who: str) -> dict:
    message = conn.recv()
    if "error" in message:
        sys.exit(f"{who} failed: {message['error']}")
    return message


# ---- the comparison -------------------------------------------------------------------------------
def prepare(size: str) -> tuple[Path, Path, int]:
    from reinforge.environment.tasks import write_task_files
    from reinforge.training.tiny_model import TinyModelSpec, ensure_tiny_model

    path = ensure_tiny_model(TinyModelSpec(**SIZES[size]))
    import json as _json

    config = _json.loads((path / "config.json").read_text())
    params = sum(os.path.getsize(f) for f in path.glob("*.safetensors")) // 4
    return path, write_task_files()[0], (params, config["vocab_size"])


def first_prompt_tokens(model_path: Path, train_file: Path) -> int:
    """The mean token count of the first step's prompts after the chat template (22 for the add-one prompts)."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    rows = pq.read_table(train_file).slice(0, PROMPTS).to_pylist()
    texts = [tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True) for row in rows]
    return round(statistics.mean(len(tokenizer(text)["input_ids"]) for text in texts))


def compare(size: str, steps: int, warmup: int, thread_policy: str | None) -> dict:
    model_path, train_file, (params, vocab) = prepare(size)
    print(f"\n== {size}: {params / 1e6:.1f}M parameters, vocabulary {vocab}, {PROMPTS}x{SAMPLES} samples x {NEW_TOKENS} tokens",
          flush=True)
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="grpo-bench-") as tmp:
        process, conn = run_child(ctx, "gradcheck", None, str(model_path), str(train_file), f"{tmp}/grad")
        check = receive(conn, "gradient check")
        process.join()
        relative = check["max_abs_diff"] / max(check["max_abs_grad"], 1e-30)
        print(f"same gradient on a fixed batch: max |diff| {check['max_abs_diff']:.2e} "
              f"(max |grad| {check['max_abs_grad']:.2e}, relative {relative:.1e}), cosine {check['cosine']:.7f}", flush=True)
        if relative > 1e-3 or check["cosine"] < 0.9999:
            sys.exit("the two losses' gradients differ: the comparison would not be fair")

        total = steps + warmup
        runners = {}
        for name in ("reinforge", "trl"):
            steps_arg = (total,) if name == "trl" else ()  # reinforge steps until told to stop
            runners[name] = run_child(ctx, name, thread_policy, str(model_path), str(train_file), f"{tmp}/{name}", *steps_arg)
        for name, (_, conn) in runners.items():
            receive(conn, name)
        results = {name: [] for name in runners}
        for index in range(total):
            order = list(runners) if index % 2 == 0 else list(runners)[::-1]
            seconds = {}
            for name in order:
                runners[name][1].send("step")
                result = receive(runners[name][1], name)
                seconds[name] = result["step"]
                if index >= warmup:
                    results[name].append(result)
            tokens = {name: results[name][-1]["tokens"] for name in runners} if index >= warmup else None
            if tokens and len(set(tokens.values())) != 1:
                sys.exit(f"generated tokens differ in step {index}: {tokens}")
            print(f"  step {index + 1}/{total}{' (warm-up, not counted)' if index < warmup else ''}: " + ", ".join(
                f"{name} {seconds[name]:.2f}s" for name in runners), flush=True)
        for process, conn in runners.values():
            conn.send("stop")
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
    summary = {name: summarise(rows) for name, rows in results.items()}
    summary["ratio"] = summary["trl"]["step"] / summary["reinforge"]["step"]
    summary["cpu_ratio"] = summary["trl"]["cpu"] / summary["reinforge"]["cpu"]
    summary["gradient"] = check
    summary["floor"] = compute_floor.floor(compute_floor.Shape.of(model_path), compute_floor.StepWork(
        PROMPTS * SAMPLES, PROMPTS, first_prompt_tokens(model_path, train_file), NEW_TOKENS))  # measured after both children have stopped
    print_table(size, summary)
    return summary


def summarise(rows: list[dict]) -> dict:
    out = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    out["tokens_per_s"] = out["tokens"] / out["step"]
    out["peak_rss_mb"] = max(row["peak_rss_mb"] for row in rows)
    out["step_memory_mb"] = max(row["step_memory_mb"] for row in rows)
    return out


def print_table(size: str, summary: dict) -> None:
    print(f"{'':<14}{'step s':>9}{'CPU s':>8}{'tok/s':>9}{'generate':>10}{'logp fwd':>10}{'bwd+opt':>9}{'step mem MB':>13}{'peak RSS MB':>13}")
    for name in ("reinforge", "trl"):
        s = summary[name]
        print(f"{name:<14}{s['step']:>9.2f}{s['cpu']:>8.2f}{s['tokens_per_s']:>9.0f}{s['generate']:>10.2f}{s['forward']:>10.2f}"
              f"{s['backward_optimizer']:>9.2f}{s['step_memory_mb']:>13.0f}{s['peak_rss_mb']:>13.0f}")
    print(f"{size}: reinforge's median step is {summary['ratio']:.2f}x faster than TRL's "
          f"({summary['cpu_ratio']:.2f}x less CPU time)", flush=True)
    floor = summary["floor"]
    print(f"{size}: the fp32 products alone take {floor['step']:.2f} s per step on this machine (generate {floor['generate']:.2f}, "
          f"update {floor['update']:.2f}; {floor['step_shared_prompt']:.2f} s with the update's prompts shared), "
          f"at {floor['decode_gflops_per_s']:.0f}/{floor['batch_gflops_per_s']:.0f} GFLOP/s; reinforge's step is "
          f"{summary['reinforge']['step'] / floor['step']:.2f}x that floor, TRL's {summary['trl']['step'] / floor['step']:.2f}x",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["small", "medium", "both"], default="both")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per framework (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--omp-wait-policy", choices=["default", "passive", "active"], default="default",
                        help="give both frameworks this OMP_WAIT_POLICY (default: the OpenMP default)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    import torch
    import transformers
    import trl

    load = os.getloadavg()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}; "
          f"{os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    sizes = ["small", "medium"] if args.model == "both" else [args.model]
    policy = args.omp_wait_policy.upper() if args.omp_wait_policy != "default" else None
    print(f"OpenMP wait policy: {policy or 'the OpenMP default'}")
    figures = {size: compare(size, args.steps, args.warmup, policy) for size in sizes}
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
