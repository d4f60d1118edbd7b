"""`reinforge generate` (verl's main_generation) on the tiny model: the output file, what each response is, seeds, errors."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from reinforge.cli import main

PROMPTS = ["Add one to 1234", "Add one to 98", "What is 7?", "Say 55", "Count 123"]


@pytest.fixture
def prompts_file(tmp_path):
    """Five rows in verl's schema, with an extra column that must reach the output untouched."""
    rows = [{"data_source": "reinforge/add_one", "prompt": [{"role": "user", "content": text}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(i)}, "extra_info": {"index": i}, "note": f"row {i}"}
            for i, text in enumerate(PROMPTS)]
    path = tmp_path / "prompts.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture(scope="module")
def varied_model_path(tiny_model_path, tmp_path_factory):
    """The tiny model with noise on its weights: its greedy responses vary with the prompt (the untrained one's are
    all newlines), so comparing them says something."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    path = tmp_path_factory.mktemp("varied-model")
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(path)
    return path


def generate(model, data, output, *overrides):
    return main(["generate", f"model.path={model}", f"data.path={data}", f"data.output_path={output}",
                 "rollout.response_length=12", *overrides])


def test_output_has_every_input_column_and_n_samples_responses_per_row(tiny_model_path, prompts_file, tmp_path, capsys):
    output = tmp_path / "new" / "folder" / "out.parquet"
    verl_keys = ["trainer.nnodes=1", "trainer.n_gpus_per_node=8", "data.prompt_key=prompt", "rollout.temperature=1.0",
                 "rollout.top_k=50", "rollout.top_p=0.7", "rollout.prompt_length=1536", "+model.trust_remote_code=True"]
    assert generate(tiny_model_path, prompts_file, output, "data.n_samples=3", "data.batch_size=2", *verl_keys) == 0
    written, given = pq.read_table(output), pq.read_table(prompts_file)
    assert written.column_names == [*given.column_names, "responses"]
    assert written.drop_columns(["responses"]).to_pylist() == given.to_pylist()
    assert all(len(responses) == 3 and all(isinstance(r, str) for r in responses)
               for responses in written.column("responses").to_pylist())
    assert sorted(p.name for p in output.parent.iterdir()) == ["out.parquet"]  # no temporary file left behind
    out = capsys.readouterr().out
    assert "trainer.n_gpus_per_node: generation runs in one process" in out
    assert f"wrote {output}: 5 rows x 3 responses" in out and "[3/3]" in out


def test_seeded_samples_are_distinct_and_the_same_for_any_batch_size(tiny_model_path, prompts_file, tmp_path):
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert generate(tiny_model_path, prompts_file, first, "data.n_samples=4", "data.batch_size=5") == 0
    assert generate(tiny_model_path, prompts_file, second, "data.n_samples=4", "data.batch_size=2",
                    "rollout.micro_batch_size_per_gpu=3") == 0
    a, b = pq.read_table(first).column("responses").to_pylist(), pq.read_table(second).column("responses").to_pylist()
    assert a == b
    assert all(len(set(responses)) == 4 for responses in a)  # four different samples of each prompt
    other = tmp_path / "c.parquet"
    assert generate(tiny_model_path, prompts_file, other, "data.n_samples=4", "+rollout.seed=7") == 0
    assert pq.read_table(other).column("responses").to_pylist() != a


def test_greedy_response_is_model_generate_on_the_chat_prompt(varied_model_path, prompts_file, tokenizer, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    output = tmp_path / "greedy.parquet"
    # on the CPU in float32, as the model.generate it is compared with (on a GPU the engine's default is bfloat16)
    assert generate(varied_model_path, prompts_file, output, "data.n_samples=1", "rollout.do_sample=false",
                    "trainer.device=cpu") == 0
    model = AutoModelForCausalLM.from_pretrained(varied_model_path).eval()
    written = pq.read_table(output).column("responses").to_pylist()
    assert len({responses[0] for responses in written}) == len(PROMPTS)  # a different response to each prompt
    for text, responses in zip(PROMPTS, written, strict=True):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        with torch.no_grad():
            expected = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        assert responses == [tokenizer.decode(expected[0, ids.shape[1]:], skip_special_tokens=True)]


def test_json_lines_input_and_prompts_cut_to_prompt_length(tiny_model_path, tmp_path, capsys):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "Add one to 1234", "data_source": "x"}\n{"prompt": "Hi", "data_source": "y"}\n')
    output = tmp_path / "out.parquet"
    assert generate(tiny_model_path, data, output, "data.n_samples=1", "rollout.prompt_length=8") == 0
    written = pq.read_table(output)
    assert written.column_names == ["prompt", "data_source", "responses"] and written.num_rows == 2
    assert "1 of 2 prompts are longer than rollout.prompt_length=8 tokens" in capsys.readouterr().out  # "Hi": raw text, 1 token
    # a .jsonl output name gets JSON lines, which reinforge eval (and any JSON reader) reads back
    assert generate(tiny_model_path, data, tmp_path / "out.jsonl", "data.n_samples=2") == 0
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in row.items() if k != "responses"} for row in lines] == [
        {"prompt": "Add one to 1234", "data_source": "x"}, {"prompt": "Hi", "data_source": "y"}]
    assert all(len(row["responses"]) == 2 for row in lines)
    capsys.readouterr()
    # OpenRLHF's options: "Hi" as one user message through the chat template, or in a template, is over 8 tokens too
    for option in ("data.apply_chat_template=true", "data.input_template='Please answer this question at once: {}'"):
        assert generate(tiny_model_path, data, output, "data.n_samples=1", "rollout.prompt_length=8", option) == 0
        assert "2 of 2 prompts are longer than rollout.prompt_length=8 tokens" in capsys.readouterr().out


@pytest.mark.parametrize("override, message", [
    ("data.n_sample=2", "unknown config key 'data.n_sample'; did you mean 'data.n_samples'?"),
    ("rollout.temprature=0.5", "did you mean 'rollout.temperature'?"),
    ("data.n_samples=0", "data.n_samples=0 must be > 0"),
    ("rollout.temperature=0", "verl requires data.n_samples=1 then"),
    ("trainer.device=cpu rollout.name=vllm", "rollout.name=vllm needs a CUDA GPU (trainer.device=cpu); use rollout.name=hf on CPU"),
    ("data.prompt_key=question", "no prompt column 'question' (data.prompt_key); its columns are data_source, prompt"),
    ("data.input_template=Q:", "data.input_template='Q:' must be a string with one {} where the prompt goes"),
    pytest.param("trainer.device=cuda", "trainer.device=cuda but no CUDA GPU is visible to torch; use trainer.device=cpu",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")),
])
def test_user_errors_name_the_key_or_column(override, message, tiny_model_path, prompts_file, tmp_path, capsys):
    assert generate(tiny_model_path, prompts_file, tmp_path / "out.parquet", *override.split()) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out.parquet").exists()


def test_missing_input_file_and_model_folder_are_named(tiny_model_path, prompts_file, tmp_path, capsys):
    assert generate(tiny_model_path, tmp_path / "nope.parquet", tmp_path / "out.parquet") == 2
    assert f"data.path={tmp_path / 'nope.parquet'}" in capsys.readouterr().err
    assert generate(tmp_path / "no-model", prompts_file, tmp_path / "out.parquet") == 2
    assert f"model.path={tmp_path / 'no-model'}: no such folder" in capsys.readouterr().err


def test_dry_run_prints_the_config_without_loading(tmp_path, capsys):
    assert main(["generate", "--dry-run", f"model.path={tmp_path / 'absent'}", "rollout.gpu_memory_utilization=0.8"]) == 0
    out = capsys.readouterr().out
    assert "n_samples: 5" in out and "name: hf" in out
    assert "rollout.gpu_memory_utilization: vLLM/SGLang setting" in out


@pytest.mark.parametrize("engine_name", ["vllm", "sglang"])
def test_gpu_engines_read_the_folders_weights_and_answer_every_sample(engine_name, monkeypatch, tiny_model_path,
                                                                      prompts_file, tmp_path):
    """vLLM / SGLang stand-ins (tests/inference/fake_engines.py) on a machine made to look like it has a GPU: the engine
    is built from the rollout keys with real weights (verl's dummy load format read as auto), nothing is pushed to it,
    every (row, sample) is one request (vLLM: with its own seed), and its tokens are what the output holds, decoded."""
    import sys

    import torch
    from transformers import AutoTokenizer

    from reinforge.inference import factory
    from tests.inference.fake_engines import FakeLLM, FakeSGLangEngine, fake_response, fake_sglang, fake_vllm

    calls: list = []
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(calls))
    monkeypatch.setitem(sys.modules, "sglang", fake_sglang(calls))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(factory.importlib.util, "find_spec", lambda name: object())
    output = tmp_path / "out.parquet"
    assert generate(tiny_model_path, prompts_file, output, f"rollout.name={engine_name}", "trainer.device=cuda",
                    "data.n_samples=2", "data.batch_size=3", "rollout.gpu_memory_utilization=0.7", "rollout.seed=5") == 0
    (engine,) = (FakeLLM if engine_name == "vllm" else FakeSGLangEngine).instances
    kwargs = engine.kwargs
    assert kwargs["load_format"] == "auto" and kwargs.get("model", kwargs.get("model_path")) == str(tiny_model_path)
    assert kwargs.get("gpu_memory_utilization", kwargs.get("mem_fraction_static")) == 0.7
    assert kwargs.get("max_model_len", kwargs.get("context_length")) == 1536 + 12  # rollout.prompt_length + response_length
    assert not [call for call in calls if call[0] == "load"]  # no weights pushed: the engine read the folder's
    assert [call for call in calls if call[0] == "generate"] == [("generate", 6), ("generate", 4)]  # 3 + 2 prompts x 2
    if engine_name == "vllm":  # a seed per request (SGLang takes only the engine's random_seed: see sglang_engine.py)
        assert len({params["seed"] for params in engine.sampling}) == 10
    else:
        assert kwargs["random_seed"] == 5
    # the fake's rule: token i of a response = (last prompt token + i + 1) % 100 + 10, up to a stop token
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    written = pq.read_table(output).to_pylist()
    for row, text in zip(written, PROMPTS, strict=True):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True,
                                            return_dict=True)["input_ids"]
        stops = [tokenizer.eos_token_id]
        expected = tokenizer.decode(fake_response(ids, 12, stops)[0], skip_special_tokens=True)
        assert row["responses"] == [expected, expected]


def test_a_responses_column_of_a_pandas_file_is_replaced_and_the_file_reads_back_in_pandas(tiny_model_path, tmp_path):
    """pandas records each column's type in the file; the replaced column's record must follow, or pandas (and verl's
    main_eval, which reads the file with it) cannot read the output."""
    import pandas as pd

    given = tmp_path / "with_responses.parquet"
    frame = pd.DataFrame({"data_source": ["d", "d"], "prompt": [[{"role": "user", "content": "hi"}]] * 2,
                          "responses": ["old", "old"]}, index=[3, 7])
    frame.to_parquet(given)
    assert generate(tiny_model_path, given, tmp_path / "out.parquet", "data.n_samples=2") == 0
    written = pd.read_parquet(tmp_path / "out.parquet")
    assert written.index.tolist() == [3, 7] and list(written.columns) == ["data_source", "prompt", "responses"]
    assert all(len(responses) == 2 for responses in written["responses"])


def test_verl_09s_generation_server_command_line(tiny_model_path, prompts_file, tmp_path, capsys):
    """verl 0.9 ships main_generation_server, which reads the ppo_trainer config: data.train_files, +data.output_path,
    actor_rollout_ref.model.path, actor_rollout_ref.rollout.n and the rollout's sampling keys, with ppo_trainer's
    defaults (one sample, top_p 1, no top-k)."""
    output = tmp_path / "server.parquet"
    server = [f"data.train_files={prompts_file}", f"+data.output_path={output}", f"actor_rollout_ref.model.path={tiny_model_path}",
              "actor_rollout_ref.rollout.response_length=6", "trainer.n_gpus_per_node=1"]
    assert main(["generate", *server, "actor_rollout_ref.rollout.n=2", "algorithm.adv_estimator=grpo"]) == 0
    out = capsys.readouterr().out
    assert "algorithm.adv_estimator: a training setting of the ppo_trainer config" in out
    assert all(len(responses) == 2 for responses in pq.read_table(output).column("responses").to_pylist())
    assert main(["generate", "--dry-run", *server]) == 0
    out = capsys.readouterr().out
    assert "n_samples: 1" in out and "top_p: 1.0" in out and "top_k: -1" in out and "response_length: 6" in out
    assert "prompt_length: null" in out  # verl's server sends whole prompts: a long one keeps its generation prompt
    long = tmp_path / "long.parquet"
    rows = pq.read_table(prompts_file).to_pylist()[:1]
    rows[0]["prompt"][0]["content"] += " filler" * 600
    pq.write_table(pa.Table.from_pylist(rows), long)
    server[0] = f"data.train_files={long}"
    assert main(["generate", *server, "data.max_prompt_length=512"]) == 0
    out = capsys.readouterr().out
    assert "data.max_prompt_length: a training setting of the ppo_trainer config" in out and "were cut" not in out
    for extra, message in ((["actor_rollout_ref.actor.ppo_mini_batch_sze=2"],
                            "did you mean 'actor_rollout_ref.actor.ppo_mini_batch_size'?"),
                           ([f"data.train_files=[{prompts_file},{prompts_file}]"], "reinforge generate reads one file"),
                           (["actor_rollout_ref.rollout.n=2", "data.n_samples=3"],
                            "actor_rollout_ref.rollout.n=2 and data.n_samples=3 are the same setting"),
                           (["rollout.temperature=0.7", "actor_rollout_ref.rollout.temperature=0.5"],
                            "rollout.temperature=0.7 and actor_rollout_ref.rollout.temperature=0.5 are the same setting")):
        assert main(["generate", *server, *extra]) == 2
        assert message in capsys.readouterr().err
