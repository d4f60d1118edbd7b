"""Where the tokenizer and the model load from: a model folder needs config.json, a tokenizer folder only a tokenizer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reinforge.config.schema import Config
from reinforge.errors import ModelError
from reinforge.reward.models.worker import _tokenizer
from reinforge.training.model import load_tokenizer, model_source

TOKENIZER_ONLY = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def _config(model, tokenizer=None) -> Config:
    config = Config()
    config.actor_rollout_ref.model.path = str(model)
    config.data.tokenizer = None if tokenizer is None else str(tokenizer)
    return config


@pytest.fixture
def tokenizer_folder(tiny_model_path, tmp_path):
    """A folder with the tiny model's tokenizer files and chat template only (no config.json, no weights)."""
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in TOKENIZER_ONLY:
        shutil.copy(tiny_model_path / name, folder / name)
    return folder


def test_data_tokenizer_loads_from_a_folder_that_holds_only_a_tokenizer(tiny_model_path, tokenizer_folder):
    own = load_tokenizer(_config(tiny_model_path))
    alone = load_tokenizer(_config(tiny_model_path, tokenizer_folder))
    messages = [{"role": "user", "content": "Add 1: 0042"}]
    assert alone.apply_chat_template(messages, tokenize=False) == own.apply_chat_template(messages, tokenize=False)
    assert alone("0042")["input_ids"] == own("0042")["input_ids"]
    # the reward model's input_tokenizer is a tokenizer alone too
    assert _tokenizer(str(tokenizer_folder), "reward_model.model.input_tokenizer", False)("0042")["input_ids"] == own("0042")["input_ids"]


def test_a_tokenizer_folder_without_tokenizer_files_is_named(tiny_model_path, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a tokenizer")
    with pytest.raises(ModelError, match=r"data.tokenizer=.*notes: the folder has no tokenizer files \(none of tokenizer.json, "):
        load_tokenizer(_config(tiny_model_path, tmp_path / "notes"))
    with pytest.raises(ModelError, match=r"data.tokenizer=.*absent: no such folder"):
        load_tokenizer(_config(tiny_model_path, tmp_path / "absent"))
    (tmp_path / "weights_only").mkdir()  # a model folder without its tokenizer: transformers would make one of 1 token
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model_path / name, tmp_path / "weights_only" / name)
    with pytest.raises(ModelError, match=r"actor_rollout_ref.model.path=.*weights_only: the folder has no tokenizer files"):
        load_tokenizer(_config(tmp_path / "weights_only"))


def test_a_model_folder_still_needs_its_config_json(tokenizer_folder):
    with pytest.raises(ModelError, match=r"actor_rollout_ref.model.path=.*tok: the folder has no config.json"):
        model_source(str(tokenizer_folder))
    with pytest.raises(ModelError, match="the folder has no config.json"):
        load_tokenizer(_config(tokenizer_folder))  # without data.tokenizer the model folder is checked as a model's


@pytest.mark.parametrize("change, message", [
    ({"num_attention_heads": 8}, r"cannot load the model: You set `ignore_mismatched_sizes` to `False`.*\n.*LOAD REPORT"
                                 r"[\s\S]*k_proj\.weight +\| MISMATCH"),
    ({"hidden_act": "silux"}, r"cannot load the model: KeyError: 'silux'"),
])
def test_weights_that_do_not_fit_the_config_are_shown_in_a_quiet_run(tiny_model_path, tmp_path, capsys, change, message):
    """transformers refers to its load report, which a quiet run (trainer/main.py) keeps off the console: the error
    carries it; a short message gets its exception's name."""
    import json

    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from reinforge.training.model import load_pretrained

    folder = tmp_path / "edited"
    shutil.copytree(tiny_model_path, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    model_cfg = Config().actor_rollout_ref.model
    model_cfg.path = str(folder)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with pytest.raises(ModelError, match=message):
            load_pretrained(model_cfg, "actor_rollout_ref.model.path", "model", "fp32",
                            lambda source, hf_config, kwargs: AutoModelForCausalLM.from_pretrained(source, **kwargs))
    finally:
        hf_logging.set_verbosity(verbosity)
    assert "LOAD REPORT" not in capsys.readouterr().err  # in the error only, not printed on the way


@pytest.mark.parametrize("key", ["attn_implementation", "_attn_implementation"])
def test_override_config_sets_the_attention_implementation(tiny_model_path, key, monkeypatch):
    """verl's scripts choose attention with +actor_rollout_ref.model.override_config.attn_implementation (or
    _attn_implementation); flash attention, asked for without a CUDA GPU, attends with sdpa and says so at start."""
    import torch

    from reinforge.config import load_config, unused_settings
    from reinforge.training.model import load_causal_lm

    def attention(name):
        config, keys = load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "data.train_files=x.parquet",
                                    f"+actor_rollout_ref.model.override_config.{key}={name}"])
        notes = [note for note in unused_settings(config, keys) if "override_config" in note]
        return load_causal_lm(config, "cpu", trainable=False).config._attn_implementation, notes

    assert attention("eager") == ("eager", [])
    assert attention("sdpa") == ("sdpa", [])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert attention("flash_attention_2") == ("sdpa", [
        f"actor_rollout_ref.model.override_config.{key}: flash attention needs a CUDA GPU; on this machine the model "
        "attends with sdpa (the same maths)"])
    with pytest.raises(ModelError, match='cannot load the model: Specified `attn_implementation="no_such"` is not supported'):
        attention("no_such")


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A Hugging Face cache of its own and no proxy; the hub probe forgotten before and after."""
    from huggingface_hub import constants

    from reinforge.training import model

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    model._hub_unreachable.cache_clear()
    yield constants
    model._hub_unreachable.cache_clear()


def test_a_hub_id_that_is_not_cached_and_cannot_be_downloaded_is_named_at_once(hub, monkeypatch):
    """Not after huggingface_hub's retries (about 25 s per file): one connection to the hub's endpoint is refused."""
    import socket

    from reinforge.training import model

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: connection refused
    monkeypatch.setattr(hub, "ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(ModelError, match=rf"actor_rollout_ref.model.path=someorg/some-model: there is no such folder here, and "
                                         rf"as a model id on the hub it is not in the Hugging Face cache, while the hub "
                                         rf"\(http://127.0.0.1:{port}\) cannot be reached from this machine \(Connection refused\)"):
        model_source("someorg/some-model")
    repo = Path(hub.HF_HUB_CACHE) / "models--someorg--some-model"  # huggingface_hub's cache layout
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    assert model_source("someorg/some-model") == "someorg/some-model"  # cached: transformers loads it offline
    listening = socket.create_server(("127.0.0.1", 0))
    monkeypatch.setattr(hub, "ENDPOINT", f"http://127.0.0.1:{listening.getsockname()[1]}")
    model._hub_unreachable.cache_clear()
    with listening:
        assert model_source("otherorg/other-model") == "otherorg/other-model"  # reachable: left to transformers
