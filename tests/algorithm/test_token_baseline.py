"""verl's optimal token baseline (optimal_token_baseline, tir_optimal_token_baseline) and its vectorized
GRPO and RLOO names, against numbers worked out by hand and loops written from the formulas in
docs/algorithms.md (never from the functions under test)."""

import math

import numpy as np
import pytest
import torch

from reinforge.algorithm import compute_advantage, sum_pi_squared_from_logits

OTB, TIR = "optimal_token_baseline", "tir_optimal_token_baseline"


def run(name, **kwargs):
    kwargs.setdefault("epsilon", 1e-6)  # what the trainer passes every estimator
    return compute_advantage(name, **kwargs)


# ------------------------------------------------------------------------------------------------ by hand
def test_otb_by_hand_weighs_the_baseline_by_path_variance():
    # row 0: p = 0.5 at both tokens and sum p^2 = 0.5, so each token adds 1 - 2(0.5) + 0.5 = 0.5 to W: W = 0.5, 1.0
    # row 1: p = 0.9, sum p^2 = 0.82: each adds 1 - 1.8 + 0.82 = 0.02: W = 0.02, 0.04
    # returns (reward-to-go): row 0 scores 1 -> G = 1, 1; row 1 scores 0 -> G = 0, 0
    # B_0 = (1 * 0.5 + 0 * 0.02) / (0.5 + 0.02) = 0.5 / 0.52; B_1 = (1 * 1.0) / 1.04 = the same
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    mask = torch.ones(2, 2)
    old = torch.tensor([[0.5, 0.5], [0.9, 0.9]]).log()
    spp = torch.tensor([[0.5, 0.5], [0.82, 0.82]])
    b = 0.5 / 0.52
    for name in (OTB, TIR):
        adv, ret = run(name, token_level_rewards=rewards, response_mask=mask, index=np.array(["a", "a"]),
                       old_log_probs=old, sum_pi_squared=spp)
        assert torch.allclose(adv, torch.tensor([[1 - b, 1 - b], [-b, -b]]), atol=1e-6), name
        assert torch.equal(ret, torch.tensor([[1.0, 1.0], [0.0, 0.0]])), name
    # the importance weights scale each token's term by rho^2: rho = 2 on row 1 makes its W four times larger
    rho = torch.tensor([[1.0, 1.0], [2.0, 2.0]])
    adv, _ = run(OTB, token_level_rewards=rewards, response_mask=mask, index=np.array(["a", "a"]), old_log_probs=old,
                 sum_pi_squared=spp, rollout_is_weights=rho)
    b = 0.5 / 0.58  # (1 * 0.5) / (0.5 + 4 * 0.02)
    assert torch.allclose(adv, torch.tensor([[1 - b, 1 - b], [-b, -b]]), atol=1e-6)


def test_otb_group_of_one_and_zero_tail_by_hand():
    # one group of 3 with lengths 3, 1, 2 and uniform weights (p = 0.5, sum p^2 = 0.5: 0.5 per token), and a group of one
    rewards = torch.tensor([[0, 0, 3.0], [1.0, 0, 0], [0, 2.0, 0], [0, 5.0, 0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 0]], dtype=torch.float)
    old, spp = torch.full((4, 3), math.log(0.5)), torch.full((4, 3), 0.5)
    index = np.array(["g", "g", "g", "alone"])
    # W: row 0 0.5, 1, 1.5; row 1 0.5; row 2 0.5, 1.   G: row 0 3, 3, 3; row 1 1; row 2 2, 2
    # t=0: (3 * 0.5 + 1 * 0.5 + 2 * 0.5) / 1.5 = 2;  t=1: (3 * 1 + 2 * 1) / 2 = 2.5;  t=2: only row 0: 3 * 1.5 / 1.5 = 3
    expected = torch.tensor([[1.0, 0.5, 0.0], [-1.0, 0, 0], [0.0, -0.5, 0], [5.0, 5.0, 0]])
    adv, _ = run(OTB, token_level_rewards=rewards, response_mask=mask, index=index, old_log_probs=old, sum_pi_squared=spp,
                 handle_zero_tail=False)
    assert torch.allclose(adv, expected, atol=1e-6)
    # handle_zero_tail (the default): row 0 is the one longest; past the second longest (2 tokens) it keeps its return
    expected[0, 2] = 3.0
    for name in (OTB, TIR):
        adv, _ = run(name, token_level_rewards=rewards, response_mask=mask, index=index, old_log_probs=old, sum_pi_squared=spp)
        assert torch.allclose(adv, expected, atol=1e-6), name


# --------------------------------------------------------------------------------------------- loops
def loop_reference(rewards, mask, index, old, spp, rho, zero_tail, packed):
    """B at each (packed: k-th trained) position of a group = sum G W / (sum W + 1e-8) over the group's rows that
    reach it; a group of one (packed: of one non-empty row) has none; zero_tail: none past the second-longest row on
    the single longest one."""
    r, m, p, s = (t.double().numpy() for t in (rewards, mask, old.exp(), spp))
    w_tok = (1 - 2 * p + s) * (1.0 if rho is None else rho.double().numpy() ** 2)
    rows, width = m.shape
    adv = np.zeros_like(r)
    seqs = []  # per row: (positions, returns, W) at its trained tokens, in order
    for i in range(rows):
        pos = [t for t in range(width) if m[i, t]]
        g = [sum(r[i, u] * m[i, u] for u in range(t, width)) for t in range(width)]
        w = np.cumsum([w_tok[i, t] * m[i, t] for t in range(width)])
        seqs.append((pos, [g[t] for t in pos], [w[t] for t in pos]) if packed else
                    (list(range(width)), g, list(w)))
    for key in dict.fromkeys(index.tolist()):
        members = [i for i in range(rows) if index[i] == key and (not packed or m[i].sum() > 0)]
        lengths = {i: int(m[i].sum()) for i in members}
        for i in members:
            pos, g, w = seqs[i]
            for k, t in enumerate(pos):
                if not m[i, t]:
                    continue
                reach = [j for j in members if (k < lengths[j] if packed else m[j, t])]
                base = sum(seqs[j][1][k] * seqs[j][2][k] for j in reach) / (sum(seqs[j][2][k] for j in reach) + 1e-8)
                if len(members) == 1:
                    base = 0.0
                ordered = sorted(lengths.values())
                if (zero_tail and len(members) > 1 and lengths[i] == ordered[-1] and ordered[-2] < ordered[-1]
                        and k >= ordered[-2]):
                    base = 0.0
                adv[i, t] = g[k] - base
    return torch.tensor(adv, dtype=torch.float)


@pytest.mark.parametrize("zero_tail", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_otb_random_against_loops(zero_tail, weighted):
    gen = torch.Generator().manual_seed(3)
    rows, width = 10, 6
    lengths = [6, 2, 4, 6, 1, 5, 3, 6, 0, 2]
    mask = (torch.arange(width) < torch.tensor(lengths).unsqueeze(-1)).float()
    rewards = torch.randn(rows, width, generator=gen) * mask  # process rewards too, not only a final score
    old = -torch.rand(rows, width, generator=gen) * 3
    spp = old.exp() ** 2 + torch.rand(rows, width, generator=gen) * 0.3  # sum p^2 >= p(token)^2
    rho = torch.rand(rows, width, generator=gen) + 0.5 if weighted else None
    index = np.array([0, 1, 0, 2, 1, 0, 3, 2, 1, 1])  # group 3 has one row; row 8 is empty
    adv, ret = run(OTB, token_level_rewards=rewards, response_mask=mask, index=index, old_log_probs=old,
                   sum_pi_squared=spp, rollout_is_weights=rho, handle_zero_tail=zero_tail)
    expected = loop_reference(rewards, mask, index, old, spp, rho, zero_tail, packed=False)
    assert torch.allclose(adv, expected, atol=1e-5)
    assert torch.allclose(ret, rewards.flip(-1).cumsum(-1).flip(-1) * mask, atol=1e-6)


@pytest.mark.parametrize("zero_tail", [False, True])
def test_tir_pools_the_k_th_trained_tokens_of_multi_turn_rows(zero_tail):
    gen = torch.Generator().manual_seed(4)
    # tool outputs masked out between turns, an empty row, and rows that end at different places
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0],
                         [1, 0, 0, 1, 1, 0, 0, 0],
                         [1, 1, 1, 1, 1, 1, 0, 0],
                         [0, 0, 0, 0, 0, 0, 0, 0],
                         [1, 1, 0, 1, 0, 1, 0, 1],
                         [1, 1, 1, 0, 0, 0, 0, 0]], dtype=torch.float)
    rewards = torch.randn(mask.shape, generator=gen) * mask
    old = -torch.rand(mask.shape, generator=gen) * 2
    spp = old.exp() ** 2 + 0.1
    index = np.array(["a", "a", "b", "b", "b", "c"])  # group b has an empty row, so two members
    adv, _ = run(TIR, token_level_rewards=rewards, response_mask=mask, index=index, old_log_probs=old,
                 sum_pi_squared=spp, handle_zero_tail=zero_tail)
    expected = loop_reference(rewards, mask, index, old, spp, None, zero_tail, packed=True)
    assert torch.allclose(adv, expected, atol=1e-5)
    assert torch.all(adv[mask == 0] == 0)


def test_tir_equals_otb_on_single_turn_rows():
    gen = torch.Generator().manual_seed(5)
    lengths = torch.tensor([5, 3, 5, 2, 4, 4])
    mask = (torch.arange(5) < lengths.unsqueeze(-1)).float()
    rewards, old = torch.randn(6, 5, generator=gen) * mask, -torch.rand(6, 5, generator=gen)
    spp = old.exp() ** 2 + 0.2
    kwargs = dict(token_level_rewards=rewards, response_mask=mask, index=np.array([1, 1, 1, 2, 2, 2]), old_log_probs=old,
                  sum_pi_squared=spp)
    for zero_tail in (False, True):
        assert torch.allclose(run(TIR, **kwargs, handle_zero_tail=zero_tail)[0], run(OTB, **kwargs, handle_zero_tail=zero_tail)[0],
                              atol=1e-6)


# ---------------------------------------------------------------------------------- vectorized names
def test_grpo_vectorized_is_grpo():
    mask = torch.ones(4, 2)
    rewards = torch.tensor([[0, 0.0], [0, 1e-4], [0, 1.0], [0, 3.0]])
    index = np.array(["close", "close", "far", "far"])
    grpo, _ = run("grpo", token_level_rewards=rewards, response_mask=mask, index=index)
    vec, _ = run("grpo_vectorized", token_level_rewards=rewards, response_mask=mask, index=index)
    assert torch.equal(grpo, vec)
    # (1 - 2) / (std + 1e-6) with std = sqrt(2); scores 1e-4 apart: std 7.07e-5, no floor under it (verl's current form)
    assert vec[2, 0].item() == pytest.approx(-1 / (math.sqrt(2) + 1e-6), rel=1e-6)
    assert vec[1, 0].item() == pytest.approx(5e-5 / (1e-4 / math.sqrt(2) + 1e-6), rel=1e-3)


def test_rloo_vectorized_gives_a_response_alone_in_its_group_nothing():
    mask = torch.ones(4, 1)
    rewards = torch.tensor([[1.0], [3.0], [0.5], [2.0]])
    index = np.array([0, 0, 0, 1])
    rloo, _ = run("rloo", token_level_rewards=rewards, response_mask=mask, index=index)
    vec, _ = run("rloo_vectorized", token_level_rewards=rewards, response_mask=mask, index=index)
    # 1 - (3 + 0.5) / 2 = -0.75; 3 - 0.75 = 2.25; 0.5 - 2 = -1.5; the lone 2.0: rloo keeps it, rloo_vectorized 0
    assert vec.squeeze(-1).tolist() == pytest.approx([-0.75, 2.25, -1.5, 0.0])
    assert rloo.squeeze(-1).tolist() == pytest.approx([-0.75, 2.25, -1.5, 2.0])


# ------------------------------------------------------------------------------------------ sum p^2
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_sum_pi_squared_from_logits_against_the_softmax(temperature):
    logits = torch.randn(3, 7, 1500, generator=torch.Generator().manual_seed(6)) * 5
    expected = (torch.softmax(logits.double() / temperature, -1) ** 2).sum(-1)
    got = sum_pi_squared_from_logits(logits, temperature)
    assert got.shape == (3, 7) and got.dtype == torch.float32
    assert torch.allclose(got.double(), expected, rtol=1e-5, atol=1e-7)
    assert sum_pi_squared_from_logits(torch.zeros(2, 10)).tolist() == pytest.approx([0.1, 0.1])  # uniform: 1/V
