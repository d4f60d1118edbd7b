"""Weight sync check of a GPU engine (run by scripts/gpu_smoke.sh): does the engine generate with the actor's weights?

The engine starts with dummy (random) weights (rollout.load_format=dummy), so its log-probs match the actor's
only if the first push worked. The actor is then changed by hand (its output embedding scaled by 1/4, which
divides the logits by 4 and so moves every log-prob) and handed over as after a training update; the engine's
log-probs must follow. Exits non-zero
with the numbers when either comparison fails.

    python scripts/gpu_smoke_sync.py vllm Qwen/Qwen2.5-0.5B-Instruct
"""

from __future__ import annotations

import sys

import torch

from reinforge.batch import Batch
from reinforge.config import load_config
from reinforge.training.workers import ActorRolloutRefWorker

PROMPTS = ["What is 17 + 25? Answer with the number.", "Name a prime number larger than 50.",
           "Write one sentence about the sea.", "Count from 1 to 5."]
MAX_DIFF = 0.1  # mean |engine - actor| log-prob per response token: bf16 engine vs fp32 actor stays well below this
MIN_CHANGE = 0.3  # the hand-made change must move the actor's log-probs at least this much, or the check proves nothing


def prompt_batch(tokenizer) -> Batch:
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
             for p in PROMPTS]
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    width = max(map(len, ids))
    input_ids = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, prompt in enumerate(ids):
        input_ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    return Batch({"input_ids": input_ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)})


def mean_abs(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return float(((a - b).abs() * mask).sum() / mask.sum())


def rollout_vs_actor(worker: ActorRolloutRefWorker, prompts: Batch) -> tuple[Batch, float]:
    """A rollout, and the mean difference between the engine's log-probs and the actor's for its tokens."""
    batch = worker.generate_sequences(prompts.select())
    actor = worker.compute_log_prob(batch)["old_log_probs"]
    mask = batch["response_mask"].float()
    if mask.sum() == 0:
        sys.exit("FAIL generation: the engine returned only empty responses")
    return batch, mean_abs(batch["rollout_log_probs"], actor.cpu(), mask)


def main(engine: str, model: str) -> None:
    config, _ = load_config([f"actor_rollout_ref.model.path={model}", "data.train_files=unused.parquet",
                             f"actor_rollout_ref.rollout.name={engine}", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                             "actor_rollout_ref.rollout.gpu_memory_utilization=0.3", "actor_rollout_ref.rollout.temperature=1.0",
                             "data.max_response_length=48", "actor_rollout_ref.rollout.update_weights_bucket_megabytes=64"])
    worker = ActorRolloutRefWorker(config, role="actor_rollout")
    worker.init_model(total_training_steps=1)
    prompts = prompt_batch(worker.tokenizer)

    first, diff = rollout_vs_actor(worker, prompts)
    print(f"{engine}: first push  mean |engine - actor| log-prob = {diff:.4f} (must be < {MAX_DIFF})")
    if diff >= MAX_DIFF:
        sys.exit(f"FAIL weight sync: the engine's log-probs are not the actor's after the first push ({diff:.4f})")

    before = worker.compute_log_prob(first)["old_log_probs"].cpu()
    with torch.no_grad():
        worker.actor.model.get_output_embeddings().weight.mul_(0.25)
    change = mean_abs(worker.compute_log_prob(first)["old_log_probs"].cpu(), before, first["response_mask"].float())
    if change < MIN_CHANGE:
        sys.exit(f"FAIL check: scaling the output embedding moved the actor's log-probs by only {change:.4f}")
    worker.update_weights()

    _, diff = rollout_vs_actor(worker, prompts)
    print(f"{engine}: after update mean |engine - actor| log-prob = {diff:.4f} (the change moved them by {change:.4f})")
    if diff >= MAX_DIFF:
        sys.exit(f"FAIL weight sync: the engine did not take the updated weights ({diff:.4f})")
    print(f"{engine}: weight sync OK")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
