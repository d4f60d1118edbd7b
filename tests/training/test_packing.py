"""Packed forwards without padding (training/packing.py, `use_remove_padding`) give the padded forward's numbers.

The reference is always the padded forward of the same model on the same rows: log-probs, entropy and
values, the gradient of a whole actor update (with the exact KL to a reference, whose logits must be laid out
like the policy's), under gradient checkpointing; a model that ignores packed position ids keeps the padded
forward; and the config switch reaching the actor, reference and critic.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

from reinforge.batch import Batch
from reinforge.config import load_config
from reinforge.training import actor as actor_module
from reinforge.training import packing
from reinforge.training.actor import response_log_probs, response_logits
from reinforge.training.critic import response_values
from reinforge.training.minibatch import trim_padding
from reinforge.training.packing import plan_packing
from reinforge.training.workers import ActorRolloutRefWorker, CriticWorker
from tests.training.test_fsdp import rank_results, start_ranks
from tests.training.test_shared_prefix import actor_update_gradient, assert_relatively_close

PROMPT, RESPONSE = 6, 8
PROMPTS = (6, 2, 4, 1, 5, 3, 6, 2)  # each row's own prompt (no prompt repeats): only packing saves work
RESPONSES = (8, 1, 0, 3, 2, 8, 5, 1)  # right-padded responses, one empty


def varied_batch(vocab: int, seed: int = 0, prompts=PROMPTS, responses=RESPONSES) -> Batch:
    g = torch.Generator().manual_seed(seed)
    rows = len(prompts)
    prompt_mask = (torch.arange(PROMPT) >= PROMPT - torch.tensor(prompts)[:, None]).long()
    response_mask = (torch.arange(RESPONSE) < torch.tensor(responses)[:, None]).long()
    attention_mask = torch.cat([prompt_mask, response_mask], 1)
    ids = torch.randint(3, vocab, (rows, PROMPT + RESPONSE), generator=g) * attention_mask
    return Batch({"input_ids": ids, "attention_mask": attention_mask,
                  "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0), "responses": ids[:, PROMPT:],
                  "response_mask": response_mask, "advantages": torch.randn(rows, 1, generator=g) * response_mask,
                  "ref_log_prob": -torch.rand(rows, RESPONSE, generator=g) * 3})


def replaced(batch: Batch, **columns) -> Batch:
    return Batch({**{key: batch[key] for key in batch.keys()}, **columns})


def test_rows_are_packed_into_the_cheapest_rows_and_map_back():
    """Lengths 14, 3, 4, 4, 7, 11, 11, 3 (57 tokens; padded: 8 rows of 14). With attention free, all in one row of 57
    (verl's packing); with an attention pair costing 1/20 of a token, rows of the longest sequence, filled first fit
    longest first: [14] [11 3] [11 3] [7 4] [4] (5 x (14 + 14^2 / 20) = 119 against 190.4 padded; rows of 28 would
    cost 201.6); rows of the longest sequence cost per row what padded rows do, so any attention cost keeps them."""
    batch = varied_batch(100)
    assert plan_packing(batch).input_ids.shape == (1, 57)
    assert plan_packing(batch, pair=1.0).input_ids.shape == (5, 14)
    plan = plan_packing(batch, pair=0.05)
    assert plan.input_ids.shape == (5, 14)
    # every real token is in the packed rows once, with its own position
    assert sorted(plan.input_ids[plan.input_ids > 0].tolist()) == sorted(batch["input_ids"][batch["input_ids"] > 0].tolist())
    assert (plan.position_ids.max() == 13) and len(plan.predict) == sum(RESPONSES)
    # the position predicting each response token holds the token before it in its own sequence
    flat_ids = plan.input_ids.flatten()
    for token, at, row, col in zip(flat_ids[plan.predict + 1].tolist(), plan.predict.tolist(), plan.rows.tolist(),
                                   plan.cols.tolist(), strict=True):
        assert token == int(batch["responses"][row, col]) and at % 14 + 1 < 14


def test_the_pair_cost_is_read_from_the_model_config(tiny_model_path):
    config = AutoModelForCausalLM.from_pretrained(tiny_model_path).config
    heads, head_dim, kv = config.num_attention_heads, config.hidden_size // config.num_attention_heads, config.num_key_value_heads
    weights = config.hidden_size * head_dim * (2 * heads + 2 * kv) + 3 * config.hidden_size * config.intermediate_size
    assert packing.pair_cost(config) == pytest.approx(2 * config.hidden_size / weights)


def test_what_is_not_packed():
    equal = varied_batch(100, prompts=(6,) * 4, responses=(8,) * 4)
    assert plan_packing(equal, pair=0.01) is None  # 4 x 14.14 padded; 2 x 28.3 and 1 x 56 + 31 packed
    batch = varied_batch(100)
    assert plan_packing(replaced(batch, position_ids=batch["position_ids"][:, None].expand(-1, 3, -1))) is None
    skipping = batch["position_ids"].clone()
    skipping[0, -1] += 5  # positions that do not count up by one inside a sequence
    assert plan_packing(replaced(batch, position_ids=skipping)) is None
    assert plan_packing(replaced(batch, position_ids=batch["position_ids"] + 1)) is None  # sequences not starting at 0


def test_packed_log_probs_entropy_and_logits_are_the_padded_ones(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    batch = varied_batch(model.config.vocab_size)
    with torch.no_grad():
        out = response_logits(model, batch, share_prompt=False, pack=True)
        padded = response_logits(model, batch, share_prompt=False, pack=False)
        assert out.logits.shape == (1, sum(RESPONSES), model.config.vocab_size)  # the head ran on response positions only
        assert torch.allclose(out.logits[0], padded.logits[out.packing.rows, out.packing.cols], atol=1e-5, rtol=0)
        packed = response_log_probs(model, batch, 0.7, with_entropy=True, share_prompt=False, pack=True)
        plain = response_log_probs(model, batch, 0.7, with_entropy=True, share_prompt=False, pack=False)
    mask = batch["response_mask"].bool()
    for name, got, want in zip(("log_probs", "entropy"), packed, plain, strict=True):
        assert torch.allclose(got[mask], want[mask], atol=1e-5, rtol=0), (name, (got - want)[mask].abs().max().item())
        assert (got[~mask] == 0).all()


def test_packed_values_are_the_padded_ones(tiny_model_path):
    model = AutoModelForTokenClassification.from_pretrained(tiny_model_path, num_labels=1).eval()
    batch = varied_batch(model.config.vocab_size, seed=1)
    mask = batch["response_mask"].bool()
    with torch.no_grad():
        packed, plain = response_values(model, batch, pack=True), response_values(model, batch, pack=False)
    assert torch.allclose(packed[mask], plain[mask], atol=1e-5, rtol=0) and (packed[~mask] == 0).all()


@pytest.mark.parametrize("kl_loss_type, checkpointing", [("low_var_kl", False), ("full", False), ("low_var_kl", True)])
def test_update_gradient_is_the_padded_forwards(tiny_model_path, kl_loss_type, checkpointing, monkeypatch):
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    batch = varied_batch(base.config.vocab_size, seed=2)
    plain = actor_update_gradient(base, batch, share_prompt=False, kl_loss_type=kl_loss_type)
    assert plain.abs().max() > 0
    packed_forwards = []
    forward = actor_module.packed_logits
    monkeypatch.setattr(actor_module, "packed_logits", lambda *args: packed_forwards.append(1) or forward(*args))
    assert_relatively_close(actor_update_gradient(base, batch, share_prompt=False, checkpointing=checkpointing, pack=True,
                                                  kl_loss_type=kl_loss_type), plain)
    assert len(packed_forwards) == (2 if kl_loss_type == "full" else 1)  # the policy's (and the reference's)


def test_repeated_prompts_take_whichever_forward_runs_fewer_tokens(tiny_model_path):
    """GRPO rows: long shared prompts with short responses run the shared-prompt forward; short prompts with responses
    of very different lengths pack."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    long_prompts = varied_batch(model.config.vocab_size, prompts=(6,) * 4, responses=(1, 2, 1, 2))
    long_prompts["input_ids"][:, :PROMPT] = long_prompts["input_ids"][0, :PROMPT]  # one prompt, 4 samples
    short_prompts = varied_batch(model.config.vocab_size, prompts=(1,) * 4, responses=(8, 1, 7, 2))
    short_prompts["input_ids"][:, PROMPT - 1] = 5
    with torch.no_grad():  # as the update runs them: trimmed of the columns no row uses
        long_prompts, short_prompts = trim_padding(long_prompts).batch, trim_padding(short_prompts).batch
        assert response_logits(model, long_prompts, share_prompt=True, pack=True).packing is None  # shared: 5 + 4 x 3 tokens
        assert response_logits(model, short_prompts, share_prompt=True, pack=True).packing is not None  # 2 x 9 packed


def test_a_model_that_ignores_packed_positions_keeps_the_padded_forward(tiny_model_path, monkeypatch, capsys):
    """Simulated by transformers not reading sequence starts from the position ids: the probe sees the packed sequences
    attend to each other, says so once, and the numbers stay the padded forward's."""
    import transformers.masking_utils as masking

    monkeypatch.setattr(masking, "find_packed_sequence_indices", lambda position_ids: None)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    batch = varied_batch(model.config.vocab_size)
    with torch.no_grad():
        for _ in range(2):
            out = response_logits(model, batch, share_prompt=False, pack=True)
            assert out.packing is None
    assert capsys.readouterr().err.count("Qwen2ForCausalLM does not compute sequences packed by their position ids") == 1
    monkeypatch.undo()
    fresh = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    assert packing.packing_works(fresh, batch["input_ids"].device)


@pytest.mark.parametrize("setting", ["true", "false"])
def test_config_switch_reaches_the_actor_reference_and_critic(tiny_model_path, setting):
    config, _ = load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "trainer.device=cpu",
                             f"critic.model.path={tiny_model_path}", "algorithm.adv_estimator=gae",
                             f"actor_rollout_ref.model.use_remove_padding={setting}", f"critic.model.use_remove_padding={setting}"])
    worker = ActorRolloutRefWorker(config)
    worker.init_model(1)
    assert worker.actor.forward["pack"] == worker.ref.forward["pack"] == (setting == "true")
    critic = CriticWorker(config)
    critic.init_model(1)
    assert critic.critic.pack == (setting == "true")


def test_two_fsdp_ranks_packing_give_the_one_process_padded_gradient(tiny_model_path, tmp_path):
    """Each rank packs its own rows of a sharded, checkpointed model (and probes it once, in step with the other);
    the gradient is the padded update's on the whole batch in one process, and a packed forward on one rank beside a
    padded one on the other keeps their collectives in step."""
    from tests.training.packing_ranks import UNEVEN_ROWS
    from tests.training.packing_ranks import update_gradient as rank_update_gradient

    procs = start_ranks("packing_ranks.py", tiny_model_path, tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).train()
    batch = varied_batch(model.config.vocab_size, seed=4)
    single, _ = rank_update_gradient(model, batch, pack=False)
    ranks = rank_results(procs, tmp_path)
    assert [rank["packed_forwards"] for rank in ranks] == [2, 1]  # the update on both, the uneven rows on rank 0 only
    for rank in ranks:
        assert_relatively_close(rank["gradient"], single)
    with torch.no_grad():
        for rows, rank in zip(UNEVEN_ROWS, ranks, strict=True):
            uneven = batch.index(rows)
            want, _ = response_log_probs(model.eval(), uneven, 1.0, share_prompt=False)
            mask = uneven["response_mask"].bool()
            assert torch.allclose(rank["uneven_log_probs"][mask], want[mask], atol=1e-5, rtol=0)


def test_sft_packed_and_padded_give_the_same_losses(tiny_model_path, tmp_path, monkeypatch):
    """`reinforge sft` packs by default (model.use_remove_padding, verl 0.9's default); either switch set to false
    pads; rows of very different lengths train to the same losses either way."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from reinforge.cli import main

    rows = [{"question": f"Copy {i}: " + "ab " * (4 * (i % 9)), "answer": str(i % 10) * (1 + i % 5)} for i in range(32)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    packed_forwards = []
    forward = actor_module.packed_logits
    monkeypatch.setattr(actor_module, "packed_logits", lambda *args: packed_forwards.append(1) or forward(*args))
    losses = {}
    for name, switch in (("packed", []), ("padded", ["model.use_remove_padding=false"]), ("old", ["use_remove_padding=false"])):
        run = tmp_path / name
        assert main(["sft", f"data.train_files={tmp_path / 'train.parquet'}", "data.prompt_key=question",
                     "data.response_key=answer", "data.train_batch_size=16", "data.micro_batch_size_per_gpu=8",
                     f"model.partial_pretrain={tiny_model_path}", f"trainer.default_local_dir={run}", "optim.lr=3e-3",
                     "trainer.total_epochs=2", *switch]) == 0
        losses[name] = [json.loads(line)["train/loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        if name == "packed":
            packed = len(packed_forwards)
            assert packed >= 4  # of 4 steps x 2 micro-batches: those where packing costs less
    assert len(packed_forwards) == packed  # the padded runs did not pack
    assert losses["packed"] == pytest.approx(losses["padded"], rel=1e-5) and losses["old"] == losses["padded"]
    assert losses["padded"][-1] < losses["padded"][0]


def test_configs_of_multimodal_and_per_layer_models_give_a_pair_cost_and_flops():
    """Gemma 4's head_dim set per layer (transformers raises when it is read as one value), Gemma 3n's per-layer MLP
    widths and a multimodal config holding its language model's sizes under text_config."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Gemma4Config"):
        pytest.skip(f"transformers {transformers.__version__} has no Gemma 4")
    from transformers import Gemma3nTextConfig, Gemma4Config, Gemma4TextConfig

    from reinforge.training.perf import model_shape, training_flops

    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                vocab_size=128, head_dim=8, layer_types=["sliding_attention", "full_attention"], sliding_window=3)
    per_layer = Gemma4TextConfig(**text, per_layer_config={"01": {"head_dim": 16}})
    with pytest.raises(RuntimeError):
        per_layer.head_dim  # noqa: B018 (the read transformers refuses)
    assert model_shape(per_layer).head_dim == 8  # hidden / heads
    assert model_shape(Gemma4Config(text_config=text)) == model_shape(Gemma4TextConfig(**text))
    widths = Gemma3nTextConfig(hidden_size=32, intermediate_size=[64, 128], num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, vocab_size=128, head_dim=8, layer_types=["sliding_attention", "full_attention"])
    assert model_shape(widths).layer_weights == 32 * 8 * (2 * 4 + 2 * 2) + 3 * 32 * 96  # the mean width
    for config in (per_layer, Gemma4Config(text_config=text), widths):
        assert 0 < packing.pair_cost(config) < 1 and training_flops(config, [10]) > 0


def test_a_forward_in_eval_mode_gives_each_module_back_its_own_mode():
    """The reference of a LoRA run wraps the training policy (WithoutAdapters): a pass in eval mode over the wrapper
    must leave the policy training, whatever the wrapper's own flag says."""
    from reinforge.training.minibatch import eval_mode

    inner = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)).train()
    wrapper = torch.nn.Sequential(inner)  # its own flag: training, as a new module's is
    with eval_mode(inner):  # the policy's pass, inside which the reference (the wrapper) runs
        with eval_mode(wrapper):
            assert not any(m.training for m in wrapper.modules())
        assert not any(m.training for m in inner.modules())  # still the policy's eval pass, no dropout
    assert all(m.training for m in inner.modules()) and wrapper.training


def test_packed_sequences_read_only_from_a_batch_of_one_row_are_caught_by_the_probe(tiny_model_path, monkeypatch, capsys):
    """transformers' flash attention reads packed sequences only in a batch of one row; a model that does the same with
    its other kernels is caught by the probe's two packed rows and keeps padded rows."""
    import transformers.masking_utils as masking

    detect = masking.find_packed_sequence_indices
    monkeypatch.setattr(masking, "find_packed_sequence_indices",
                        lambda position_ids: detect(position_ids) if position_ids.shape[0] == 1 else None)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    assert not packing.packing_works(model, torch.device("cpu"))
    assert "does not compute sequences packed by their position ids" in capsys.readouterr().err


@pytest.mark.parametrize("step, computed_in, works", [(1, torch.bfloat16, True), (8, torch.float32, True),
                                                     (1, torch.float32, False)])
def test_the_probe_allows_the_rounding_of_the_dtype_the_outputs_are_computed_in(tiny_model_path, step, computed_in, works):
    """fp32 weights computing in bf16 (on CUDA, verl's default): the two layouts' bf16 logits may differ by a rounding
    step, which the probe allows as it does for bf16 weights; an fp32 forward gets the fp32 tolerance (1e-3), which
    a bf16 rounding step on every logit exceeds."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    calls = []

    def outputs(ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=ids, position_ids=positions, attention_mask=None, use_cache=False).logits
        if computed_in == torch.bfloat16:
            logits = logits.to(torch.bfloat16)
        if not calls:  # the packed layout: one bf16 rounding step off (or a step of an fp32 ulp x 8, within fp32's tolerance)
            bump = logits.to(torch.bfloat16) if step == 1 else logits
            for _ in range(step):
                bump = torch.nextafter(bump, torch.full_like(bump, float("inf")))
            logits = bump.to(logits.dtype)
        calls.append(logits.dtype)
        return logits

    assert packing.packing_works(model, torch.device("cpu"), outputs) is works
    assert calls == [computed_in, computed_in]


def test_under_flash_attention_every_sequence_goes_in_one_row(tiny_model_path):
    """Flash attention computes only the pairs within each sequence (verl's varlen layout), so attention costs nothing
    extra in a long row, and transformers packs only a batch of one row: one row of all tokens, however many."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    assert not packing.varlen_attention(model) and packing.attention_pair_cost(model) > 0
    model.config._attn_implementation = "flash_attention_2"
    assert packing.varlen_attention(model) and packing.attention_pair_cost(model) == 0
    batch = varied_batch(100)
    assert plan_packing(batch, 0.0, one_row=True).input_ids.shape == (1, 57)
    long = [packing.MAX_CAPACITY, packing.MAX_CAPACITY // 2, 10]
    assert packing._cheapest_bins(long, packing.MAX_CAPACITY, 0.0, one_row=True)[1] == sum(long)
    assert packing._cheapest_bins(long, packing.MAX_CAPACITY, 0.0)[1] == packing.MAX_CAPACITY  # rows stop at the cap
