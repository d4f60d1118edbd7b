from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from reinforge.batch import Batch
from reinforge.inference import HFEngine, SamplingParams, generate_sequences
from reinforge.inference.hf import filter_logits
from reinforge.inference.seeds import CDF_BLOCK, TRAIN, VALIDATION, derive_seed, row_seeds, sample_inverse_cdf
from reinforge.training.actor import response_log_probs


def prompts_batch(tokenizer, texts):
    ids = [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True)
           for t in texts]
    ids = [i["input_ids"] if isinstance(i, dict) or hasattr(i, "keys") else i for i in ids]
    width = max(map(len, ids))
    input_ids = torch.full((len(ids), width), tokenizer.pad_token_id)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, seq in enumerate(ids):
        input_ids[row, width - len(seq):] = torch.tensor(seq)
        mask[row, width - len(seq):] = 1
    return Batch({"input_ids": input_ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)})


def load(path):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(path).eval()


def test_greedy_matches_transformers_generate(tiny_model_path, tokenizer):
    model = load(tiny_model_path)
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
    batch = prompts_batch(tokenizer, ["Reverse the digits: 1 2 3", "a much longer prompt with words 9 8"])
    out = generate_sequences(engine, batch, SamplingParams(max_tokens=12, do_sample=False), tokenizer.pad_token_id)
    reference = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=12,
                               do_sample=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    expected = reference[:, batch["input_ids"].shape[1]:]
    for row in range(2):
        n = int(out["response_mask"][row].sum())
        got = out["responses"][row, :n]
        want = expected[row][: n]
        assert torch.equal(got, want)


def test_engine_log_probs_equal_teacher_forced_log_probs(tiny_model_path, tokenizer):
    model = load(tiny_model_path)
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], seed=3)
    batch = prompts_batch(tokenizer, ["1 2 3", "4 5", "some words here"])
    out = generate_sequences(engine, batch, SamplingParams(max_tokens=10, temperature=0.7), tokenizer.pad_token_id)
    with torch.no_grad():
        log_probs, _ = response_log_probs(model, out, temperature=0.7)
    mask = out["response_mask"].bool()
    assert torch.allclose(log_probs[mask], out["rollout_log_probs"][mask], atol=1e-4)
    assert torch.all(out["attention_mask"][:, batch["input_ids"].shape[1]:] == out["response_mask"])


def test_a_diverged_policy_stops_sampling_with_a_message(tiny_model_path, tokenizer):
    """NaN or inf logits (a learning rate far too high): a TrainingError naming the cause, not the inverse CDF's index
    past the vocabulary."""
    from reinforge.errors import TrainingError

    batch = prompts_batch(tokenizer, ["1 2 3", "4 5"])
    for bad in (float("nan"), float("inf")):
        model = load(tiny_model_path)
        with torch.no_grad():
            model.lm_head.weight[5].fill_(bad)  # one vocabulary entry's logit is NaN (inf: +inf or -inf) on every row
        engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], seed=1)
        with pytest.raises(TrainingError, match="logits are NaN or infinite while generating: its weights have diverged"):
            generate_sequences(engine, batch, SamplingParams(max_tokens=4), tokenizer.pad_token_id)


def test_sampling_is_reproducible_from_the_engine_state(tiny_model_path, tokenizer):
    model = load(tiny_model_path)
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], seed=7)
    batch = prompts_batch(tokenizer, ["1 2 3"] * 4)
    params = SamplingParams(max_tokens=8)
    state = engine.state_dict()
    first = generate_sequences(engine, batch, params, tokenizer.pad_token_id)["responses"]
    engine.load_state_dict(state)
    again = generate_sequences(engine, batch, params, tokenizer.pad_token_id)["responses"]
    assert torch.equal(first, again)
    different = generate_sequences(engine, batch, params, tokenizer.pad_token_id)["responses"]
    assert not torch.equal(first, different)


def test_stop_on_eos_and_length_limit(tiny_model_path, tokenizer):
    model = load(tiny_model_path)
    # make EOS the certain next token: every response is exactly [eos]
    def favour_eos(module, inputs, output):
        output[..., tokenizer.eos_token_id] += 1000.0
        return output

    model.lm_head.register_forward_hook(favour_eos)
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
    out = generate_sequences(engine, prompts_batch(tokenizer, ["1", "2 2"]), SamplingParams(max_tokens=5), tokenizer.pad_token_id)
    assert out["responses"].shape == (2, 5)  # padded to the response length, as verl does
    assert out["response_mask"].sum(-1).tolist() == [1, 1] and torch.all(out["responses"][:, 0] == tokenizer.eos_token_id)
    assert out["finish_reason"].tolist() == ["stop", "stop"]
    ignoring = generate_sequences(engine, prompts_batch(tokenizer, ["1"]), SamplingParams(max_tokens=5, ignore_eos=True),
                                  tokenizer.pad_token_id)
    assert ignoring["response_mask"].sum().item() == 5 and ignoring["finish_reason"].tolist() == ["length"]


def test_finished_rows_leave_the_batch(tiny_model_path, tokenizer):
    """A row that stops is dropped from the decoding batch, and the rows left keep their own cache and positions."""
    model = load(tiny_model_path)
    stop = tokenizer.convert_tokens_to_ids("<|im_start|>")
    model.lm_head.register_forward_hook(lambda module, inputs, output: output.index_add(
        -1, torch.tensor([stop]), torch.full((*output.shape[:-1], 1), 5.0)))  # sampled about one time in four
    decoded_rows = []
    model.model.register_forward_pre_hook(lambda module, args, kwargs: decoded_rows.append(kwargs["input_ids"].shape[0]),
                                          with_kwargs=True)
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], seed=0)
    batch = prompts_batch(tokenizer, ["1 2 3", "the answer is", "4 5 6 7", "words and more words", "9", "apples cost 3"])
    out = generate_sequences(engine, batch, SamplingParams(max_tokens=12, stop_token_ids=(stop,)), tokenizer.pad_token_id)
    ends = out["response_mask"].sum(-1).tolist()
    assert len(set(ends)) >= 3 and min(ends) < 12, ends  # rows stopped at different steps
    for row, end in enumerate(ends):
        tokens = out["responses"][row, :end].tolist()
        assert stop not in tokens[:-1] and (tokens[-1] == stop) == (out["finish_reason"][row] == "stop")
    # the prefill and the step that samples token t ran only on the rows that had not stopped before t
    assert decoded_rows == [sum(end > t for end in ends) for t in range(max(ends))]
    with torch.no_grad():  # a row that kept decoding after others left still saw its own prompt and tokens
        log_probs, _ = response_log_probs(model, out, temperature=1.0)
    mask = out["response_mask"].bool()
    assert torch.allclose(log_probs[mask], out["rollout_log_probs"][mask], atol=1e-4)


def test_a_repeated_prompt_is_prefilled_once(tiny_model_path, tokenizer):
    """GRPO's n samples of one prompt share one prefill row; each row then samples on its own."""
    model = load(tiny_model_path)
    forward_rows = []
    model.model.register_forward_pre_hook(lambda module, args, kwargs: forward_rows.append(kwargs["input_ids"].shape),
                                          with_kwargs=True)
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], seed=2)
    batch = prompts_batch(tokenizer, ["1 2 3"] * 3 + ["a longer prompt 4 5"] * 2)
    out = generate_sequences(engine, batch, SamplingParams(max_tokens=6, ignore_eos=True), tokenizer.pad_token_id)
    assert forward_rows[0] == (2, batch["input_ids"].shape[1]) and all(shape == (5, 1) for shape in forward_rows[1:])
    assert len({tuple(r) for r in out["responses"][:3].tolist()}) > 1  # the copies sample different responses
    with torch.no_grad():
        log_probs, _ = response_log_probs(model, out, temperature=1.0)
    assert torch.allclose(log_probs, out["rollout_log_probs"], atol=1e-4)


def test_top_k_and_top_p_filtering():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, top_k=2, top_p=1.0)[0, 2:]).all()
    kept = ~torch.isinf(filter_logits(logits, top_k=-1, top_p=0.7))
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7, 0.5 + 0.3 >= 0.7
    assert (~torch.isinf(filter_logits(logits, top_k=-1, top_p=0.1))).sum() == 1
    for top_p in (0.0, -1.0):  # refused by the config checks; still the best token, never an empty distribution
        assert (~torch.isinf(filter_logits(logits, top_k=-1, top_p=top_p))).tolist() == [[True, False, False, False]]


def test_per_request_token_limits_run_as_one_batch(tiny_model_path, tokenizer):
    """Concurrent requests that differ only in max_tokens share one engine call; each row stops at its own limit
    (finish reason "length") with the tokens greedy decoding gives up to that limit, and leaves the decoding batch."""
    import asyncio

    model = load(tiny_model_path)
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
    prompts = [tokenizer("1 2 3")["input_ids"], tokenizer("the answer is")["input_ids"], tokenizer("4 5")["input_ids"]]
    limits = [3, 8, 5]
    greedy = SamplingParams(max_tokens=8, do_sample=False, ignore_eos=True)
    full = engine.generate_batch(prompts, greedy)
    calls, decoded_rows = [], []
    model.model.register_forward_pre_hook(lambda module, args, kwargs: decoded_rows.append(kwargs["input_ids"].shape[0]),
                                          with_kwargs=True)
    run_batch = engine.generate_batch
    engine.generate_batch = lambda *args: calls.append(args) or run_batch(*args)

    async def requests():
        return await asyncio.gather(*(engine.generate(p, SamplingParams(max_tokens=k, do_sample=False, ignore_eos=True))
                                      for p, k in zip(prompts, limits, strict=True)))

    outputs = asyncio.run(requests())
    assert len(calls) == 1 and calls[0][1].max_tokens == 8 and calls[0][2] == limits
    assert [o.token_ids for o in outputs] == [f.token_ids[:k] for f, k in zip(full, limits, strict=True)]
    assert [len(o.log_probs) for o in outputs] == limits and {o.finish_reason for o in outputs} == {"length"}
    assert decoded_rows == [sum(k > t for k in limits) for t in range(max(limits))]


def test_a_seeded_row_samples_the_same_tokens_in_any_batch(tiny_model_path, tokenizer):
    """A row's tokens and log-probs follow from its prompt and seed alone: not from the other rows, the
    micro-batch size, or rows leaving the batch early; another seed samples another response."""
    model = load(tiny_model_path)
    stop = tokenizer.convert_tokens_to_ids("<|im_start|>")
    model.lm_head.register_forward_hook(lambda module, inputs, output: output.index_add(
        -1, torch.tensor([stop]), torch.full((*output.shape[:-1], 1), 5.0)))  # some rows stop early
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
    params = SamplingParams(max_tokens=16, temperature=1.0, stop_token_ids=(stop,))
    target, seed = tokenizer("1 2 3")["input_ids"], 1234
    others = [tokenizer(text)["input_ids"] for text in ["the answer is", "4 5 6 7", "9", "words and more words", "1 2 3",
                                                        "apples cost 3", "8 8"]]
    alone = engine.generate_batch([target], params, seeds=[seed])[0]
    prompts = others[:3] + [target] + others[3:]
    seeds = [11, 12, 13, seed, 14, 15, 16, 17]
    in_batch = engine.generate_batch(prompts, params, seeds=seeds)
    ends = [len(o.token_ids) for o in in_batch]
    assert min(ends) < len(alone.token_ids) and len(set(ends)) >= 3, ends  # rows left the batch before the target ended
    engine.micro_batch_size = 2
    in_micro_batches = engine.generate_batch(prompts, params, seeds=seeds)
    for output in (in_batch[3], in_micro_batches[3]):
        assert output.token_ids == alone.token_ids and output.finish_reason == alone.finish_reason
        assert torch.allclose(torch.tensor(output.log_probs), torch.tensor(alone.log_probs), atol=1e-5)
    assert in_batch[4].token_ids != in_batch[3].token_ids  # the same prompt with another seed
    assert len({tuple(engine.generate_batch([target], params, seeds=[s])[0].token_ids) for s in range(5)}) > 1


FIXED = torch.log(torch.tensor([0.4, 0.25, 0.15, 0.1, 0.06, 0.04]))  # the logits of tokens 10..15; every other token -1e4


@pytest.mark.parametrize(("temperature", "top_k", "top_p", "expected"), [
    (1.0, -1, 1.0, [0.4, 0.25, 0.15, 0.1, 0.06, 0.04]),
    (2.0, -1, 1.0, [p**0.5 / 2.2809 for p in (0.4, 0.25, 0.15, 0.1, 0.06, 0.04)]),  # sum of the square roots: 2.2809
    # top-k 4 keeps 0.4/0.9, 0.25/0.9, 0.15/0.9, 0.1/0.9; the mass before them is 0, .444, .722, .889: top-p 0.75 keeps 3
    (1.0, 4, 0.75, [0.5, 0.3125, 0.1875, 0, 0, 0]),
])
@pytest.mark.parametrize("seeded", [True, False])
def test_sampling_draws_from_the_filtered_distribution(tiny_model_path, tokenizer, temperature, top_k, top_p, expected,
                                                       seeded):
    """Over many rows (each with its own seed, or all from the engine's generator), the first token's frequencies
    match the distribution (chi-square, 0.1% level); filtered tokens never occur."""
    model = load(tiny_model_path)

    def fixed_logits(module, inputs, output):
        logits = torch.full_like(output, -1e4)
        logits[..., 10:16] = FIXED
        return logits

    model.lm_head.register_forward_hook(fixed_logits)
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
    draws = 20000
    outputs = engine.generate_batch([[5, 6, 7]] * draws, SamplingParams(max_tokens=1, temperature=temperature, top_k=top_k,
                                                                         top_p=top_p), seeds=list(range(draws)) if seeded else None)
    counts = torch.bincount(torch.tensor([o.token_ids[0] for o in outputs]), minlength=model.config.vocab_size)
    assert counts[:10].sum() == 0 and counts[16:].sum() == 0
    # each token's log-prob is under the distribution before top-k/top-p: log softmax(logits / temperature)
    unfiltered = torch.log_softmax(FIXED / temperature, -1)
    for token in range(10, 16):
        got = [o.log_probs[0] for o in outputs if o.token_ids[0] == token]
        assert all(abs(value - unfiltered[token - 10].item()) < 1e-5 for value in got), (token, got[:3])
    assert abs(sum(expected) - 1) < 1e-4
    observed, expected = counts[10:16].double(), torch.tensor(expected, dtype=torch.float64) * draws
    assert torch.all(observed[expected == 0] == 0), observed
    kept = expected > 0
    chi_square = float((((observed - expected)[kept]) ** 2 / expected[kept]).sum())
    limits = {2: 13.82, 5: 20.52}  # the 99.9% quantiles of chi-square with 2 and 5 degrees of freedom
    assert chi_square < limits[int(kept.sum()) - 1], (observed.tolist(), expected.tolist())


def test_generating_a_batch_in_two_parts_equals_generating_it_whole(tiny_model_path, tokenizer):
    """What data-parallel generation needs: rows 0..k and k..B, each part with its rows' `sample_seeds`, give
    the whole batch's responses row for row."""
    model = load(tiny_model_path)
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], micro_batch_size=4)
    batch = prompts_batch(tokenizer, ["1 2 3", "the answer is", "4 5 6 7", "9"]).repeat(2, interleave=True)
    batch["sample_seeds"] = row_seeds(len(batch), 1, TRAIN, 5, 0)
    params, pad = SamplingParams(max_tokens=10, temperature=1.0), tokenizer.pad_token_id
    whole = generate_sequences(engine, batch, params, pad)
    assert not torch.equal(whole["responses"][0], whole["responses"][1])  # the two samples of a prompt differ
    for k in (3, 5):
        parts = [generate_sequences(engine, batch.index(part), params, pad) for part in (slice(0, k), slice(k, len(batch)))]
        assert torch.equal(torch.cat([p["responses"] for p in parts]), whole["responses"])
        assert torch.allclose(torch.cat([p["rollout_log_probs"] for p in parts]), whole["rollout_log_probs"], atol=1e-5)
        assert [r for p in parts for r in p["finish_reason"]] == list(whole["finish_reason"])


@pytest.mark.parametrize("vocab", [7, CDF_BLOCK, 2 * CDF_BLOCK + 88])
def test_the_inverse_cdf_gives_each_token_its_share_of_the_unit_interval(vocab):
    """Uniform numbers on a regular grid of N points pick token i about p_i N times (within 2: the grid's ends), across
    block edges and a shorter last block; tokens of probability 0 are never picked; each row inverts its own CDF."""
    g = torch.Generator().manual_seed(vocab)
    weights = torch.rand(2, vocab, generator=g) ** 4  # uneven, not normalised
    weights[:, ::5] = 0  # filtered-out entries, the first of each block among them
    weights[1, : vocab // 2] = 0  # row 1: the mass in the upper half only
    grid = 100_000
    u = (torch.arange(grid, dtype=torch.float64) + 0.5) / grid
    for row in range(2):
        picked = sample_inverse_cdf(weights[row].expand(grid, vocab), u)
        counts = torch.bincount(picked, minlength=vocab).double()
        expected = weights[row].double() / weights[row].double().sum() * grid
        assert torch.all(counts[weights[row] == 0] == 0)
        assert float((counts - expected).abs().max()) <= 2, float((counts - expected).abs().max())


def test_row_seeds_follow_from_their_parts():
    seeds = row_seeds(6, 1, TRAIN, 3, 0)
    assert seeds.dtype == torch.int64 and bool((seeds >= 0).all()) and len(set(seeds.tolist())) == 6
    assert seeds.tolist() == [derive_seed(1, TRAIN, 3, 0, i) for i in range(6)]
    others = [row_seeds(6, *parts) for parts in [(2, TRAIN, 3, 0), (1, VALIDATION, 3, 0), (1, TRAIN, 4, 0), (1, TRAIN, 3, 1)]]
    assert all(not set(seeds.tolist()) & set(other.tolist()) for other in others)


def test_seeded_and_unseeded_requests_share_a_batch(tiny_model_path, tokenizer):
    """A batch may mix rows with and without seeds: seeded rows sample what they sample alone, unseeded ones
    draw from the engine's generator (whose state then moves on)."""
    model = load(tiny_model_path)
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], seed=4)
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    prompts = [tokenizer(text)["input_ids"] for text in ["1 2 3", "the answer is", "4 5"]]
    alone = [engine.generate_batch([prompts[i]], params, seeds=[seed])[0].token_ids for i, seed in ((0, 21), (2, 22))]
    state = engine.state_dict()["generator"]
    mixed = engine.generate_batch(prompts, params, seeds=[21, None, 22])
    assert [mixed[0].token_ids, mixed[2].token_ids] == alone and len(mixed[1].token_ids) == 8
    assert not torch.equal(engine.state_dict()["generator"], state)
    assert engine.generate_batch(prompts[:1], replace(params, seed=21))[0].token_ids == alone[0]  # SamplingParams.seed
