"""Rows with and without images on 2 FSDP2 ranks (gloo) train as the 1-process run does, even when one rank's
micro-batches have no image while the other's have: the vision encoder's blocks are sharded, so every rank must run
them (training/actor.py runs a stand-in image on the rank without one). Here all rows with images go to rank 0 and
all rows without to rank 1; the log-probs, the metrics of 2 updates and the final parameters must agree."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from reinforge.batch import Batch
from reinforge.config.data_schema import DataConfig
from reinforge.distributed.layout import dp_order
from reinforge.environment.dataset import RLDataset, collate_prompts
from reinforge.environment.multimodal import MM_KEY
from reinforge.inference import SamplingParams, generate_sequences
from reinforge.inference.hf import HFEngine
from tests.training.fsdp_images import train
from tests.training.test_fsdp import assert_metrics_close, assert_params_close, rank_results, start_ranks


def image_and_text_batch(model_path, brightness_rows, tmp_path) -> Batch:
    """8 trajectories: rows 0, 2, 4, 6 (rank 0's share under Dispatch.DP's layout) with an image, the others without."""
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from reinforge.training.vision import load_processor

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    rows = brightness_rows(8, seed=9)
    for row in rows[1::2]:
        row["images"], row["prompt"] = [], [{"role": "user", "content": "Copy: 10"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    dataset = RLDataset(str(tmp_path / "rows.parquet"), tokenizer, DataConfig(max_prompt_length=64),
                        load_processor(str(model_path), tokenizer))
    prompts = Batch.from_dict(collate_prompts([dataset[i] for i in range(8)], tokenizer.pad_token_id))
    prompts["sample_seeds"] = torch.arange(8)
    engine = HFEngine(AutoModelForImageTextToText.from_pretrained(model_path), tokenizer.pad_token_id, [tokenizer.eos_token_id])
    batch = generate_sequences(engine, prompts, SamplingParams(max_tokens=4, temperature=1.5), tokenizer.pad_token_id)
    batch[MM_KEY] = prompts[MM_KEY]
    batch["response_mask"] = batch["attention_mask"][:, -4:]
    batch["advantages"] = torch.randn(8, 1, generator=torch.Generator().manual_seed(0)).expand(8, 4) * batch["response_mask"]
    return batch


def test_a_rank_without_images_trains_beside_a_rank_with_them(tiny_vl_model_path, brightness_rows, tmp_path):
    batch = image_and_text_batch(tiny_vl_model_path, brightness_rows, tmp_path)
    order = torch.as_tensor(dp_order([0] * len(batch), 2, balance=False))
    shares = batch.index(order).chunk(2)
    assert all(x is not None for x in shares[0][MM_KEY]) and all(x is None for x in shares[1][MM_KEY])
    torch.save(batch.index(order), tmp_path / "batch.pt")
    procs = start_ranks("fsdp_images.py", tiny_vl_model_path, tmp_path / "batch.pt", tmp_path)
    single = train(str(tiny_vl_model_path), batch, world_size=1)  # while the ranks run
    ranks = rank_results(procs, tmp_path)
    for name in ("ref_log_prob", "old_log_probs"):
        assert torch.allclose(torch.cat([r[name] for r in ranks]), single[name][order], atol=2e-5), name
    assert ranks[0]["actor_metrics"] == ranks[1]["actor_metrics"]
    assert_metrics_close(ranks[0]["actor_metrics"], single["actor_metrics"])
    assert_params_close(ranks[0]["actor"], single["actor"])
    start = __import__("transformers").AutoModelForImageTextToText.from_pretrained(tiny_vl_model_path).state_dict()
    moved = [name for name in single["actor"] if ".visual." in name and not torch.equal(single["actor"][name], start[name])]
    assert moved  # the vision encoder trained (from rank 0's images), and rank 1's copy of it stayed in step
