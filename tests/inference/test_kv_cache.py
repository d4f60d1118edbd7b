import torch
from transformers import AutoModelForCausalLM
from transformers.cache_utils import DynamicCache, DynamicLayer

import reinforge.inference.hf as hf
from reinforge.inference import HFEngine, SamplingParams
from reinforge.inference.kv_cache import GrowingLayer


def kv(rows, positions, generator):
    shape = (rows, 2, positions, 4)
    return torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


def test_the_growing_layer_holds_what_concatenation_holds():
    """Every operation the engine and transformers apply to a layer leaves the same keys and values as
    transformers' concatenating `DynamicLayer`; a step writes into the same buffer while it has room, and a
    full buffer grows by half its length up to the limit, past it only as needed."""
    generator = torch.Generator().manual_seed(0)
    ours, reference = GrowingLayer(limit=9), DynamicLayer()

    def same(step):
        assert torch.equal(ours.keys, reference.keys) and torch.equal(ours.values, reference.values), step
        assert ours.get_seq_length() == reference.get_seq_length(), step

    def update(rows, positions, step):
        keys, values = kv(rows, positions, generator)
        got, want = ours.update(keys, values), reference.update(keys, values)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True)), step
        same(step)

    update(3, 5, "prefill")
    assert ours.key_buffer.shape[-2] == 7  # 5 filled, room for half as many again
    buffer = ours.keys.data_ptr()
    update(3, 1, "one step")
    assert ours.keys.data_ptr() == buffer  # written in place, no copy of the cache
    ours.reorder_cache(torch.tensor([0, 2]))  # rows that finished leave
    reference.reorder_cache(torch.tensor([0, 2]))
    same("rows dropped")
    update(2, 1, "a step after the drop")
    ours.batch_select_indices(torch.tensor([0, 0, 1]))  # a prompt's cache row copied for its samples
    reference.batch_select_indices(torch.tensor([0, 0, 1]))
    same("rows repeated")
    ours.crop(-2)
    reference.crop(-2)
    same("cropped")
    lengths = []
    for step in range(5):  # from 5 positions to 10
        update(3, 1, f"step {step} after the crop")
        lengths.append(ours.key_buffer.shape[-2])
    assert lengths == [7, 7, 9, 9, 10]  # 8 positions: room for 12 but the limit is 9; the 10th: as needed
    ours.batch_repeat_interleave(2)  # transformers' own method replaces the tensors: the next update re-buffers
    reference.batch_repeat_interleave(2)
    update(6, 1, "after transformers replaced the tensors")


def test_the_engine_samples_the_same_as_with_a_concatenating_cache(tiny_model_path, tokenizer, monkeypatch):
    """Generation with the growing cache gives the tokens, log-probs and finish reasons transformers' concatenating
    cache gives, with rows leaving the batch early, repeated prompts and micro-batches."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    stop = tokenizer.convert_tokens_to_ids("<|im_start|>")
    model.lm_head.register_forward_hook(lambda module, inputs, output: output.index_add(
        -1, torch.tensor([stop]), torch.full((*output.shape[:-1], 1), 4.0)))  # some rows stop early
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], micro_batch_size=5)
    texts = ["1 2 3", "the answer is", "4 5 6 7", "words and more words", "9", "apples cost 3"]
    prompts = [tokenizer(text)["input_ids"] for text in texts for _ in range(2)]
    params = SamplingParams(max_tokens=20, temperature=1.0, stop_token_ids=(stop,))
    seeds = list(range(100, 100 + len(prompts)))

    updates, update = [], GrowingLayer.update
    monkeypatch.setattr(GrowingLayer, "update", lambda self, *a, **k: updates.append(1) or update(self, *a, **k))
    growing = engine.generate_batch(prompts, params, seeds=seeds)
    assert updates  # the engine decoded with the growing layers
    monkeypatch.setattr(hf, "growing_cache", lambda config, limit: DynamicCache(config=config))
    concatenating = engine.generate_batch(prompts, params, seeds=seeds)

    ends = [len(o.token_ids) for o in growing]
    assert len(set(ends)) >= 3 and min(ends) < 20, ends
    for ours, reference in zip(growing, concatenating, strict=True):
        assert ours.token_ids == reference.token_ids and ours.finish_reason == reference.finish_reason
        assert torch.allclose(torch.tensor(ours.log_probs), torch.tensor(reference.log_probs), atol=1e-6)

