"""Rollout: from a batch of prompts to a batch of trajectories (verl's `generate_sequences`).

The single-turn agent loop issues one engine request per row, all concurrently, so the engine
runs them as one batch; multi-turn loops (tools, interactions, games; `agent/`) issue several
requests per row through the same `engine.generate` and lay their conversations out with
`trajectories` too. A prompts Batch may carry `sample_seeds` (int64, one seed per row; the
trainer sets it): each row's requests then carry that seed (multi-turn: one derived per turn), so
a row's response does not depend on the rest of the batch, and generating a batch in parts (data
parallel ranks) gives the rows the whole batch gives. The output has verl's fields:

- `prompts` (B, P) left-padded, `responses` (B, R) right-padded with the pad id,
- `input_ids`, `attention_mask`, `position_ids` (B, P + R) for the forward passes,
- `response_mask` (B, R): 1 on generated tokens (EOS included; multi-turn: 0 on tool/user tokens),
- `rollout_log_probs` (B, R): the engine's log-prob of each token.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import torch

from reinforge.batch import Batch
from reinforge.environment.multimodal import MM_KEY
from reinforge.errors import DataError
from reinforge.inference.engine import GenerationOutput, InferenceEngine, SamplingParams

PROMPT_KEYS = ("input_ids", "attention_mask", "position_ids")  # what generate_sequences reads
SEED_KEY = "sample_seeds"  # (B,) int64: each row's sampling seed, read by generate_sequences when present
AGENT_INPUT_KEYS = ("raw_prompt", "extra_info", "agent_name", MM_KEY)  # also read by generation (copied, not moved)


def rollout_inputs(batch: Batch) -> Batch:
    """What generation needs of `batch`: its prompt tensors (moved out), and its seeds and the per-row fields agent loops
    read (copied: a generative reward model samples its verdict on a row with a seed derived from the row's)."""
    present = [key for key in (*AGENT_INPUT_KEYS, SEED_KEY) if key in batch]
    return batch.pop(list(PROMPT_KEYS)).union(batch.select(present, meta_info=False))


def check_single_turn_row(where: str, agent_name: str | None) -> None:
    """DataError when a row of a single-turn rollout (`where`: which, for the message) names an agent loop: its tools or
    environment would never run."""
    if agent_name not in (None, "single_turn_agent"):
        raise DataError(f"{where} has agent_name={agent_name!r}, but actor_rollout_ref.rollout.multi_turn.enable=false: no "
                        "agent loop runs, so it would be generated single-turn; set it to true")


def check_single_turn(prompts: Batch) -> None:
    """`check_single_turn_row` for each row of `prompts`; the built-in dataset's rows are checked at start
    (inference/agent/runner.py check_agent_rows), a Dataset class's here."""
    names = prompts["agent_name"] if "agent_name" in prompts else ()
    for row, name in enumerate(names):
        index = (prompts["extra_info"][row] or {}).get("index") if "extra_info" in prompts else None
        check_single_turn_row(f"a row (extra_info.index={index})", name)


def row_seed_list(prompts: Batch) -> list[int | None]:
    """Each row's sampling seed (None for every row when the Batch has no `sample_seeds`)."""
    return prompts[SEED_KEY].tolist() if SEED_KEY in prompts else [None] * len(prompts)


def prompt_token_lists(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    """The unpadded token ids of each left-padded prompt row."""
    return [row[mask.bool()].tolist() for row, mask in zip(input_ids, attention_mask, strict=True)]


async def _single_turn(engine: InferenceEngine, prompts: list[list[int]], params: SamplingParams,
                       seeds: list[int | None], images: list[dict | None]) -> list[GenerationOutput]:
    return list(await asyncio.gather(*(engine.generate(prompt, replace(params, seed=seed), multi_modal=row)
                                       for prompt, seed, row in zip(prompts, seeds, images, strict=True))))


def run_single_turn(engine: InferenceEngine, prompts: list[list[int]], params: SamplingParams,
                    seeds: list[int | None], images: list[dict | None] | None = None) -> list[GenerationOutput]:
    """Run the single-turn agent loop for every prompt, each with its seed and images' inputs (one batched engine call)."""
    return asyncio.run(_single_turn(engine, prompts, params, seeds, images or [None] * len(prompts)))


def generate_sequences(engine: InferenceEngine, prompts: Batch, params: SamplingParams, pad_token_id: int) -> Batch:
    """Generate one response per row of `prompts` (seeded by `sample_seeds` when present, with its images when it has
    `multi_modal_inputs`) as prompts + responses."""
    outputs = run_single_turn(engine, prompt_token_lists(prompts["input_ids"], prompts["attention_mask"]), params,
                              row_seed_list(prompts), list(prompts[MM_KEY]) if MM_KEY in prompts else None)
    return trajectories(prompts, outputs, pad_token_id, width=params.max_tokens)


def trajectories(prompts: Batch, outputs: list[GenerationOutput], pad_token_id: int, width: int = 0,
                 response_masks: list[list[int]] | None = None) -> Batch:
    """Lay out prompts (left-padded) and responses (right-padded to `width`, or the longest) as one Batch.

    `response_masks` (multi-turn) marks which response tokens the model generated; by default all are.
    The attention mask covers every response token either way.

    Padding to the configured response length, as verl does, keeps the response width constant
    from step to step (the normaliser of `seq-mean-token-sum-norm` depends on it).
    """
    prompt_ids, prompt_mask = prompts["input_ids"].cpu(), prompts["attention_mask"].to(torch.long).cpu()
    batch, width = len(outputs), max(1, width, *(len(o.token_ids) for o in outputs))
    responses = torch.full((batch, width), pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((batch, width), dtype=torch.long)
    attended = torch.zeros((batch, width), dtype=torch.long)
    rollout_log_probs = torch.zeros((batch, width), dtype=torch.float32)
    for row, output in enumerate(outputs):
        n = len(output.token_ids)
        responses[row, :n] = torch.tensor(output.token_ids, dtype=torch.long)
        attended[row, :n] = 1
        response_mask[row, :n] = torch.tensor(response_masks[row], dtype=torch.long) if response_masks is not None else 1
        if output.log_probs:
            rollout_log_probs[row, :n] = torch.tensor(output.log_probs, dtype=torch.float32)

    attention_mask = torch.cat([prompt_mask, attended], dim=1)
    return Batch(
        tensors={
            "prompts": prompt_ids,
            "responses": responses,
            "input_ids": torch.cat([prompt_ids, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
            "response_mask": response_mask,
            "rollout_log_probs": rollout_log_probs,
        },
        non_tensors={"finish_reason": [o.finish_reason for o in outputs]},
        meta_info=dict(prompts.meta_info),
    )


def concat_trajectories(batches: list[Batch], pad_token_id: int) -> Batch:
    """Rows of several trajectory Batches, their prompts left-padded to the widest (batches collate to their own width)."""
    width = max(batch["prompts"].shape[1] for batch in batches)
    aligned = []
    for batch in batches:
        extra = width - batch["prompts"].shape[1]
        if extra:
            batch = batch.select()
            for key, value in (("prompts", pad_token_id), ("input_ids", pad_token_id), ("attention_mask", 0), ("position_ids", 0)):
                batch[key] = torch.nn.functional.pad(batch[key], (extra, 0), value=value)
        aligned.append(batch)
    return Batch.concat(aligned)
