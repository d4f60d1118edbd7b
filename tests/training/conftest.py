"""Synthetic trajectories for the actor and critic tests."""

import pytest
import torch

from reinforge.batch import Batch


def make_trajectories(vocab, rows=6, prompt=5, response=4, seed=0):
    """A Batch of random prompts and responses of different lengths (row 0 left-padded), with the
    fields the actor (advantages, ref_log_prob) and the critic (values, returns) read."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, vocab, (rows, prompt), generator=g)
    responses = torch.randint(3, vocab, (rows, response), generator=g)
    response_mask = torch.ones(rows, response, dtype=torch.long)
    for row in range(rows):
        response_mask[row, 1 + row % response:] = 0  # different lengths
    prompt_mask = torch.ones(rows, prompt, dtype=torch.long)
    prompt_mask[0, :2] = 0  # a left-padded prompt
    attention_mask = torch.cat([prompt_mask, response_mask], 1)
    return Batch({
        "input_ids": torch.cat([prompts, responses], 1), "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0), "responses": responses,
        "response_mask": response_mask, "advantages": torch.randn(rows, 1, generator=g) * response_mask,
        "ref_log_prob": -torch.rand(rows, response, generator=g) * 3,
        "returns": torch.randn(rows, response, generator=g) * response_mask,
        "values": torch.randn(rows, response, generator=g) * 0.1 * response_mask,
    })


@pytest.fixture
def trajectories():
    return make_trajectories
