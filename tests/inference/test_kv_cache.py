import torch
from transformers import AutoModelForCausalLM
from transformers.cache_utils import DynamicCache, DynamicLayer

import reinforge.inference.hf as hf
from reinforge.inference import HFEngine, SamplingParams
from reinforge.inference.kv_cache import PreallocatedLayer


def kv(rows, positions, generator):
    shape = (rows, 2, positions, 4)
    return torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


def test_the_preallocated_layer_holds_what_concatenation_holds():
    """Every operation the engine and transformers apply to a layer leaves the same keys and values as
    transformers' concatenating `DynamicLayer`; within its capacity a step writes into the same buffer."""
    generator = torch.Generator().manual_seed(0)
    ours, reference = PreallocatedLayer(capacity=9), DynamicLayer()

    def same(step):
        assert torch.equal(ours.keys, reference.keys) and torch.equal(ours.values, reference.values), step
        assert ours.get_seq_length() == reference.get_seq_length(), step

    def update(rows, positions, step):
        keys, values = kv(rows, positions, generator)
        got, want = ours.update(keys, values), reference.update(keys, values)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True)), step
        same(step)

    update(3, 5, "prefill")
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
    for step in range(5):  # 6, 7, 8 and 9 positions fit; the 10th doubles the buffers (to 20)
        update(3, 1, f"step {step} after the crop")
    assert ours.key_buffer.shape[-2] == 20
    ours.batch_repeat_interleave(2)  # transformers' own method replaces the tensors: the next update re-buffers
    reference.batch_repeat_interleave(2)
    update(6, 1, "after transformers replaced the tensors")


def test_the_engine_samples_the_same_as_with_a_growing_cache(tiny_model_path, tokenizer, monkeypatch):
    """Generation with the preallocated cache gives the tokens, log-probs and finish reasons the concatenating
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

    updates, update = [], PreallocatedLayer.update
    monkeypatch.setattr(PreallocatedLayer, "update", lambda self, *a, **k: updates.append(1) or update(self, *a, **k))
    preallocated = engine.generate_batch(prompts, params, seeds=seeds)
    assert updates  # the engine decoded with the preallocated layers
    monkeypatch.setattr(hf, "preallocated_cache", lambda config, capacity: DynamicCache(config=config))
    growing = engine.generate_batch(prompts, params, seeds=seeds)

    ends = [len(o.token_ids) for o in preallocated]
    assert len(set(ends)) >= 3 and min(ends) < 20, ends
    for ours, reference in zip(preallocated, growing, strict=True):
        assert ours.token_ids == reference.token_ids and ours.finish_reason == reference.finish_reason
        assert torch.allclose(torch.tensor(ours.log_probs), torch.tensor(reference.log_probs), atol=1e-6)

