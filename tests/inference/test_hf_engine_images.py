"""The hf engine with prompts that hold images: the actor's forward gives the log-probs the engine sampled with (the
images' features and the three-axis positions agree between the cached decoding and the one-pass forward), a seeded
row's tokens do not depend on the batch, the image changes what the model says, and vision tokens are never sampled."""

from __future__ import annotations

import pytest
import torch

from reinforge.batch import Batch
from reinforge.config.data_schema import DataConfig
from reinforge.environment.dataset import RLDataset, collate_prompts
from reinforge.environment.multimodal import MM_KEY, vision_token_ids
from reinforge.inference import SamplingParams, generate_sequences
from reinforge.inference.hf import HFEngine
from reinforge.training.actor import response_log_probs


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen2_5_vl"])
def parts(request, tiny_model_path, cache_dir, brightness_rows, tmp_path_factory):
    """Tokenizer, dataset (3 rows with an image, 1 without) and model, for a tiny Qwen2-VL and a tiny Qwen2.5-VL."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from reinforge.training.tiny_vl_model import ensure_tiny_vl_model
    from reinforge.training.vision import load_processor

    tiny_vl_model_path = ensure_tiny_vl_model(tiny_model_path, cache_dir / "models", arch=request.param)
    tokenizer = AutoTokenizer.from_pretrained(tiny_vl_model_path)
    processor = load_processor(str(tiny_vl_model_path), tokenizer)
    rows = brightness_rows(4, seed=5)
    rows[3]["images"] = []  # a text row among them
    rows[3]["prompt"] = [{"role": "user", "content": "Copy: 01"}]
    path = tmp_path_factory.mktemp("images") / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    dataset = RLDataset(str(path), tokenizer, DataConfig(max_prompt_length=64), processor)
    model = AutoModelForImageTextToText.from_pretrained(tiny_vl_model_path)
    assert model.config.model_type == request.param
    return tokenizer, dataset, model


def prompts_of(dataset, tokenizer, rows, n=2, seeds=None) -> Batch:
    batch = Batch.from_dict(collate_prompts([dataset[i] for i in rows], tokenizer.pad_token_id)).repeat(n, interleave=True)
    batch["sample_seeds"] = torch.tensor(seeds if seeds is not None else range(len(batch)), dtype=torch.long)
    return batch


def generate(model, tokenizer, prompts: Batch, max_tokens=6, temperature=1.0) -> Batch:
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], seed=0)
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature)
    out = generate_sequences(engine, prompts, params, tokenizer.pad_token_id)
    out[MM_KEY] = prompts[MM_KEY]
    return out


def test_the_actor_forward_gives_the_log_probs_the_engine_sampled_with(parts):
    tokenizer, dataset, model = parts
    trajectories = generate(model, tokenizer, prompts_of(dataset, tokenizer, [0, 1, 2, 3]), temperature=1.3)
    mask = trajectories["attention_mask"][:, -trajectories["responses"].shape[1]:].bool()
    assert int(mask.sum()) > 20
    with torch.no_grad():
        log_probs, _ = response_log_probs(model, trajectories, temperature=1.3, never=vision_token_ids(model.config))
    gap = (log_probs - trajectories["rollout_log_probs"]).abs()[mask]
    assert float(gap.max()) < 1e-4, gap


def test_a_seeded_row_gets_the_same_tokens_alone_or_in_a_batch_and_the_image_matters(parts):
    tokenizer, dataset, model = parts
    together = generate(model, tokenizer, prompts_of(dataset, tokenizer, [0, 1, 2], n=1, seeds=[7, 8, 9]))
    alone = generate(model, tokenizer, prompts_of(dataset, tokenizer, [1], n=1, seeds=[8]))
    assert together["responses"][1].tolist() == alone["responses"][0].tolist()
    # the same prompt and response tokens with another row's image (of the same size): other log-probs
    other = dataset[0][MM_KEY]
    assert other["image_grid_thw"].tolist() == dataset[1][MM_KEY]["image_grid_thw"].tolist()
    swapped = alone.select()
    swapped[MM_KEY] = [other]
    with torch.no_grad():
        own, _ = response_log_probs(model, alone, temperature=1.0)
        theirs, _ = response_log_probs(model, swapped, temperature=1.0)
    assert float((own - theirs).abs().max()) > 1e-3


def test_vision_tokens_are_never_sampled_even_when_the_model_favours_them(parts):
    tokenizer, dataset, model = parts
    favoured = type(model).from_pretrained(model.name_or_path)
    vision = vision_token_ids(favoured.config)
    assert len(vision) == 4
    with torch.no_grad():  # tied embeddings: the image placeholder's logit dwarfs every other token's
        embeddings = favoured.get_input_embeddings().weight
        embeddings[vision[0]] = embeddings[vision[0]] * 0 + favoured.model.language_model.norm.weight.sign() * 50
    trajectories = generate(favoured, tokenizer, prompts_of(dataset, tokenizer, [0, 3]))
    assert not torch.isin(trajectories["responses"], torch.tensor(vision)).any()
    with torch.no_grad():
        log_probs, _ = response_log_probs(favoured, trajectories, temperature=1.0, never=vision)
    mask = trajectories["attention_mask"][:, -trajectories["responses"].shape[1]:].bool()
    assert float((log_probs - trajectories["rollout_log_probs"]).abs()[mask].max()) < 1e-4
    with torch.no_grad():  # what the actor computes without the engine's rule (vLLM's case): other log-probs
        unmasked, _ = response_log_probs(favoured, trajectories, temperature=1.0)
    assert float((unmasked - trajectories["rollout_log_probs"]).abs()[mask].max()) > 1.0
