"""Validation: generate for every validation prompt with val_kwargs, score, and aggregate.

Metrics use verl's names: `val-core/<data_source>/reward/mean@<n>` for the core variable
(`acc` when the reward function returns one, else `reward`), `val-aux/<data_source>/<key>/mean@<n>`
for the other numeric keys it returns, and `val-aux/.../{best,worst}@<n>` when n > 1. `trainer.log_val_generations` prints that many samples; `trainer.validation_data_dir`
writes every sample as JSONL.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from reinforge.batch import Batch
from reinforge.config.schema import Config
from reinforge.distributed import WorkerGroup
from reinforge.inference.rollout import PROMPT_KEYS
from reinforge.trainer.generations import generation_records, write_generations


def validate(config: Config, wg: WorkerGroup, reward_fn, val_loader, tokenizer, step: int) -> dict[str, float]:
    n = config.actor_rollout_ref.rollout.val_kwargs.n
    key = config.data.reward_fn_key
    values: dict[tuple[str, str], list[float]] = defaultdict(list)  # (data_source, metric) -> per-sample values
    samples = []
    for prompts in val_loader:
        batch = Batch.from_dict(prompts, meta_info={"validate": True}).repeat(n, interleave=True)
        batch = batch.union(wg.generate_sequences(batch.pop(PROMPT_KEYS)))
        scored = reward_fn(batch, return_dict=True)
        scores = scored["reward_tensor"].sum(-1).tolist()
        sources = [str(s) for s in batch[key]] if key in batch else ["unknown"] * len(batch)
        for row, (source, score) in enumerate(zip(sources, scores, strict=True)):
            values[(source, "reward")].append(score)
            for extra_key, extra_values in scored.get("reward_extra_info", {}).items():
                if extra_key != "score" and isinstance(extra_values[row], (int, float)):  # bools count as 0/1
                    values[(source, extra_key)].append(float(extra_values[row]))
        samples += generation_records(batch, scores, tokenizer, step)

    metrics: dict[str, float] = {}
    names = {name for _, name in values}
    core = "acc" if "acc" in names else "reward"  # verl's core variable; the others go under val-aux
    for (source, name), vals in sorted(values.items()):
        group = "val-core" if name == core else "val-aux"
        metrics[f"{group}/{source}/{name}/mean@{n}"] = float(np.mean(vals))
        if n > 1:
            groups = np.array(vals).reshape(-1, n)
            metrics[f"val-aux/{source}/{name}/best@{n}"] = float(groups.max(1).mean())
            metrics[f"val-aux/{source}/{name}/worst@{n}"] = float(groups.min(1).mean())
    _report_samples(config, samples, step)
    return metrics


def _report_samples(config: Config, samples: list[dict], step: int) -> None:
    count = config.trainer.log_val_generations
    for sample in samples[:count]:
        print(f"[val sample @ step {step}] score={sample['score']:.3f} gts={sample['gts']!r}\n"
              f"  input:  {sample['input']!r}\n  output: {sample['output']!r}", flush=True)
    if config.trainer.validation_data_dir:
        write_generations(config.trainer.validation_data_dir, step, samples)
