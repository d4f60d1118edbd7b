"""The vllm and sglang adapters without a GPU: settings translation, output conversion, the bucketed weight
push and the sleep/wake protocol, against the fake packages of fake_engines.py (the real ones run in
scripts/gpu_smoke.sh)."""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from reinforge.config import load_config, unused_settings
from reinforge.config.schema import Config, RolloutConfig
from reinforge.errors import ConfigError
from reinforge.inference import ModuleWeights, SamplingParams, factory
from reinforge.inference.colocated import engine_kwargs_for, hf_weight_name, weight_buckets
from reinforge.inference.factory import check_gpu_engine
from reinforge.inference.rollout import run_single_turn
from reinforge.inference.sglang_engine import SGLangEngine, sglang_engine_kwargs, sglang_output, sglang_sampling_params
from reinforge.inference.vllm_engine import VLLMEngine, vllm_llm_kwargs, vllm_output, vllm_sampling_kwargs
from tests.inference.fake_engines import fake_sglang, fake_vllm

MiB = 1 << 20


def tiny_qwen(tied: bool = True) -> torch.nn.Module:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, tie_word_embeddings=tied)
    return Qwen2ForCausalLM(config)


def rollout(**changes) -> RolloutConfig:
    config = RolloutConfig()
    for key, value in changes.items():
        setattr(config, key, value)
    return config


@pytest.fixture
def log(monkeypatch) -> list:
    """The fake packages installed as `vllm` and `sglang`; every call they receive lands in the returned list."""
    calls: list = []
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(calls))
    monkeypatch.setitem(sys.modules, "sglang", fake_sglang(calls))
    return calls


# ---- settings -------------------------------------------------------------------------------------
def test_vllm_llm_kwargs_translate_the_rollout_settings_and_pass_engine_kwargs_through():
    settings = rollout(tensor_model_parallel_size=1, gpu_memory_utilization=0.4, max_model_len=1024, enforce_eager=False,
                       engine_kwargs={"vllm": {"kv_cache_dtype": "fp8", "max_num_seqs": 8}, "sglang": {"tp_size": 9}})
    assert vllm_llm_kwargs(settings, "/models/q", seed=7) == {
        "model": "/models/q", "tensor_parallel_size": 1, "dtype": "bfloat16", "seed": 7, "gpu_memory_utilization": 0.4,
        "enforce_eager": False, "max_num_batched_tokens": 8192, "max_num_seqs": 8, "enable_chunked_prefill": True,
        "enable_sleep_mode": True, "load_format": "dummy", "disable_log_stats": True, "trust_remote_code": False,
        "logprobs_mode": "processed_logprobs", "max_model_len": 1024, "kv_cache_dtype": "fp8",
    }


def test_sglang_kwargs_use_sglang_names_and_pass_engine_kwargs_through():
    settings = rollout(tensor_model_parallel_size=1, enable_chunked_prefill=False, free_cache_engine=False,
                       engine_kwargs={"sglang": {"attention_backend": "fa3"}})
    assert sglang_engine_kwargs(settings, "/models/q", seed=3, trust_remote_code=True) == {
        "model_path": "/models/q", "tp_size": 1, "dtype": "bfloat16", "random_seed": 3, "mem_fraction_static": 0.5,
        "disable_cuda_graph": True, "chunked_prefill_size": -1, "max_running_requests": 1024, "enable_memory_saver": False,
        "load_format": "dummy", "trust_remote_code": True, "log_level": "error", "attention_backend": "fa3",
    }


def test_the_context_length_defaults_to_the_longest_sequence_the_caller_names():
    """verl gives vLLM max_model_len = the longest prompt + response_length when max_model_len is null (not the model's
    own maximum, whose KV-cache reservation may not fit); an explicit max_model_len wins."""
    assert vllm_llm_kwargs(rollout(), "m", 0, longest=128)["max_model_len"] == 128
    assert sglang_engine_kwargs(rollout(), "m", 0, longest=128)["context_length"] == 128
    assert vllm_llm_kwargs(rollout(max_model_len=4096), "m", 0, longest=128)["max_model_len"] == 4096
    assert sglang_engine_kwargs(rollout(max_model_len=4096), "m", 0, longest=128)["context_length"] == 4096
    assert "max_model_len" not in vllm_llm_kwargs(rollout(), "m", 0)


def test_training_engines_take_the_datas_prompt_limit_plus_the_response(log, monkeypatch, tiny_model_path):
    """In training the prompts are limited by data.max_prompt_length (rollout.prompt_length has no effect there)."""
    monkeypatch.setattr(factory, "check_gpu_engine", lambda config: None)
    config, _ = load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "data.train_files=/d.parquet", "data.max_prompt_length=40",
                             "data.max_response_length=24", "actor_rollout_ref.rollout.prompt_length=8",
                             "actor_rollout_ref.rollout.name=vllm"])
    engine = factory.make_engine(config, tiny_qwen(), SimpleNamespace(eos_token_id=2))
    assert engine.llm.kwargs["max_model_len"] == 40 + 24


def test_the_hf_engine_generates_from_a_bf16_copy_on_cuda_and_with_the_actors_module_on_cpu(tiny_model_path, verl_default):
    """rollout.dtype null is bf16 on CUDA, as in verl (the copy follows the actor through update_weights); the actor's
    own module on the CPU. (The copy is made on the CPU here: the device only decides the dtype.)"""
    config, _ = load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "data.train_files=/d.parquet"])
    tokenizer = SimpleNamespace(eos_token_id=2, pad_token_id=0)
    actor = tiny_qwen()
    config.trainer.device = "cpu"
    assert factory.make_engine(config, actor, tokenizer).model is actor
    config.trainer.device = "cuda"
    engine = factory.make_engine(config, actor, tokenizer)
    assert engine.model is not actor and {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    assert engine.model.model.rotary_emb.inv_freq.dtype == torch.float32  # as a model loaded in bf16 keeps it
    with torch.no_grad():
        for param in actor.parameters():
            param.add_(1.0)
    engine.update_weights(ModuleWeights(actor))
    assert all(torch.equal(mine, theirs.to(torch.bfloat16)) for mine, theirs in
               zip(engine.model.state_dict().values(), actor.state_dict().values(), strict=True))
    # fp32 as the actor's weights, which compute in bf16 on CUDA: an fp32 copy, so the engine decodes in fp32
    config.actor_rollout_ref.rollout.dtype = "fp32"
    engine = factory.make_engine(config, actor, tokenizer)
    assert engine.model is not actor and {p.dtype for p in engine.model.parameters()} == {torch.float32}
    assert {b.dtype for b in engine.model.buffers()} == {b.dtype for b in actor.buffers()}  # rotary frequencies stay fp32
    config.actor_rollout_ref.actor.fsdp_config.mixed_precision = {"param_dtype": "fp32"}  # the actor's module computes in fp32
    assert factory.make_engine(config, actor, tokenizer).model is actor


def test_engine_kwargs_not_nested_under_an_engine_name_are_an_error():
    with pytest.raises(ConfigError, match=r"engine_kwargs\.swap_space: .*engine_kwargs\.vllm\.swap_space"):
        engine_kwargs_for("vllm", {"swap_space": 4})


def test_sampling_translation():
    sample = SamplingParams(max_tokens=9, temperature=0.7, top_p=0.9, top_k=0, stop_token_ids=(5, 2))
    assert vllm_sampling_kwargs(sample, 4, (2,)) == {
        "n": 1, "max_tokens": 4, "temperature": 0.7, "top_p": 0.9, "top_k": -1, "logprobs": 0, "ignore_eos": False,
        "stop_token_ids": [2, 5], "detokenize": False,
    }
    greedy = SamplingParams(max_tokens=9, temperature=0.7, top_p=0.9, top_k=5, do_sample=False, ignore_eos=True)
    assert sglang_sampling_params(greedy, 9, (2,)) == {
        "n": 1, "max_new_tokens": 9, "temperature": 0.0, "top_p": 1.0, "top_k": -1, "ignore_eos": True,
        "stop_token_ids": [], "no_stop_trim": True,
    }
    assert vllm_sampling_kwargs(SamplingParams(max_tokens=3, top_k=40), 3, ())["top_k"] == 40
    # a row's own seed (the trainer's per-row seeds) becomes vLLM's request seed; SGLang gets none (docs/engines.md)
    assert vllm_sampling_kwargs(sample, 4, (2,), seed=77)["seed"] == 77
    assert "seed" not in vllm_sampling_kwargs(sample, 4, (2,))


# ---- generation and output conversion ---------------------------------------------------------------
@pytest.mark.parametrize("engine_name", ["vllm", "sglang"])
def test_outputs_carry_tokens_log_probs_and_finish_reasons(log, engine_name):
    engine = make(engine_name, tiny_qwen(), eos=[20])
    # fake rule: token i = (last prompt token + i + 1) % 100 + 10, log-prob -(i + 1) / 10
    outputs = engine.generate_batch([[5, 7], [1, 50], [3, 60]], SamplingParams(max_tokens=4), max_tokens=[4, 4, 2])
    assert [o.token_ids for o in outputs] == [[18, 19, 20], [61, 62, 63, 64], [71, 72]]
    assert [o.finish_reason for o in outputs] == ["stop", "length", "length"]
    assert outputs[0].log_probs == pytest.approx([-0.1, -0.2, -0.3])
    assert outputs[1].log_probs == pytest.approx([-0.1, -0.2, -0.3, -0.4])


def test_ignore_eos_runs_to_the_limit(log):
    engine = make("vllm", tiny_qwen(), eos=[20])
    (output,) = engine.generate_batch([[5, 7]], SamplingParams(max_tokens=4, ignore_eos=True))
    assert output.token_ids == [18, 19, 20, 21] and output.finish_reason == "length"


# ---- weights ------------------------------------------------------------------------------------------
def test_hf_weight_names_lose_wrapper_prefixes():
    assert hf_weight_name("_orig_mod.model.layers.0._fsdp_wrapped_module.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"
    assert hf_weight_name("model.layers.1._checkpoint_wrapped_module.self_attn.q_proj.bias") == "model.layers.1.self_attn.q_proj.bias"


def test_module_weights_send_a_tied_embedding_once_under_hf_names():
    tied, untied = tiny_qwen(tied=True), tiny_qwen(tied=False)
    tied_names = [name for name, _ in ModuleWeights(tied)]
    assert "model.embed_tokens.weight" in tied_names and "lm_head.weight" not in tied_names
    assert len(tied_names) == len(tied.state_dict()) - 1
    assert "lm_head.weight" in [name for name, _ in ModuleWeights(untied)]
    wrapper = torch.nn.Module()
    wrapper._orig_mod = untied
    assert [name for name, _ in ModuleWeights(wrapper)] == list(untied.state_dict())


def test_buckets_respect_the_size_and_cast_floating_tensors():
    tensors = [("a", torch.zeros(10)), ("b", torch.zeros(10)), ("c", torch.zeros(10)), ("big", torch.zeros(50)),
               ("ids", torch.zeros(3, dtype=torch.int64)), ("d", torch.zeros(10))]
    # float32: 40 B each, big 200 B, ids 24 B; at most 100 B a bucket (a tensor larger than that goes alone)
    assert [[n for n, _ in b] for b in weight_buckets(tensors, 100)] == [["a", "b"], ["c"], ["big"], ["ids", "d"]]
    # cast to bfloat16: 20 B each, big 100 B, ids stay int64 (24 B)
    buckets = list(weight_buckets(tensors, 100, torch.bfloat16))
    assert [[n for n, _ in b] for b in buckets] == [["a", "b", "c"], ["big"], ["ids", "d"]]
    assert [t.dtype for _, t in buckets[2]] == [torch.int64, torch.bfloat16]


@pytest.mark.parametrize("engine_name", ["vllm", "sglang"])
def test_the_push_sends_every_tensor_once_in_buckets_cast_to_the_engine_dtype(log, engine_name):
    model = tiny_qwen()
    engine = make(engine_name, model, bucket_bytes=600)  # the tiny model's tensors: 16 B to 512 B in bfloat16
    engine.generate_batch([[1, 2]], SamplingParams(max_tokens=1))
    fake = engine.llm if engine_name == "vllm" else engine.engine
    pushed = [name for bucket in fake.buckets for name in bucket]
    expected = {name: tensor for name, tensor in model.state_dict().items() if name != "lm_head.weight"}
    assert sorted(pushed) == sorted(expected) and len(fake.buckets) > 2
    for bucket in fake.buckets:
        assert sum(fake.weights[name].numel() * 2 for name in bucket) <= 600 or len(bucket) == 1
    for name, tensor in expected.items():
        assert fake.weights[name].dtype == torch.bfloat16
        assert torch.equal(fake.weights[name], tensor.to(torch.bfloat16))


# ---- the sync protocol --------------------------------------------------------------------------------
def step(engine, model) -> None:
    """One training step as the worker runs it: wake, generate, sleep, update the actor, hand over its weights."""
    engine.wake()
    engine.generate_batch([[1, 2]], SamplingParams(max_tokens=1))
    engine.sleep()
    with torch.no_grad():
        model.model.norm.weight.add_(1.0)
    engine.update_weights(ModuleWeights(model))


def test_vllm_protocol_pushes_after_updates_only(log):
    model = tiny_qwen()
    engine = make("vllm", model)
    engine.sleep()
    step(engine, model)
    step(engine, model)
    for _ in range(2):  # the first rollout gets the second update; the next (no update between) pushes nothing
        engine.generate_batch([[1, 2]], SamplingParams(max_tokens=1))
        engine.sleep()
    woken = [("wake_up", ("weights",)), ("load", len(list(ModuleWeights(model)))), ("reset_prefix_cache",),
             ("wake_up", ("kv_cache",)), ("generate", 1), ("sleep", 1)]
    assert log == [("sleep", 1), *woken, *woken, *woken,
                   ("wake_up", ("weights",)), ("wake_up", ("kv_cache",)), ("generate", 1), ("sleep", 1)]
    # the norm starts at ones; each step's update added 1, and the last push carries both
    assert torch.equal(engine.llm.weights["model.norm.weight"], torch.full((8,), 3.0, dtype=torch.bfloat16))


def test_sglang_protocol_pushes_on_every_wake_since_release_discards_weights(log):
    model = tiny_qwen()
    engine = make("sglang", model)
    engine.sleep()
    step(engine, model)
    engine.wake()
    woken = [("resume", ("weights",)), ("begin_weight_update",), ("load", len(list(ModuleWeights(model)))),
             ("end_weight_update",), ("flush_cache",), ("resume", ("kv_cache", "cuda_graph"))]
    released = ("release", ["weights", "kv_cache", "cuda_graph"])  # exactly the tags a wake takes back
    assert log == [released, *woken, ("generate", 1), released, *woken]


def test_weights_loaded_into_the_actor_before_the_first_rollout_reach_the_engine(log):
    model = tiny_qwen()
    engine = make("sglang", model)
    engine.sleep()
    with torch.no_grad():  # as a resumed checkpoint loads into the actor after the engine was built
        model.model.norm.weight.fill_(5.0)
    engine.generate_batch([[1, 2]], SamplingParams(max_tokens=1))
    assert torch.equal(engine.engine.weights["model.norm.weight"], torch.full((8,), 5.0, dtype=torch.bfloat16))


def test_without_free_cache_engine_nothing_is_released(log):
    model = tiny_qwen()
    engine = make("vllm", model, free_cache_engine=False)
    engine.sleep()
    step(engine, model)
    engine.generate_batch([[1, 2]], SamplingParams(max_tokens=1))
    loads = len(list(ModuleWeights(model)))
    assert log == [("load", loads), ("reset_prefix_cache",), ("generate", 1), ("load", loads), ("reset_prefix_cache",),
                   ("generate", 1)]


def test_sglang_generates_inside_the_rollouts_event_loop(log):
    """Rollouts and agent loops run in `asyncio.run`, and every sglang.Engine method runs SGLang's own loop to completion,
    which Python refuses while another loop runs in the thread ("Cannot run the event loop while another loop is
    running"): the engine's methods are called from a thread of their own."""
    model = tiny_qwen()
    engine = make("sglang", model, eos=[20])
    engine.sleep()
    outputs = run_single_turn(engine, [[5, 7], [1, 50]], SamplingParams(max_tokens=4), [None, None])
    assert [o.token_ids for o in outputs] == [[18, 19, 20], [61, 62, 63, 64]]
    step(engine, model)  # and outside a loop, as the trainer's weight pushes and generate's batches run
    assert log[-1] == ("release", ["weights", "kv_cache", "cuda_graph"])
    assert {name.startswith("sglang") for name in engine.engine.threads} == {True}


@pytest.mark.parametrize("version, session", [("0.5.20", False), ("0.5.21", True)])
def test_sglang_pushes_weights_in_a_weight_update_session_where_it_has_them(monkeypatch, version, session):
    log: list = []
    monkeypatch.setitem(sys.modules, "sglang", fake_sglang(log, version))
    model = tiny_qwen()
    engine = make("sglang", model, free_cache_engine=False)
    engine.generate_batch([[1, 2]], SamplingParams(max_tokens=1))
    loads = len(list(ModuleWeights(model)))
    opened = [("begin_weight_update",)] if session else []
    closed = [("end_weight_update",)] if session else []
    assert log == [*opened, ("load", loads), *closed, ("flush_cache",), ("generate", 1)]
    assert torch.equal(engine.engine.weights["model.norm.weight"], torch.ones(8, dtype=torch.bfloat16))


def test_a_weight_load_sglang_refuses_stops_the_run(log):
    engine = make("sglang", tiny_qwen())
    engine.sessions = False  # as before reinforge opened SGLang 0.5.21's sessions: every update was refused
    with pytest.raises(RuntimeError, match=r"SGLang did not load the actor's weights \(update_weights_from_tensor\): "
                                           r"update_weights_from_tensor must run between begin_weight_update\(\)"):
        engine.generate_batch([[1, 2]], SamplingParams(max_tokens=1))


@pytest.mark.parametrize("version", ["0.5.4", "0.5.10.post1"])
def test_sglang_releases_before_0_5_11_are_refused(monkeypatch, version):
    """Before 0.5.5 they return up to 5 prompt tokens at the start of output_ids, so every request failed its length
    check; before 0.5.11 they pin a transformers older than 5.4."""
    monkeypatch.setitem(sys.modules, "sglang", fake_sglang([], version))
    with pytest.raises(ConfigError, match=rf"sglang {re.escape(version)} is installed, and reinforge works with sglang "
                                          r"0\.5\.11 or newer: pip install 'reinforge\[sglang\]'"):
        make("sglang", tiny_qwen())


@pytest.mark.parametrize("version", ["0.5.11rc1", "dev"])
def test_a_pre_release_of_the_oldest_or_a_source_builds_version_passes(monkeypatch, version):
    monkeypatch.setitem(sys.modules, "sglang", fake_sglang([], version))
    make("sglang", tiny_qwen())


@pytest.mark.parametrize("output", [
    {"output_ids": [5], "meta_info": {"finish_reason": {"type": "abort", "message": "out of memory"},
                                      "output_token_logprobs": [(-0.1, 5, None)]}},
    SimpleNamespace(outputs=[SimpleNamespace(token_ids=[5], logprobs=[{5: SimpleNamespace(logprob=-0.1)}],
                                             finish_reason="abort")]),
])
def test_a_request_the_engine_aborted_is_an_error_not_a_response_cut_at_its_limit(output):
    convert = sglang_output if isinstance(output, dict) else vllm_output
    with pytest.raises(RuntimeError, match=r"ended a request with finish reason 'abort'.*: the response is not complete"):
        convert(output)


def test_the_fakes_refuse_engine_arguments_the_libraries_do_not_have(log):
    """vLLM 0.33's EngineArgs has no swap_space (0.18-0.32 dropped it with a warning): a TypeError there, so here."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'swap_space'"):
        VLLMEngine({**vllm_llm_kwargs(rollout(), "m", 0), "swap_space": 4}, [], True, MiB)


# ---- errors -------------------------------------------------------------------------------------------
def test_a_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'reinforge\[vllm\]'"):
        make("vllm", tiny_qwen())


@pytest.mark.parametrize("engine_name", ["vllm", "sglang"])
def test_gpu_engines_on_cpu_are_a_config_error(engine_name):
    with pytest.raises(ConfigError, match=f"rollout.name={engine_name} needs a CUDA GPU .*use actor_rollout_ref.rollout.name=hf"):
        load_config(["actor_rollout_ref.model.path=/m", "data.train_files=/d.parquet", "trainer.device=cpu",
                     f"actor_rollout_ref.rollout.name={engine_name}"])


def test_unused_settings_follow_the_engine(monkeypatch):
    monkeypatch.setattr("reinforge.inference.factory.check_gpu_engine", lambda config: None)
    keys = ["actor_rollout_ref.rollout.gpu_memory_utilization=0.3", "actor_rollout_ref.rollout.micro_batch_size_per_gpu=4"]
    base = ["actor_rollout_ref.model.path=/m", "data.train_files=/d.parquet"]
    notes = {name: unused_settings(*load_config([*base, f"actor_rollout_ref.rollout.name={name}", *keys]))
             for name in ("hf", "sglang")}
    assert notes["hf"] == ["actor_rollout_ref.rollout.gpu_memory_utilization: vLLM/SGLang setting; this run generates with "
                           "the hf engine"]
    assert notes["sglang"] == ["actor_rollout_ref.rollout.micro_batch_size_per_gpu: hf engine setting; sglang schedules its "
                               "own batches"]


@pytest.mark.parametrize("path, tp, message", [
    (None, 1, "loads the model from actor_rollout_ref.model.path, which is not set"),
    ("/m", 2, "tensor_model_parallel_size=2 is more than the 1 GPU.s. visible; set it to at most that .1 on one GPU."),
])
def test_gpu_engine_settings_that_cannot_run_on_this_machine(monkeypatch, path, tp, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(factory.importlib.util, "find_spec", lambda name: object())  # as if vllm were installed
    config = Config()
    config.trainer.device, config.actor_rollout_ref.model.path = "cuda", path
    config.actor_rollout_ref.rollout.name, config.actor_rollout_ref.rollout.tensor_model_parallel_size = "vllm", tp
    with pytest.raises(ConfigError, match=message):
        check_gpu_engine(config)
    config.actor_rollout_ref.model.path, config.actor_rollout_ref.rollout.tensor_model_parallel_size = "/m", 1
    check_gpu_engine(config)  # the same settings, fixed, pass


def test_gpu_engines_say_what_is_missing_or_not_supported(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    config = Config()
    config.trainer.device, config.actor_rollout_ref.model.path = "cuda", "/m"
    config.actor_rollout_ref.rollout.name, config.actor_rollout_ref.rollout.tensor_model_parallel_size = "sglang", 1
    monkeypatch.setattr(factory.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"needs the sglang package: pip install 'reinforge\[sglang\]'"):
        check_gpu_engine(config)
    config.trainer.n_gpus_per_node = 2
    with pytest.raises(ConfigError, match="rollout.name=sglang with 2 ranks .* is not supported in this version yet"):
        check_gpu_engine(config)


def test_generating_before_any_weights_were_given_says_so(log):
    settings = rollout(tensor_model_parallel_size=1)
    engine = VLLMEngine(vllm_llm_kwargs(settings, "m", 0), [], True, MiB)
    with pytest.raises(RuntimeError, match=r"no weights to generate with: call update_weights\(ModuleWeights\(actor\)\)"):
        engine.generate_batch([[1, 2]], SamplingParams(max_tokens=1))


def test_an_unknown_engine_dtype_is_a_config_error(log):
    with pytest.raises(ConfigError, match="actor_rollout_ref.rollout.dtype='half-ish'"):
        VLLMEngine({**vllm_llm_kwargs(rollout(), "m", 0), "dtype": "half-ish"}, [], True, MiB)


def make(engine_name: str, model: torch.nn.Module, eos: list[int] = (), free_cache_engine: bool = True,
         bucket_bytes: int = MiB):
    settings = rollout(tensor_model_parallel_size=1, free_cache_engine=free_cache_engine)
    if engine_name == "vllm":
        engine = VLLMEngine(vllm_llm_kwargs(settings, "m", 0), list(eos), free_cache_engine, bucket_bytes)
    else:
        engine = SGLangEngine(sglang_engine_kwargs(settings, "m", 0), list(eos), free_cache_engine, bucket_bytes)
    engine.update_weights(ModuleWeights(model))
    return engine
