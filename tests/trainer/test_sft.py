"""`reinforge sft`: verl's SFT data and command line, the loss against an independent computation, learning, exact
resume, 2 ranks equal to 1, LoRA, and the messages of user mistakes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from reinforge.cli import main
from reinforge.config.sft_schema import SFTConfig
from reinforge.environment.sft_dataset import SFTDataset
from reinforge.errors import DataError
from tests.trainer.test_metrics_documented import DOC, documented_patterns

ROWS = 256


def _digits(i: int, salt: int) -> str:
    return str((i * 7919 + salt * 104729) % 10000).zfill(4)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """gsm8k-like single-turn rows (the question and answer also nested in extra_info, as verl's gsm8k files hold
    them), and two-turn conversations."""
    folder = tmp_path_factory.mktemp("sft-data")
    for name, count, salt in (("train", ROWS, 0), ("test", 32, 1)):
        rows = [{"question": f"Copy: {_digits(i, salt)}", "answer": _digits(i, salt),
                 "extra_info": {"question": f"Copy: {_digits(i, salt)}", "answer": _digits(i, salt), "index": i}}
                for i in range(count)]
        pq.write_table(pa.Table.from_pylist(rows), folder / f"{name}.parquet")
    conversations = [{"messages": [{"role": "user", "content": f"Copy: {i % 10}"}, {"role": "assistant", "content": str(i % 10)},
                                   {"role": "user", "content": f"Copy: {i % 7}"}, {"role": "assistant", "content": str(i % 7)}]}
                     for i in range(64)]
    pq.write_table(pa.Table.from_pylist(conversations), folder / "multi.parquet")
    return folder


def _args(model: Path, data: Path, run: Path, *extra: str) -> list[str]:
    return ["sft", f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
            "data.train_batch_size=32", "data.micro_batch_size_per_gpu=8", f"model.partial_pretrain={model}",
            f"trainer.default_local_dir={run}", "optim.lr=3e-3", "trainer.total_epochs=1", *extra]


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


# ---- data -------------------------------------------------------------------------------------------------------
def test_single_turn_rows_train_the_response_and_eos(tokenizer, data):
    config = SFTConfig().data
    config.prompt_key, config.response_key = "extra_info", "extra_info"
    config.prompt_dict_keys, config.response_dict_keys = ["question"], ["answer"]
    example = SFTDataset(str(data / "train.parquet"), tokenizer, config)[3]
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": f"Copy: {_digits(3, 0)}"}], add_generation_prompt=True,
                                           tokenize=False)
    assert tokenizer.decode(example.prompt) == prompt
    assert example.response == tokenizer(_digits(3, 0), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert example.mask == [1] * len(example.response)


def test_verls_gemma_example_takes_the_prompt_columns_one_message_by_its_content(tokenizer, tmp_path):
    """verl's run_gemma_2b.sh: data.prompt_key=prompt with prompt_dict_keys=['content'] on an RL file, whose prompt is a
    list of one chat message; verl's series_to_item unwraps it, so the prompt is that message's text."""
    rows = [{"prompt": [{"role": "user", "content": "Copy: 42"}], "extra_info": {"answer": "42"}}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rl.parquet")
    config = SFTConfig().data
    config.prompt_key, config.response_key = "prompt", "extra_info"
    config.prompt_dict_keys, config.response_dict_keys = ["content"], ["answer"]
    example = SFTDataset(str(tmp_path / "rl.parquet"), tokenizer, config)[0]
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Copy: 42"}], add_generation_prompt=True, tokenize=False)
    assert tokenizer.decode(example.prompt) == prompt
    rows[0]["prompt"].append({"role": "user", "content": "and again"})  # two messages: no one message to take
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "two.parquet")
    with pytest.raises(DataError, match=r"row 0: column 'prompt' has no key 'content' \(data.prompt_dict_keys\); it is a list"):
        SFTDataset(str(tmp_path / "two.parquet"), tokenizer, config)[0]


def test_multi_turn_rows_train_the_assistant_messages_only(tokenizer, data):
    config = SFTConfig().data
    config.multiturn.enable = True
    example = SFTDataset(str(data / "multi.parquet"), tokenizer, config)[12]
    trained = tokenizer.decode([t for t, m in zip(example.response, example.mask, strict=True) if m])
    end = "<|im_end|>\n"  # the tiny model's template closes every turn so
    assert trained == f"2{end}5{end}"
    whole = tokenizer.apply_chat_template([{"role": "user", "content": "Copy: 2"}, {"role": "assistant", "content": "2"},
                                           {"role": "user", "content": "Copy: 5"}, {"role": "assistant", "content": "5"}],
                                          tokenize=False)
    assert tokenizer.decode(example.prompt + example.response) == whole


def test_apply_chat_template_kwargs_reach_every_template_call(tiny_model_path, data, tmp_path):
    """data.apply_chat_template_kwargs (verl's) go to the single-turn prompt's and the conversations' template calls; a
    row's enable_thinking column wins over an enable_thinking given there."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)  # its own copy: the template is replaced
    tokenizer.chat_template = ("[{{ greeting }}|{{ enable_thinking }}]{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                               "<|im_end|>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")
    config = SFTConfig().data
    config.apply_chat_template_kwargs = {"greeting": "hi", "enable_thinking": False}
    example = SFTDataset(str(data / "train.parquet"), tokenizer, config)[0]
    assert tokenizer.decode(example.prompt).startswith("[hi|False]<user>Copy: ")
    rows = [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "enable_thinking": thinking}
            for thinking in (None, True)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "multi.parquet")
    config.multiturn.enable = True
    dataset = SFTDataset(str(tmp_path / "multi.parquet"), tokenizer, config)
    assert [tokenizer.decode(e.prompt + e.response)[:10] for e in dataset] == ["[hi|False]", "[hi|True]<"]


def test_long_rows_are_truncated_or_named(tokenizer, data):
    config = SFTConfig().data
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": f"Copy: {_digits(0, 0)}"}], add_generation_prompt=True,
                                           tokenize=False)
    config.max_length = len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) + 2
    with pytest.raises(Exception, match=rf"train.parquet row 0: \d+ tokens, more than data.max_length={config.max_length}"):
        SFTDataset(str(data / "train.parquet"), tokenizer, config)
    config.truncation = "right"
    example = SFTDataset(str(data / "train.parquet"), tokenizer, config)[0]
    assert tokenizer.decode(example.prompt) == prompt and example.response == tokenizer(_digits(0, 0))["input_ids"][:2]
    config.truncation = "left"
    example = SFTDataset(str(data / "train.parquet"), tokenizer, config)[0]
    assert len(example.prompt + example.response) == config.max_length and example.response[-1] == tokenizer.eos_token_id


def test_rows_with_nothing_to_train_keep_their_place_and_an_assistant_first_conversation_is_named(tokenizer, tmp_path):
    """verl keeps a row whose response is cut away (or empty): it counts in the batches and adds nothing to the loss.
    A conversation that starts with the assistant has no prompt to tell its tokens from: a DataError naming the row."""
    rows = [{"question": "Copy: 12", "answer": "12"}, {"question": "Copy: 34", "answer": ""}, {"question": "C", "answer": "5"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "pairs.parquet")
    config = SFTConfig().data
    dataset = SFTDataset(str(tmp_path / "pairs.parquet"), tokenizer, config)
    assert len(dataset) == 3 and dataset.untrained == 0  # the EOS after an empty answer is trained
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Copy: 12"}], add_generation_prompt=True, tokenize=False)
    config.max_length, config.truncation = len(tokenizer(prompt, add_special_tokens=False)["input_ids"]), "right"
    dataset = SFTDataset(str(tmp_path / "pairs.parquet"), tokenizer, config)  # the first two answers cut away
    assert len(dataset) == 3 and dataset.untrained == 2
    assert [any(example.mask) for example in dataset] == [False, False, True]
    conversations = [{"messages": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "a"},
                                   {"role": "assistant", "content": "b"}]}]
    pq.write_table(pa.Table.from_pylist(conversations), tmp_path / "multi.parquet")
    config = SFTConfig().data
    config.multiturn.enable = True
    with pytest.raises(DataError, match=r"multi.parquet row 0: the conversation starts with an assistant message"):
        SFTDataset(str(tmp_path / "multi.parquet"), tokenizer, config)
    for messages in ([], [{"role": "user", "content": 5}, {"role": "assistant", "content": "b"}]):  # no message; a number
        (tmp_path / "odd.jsonl").write_text(json.dumps({"messages": messages}) + "\n")
        with pytest.raises(DataError, match=r"odd.jsonl row 0, column 'messages': the chat template failed on this row \("):
            SFTDataset(str(tmp_path / "odd.jsonl"), tokenizer, config)  # the template's own error, named, not a traceback


def test_max_samples_keep_the_first_rows_or_with_shuffle_a_seeded_random_choice(tokenizer, data):
    """data.train_max_samples keeps the first rows; with data.shuffle=true, verl's random choice
    (np.random.default_rng(data.seed).choice without replacement, in the order drawn), data.seed=null being trainer.seed."""
    import numpy as np

    from reinforge.config.sft_schema import load_sft_config

    base = ["model.partial_pretrain=/models/x", f"data.train_files={data / 'train.parquet'}", "trainer.seed=5"]

    def answers(*extra: str) -> list[str]:
        config, _ = load_sft_config([*base, *extra], None, 1)
        dataset = SFTDataset(config.data.train_files, tokenizer, config.data, config.data.train_max_samples)
        return [tokenizer.decode(example.response[:-1]) for example in dataset]  # without the EOS

    def drawn(seed: int) -> list[str]:
        return [_digits(i, 0) for i in np.random.default_rng(seed).choice(ROWS, size=8, replace=False).tolist()]

    assert answers("data.train_max_samples=8") == [_digits(i, 0) for i in range(8)]
    assert answers("data.train_max_samples=8", "data.shuffle=true") == drawn(5)
    assert answers("data.train_max_samples=8", "data.shuffle=true", "data.seed=7") == drawn(7) != drawn(5)
    assert len(answers("data.shuffle=true")) == ROWS  # nothing cut: every row, in the files' order


# ---- the loss, learning, checkpoints ----------------------------------------------------------------------------
def test_first_step_loss_is_the_token_mean_nll(tiny_model_path, tokenizer, data, tmp_path):
    """Step 1's train/loss (before any update) against the model's own cross-entropy on the same rows, worked out here."""
    run = tmp_path / "run"
    assert main(_args(tiny_model_path, data, run, "trainer.total_training_steps=1")) == 0
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    rows = torch.randperm(ROWS, generator=torch.Generator().manual_seed(0))[:32].tolist()  # verl's sampler: seed 0 + epoch 0
    nll = tokens = 0.0
    for i in rows:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": f"Copy: {_digits(i, 0)}"}], add_generation_prompt=True,
                                               tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer = tokenizer(_digits(i, 0), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        labels = [-100] * len(prompt_ids) + answer
        with torch.no_grad():
            out = model(torch.tensor([prompt_ids + answer]), labels=torch.tensor([labels]))
        nll, tokens = nll + out.loss.item() * len(answer), tokens + len(answer)
    (step,) = _metrics(run)
    assert step["train/loss"] == pytest.approx(nll / tokens, rel=1e-5)
    assert step["train/tokens"] == tokens


def test_sft_learns_and_saves_a_model_reinforge_train_loads(tiny_model_path, data, tmp_path):
    run = tmp_path / "run"
    assert main(_args(tiny_model_path, data, run, "trainer.total_epochs=3", "trainer.test_freq=8")) == 0  # 24 steps
    metrics = _metrics(run)
    patterns = documented_patterns(DOC.read_text())
    assert not [key for m in metrics for key in m if not any(p.match(key) for p in patterns)]  # docs/metrics.md lists them
    val = [m["val/loss"] for m in metrics if "val/loss" in m]
    assert len(val) == 3 and val[0] > val[1] > val[2] and val[2] < 0.6 * metrics[0]["train/loss"]
    hf = run / "global_step_24" / "huggingface"
    assert (run / "latest_checkpointed_iteration.txt").read_text().strip() == "24"
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(hf).state_dict()
    trained = torch.load(run / "global_step_24" / "model_world_size_1_rank_0.pt", weights_only=True)
    assert all(torch.equal(saved[name], trained[name]) for name in saved)
    from reinforge.report import write_report

    page = write_report([run])
    assert sorted(p.name for p in page.parent.glob("*.png")) == ["grad_norm.png", "loss.png", "lr.png"]
    assert main(["train", "--dry-run", f"actor_rollout_ref.model.path={hf}", f"data.train_files={data / 'train.parquet'}",
                 f"data.val_files={data / 'test.parquet'}", "data.prompt_key=question"]) == 0


def test_resumed_run_equals_the_uninterrupted_one(tiny_model_path, data, tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert main(_args(tiny_model_path, data, whole, "trainer.save_freq=4")) == 0  # 8 steps
    assert main(_args(tiny_model_path, data, resumed, "trainer.resume_mode=resume_path",
                      f"trainer.resume_from_path={whole / 'global_step_4'}")) == 0
    a = torch.load(whole / "global_step_8" / "model_world_size_1_rank_0.pt", weights_only=True)
    b = torch.load(resumed / "global_step_8" / "model_world_size_1_rank_0.pt", weights_only=True)
    assert all(torch.equal(a[name], b[name]) for name in a)
    after = {m["step"]: m["train/loss"] for m in _metrics(resumed) if m["step"] > 4}
    assert after == {m["step"]: m["train/loss"] for m in _metrics(whole) if m["step"] > 4}


def test_lora_trains_adapters_only(tiny_model_path, data, tmp_path):
    pytest.importorskip("peft")
    run = tmp_path / "run"
    assert main(_args(tiny_model_path, data, run, "model.lora_rank=4", "model.lora_alpha=8", "trainer.total_training_steps=4",
                      "optim.lr=1e-2")) == 0
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict()
    saved_state = torch.load(run / "global_step_4" / "model_world_size_1_rank_0.pt", weights_only=True)
    assert all(name.startswith("base_model.model.") for name in saved_state)  # peft's names, as verl's rank files
    state = {name.removeprefix("base_model.model."): tensor for name, tensor in saved_state.items()}
    assert json.loads((run / "global_step_4" / "lora_train_meta.json").read_text())["lora_alpha"] == 8
    adapters = [name for name in state if ".lora_" in name]
    def saved(name: str) -> torch.Tensor:  # an adapted layer keeps its weight under base_layer (peft's names)
        return state[name] if name in state else state[name.replace(".weight", ".base_layer.weight").replace(".bias", ".base_layer.bias")]

    assert adapters and all(torch.equal(saved(name), base[name]) for name in base)  # the base weights did not move
    assert (run / "global_step_4" / "lora_adapter" / "adapter_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(run / "global_step_4" / "huggingface").state_dict()
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"], base["model.layers.0.self_attn.q_proj.weight"])


def _torchrun(ranks: int, args: list[str]) -> None:
    """`reinforge <args>` in `ranks` processes started by torchrun (FSDP2 over gloo, on the CPU also where a GPU is)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", "-m", "reinforge",
               *args, "trainer.device=cpu"]
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_two_ranks_equal_one(tiny_model_path, data, tmp_path):
    """torchrun with 2 processes (FSDP2 over gloo) gives the 1-process run's losses and weights."""
    for ranks in (1, 2):
        _torchrun(ranks, _args(tiny_model_path, data, tmp_path / f"r{ranks}", "trainer.total_training_steps=4", "trainer.logger=[]"))
    one, two = _metrics(tmp_path / "r1"), _metrics(tmp_path / "r2")
    for a, b in zip(one, two, strict=True):
        assert b["train/loss"] == pytest.approx(a["train/loss"], rel=1e-5)
        assert b["train/grad_norm"] == pytest.approx(a["train/grad_norm"], rel=1e-4)
    assert two[-1]["val/loss"] == pytest.approx(one[-1]["val/loss"], rel=1e-5)
    assert sorted(p.name for p in (tmp_path / "r2" / "global_step_4").glob("model_*")) == [
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]


def test_validation_with_fewer_rows_than_ranks(tiny_model_path, data, tmp_path):
    """One validation row (fewer than the ranks, and than a micro-batch) on 2 ranks: the rank without rows still runs
    the sharded forward, and val/loss is the token mean over the rows, the 1-process value."""
    pq.write_table(pq.read_table(data / "test.parquet").slice(0, 1), tmp_path / "one.parquet")
    extra = (f"data.val_files={tmp_path / 'one.parquet'}", "data.train_batch_size=2", "trainer.total_training_steps=1",
             "trainer.logger=[]")
    assert main(_args(tiny_model_path, data, tmp_path / "r1", *extra)) == 0
    _torchrun(2, _args(tiny_model_path, data, tmp_path / "r2", *extra))
    (one,), (two,) = _metrics(tmp_path / "r1"), _metrics(tmp_path / "r2")
    assert two["val/loss"] == pytest.approx(one["val/loss"], rel=1e-5)


# ---- user mistakes ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, message", [
    (["data.promt_key=x"], "unknown config key 'data.promt_key'; did you mean 'data.prompt_key'?"),
    (["model.partial_pretrain=null"], "model.partial_pretrain (verl 0.9: model.path) is not set"),
    (["data.response_key=solution"], "no column 'solution' (data.response_key); its columns are question, answer, extra_info"),
    (["optim.lr_scheduler=polynomial"], "optim.lr_scheduler='polynomial' is not one of: constant, cosine, wsd, linear"),
    (["data.train_batch_size=1000"], "data.train_batch_size=1000 is more than the 256 training rows"),
    (["data.pad_mode=left_right"], "data.pad_mode='left_right' is not supported; right and no_padding are accepted"),
    (["model.fsdp_config.model_dtype=fp16"], "model.fsdp_config.model_dtype='fp16' is not one of: fp32, bf16, float32, bfloat16"),
    (["+data.apply_chat_template_kwargs.tokenize=true"], "data.apply_chat_template_kwargs.tokenize: set by reinforge itself"),
])
def test_user_mistakes_are_named(tiny_model_path, data, tmp_path, capsys, extra, message):
    assert main(_args(tiny_model_path, data, tmp_path / "run", *extra)) == 2
    assert message in capsys.readouterr().err


def test_a_run_folder_in_use_stops_before_anything_is_written(tiny_model_path, data, tmp_path, capsys):
    """A second SFT run in a folder another run holds would write over its config.yaml, checkpoints and metrics."""
    run = tmp_path / "run"
    code = ("import sys, time\nfrom pathlib import Path\nfrom reinforge.trainer.run_folder import hold_run_folder\n"
            "with hold_run_folder(Path(sys.argv[1]), 'x'):\n    print('held', flush=True)\n    time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(_args(tiny_model_path, data, run)) == 2
    finally:
        holder.kill()
        holder.wait()
    assert f"is in use by another reinforge run (process {holder.pid})" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == [".reinforge.lock"]


def test_no_gradient_clip(tiny_model_path, data, tmp_path):
    """optim.clip_grad=null (the schema allows it): the step runs unclipped and reports the gradient's norm."""
    run = tmp_path / "run"
    assert main(_args(tiny_model_path, data, run, "optim.clip_grad=null", "trainer.total_training_steps=1", "trainer.logger=[]")) == 0
    (step,) = _metrics(run)
    assert step["train/grad_norm"] > 0 and step["train/nonfinite_skipped"] == 0


def test_deprecated_micro_batch_size_is_split_over_the_ranks_unless_the_per_gpu_size_is_set():
    """data.micro_batch_size (verl's deprecated key) is what older verl's trainer read: rows over all ranks, divided by
    their number, unless data.micro_batch_size_per_gpu is set too or it does not divide (then reported as without
    effect, as verl 0.9 ignores it)."""
    from reinforge.config.sft_schema import load_sft_config
    from reinforge.errors import ConfigError

    base = ["model.partial_pretrain=/models/x", "data.train_files=train.parquet", "data.train_batch_size=32"]
    config, notes = load_sft_config([*base, "data.micro_batch_size=16"], None, 8)
    assert config.data.micro_batch_size_per_gpu == 2 and not any("micro_batch_size" in n for n in notes)
    assert load_sft_config([*base, "data.micro_batch_size=16"], None, 1)[0].data.micro_batch_size_per_gpu == 16
    config, notes = load_sft_config([*base, "data.micro_batch_size=12"], None, 8)
    assert config.data.micro_batch_size_per_gpu == 4
    assert any(n.startswith("data.micro_batch_size=12 (verl's deprecated key, rows over all ranks) has no effect here: it "
                            "does not split over 8 rank(s)") for n in notes)
    with pytest.raises(ConfigError, match=r"data.micro_batch_size=0 must be at least 1"):
        load_sft_config([*base, "data.micro_batch_size=0"], None, 1)
    config, notes = load_sft_config([*base, "data.micro_batch_size=1", "data.micro_batch_size_per_gpu=4"], None, 8)
    assert config.data.micro_batch_size_per_gpu == 4
    assert "data.micro_batch_size=1 (verl's deprecated key) has no effect here: data.micro_batch_size_per_gpu=4 is used" in notes
    # a group given as a mapping sets only the keys it names
    config, notes = load_sft_config([*base, "data={micro_batch_size: 8}"], None, 2)
    assert config.data.micro_batch_size_per_gpu == 4 and not any("micro_batch_size" in n for n in notes)


def test_top_level_multi_turn_keys_are_the_multiturn_settings():
    """verl's newer data.messages_key / tools_key / enable_thinking_key are data.multiturn's; two values for one is an error."""
    from reinforge.config.sft_schema import load_sft_config
    from reinforge.errors import ConfigError

    base = ["model.partial_pretrain=/models/x", "data.train_files=train.parquet", "data.multiturn.enable=true"]
    config, _ = load_sft_config([*base, "+data.messages_key=conversation", "data.enable_thinking_key=think"], None, 1)
    assert (config.data.multiturn.messages_key, config.data.multiturn.enable_thinking_key) == ("conversation", "think")
    assert config.data.multiturn.tools_key == config.data.tools_key == "tools"
    config, _ = load_sft_config([*base, "data.tools_key=t", "data.multiturn.tools_key=t"], None, 1)
    assert config.data.multiturn.tools_key == "t"
    with pytest.raises(ConfigError, match="data.messages_key=conversation and data.multiturn.messages_key=messages are the "
                                          "same setting"):
        load_sft_config([*base, "data.messages_key=conversation", "data.multiturn.messages_key=messages"], None, 1)
    # the group as a mapping sets only what it names: data.multiturn.messages_key stays unset by the user
    config, _ = load_sft_config(["model.partial_pretrain=/models/x", "data.train_files=train.parquet",
                                 "data.multiturn={enable: true}", "data.messages_key=conv"], None, 1)
    assert config.data.multiturn.enable and config.data.multiturn.messages_key == "conv"


# verl 0.9's examples/sft/gsm8k/run_qwen3_8b_fsdp.sh and examples/sft/vlm/run_qwen3_vl_2b_fsdp.sh (its fsdp branch), as
# they are written, but for the model and data paths (and wandb)
VERL_09_SFT = [
    "data.micro_batch_size_per_gpu=64 data.messages_key=messages optim.lr=1e-4 engine=fsdp "
    "engine.ulysses_sequence_parallel_size=2 model.use_remove_padding=true trainer.project_name=gsm8k-sft "
    "trainer.experiment_name=e trainer.total_epochs=2 model.lora_rank=32 model.lora_alpha=16 model.target_modules=all-linear",
    "data.train_batch_size=96 data.max_length=2048 data.pad_mode=no_padding data.truncation=error data.use_dynamic_bsz=True "
    "data.max_token_len_per_gpu=65536 model.use_remove_padding=True engine=fsdp optim=fsdp optim.lr=2e-5 "
    "optim.lr_warmup_steps_ratio=0.01 optim.weight_decay=0.1 optim.betas=[0.9,0.95] optim.clip_grad=1.0 optim.min_lr_ratio=0.1 "
    "optim.warmup_style=cosine engine.ulysses_sequence_parallel_size=2 engine.strategy=fsdp2 engine.fsdp_size=-1 "
    "trainer.test_freq=-1 trainer.save_freq=4000 trainer.project_name=p trainer.experiment_name=e trainer.total_epochs=10 "
    "trainer.resume_mode=auto trainer.max_ckpt_to_keep=5 checkpoint.save_contents=[model,optimizer,extra]",
]


@pytest.mark.parametrize("line", VERL_09_SFT, ids=["gsm8k_qwen3_8b", "vlm_qwen3_vl_2b"])
def test_verl_09_sft_command_lines_load_with_their_settings(line):
    """verl 0.9's trainer (verl.trainer.sft_trainer): model.path, engine=fsdp, engine.*, checkpoint.*, a conversation
    column (its dataset reads conversations only) and its optimizer defaults where the line leaves them out."""
    from reinforge.config.sft_schema import load_sft_config

    config, notes = load_sft_config(["model.path=/models/x", "data.train_files=train.parquet", *line.split()], None, 1)
    assert config.model.partial_pretrain == config.model.path == "/models/x" and config.data.multiturn.enable
    assert "engine=fsdp (verl's choice of its engine config group) has no effect here: it is the only one" in notes
    if "vlm" in line or "warmup_style" in line:
        assert (config.optim.lr_scheduler, config.optim.betas, config.optim.min_lr_ratio) == ("cosine", [0.9, 0.95], 0.1)
        assert config.trainer.checkpoint["save_contents"] == ["model", "optimizer", "extra"]
        assert config.model.strategy == "fsdp2" and "engine.fsdp_size: verl's engine tuning, without effect here" in notes
    else:  # verl 0.9's defaults: constant schedule, no warmup, betas (0.9, 0.999)
        assert (config.optim.lr, config.optim.lr_scheduler, config.optim.lr_warmup_steps_ratio) == (1e-4, "constant", 0.0)
        assert config.optim.betas == [0.9, 0.999] and config.model.lora_rank == 32


def test_mixed_precision_is_an_fsdp_setting_in_both_trainers_forms():
    """verl 0.9's engine.mixed_precision and the older model.fsdp_config.mixed_precision set the compute dtype on CUDA
    (training/fsdp.py); a dtype the trainer cannot compute in is refused when the config is read."""
    from reinforge.config.sft_schema import load_sft_config
    from reinforge.errors import ConfigError

    base = ["model.partial_pretrain=/models/x", "data.train_files=train.parquet"]
    assert load_sft_config(base, None, 1)[0].model.fsdp_config.mixed_precision == {}  # bf16 on CUDA, verl's default
    for key in ("engine.mixed_precision.param_dtype", "model.fsdp_config.mixed_precision.param_dtype"):
        assert load_sft_config([*base, f"{key}=fp32"], None, 1)[0].model.fsdp_config.mixed_precision == {"param_dtype": "fp32"}
    with pytest.raises(ConfigError, match=r"model.fsdp_config.mixed_precision.param_dtype='fp16' is not one of"):
        load_sft_config([*base, "model.fsdp_config.mixed_precision.param_dtype=fp16"], None, 1)


def test_a_verl_09_sft_run_trains_on_conversations_and_saves_after_each_epoch(tiny_model_path, data, tmp_path):
    run = tmp_path / "run"
    assert main(["sft", f"data.train_files={data / 'multi.parquet'}", "data.messages_key=messages", f"model.path={tiny_model_path}",
                 "engine=fsdp", "data.pad_mode=no_padding", "data.train_batch_size=32", "data.micro_batch_size_per_gpu=16",
                 "optim.lr=3e-3", "trainer.total_epochs=2", "trainer.save_freq=after_each_epoch", "trainer.logger=console",
                 f"trainer.default_local_dir={run}"]) == 0
    steps = _metrics(run)
    assert [s["step"] for s in steps] == [1, 2, 3, 4]  # 64 conversations, 32 a step
    assert {s["train/lr"] for s in steps} == {3e-3}  # verl 0.9's constant schedule without warmup
    assert sorted(p.name for p in run.glob("global_step_*")) == ["global_step_2", "global_step_4"]  # each epoch's end
    assert steps[-1]["train/loss"] < steps[0]["train/loss"]


def test_tracking_logger_is_wandb_with_one_note_under_torchrun(monkeypatch, capsys):
    """verl's deprecated trainer.logger=tracking is wandb; every rank reads the config, rank 0 alone says so."""
    from reinforge.config.sft_schema import load_sft_config

    args = ["model.partial_pretrain=/models/x", "data.train_files=train.parquet", "trainer.logger=[console,tracking]"]
    for rank, noted in (("0", True), ("1", False)):
        monkeypatch.setenv("RANK", rank)
        assert load_sft_config(args, None, 2)[0].trainer.logger == ["console", "wandb"]
        assert ("trainer.logger: 'tracking' is deprecated (as in verl); it means 'wandb'" in capsys.readouterr().out) == noted


def test_dry_run_prints_the_config_and_the_keys_without_effect(capsys):
    assert main(["sft", "--dry-run", "model.partial_pretrain=/models/x", "data.train_files=train.parquet",
                 "optim.warmup_steps_ratio=0.05", "ulysses_sequence_parallel_size=2", "data.balance_dp_token=true",
                 "+data.pad_mode=right", "model.fsdp_config.cpu_offload=true"]) == 0
    out = capsys.readouterr().out
    assert "- model.fsdp_config.cpu_offload: FSDP's offload of a model sharded over several CUDA ranks; no effect on one rank" in out
    assert "lr_warmup_steps_ratio: 0.05" in out  # verl's older name, carried over
    assert "- ulysses_sequence_parallel_size=2: sequences are not split over ranks here" in out
    assert "- data.pad_mode=right has no effect here: micro-batches are padded to their longest row" in out
    assert "- data.balance_dp_token=True has no effect here: the loss is always the token mean over the whole step" in out
