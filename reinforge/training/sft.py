"""Supervised fine-tuning on generated (prompt, answer) pairs: teacher forcing, mean NLL of answer tokens.

Used to pretrain the quickstart's tiny model on a skill (see environment/tasks.py), from examples drawn afresh at each
step; `reinforge sft` (trainer/sft_trainer.py) trains on data files, with the same batch layout and loss. The loss is
the mean negative log-prob of the answer's tokens and the EOS after them, computed with the same
`response_log_probs` the RL update uses, on the same prompt/response layout as a rollout.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from reinforge.algorithm import masked_mean
from reinforge.environment.sft_dataset import SFTExample, collate_examples
from reinforge.training.actor import response_log_probs
from reinforge.training.tiny_model import move_into_place

Examples = Callable[[random.Random, int], list[tuple[str, str]]]


def sft_batch(tokenizer, examples: list[tuple[str, str]]):
    """A batch in the rollout layout (environment/sft_dataset.py, as `reinforge sft` trains on) whose responses are the
    answers followed by EOS, all trained."""
    rows = []
    for prompt, answer in examples:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
        response = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(SFTExample(tokenizer(text, add_special_tokens=False)["input_ids"], response, [1] * len(response)))
    return collate_examples(rows, tokenizer.pad_token_id)


def supervised_finetune(model, tokenizer, examples: Examples, steps: int, lr: float = 3e-3,
                        batch_size: int = 64, seed: int = 0) -> list[float]:
    """Train `model` in place for `steps` AdamW steps; returns the loss of each step."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    losses = []
    for _ in range(steps):
        batch = sft_batch(tokenizer, examples(rng, batch_size))
        log_probs, _ = response_log_probs(model, batch, temperature=1.0)
        loss = -masked_mean(log_probs, batch["response_mask"].float())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return losses


def ensure_finetuned(base: Path, target: Path, examples: Examples, steps: int, **kwargs) -> Path:
    """`target` = `base` fine-tuned on `examples`, built once and cached (written atomically)."""
    if (target / "config.json").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    supervised_finetune(model, tokenizer, examples, steps, **kwargs)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        move_into_place(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
