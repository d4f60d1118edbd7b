"""The pieces of training/fsdp.py that need no process group: which modules become FSDP units, mixed precision."""

import copy

import pytest
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy
from transformers import AutoModelForCausalLM

from reinforge.config.engine_schema import FSDPConfig
from reinforge.errors import ConfigError
from reinforge.training.fsdp import compute_dtype, decoder_layers, mixed_precision_policy, shard_model
from reinforge.training.model import CausalLMWithValueHead


def test_decoder_layers_are_the_models_transformer_blocks(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    blocks = list(model.model.layers)
    assert decoder_layers(model) == blocks and len(blocks) == model.config.num_hidden_layers
    assert decoder_layers(CausalLMWithValueHead(model)) == blocks  # found inside the value-head wrapper too


def test_a_model_without_blocks_is_refused_with_the_way_out():
    with pytest.raises(ConfigError, match="cannot shard Linear with FSDP.*trainer.n_gpus_per_node=1"):
        decoder_layers(torch.nn.Linear(2, 2))


def test_mixed_precision_on_cuda_defaults_to_verls_bf16_compute_and_fp32_reduction(verl_default):
    bf16_fp32 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    assert mixed_precision_policy(FSDPConfig(), "cuda") == bf16_fp32  # unset, as verl's fsdp engine
    assert mixed_precision_policy(FSDPConfig(mixed_precision={"reduce_dtype": "fp32"}), "cuda") == bf16_fp32
    fp32 = FSDPConfig(mixed_precision={"param_dtype": "fp32"})
    assert mixed_precision_policy(fp32, "cuda") == MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
    assert compute_dtype(FSDPConfig(), "cuda") == torch.bfloat16 and compute_dtype(fp32, "cuda") == torch.float32
    for config in (FSDPConfig(), FSDPConfig(mixed_precision={"param_dtype": "bf16"})):  # the CPU computes in model_dtype
        assert mixed_precision_policy(config, "cpu") == MixedPrecisionPolicy() and compute_dtype(config, "cpu") is None


def test_one_cpu_rank_leaves_the_model_untouched(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    forward = model.forward
    assert shard_model(model, FSDPConfig(mixed_precision={"param_dtype": "bf16"}), "cpu") is model
    assert model.forward == forward and "forward" not in vars(model)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_one_cuda_rank_computes_in_bf16_and_keeps_fp32_weights_and_gradients(tiny_model_path, verl_default):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).cuda()
    reference = copy.deepcopy(model)
    names = list(model.state_dict())
    assert shard_model(model, FSDPConfig(), "cuda") is model and list(model.state_dict()) == names
    ids = torch.randint(3, model.config.vocab_size, (2, 9), device="cuda")
    logits = model(input_ids=ids).logits
    assert logits.dtype == torch.bfloat16  # the products ran in bf16
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert torch.equal(logits, reference(input_ids=ids).logits)  # what autocast itself computes
    logits.float().logsumexp(-1).sum().backward()
    assert all(p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())
    fp32 = copy.deepcopy(reference)
    assert shard_model(fp32, FSDPConfig(mixed_precision={"param_dtype": "fp32"}), "cuda")(input_ids=ids).logits.dtype == torch.float32


