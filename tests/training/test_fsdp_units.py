"""The pieces of training/fsdp.py that need no process group: which modules become FSDP units, mixed precision."""

import pytest
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy
from transformers import AutoModelForCausalLM

from reinforge.config.engine_schema import FSDPConfig
from reinforge.errors import ConfigError
from reinforge.training.fsdp import decoder_layers, mixed_precision_policy
from reinforge.training.model import CausalLMWithValueHead


def test_decoder_layers_are_the_models_transformer_blocks(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    blocks = list(model.model.layers)
    assert decoder_layers(model) == blocks and len(blocks) == model.config.num_hidden_layers
    assert decoder_layers(CausalLMWithValueHead(model)) == blocks  # found inside the value-head wrapper too


def test_a_model_without_blocks_is_refused_with_the_way_out():
    with pytest.raises(ConfigError, match="cannot shard Linear with FSDP.*trainer.n_gpus_per_node=1"):
        decoder_layers(torch.nn.Linear(2, 2))


def test_mixed_precision_acts_on_cuda_when_set():
    bf16 = FSDPConfig(mixed_precision={"param_dtype": "bf16"})
    assert mixed_precision_policy(bf16, "cuda") == MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    assert mixed_precision_policy(bf16, "cpu") == MixedPrecisionPolicy()
    assert mixed_precision_policy(FSDPConfig(), "cuda") == MixedPrecisionPolicy()


