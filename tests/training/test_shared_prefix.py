"""A repeated prompt computed once (training/shared_prefix.py) gives the plain forward's numbers.

The reference is always the plain forward (share_prompt=False) of the same model on the same rows:
log-probs, entropy, the gradient of a whole actor update (GRPO-style, with a KL loss), under
gradient checkpointing, and on 2 FSDP2 ranks (with checkpointing) against 1 process;
and the config switch reaching the workers' actor and reference.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.modeling_layers import GradientCheckpointingLayer

from reinforge.batch import Batch
from reinforge.config import load_config
from reinforge.config.schema import ActorConfig
from reinforge.errors import ModelError
from reinforge.training.actor import Actor, response_log_probs
from reinforge.training.model import enable_gradient_checkpointing, prepare_model
from reinforge.training.shared_prefix import PromptLayer, can_share, prompt_owners, shared_prompt_logits
from reinforge.training.workers import ActorRolloutRefWorker
from tests.training.shared_prefix_ranks import UNEVEN_ROWS, grouped_batch, update_gradients
from tests.training.test_fsdp import rank_results, start_ranks

HERE = Path(__file__).parent
CACHE_UNDER_CHECKPOINTING = pytest.mark.skipif(
    not hasattr(GradientCheckpointingLayer, "_can_checkpoint_with_cache"),
    reason="transformers 4.x drops the cache in checkpointed layers: sharing falls back to the plain forward there")
PROMPT, RESPONSE = 7, 5
GROUPS = ((7, 3), (4, 3), (2, 2), (5, 1))  # (prompt tokens, samples): left-padded groups and one unique prompt


def grouped_trajectories(vocab: int, seed: int = 0) -> Batch:
    """Groups of identical left-padded prompts (GROUPS), right-padded responses of different lengths, and the
    fields of an actor update."""
    g = torch.Generator().manual_seed(seed)
    prompt_ids, prompt_mask = [], []
    for length, samples in GROUPS:
        mask = (torch.arange(PROMPT) >= PROMPT - length).long()
        ids = torch.randint(3, vocab, (PROMPT,), generator=g) * mask
        prompt_ids.append(ids.repeat(samples, 1))
        prompt_mask.append(mask.repeat(samples, 1))
    prompt_ids, prompt_mask = torch.cat(prompt_ids), torch.cat(prompt_mask)
    rows = len(prompt_ids)
    responses = torch.randint(3, vocab, (rows, RESPONSE), generator=g)
    response_mask = (torch.arange(RESPONSE) < torch.arange(rows)[:, None] % RESPONSE + 1).long()
    attention_mask = torch.cat([prompt_mask, response_mask], 1)
    return Batch({
        "input_ids": torch.cat([prompt_ids, responses], 1), "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0), "responses": responses,
        "response_mask": response_mask, "advantages": torch.randn(rows, 1, generator=g) * response_mask,
        "ref_log_prob": -torch.rand(rows, RESPONSE, generator=g) * 3,
    })


def shares(model: torch.nn.Module, batch: Batch) -> bool:
    """Whether the shared-prompt forward runs for `batch` (else the comparison would test the plain path twice)."""
    with torch.no_grad():
        return shared_prompt_logits(model, batch["input_ids"], batch["attention_mask"], batch["position_ids"],
                                    RESPONSE) is not None


def flat_gradient(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def assert_relatively_close(got: torch.Tensor, want: torch.Tensor, tolerance: float = 1e-5) -> None:
    error = ((got - want).abs().max() / want.abs().max()).item()
    assert error < tolerance, f"largest difference {error:.2e} of the largest entry (tolerance {tolerance})"


def test_prompt_owners_group_rows_by_ids_mask_and_positions():
    ids = torch.tensor([[5, 6, 1], [5, 6, 2], [7, 8, 3], [5, 6, 4], [0, 6, 5]])
    mask = torch.tensor([[1, 1, 1]] * 4 + [[0, 1, 1]])  # row 4: same last token, but a padded prompt
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    first, owner = prompt_owners(ids, mask, positions, prompt_len=2)
    assert len(first) == 3
    assert owner[0] == owner[1] == owner[3] and len({int(owner[0]), int(owner[2]), int(owner[4])}) == 3
    assert first[owner].tolist() == [0, 0, 2, 0, 4]  # each row's prompt is computed on its group's first row
    assert prompt_owners(ids, mask, positions, prompt_len=3) is None  # the whole rows differ: nothing to share


def test_shared_forward_gives_the_plain_log_probs_and_entropy(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    batch = grouped_trajectories(model.config.vocab_size)
    assert shares(model, batch)
    with torch.no_grad():
        shared = response_log_probs(model, batch, 0.7, with_entropy=True, share_prompt=True)
        plain = response_log_probs(model, batch, 0.7, with_entropy=True, share_prompt=False)
    for name, got, want in zip(("log_probs", "entropy"), shared, plain, strict=True):
        assert torch.allclose(got, want, atol=1e-5, rtol=0), (name, (got - want).abs().max().item())


def actor_update_gradient(base: torch.nn.Module, batch: Batch, share_prompt: bool, checkpointing: bool = False,
                          pack: bool = False, **config) -> torch.Tensor:
    """The gradient of one actor update (SGD at lr 0 leaves the weights as they are) with an entropy bonus and a KL
    loss, with sharing (which must then run) or packing (test_packing.py) on or off."""
    model = copy.deepcopy(base).train()
    if checkpointing:
        enable_gradient_checkpointing(model)
    cfg = ActorConfig(ppo_mini_batch_size=len(batch), clip_ratio_low=0.2, clip_ratio_high=0.2, entropy_coeff=0.01,
                      grad_clip=1e9, use_kl_loss=True, kl_loss_coef=0.1, **config)
    ref = copy.deepcopy(base).eval().requires_grad_(False)
    actor = Actor(model, cfg, torch.optim.SGD(model.parameters(), lr=0.0), ref_model=ref, share_prompt=share_prompt,
                  pack=pack)
    assert shares(model, batch) or not share_prompt
    actor.update_policy(batch, temperature=1.0, rollout_n=1)
    return flat_gradient(model)


@pytest.mark.parametrize("kl_loss_type", ["low_var_kl", "full"])
def test_update_gradient_is_the_plain_forwards(tiny_model_path, kl_loss_type):
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    batch = grouped_trajectories(base.config.vocab_size, seed=1)
    plain = actor_update_gradient(base, batch, share_prompt=False, kl_loss_type=kl_loss_type)
    assert plain.abs().max() > 0
    assert_relatively_close(actor_update_gradient(base, batch, share_prompt=True, kl_loss_type=kl_loss_type), plain)


@CACHE_UNDER_CHECKPOINTING
def test_update_under_gradient_checkpointing_is_the_plain_forwards(tiny_model_path, monkeypatch):
    """Checkpointed layers run again in the backward pass, through the same cache: the prompt's keys must not be
    stored twice, nor the responses' appended to them (the replays are counted, so the test sees them happen)."""
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    batch = grouped_trajectories(base.config.vocab_size, seed=2)
    plain = actor_update_gradient(base, batch, share_prompt=False)
    calls = []
    update = PromptLayer.update
    monkeypatch.setattr(PromptLayer, "update", lambda layer, *args, **kwargs: calls.append(1) or update(layer, *args, **kwargs))
    shared = actor_update_gradient(base, batch, share_prompt=True, checkpointing=True)
    layers = base.config.num_hidden_layers
    assert len(calls) == 3 * layers  # `shares`' forward, the update's forward, its replay in the backward pass
    assert_relatively_close(shared, plain)


def test_checkpointed_training_keeps_the_plain_forward_where_checkpointed_layers_drop_the_cache(tiny_model_path, monkeypatch):
    """transformers 4.x has no way for a checkpointed layer to keep its cache (on 5.x simulated by removing it)."""
    model = prepare_model(AutoModelForCausalLM.from_pretrained(tiny_model_path), "cpu", trainable=True,
                          gradient_checkpointing=True)
    positions = torch.zeros(2, 3, dtype=torch.long)
    if hasattr(GradientCheckpointingLayer, "_can_checkpoint_with_cache"):
        assert can_share(model, positions)
        monkeypatch.delattr(GradientCheckpointingLayer, "_can_checkpoint_with_cache")
    assert not can_share(model, positions)
    assert can_share(model.eval(), positions)  # forward-only passes do not checkpoint


def test_sliding_window_models_keep_the_plain_forward():
    """Only full attention is checked against the plain forward; a model with sliding-window layers does not share."""
    sizes = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2}
    batch = grouped_trajectories(sizes["vocab_size"])
    sliding = Qwen2Config(**sizes, use_sliding_window=True, sliding_window=4, max_window_layers=1)
    assert not shares(Qwen2ForCausalLM(sliding).eval(), batch)
    assert shares(Qwen2ForCausalLM(Qwen2Config(**sizes)).eval(), batch)  # the same model with full attention does


class ForgetsTheCache(torch.nn.Module):
    """A model whose forward does not pass the cache it is given on (as a custom architecture might)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model, self.config = model, model.config

    def forward(self, past_key_values=None, **kwargs):
        return self.model(**kwargs)


def test_a_model_that_ignores_the_cache_is_named_not_silently_wrong(tiny_model_path):
    model = ForgetsTheCache(AutoModelForCausalLM.from_pretrained(tiny_model_path)).eval()
    batch = grouped_trajectories(model.config.vocab_size)
    with pytest.raises(ModelError, match="ForgetsTheCache .*share_prompt_forward=false"), torch.no_grad():
        response_log_probs(model, batch, 1.0)
    response_log_probs(model, batch, 1.0, share_prompt=False)  # the switch is the way out


@CACHE_UNDER_CHECKPOINTING
def test_two_fsdp_ranks_sharing_give_the_one_process_gradient(tiny_model_path, tmp_path):
    """Each rank holds one group; its two forwards of the sharded model before one backward must give the
    gradient of the plain forward on the whole batch in one process."""
    procs = start_ranks("shared_prefix_ranks.py", tiny_model_path, tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).train()
    batch = grouped_batch(model.config.vocab_size)
    single = update_gradients(model, batch, share_prompt=False)
    ranks = rank_results(procs, tmp_path)
    for rank in ranks:
        assert rank["shared"]
        assert_relatively_close(rank["gradient"], single["gradient"])
    with torch.no_grad():
        for rows, rank in zip(UNEVEN_ROWS, ranks, strict=True):
            want, _ = response_log_probs(model.eval(), batch.index(rows), 1.0, share_prompt=False)
            attended = batch.index(rows)["attention_mask"][:, -want.shape[1]:].bool()
            want = want.masked_fill(~attended, 0.0)  # compute_log_prob gives 0 past a response's end
            assert torch.allclose(rank["uneven_log_probs"], want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("setting", ["true", "false"])
def test_config_switch_reaches_the_actor_and_the_reference(tiny_model_path, setting):
    config, _ = load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "trainer.device=cpu",
                             f"actor_rollout_ref.model.share_prompt_forward={setting}"])
    worker = ActorRolloutRefWorker(config)
    worker.init_model(1)
    assert worker.actor.forward["share_prompt"] == worker.ref.forward["share_prompt"] == (setting == "true")


def test_shuffled_groups_give_the_same_gradient_bit_for_bit_every_time(tiny_model_path):
    """actor.shuffle interleaves the groups' rows; the rows' key and value copies must then still sum their gradients in
    a fixed order (advanced indexing's backward adds them with racing CPU threads: different sums from run to run)."""
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    g = torch.Generator().manual_seed(3)
    prompts, samples, prompt_len, response_len = 8, 8, 24, 4
    rows = prompts * samples
    order = torch.randperm(rows, generator=g)  # the groups interleaved, as a shuffled mini-batch has them
    prompt_ids = torch.randint(3, base.config.vocab_size, (prompts, prompt_len), generator=g).repeat_interleave(samples, 0)[order]
    responses = torch.randint(3, base.config.vocab_size, (rows, response_len), generator=g)
    attention_mask = torch.ones(rows, prompt_len + response_len, dtype=torch.long)
    batch = Batch({"input_ids": torch.cat([prompt_ids, responses], 1), "attention_mask": attention_mask,
                   "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0), "responses": responses,
                   "response_mask": torch.ones_like(responses), "advantages": torch.randn(rows, 1, generator=g),
                   "ref_log_prob": -torch.rand(rows, response_len, generator=g) * 3})
    first = actor_update_gradient(base, batch, share_prompt=True)
    for _ in range(5):
        assert torch.equal(actor_update_gradient(base, batch, share_prompt=True), first)
