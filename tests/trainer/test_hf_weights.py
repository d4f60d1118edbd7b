"""A run with hf_model in save_contents writes loadable Hugging Face weights, the same that `reinforge merge` writes."""

import torch

from reinforge.cli import main as cli_main


def test_hf_model_in_save_contents_writes_the_trained_weights_as_merge_does(run_steps, tmp_path):
    from transformers import AutoModelForCausalLM

    run_steps("trainer.total_training_steps=1", "trainer.save_freq=1",
              "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]")
    actor = tmp_path / "run" / "global_step_1" / "actor"
    trained = torch.load(actor / "model_world_size_1_rank_0.pt")
    assert cli_main(["merge", str(actor), str(tmp_path / "merged")]) == 0
    for folder in (actor / "huggingface", tmp_path / "merged"):
        model = AutoModelForCausalLM.from_pretrained(folder)
        assert model.state_dict().keys() == trained.keys()
        for name, value in model.state_dict().items():
            assert torch.equal(value, trained[name]), (folder, name)
    assert (actor / "huggingface" / "generation_config.json").read_text() == (tmp_path / "merged" / "generation_config.json").read_text()
