"""LoRA adapters (training/lora.py): only the adapters train, the reference is the policy with them off,
engines and Hugging Face folders get W + (alpha / r) B A, checkpoints resume and merge."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("peft")

from reinforge.config.schema import CriticModelConfig, ModelConfig  # noqa: E402
from reinforge.errors import ConfigError  # noqa: E402
from reinforge.training.lora import (  # noqa: E402
    WithoutAdapters,
    adapted_layers,
    add_lora,
    engine_weights,
    fan_in_fan_out,
    lora_scaling,
    merge_lora_state,
)

IDS = torch.tensor([[5, 17, 42, 9, 33, 8], [3, 3, 21, 60, 7, 12]])


def load(path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    model.eval()
    return model


def randomise_adapters(model, seed=0):
    """B starts at 0 (the adapted model is the base model); a trained one is not."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=g) * 0.2)


def tiny_gpt2(tiny_model_path, folder):
    """A GPT-2 (its linear layers transformers' Conv1D, weights stored (in, out); no intermediate_size in its config) with
    the tiny tokenizer, dropout off."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_conv1d_models_merged_weights_compute_the_adapted_model(tiny_model_path, tmp_path):
    """peft adds GPT-2's Conv1D updates transposed (fan_in_fan_out): merged untransposed, c_attn's (32, 96) weight did not
    take its (96, 32) update, and c_proj's square one took the wrong one silently (logits off by up to 5)."""
    path = tiny_gpt2(tiny_model_path, tmp_path / "gpt2")
    model = add_lora(load(path), ModelConfig(lora_rank=4, lora_alpha=12), "m")
    randomise_adapters(model)
    assert "transformer.h.0.attn.c_attn" in fan_in_fan_out(model) and "transformer.h.0.attn.c_proj" in fan_in_fan_out(model)
    plain = load(path)
    plain.load_state_dict(merge_lora_state(model.state_dict(), lora_scaling(model), fan_in_fan_out(model)))
    assert torch.allclose(plain(IDS).logits, model(IDS).logits, atol=1e-5)
    copy_of_plain = load(path)  # what an engine with its own copy receives
    own = copy_of_plain.state_dict()
    for name, tensor in engine_weights(model):
        own[name].copy_(tensor)
    assert torch.allclose(copy_of_plain(IDS).logits, model(IDS).logits, atol=1e-5)
    # the square layer alone, whose untransposed merge raised nothing
    square = add_lora(load(path), ModelConfig(lora_rank=4, lora_alpha=12, target_modules=["attn.c_proj"]), "m")
    randomise_adapters(square)
    plain = load(path)
    plain.load_state_dict(merge_lora_state(square.state_dict(), lora_scaling(square), fan_in_fan_out(square)))
    assert torch.allclose(plain(IDS).logits, square(IDS).logits, atol=1e-5)


def test_a_conv1d_models_lora_checkpoint_merges_and_its_adapter_loads(tiny_model_path, tmp_path):
    """reinforge merge of a GPT-2 LoRA checkpoint, with its lora_adapter/ and in verl's layout (lora_train_meta.json
    alone), computes the adapted model; its adapter (peft writes fan_in_fan_out into it) loads with lora_adapter_path."""
    import shutil

    from reinforge.cli import main as cli_main
    from reinforge.training.checkpoint_io import save_training_state
    from reinforge.training.lora import adapter_state, save_adapter

    path = tiny_gpt2(tiny_model_path, tmp_path / "gpt2")
    model = add_lora(load(path), ModelConfig(lora_rank=4, lora_alpha=12), "m")
    randomise_adapters(model)
    actor = tmp_path / "actor"
    save_training_state(str(actor), ["model"], model, torch.optim.AdamW(model.parameters()), {})
    save_adapter(model, adapter_state(model), actor)
    loaded = add_lora(load(path), ModelConfig(lora_adapter_path=str(actor / "lora_adapter")), "m")
    assert torch.allclose(loaded(IDS).logits, model(IDS).logits, atol=1e-6)
    assert cli_main(["merge", str(actor), str(tmp_path / "hf")]) == 0
    shutil.rmtree(actor / "lora_adapter")
    assert cli_main(["merge", str(actor), str(tmp_path / "hf_verl")]) == 0
    for out in ("hf", "hf_verl"):
        assert torch.allclose(load(tmp_path / out)(IDS).logits, model(IDS).logits, atol=1e-5), out


def test_the_reference_without_adapters_passes_the_packing_probe_of_a_model_without_mlp_sizes(tiny_model_path, tmp_path):
    """The probe reads the vocabulary from the input embeddings when the config has no intermediate_size (GPT-2, OPT,
    BLOOM, Falcon): the reference (the policy with its adapters off) has to hand them over."""
    from reinforge.training.packing import packing_works

    model = add_lora(load(tiny_gpt2(tiny_model_path, tmp_path / "gpt2")), ModelConfig(lora_rank=4), "m")
    assert packing_works(WithoutAdapters(model), torch.device("cpu"))


def test_fused_expert_weights_are_refused_naming_the_linear_layers_to_adapt_instead():
    """A mixture-of-experts model keeps its experts' weights as fused parameters, which peft's all-linear (the default)
    adapts as ParamWrapper layers that reinforge does not merge: the message names the linear layers that work."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    def moe():
        torch.manual_seed(0)
        return Qwen3MoeForCausalLM(Qwen3MoeConfig(vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
                                                  num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                                  head_dim=8, num_experts=4, num_experts_per_tok=2))

    with pytest.raises(ConfigError, match=r"^m.target_modules='all-linear' adapts layers of kind ParamWrapper "
                                          r"\(model.layers.0.mlp.experts, ...\); reinforge trains and merges LoRA on linear "
                                          r"layers only: name them, e.g. m.target_modules=\[(\w+,)+\w+\]") as refused:
        add_lora(moe(), ModelConfig(lora_rank=4), "m")
    named = str(refused.value).split("m.target_modules=[")[1].split("]")[0].split(",")
    assert {"q_proj", "k_proj", "v_proj", "o_proj"} <= set(named)
    model = add_lora(moe(), ModelConfig(lora_rank=4, target_modules=named), "m")  # what the message says works
    assert {type(layer).__name__ for layer in adapted_layers(model)} == {"Linear"}


def test_only_the_adapters_train_and_the_policy_starts_as_the_base_model(tiny_model_path):
    base = load(tiny_model_path)
    model = add_lora(load(tiny_model_path), ModelConfig(lora_rank=4, lora_alpha=8), "actor_rollout_ref.model")
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # all-linear: q, k, v, o, gate, up, down of each of the 2 layers, not the output head
    assert len(trainable) == 2 * 7 * 2 and not any("lm_head" in n for n in trainable)
    assert set(lora_scaling(model).values()) == {8 / 4}
    assert torch.equal(model(IDS).logits, base(IDS).logits)
    randomise_adapters(model)
    assert not torch.allclose(model(IDS).logits, base(IDS).logits, atol=1e-3)
    assert torch.equal(WithoutAdapters(model)(IDS).logits, base(IDS).logits)  # the reference: the adapters off
    assert not torch.allclose(model(IDS).logits, base(IDS).logits, atol=1e-3)  # and back on after it


def test_target_modules_names_the_adapted_layers(tiny_model_path):
    model = add_lora(load(tiny_model_path), ModelConfig(lora_rank=2, target_modules=["q_proj", "v_proj"]), "m")
    assert sorted(lora_scaling(model)) == [f"model.layers.{i}.self_attn.{p}" for i in (0, 1) for p in ("q_proj", "v_proj")]
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.model\.target_modules=\['qq_proj'\]"):
        add_lora(load(tiny_model_path), ModelConfig(lora_rank=2, target_modules=["qq_proj"]), "actor_rollout_ref.model")
    # peft adapts what matches when another name matches nothing: each name of the list must match a layer
    with pytest.raises(ConfigError, match=r"^m.target_modules names \['foo_proj'\], which match no layer of the model "
                                          r"\(adapted: \['q_proj'\]\)"):
        add_lora(load(tiny_model_path), ModelConfig(lora_rank=2, target_modules=["q_proj", "foo_proj"]), "m")
    add_lora(load(tiny_model_path), ModelConfig(lora_rank=2, target_modules=["self_attn.q_proj", "mlp.up_proj"]), "m")


def test_merged_weights_are_w_plus_scaled_b_a_and_compute_the_adapted_model(tiny_model_path):
    model = add_lora(load(tiny_model_path), ModelConfig(lora_rank=4, lora_alpha=12), "m")
    randomise_adapters(model)
    state = model.state_dict()
    merged = merge_lora_state(state, lora_scaling(model))
    layer = "model.layers.1.mlp.down_proj"
    by_hand = state[f"{layer}.base_layer.weight"] + 3.0 * state[f"{layer}.lora_B.default.weight"] @ state[f"{layer}.lora_A.default.weight"]
    assert torch.allclose(merged[f"{layer}.weight"], by_hand, atol=1e-6)
    plain = load(tiny_model_path)
    assert merged.keys() == plain.state_dict().keys()
    plain.load_state_dict(merged)
    assert torch.allclose(plain(IDS).logits, model(IDS).logits, atol=1e-5)

    # what an engine with its own copy of the plain model receives after an update: every weight once, merged
    # (the tied output head is the input embedding), however the temporaries' memory is reused
    copy_of_plain = copy.deepcopy(load(tiny_model_path))
    own = copy_of_plain.state_dict()
    names = [name for name, tensor in engine_weights(model) if own[name].copy_(tensor) is not None]
    assert sorted(names) == sorted(set(own) - {"lm_head.weight"})
    assert torch.allclose(copy_of_plain(IDS).logits, model(IDS).logits, atol=1e-5)


def test_a_value_model_gets_adapters_in_its_backbone_and_keeps_its_head_trainable(tiny_model_path):
    from transformers import AutoModelForTokenClassification

    critic = AutoModelForTokenClassification.from_pretrained(tiny_model_path, num_labels=1)
    add_lora(critic, CriticModelConfig(lora_rank=4), "critic.model")
    trainable = sorted(name for name, p in critic.named_parameters() if p.requires_grad)
    head = [name for name, _ in critic.score.named_parameters(prefix="score")]
    assert head and set(head) <= set(trainable) and all(n in head or ".lora_" in n for n in trainable)
    assert len(trainable) == len(head) + 2 * 7 * 2


def test_a_missing_adapter_folder_or_peft_settings_are_config_errors(tmp_path):
    from reinforge.config import load_config

    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.model\.lora_adapter_path=.*no adapter_config\.json"):
        load_config([f"actor_rollout_ref.model.lora_adapter_path={tmp_path}"])
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.model\.lora_rank=-1"):
        load_config(["actor_rollout_ref.model.lora_rank=-1"])
    with pytest.raises(ConfigError, match=r"critic\.model\.lora_alpha=0"):
        load_config(["critic.model.lora_alpha=0"])


def test_lora_settings_without_a_rank_are_reported_as_doing_nothing():
    from reinforge.config import load_config
    from reinforge.config.unused import unused_settings

    config, keys = load_config(["actor_rollout_ref.model.lora_alpha=32", "actor_rollout_ref.model.target_modules=[q_proj]",
                                "actor_rollout_ref.rollout.layered_summon=true"])
    lines = unused_settings(config, keys)
    assert "actor_rollout_ref.model.lora_alpha: LoRA is off (actor_rollout_ref.model.lora_rank=0)" in lines
    assert any(line.startswith("actor_rollout_ref.model.target_modules: LoRA is off") for line in lines)
    assert any(line.startswith("actor_rollout_ref.rollout.layered_summon:") for line in lines)
    config, keys = load_config(["actor_rollout_ref.model.lora_alpha=32", "actor_rollout_ref.model.lora_rank=8"])
    assert unused_settings(config, keys) == []
    config, keys = load_config(["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.actor.use_kl_loss=true",
                                "actor_rollout_ref.ref.fsdp_config.model_dtype=bf16"])
    assert unused_settings(config, keys) == ["actor_rollout_ref.ref.fsdp_config.model_dtype: with LoRA the reference is the "
                                             "actor's own model with its adapters off, not a model of its own"]


def test_the_tied_output_layer_and_an_adapter_of_another_shape_are_config_errors(tiny_model_path, tmp_path):
    from reinforge.training.lora import adapter_state, save_adapter

    with pytest.raises(ConfigError, match=r"adapts the output layer \(lm_head\), whose weight this model shares"):
        add_lora(load(tiny_model_path), ModelConfig(lora_rank=2, target_modules=["lm_head"]), "actor_rollout_ref.model")
    with pytest.raises(ConfigError, match=r"target_modules='q_proj': .*a string other than all-linear is a regular expression"):
        add_lora(load(tiny_model_path), ModelConfig(lora_rank=2, target_modules="q_proj"), "actor_rollout_ref.model")
    model = add_lora(load(tiny_model_path), ModelConfig(lora_rank=2), "m")
    save_adapter(model, adapter_state(model), tmp_path)
    folder = tmp_path / "lora_adapter"
    import json

    config = json.loads((folder / "adapter_config.json").read_text())
    config["r"] = 3  # the same layers with rank 3 instead of 2: the saved matrices do not fit
    (folder / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"lora_adapter_path=.*the adapter was trained for a model of another shape"):
        add_lora(load(tiny_model_path), ModelConfig(lora_adapter_path=str(folder)), "actor_rollout_ref.model")


@pytest.mark.parametrize("setting", [{"use_dora": True}, {"lora_bias": True}, {"modules_to_save": ["lm_head"]}])
def test_an_adapter_that_is_not_plain_lora_is_refused(tiny_model_path, tmp_path, setting):
    """DoRA, LoRA biases and fully trained modules would be merged wrongly as W + scale B A: refused, naming the setting."""
    from peft import LoraConfig, get_peft_model

    get_peft_model(load(tiny_model_path), LoraConfig(r=2, target_modules=["q_proj"], **setting)).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=rf"lora_adapter_path=.*sets {next(iter(setting))} in its adapter_config.json; "
                                          "reinforge trains and merges plain LoRA adapters"):
        add_lora(load(tiny_model_path), ModelConfig(lora_adapter_path=str(tmp_path)), "actor_rollout_ref.model")
