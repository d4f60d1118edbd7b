import torch
from transformers import AutoModelForCausalLM

from reinforge.batch import Batch
from reinforge.inference import HFEngine, SamplingParams, generate_sequences
from reinforge.inference.hf import filter_logits
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
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], seed=1)
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
