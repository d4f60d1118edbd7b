"""`reinforge train` with LoRA adapters on the actor and the critic (verl's model.lora_rank): the KL loss against
the policy with its adapters off, checkpoints holding the adapter in peft's layout and the merged model, rank files
that verl's model merger reads, `reinforge merge` (of verl's layout too), `lora_adapter_path`, and a resume that does not match the checkpoint's adapters."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

pytest.importorskip("peft")

from reinforge.cli import main as cli_main  # noqa: E402
from reinforge.config.schema import ModelConfig  # noqa: E402
from reinforge.errors import ConfigError  # noqa: E402
from reinforge.training.checkpoint_io import read_full_model_state  # noqa: E402
from reinforge.training.lora import add_lora  # noqa: E402

LORA = ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.1", "algorithm.adv_estimator=gae", "critic.model.lora_rank=4",
        "trainer.save_freq=2", "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"]
IDS = torch.tensor([[5, 17, 42, 9, 33, 8], [3, 3, 21, 60, 7, 12]])


def test_lora_run_trains_the_adapters_against_the_base_model_and_saves_them(run_steps, tiny_model_path, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    steps = run_steps(*LORA)
    # step 1 is on-policy from B = 0: the policy is the base model, which is the reference, so the KL is exactly 0
    assert steps[1]["actor/kl_loss"] == 0.0 and steps[2]["actor/kl_loss"] > 0
    assert all(steps[s]["critic/vf_loss"] > 0 for s in (1, 2))
    actor = tmp_path / "run" / "global_step_2" / "actor"
    state = read_full_model_state(actor, "test")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict()
    for name, tensor in state.items():  # the base weights did not move, the adapters did
        if ".base_layer." in name:
            assert torch.equal(tensor, base[name.replace(".base_layer.", ".")]), name
    assert max(state[n].abs().max().item() for n in state if ".lora_B." in n) > 1e-4

    policy = add_lora(AutoModelForCausalLM.from_pretrained(tiny_model_path), ModelConfig(lora_rank=4, lora_alpha=8), "m")
    policy.load_state_dict(state)
    policy.eval()
    want = policy(IDS).logits
    hf_model = AutoModelForCausalLM.from_pretrained(actor / "huggingface")  # hf_model: the merged weights
    assert not any("lora" in name or "base_layer" in name for name in hf_model.state_dict())
    assert torch.allclose(hf_model.eval()(IDS).logits, want, atol=1e-5)
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_path), actor / "lora_adapter")
    assert torch.allclose(peft_model.eval()(IDS).logits, want, atol=1e-5)  # the adapter in peft's own layout

    assert cli_main(["merge", str(actor), str(tmp_path / "merged")]) == 0
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert all(torch.equal(merged.state_dict()[k], v) for k, v in hf_model.state_dict().items())
    # what verl's model merger reads: peft's key names in the rank file and the adapters' r and alpha in lora_train_meta.json,
    # from which it writes an adapter that peft loads (here built the same way with peft)
    rank_file = torch.load(actor / "model_world_size_1_rank_0.pt")
    assert all(name.startswith("base_model.model.") for name in rank_file)
    meta = json.loads((actor / "lora_train_meta.json").read_text())
    assert meta == {"r": 4, "lora_alpha": 8, "task_type": "CAUSAL_LM"}
    adapters = {name.replace(".default.weight", ".weight"): t for name, t in rank_file.items() if "lora_" in name}
    rebuilt = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_path), LoraConfig(
        r=meta["r"], lora_alpha=meta["lora_alpha"], target_modules=sorted({n.split(".")[-3] for n in adapters})))
    assert not set_peft_model_state_dict(rebuilt, adapters).unexpected_keys
    assert torch.allclose(rebuilt.eval()(IDS).logits, want, atol=1e-5)
    # a verl checkpoint has no lora_adapter/: reinforge merge takes the scale from lora_train_meta.json
    verl_like = tmp_path / "verl_like"
    shutil.copytree(actor, verl_like, ignore=shutil.ignore_patterns("lora_adapter"))
    assert cli_main(["merge", str(verl_like), str(tmp_path / "merged_verl_like")]) == 0
    merged_verl_like = AutoModelForCausalLM.from_pretrained(tmp_path / "merged_verl_like")
    assert all(torch.equal(merged_verl_like.state_dict()[k], v) for k, v in merged.state_dict().items())
    critic = tmp_path / "run" / "global_step_2" / "critic"
    assert (critic / "lora_adapter" / "adapter_model.safetensors").is_file()
    assert cli_main(["merge", str(critic), str(tmp_path / "merged_critic")]) == 0
    value_model = AutoModelForTokenClassification.from_pretrained(tmp_path / "merged_critic")
    assert value_model.config.num_labels == 1

    # lora_adapter_path: a new run starts from the saved adapter, its own rank and alpha
    restart = add_lora(AutoModelForCausalLM.from_pretrained(tiny_model_path),
                       ModelConfig(lora_adapter_path=str(actor / "lora_adapter")), "m")
    assert torch.allclose(restart.eval()(IDS).logits, want, atol=1e-6)
    steps = run_steps(*LORA, f"actor_rollout_ref.model.lora_adapter_path={actor / 'lora_adapter'}",
                      "trainer.total_training_steps=1", run_dir=tmp_path / "from_adapter")
    assert steps[1]["actor/kl_loss"] > 0  # the reference is the base model, which the adapter moved away from


def test_resuming_with_other_adapters_than_the_checkpoints_names_the_setting(run_steps, tmp_path):
    run_steps("trainer.save_freq=1", "trainer.total_training_steps=1")
    with pytest.raises(ConfigError, match=r"saved without LoRA adapters and this run adds them \(actor_rollout_ref\.model\.lora_rank=4\): "
                                          r"resume it with actor_rollout_ref\.model\.lora_rank=0"):
        run_steps("actor_rollout_ref.model.lora_rank=4")
    run_steps("trainer.save_freq=1", "trainer.total_training_steps=1", "actor_rollout_ref.model.lora_rank=4",
              run_dir=tmp_path / "lora")
    with pytest.raises(ConfigError, match=r"rank \[4\] on 14 layers and this run's are of rank \[8\] on 14"):
        run_steps("actor_rollout_ref.model.lora_rank=8", run_dir=tmp_path / "lora")
    # the same weights with another alpha would be another policy
    with pytest.raises(ConfigError, match=r"scales its LoRA adapters otherwise than this run: lora_alpha 16\.0 \(checkpoint\) "
                                          r"vs 64\.0 \(this run\)\. Resume it with the actor_rollout_ref\.model\.lora_alpha"):
        run_steps("actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=64", run_dir=tmp_path / "lora")
