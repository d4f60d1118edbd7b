"""Validation metrics per data source: verl's names and bootstrap, majority voting, and the unbiased pass@k."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from reinforge.config import load_config
from reinforge.environment.tasks import write_task_files
from reinforge.trainer.main import mean_val_reward, run
from reinforge.trainer.val_metrics import (
    bootstrap_draws,
    bootstrap_sizes,
    majority_values,
    pass_at_k,
    process_validation_metrics,
    validation_metric_dict,
)


# ---- pass@k -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", range(1, 7))
def test_pass_at_k_is_the_share_of_k_subsets_holding_a_passing_response(n):
    for c, k in itertools.product(range(n + 1), range(1, n + 1)):
        subsets = list(itertools.combinations([True] * c + [False] * (n - c), k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets), abs=1e-12), (n, c, k)


# ---- majority voting --------------------------------------------------------------------------
def test_majority_on_hand_made_draws():
    values = np.array([1.0, 0.0, 0.0, 1.0, 0.0])
    votes = np.array([0, 1, 1, 0, 2])  # answers A B B A C
    draws = np.array([[0, 1, 2],  # A B B: B wins; its first response is 1 -> 0.0
                      [1, 0, 3],  # B A A: A wins; its first response is 0 -> 1.0
                      [4, 0, 1],  # C A B: a tie, C comes first -> response 4 -> 0.0
                      [3, 2, 4]])  # A B C: a tie, A comes first -> response 3 -> 1.0
    assert majority_values(values[None], votes[None], draws).tolist() == [[0.0, 1.0, 0.0, 1.0]]


def _majority_by_counting(values, votes, draw) -> float:
    """verl's calc_maj_val written plainly: count votes in draw order, the most common (first on ties), its first value."""
    counts = Counter(votes[i] for i in draw)  # Counter keeps first-seen order
    winner = max(counts, key=counts.get)
    return values[next(i for i in draw if votes[i] == winner)]


def test_vectorised_majority_matches_plain_counting_on_random_draws():
    rng = np.random.default_rng(0)
    values, votes = rng.random((5, 7)), rng.integers(0, 3, size=(5, 7))  # five prompts of seven responses
    draws = rng.integers(0, 7, size=(300, 4))
    expected = [[_majority_by_counting(v, p, draw) for draw in draws] for v, p in zip(values, votes, strict=True)]
    assert majority_values(values, votes, draws).tolist() == expected


# ---- bootstrap --------------------------------------------------------------------------------
def test_bootstrap_draws_are_verls_and_leave_the_global_generator_alone():
    np.random.seed(123)
    state = np.random.get_state()[1].copy()
    draws = bootstrap_draws(5, 4)
    assert (np.random.get_state()[1] == state).all()
    np.random.seed(42)  # verl's bootstrap_metric: reseed, then 1000 draws of k indices with replacement
    verl = np.stack([np.random.choice(5, size=4, replace=True) for _ in range(1000)])
    assert (draws == verl).all()


def test_best_and_worst_of_k_approach_their_exact_expectation():
    values = [0.0, 0.2, 0.5, 0.9, 1.0]
    metrics = process_validation_metrics(["ds"] * 5, [0] * 5, {"reward": values})["ds"]["reward"]
    # with replacement, P(max of k draws <= v_(j)) = (j / n)^k for the sorted values
    n, ordered = len(values), sorted(values)
    for k in bootstrap_sizes(n):
        best = sum(v * ((j + 1) ** k - j ** k) / n ** k for j, v in enumerate(ordered))
        worst = sum(v * ((n - j) ** k - (n - j - 1) ** k) / n ** k for j, v in enumerate(ordered))
        assert metrics[f"best@{k}/mean"] == pytest.approx(best, abs=0.03)
        assert metrics[f"worst@{k}/mean"] == pytest.approx(worst, abs=0.03)
    assert process_validation_metrics(["ds"] * 5, [0] * 5, {"reward": values})["ds"]["reward"] == metrics
    assert bootstrap_sizes(5) == [2, 4, 5] and bootstrap_sizes(8) == [2, 4, 8] and bootstrap_sizes(1) == []


# ---- aggregation and names --------------------------------------------------------------------
def test_each_metric_is_computed_per_prompt_then_averaged():
    metrics = process_validation_metrics(["ds"] * 4, ["p", "p", "q", "q"], {"reward": [1.0, 0.0, 1.0, 1.0]})["ds"]["reward"]
    assert metrics["mean@2"] == 0.75
    assert metrics["std@2"] == 0.25  # population std: 0.5 and 0
    assert metrics["pass@1"] == 0.75 and metrics["pass@2"] == 1.0
    assert metrics["worst@2/mean"] == pytest.approx((0.25 + 1.0) / 2, abs=0.03)  # min of two draws of [1, 0]: 1 with chance 1/4


def test_pass_counts_full_marks_and_bools_and_none_counts_zero():
    infos = {"reward": [1.0, 0.1, 0.1, -1.0], "acc": [True, False, None, False], "pred": ["4", "5", "5", None],
             "feedback": ["ok", "no", "no", "no"]}
    metrics = process_validation_metrics(["ds"] * 4, [0] * 4, infos)["ds"]
    assert set(metrics) == {"reward", "acc"}  # text is skipped; pred is the vote, not a variable
    assert metrics["reward"]["pass@4"] == 1.0 and metrics["reward"]["pass@1"] == 0.25
    assert metrics["acc"]["mean@4"] == 0.25 and metrics["acc"]["pass@2"] == pytest.approx(0.5)


def test_names_follow_verls_core_and_aux_split():
    rows = 8  # two prompts of four responses
    infos = {"reward": [1, 0, 0, 1, 1, 1, 0, 0], "acc": [True, False, False, True, True, True, False, False],
             "pred": list("abbaaacc")}
    metrics = validation_metric_dict(process_validation_metrics(["math"] * rows, [0] * 4 + [1] * 4, infos))
    core = sorted(name for name in metrics if name.startswith("val-core/"))
    assert core == ["val-core/math/acc/best@4/mean", "val-core/math/acc/best@4/std", "val-core/math/acc/maj@4/mean",
                    "val-core/math/acc/maj@4/std", "val-core/math/acc/mean@4"]
    for name in ("acc/std@4", "acc/best@2/mean", "acc/worst@4/mean", "acc/maj@2/std", "acc/pass@1", "acc/pass@2", "acc/pass@4",
                 "reward/mean@4", "reward/best@4/mean", "reward/maj@4/mean"):
        assert f"val-aux/math/{name}" in metrics, name
    assert metrics["val-core/math/acc/mean@4"] == 0.5
    assert metrics["val-aux/math/acc/pass@2"] == pytest.approx(1 - 1 / 6)  # both prompts: 2 of 4 pass, C(2,2)/C(4,2) = 1/6


def test_each_data_source_reports_only_the_variables_its_own_rewards_hold():
    # math's reward returns {"score", "acc", "pred"}, gsm8k's a plain number: its rows hold no acc and no pred (None)
    sources, uids = ["math"] * 4 + ["gsm8k"] * 4, [0, 0, 1, 1, 2, 2, 3, 3]
    reward = [1.0, 0.0, 1.0, 1.0, 0.5, 1.0, 0.0, 0.0]
    infos = {"reward": reward, "score": reward, "acc": [True, False, True, True, None, None, None, None],
             "pred": ["a", "b", "c", "c", None, None, None, None]}
    metrics = validation_metric_dict(process_validation_metrics(sources, uids, infos))
    gsm8k = sorted(name.removeprefix("val-aux/gsm8k/") for name in metrics if name.startswith("val-aux/gsm8k/"))
    assert not [name for name in gsm8k if not name.startswith(("reward/", "score/")) or "maj@" in name]
    assert sorted(name for name in metrics if name.startswith("val-core/gsm8k/")) == [
        "val-core/gsm8k/reward/best@2/mean", "val-core/gsm8k/reward/best@2/std", "val-core/gsm8k/reward/mean@2"]
    assert metrics["val-core/gsm8k/reward/mean@2"] == ((0.5 + 1.0) / 2 + 0.0) / 2
    assert metrics["val-core/math/acc/mean@2"] == ((1 + 0) / 2 + (1 + 1) / 2) / 2
    assert "val-core/math/acc/maj@2/mean" in metrics and "val-aux/math/reward/mean@2" in metrics


def test_without_acc_the_reward_is_core_and_one_response_gives_mean_at_1():
    metrics = validation_metric_dict(process_validation_metrics(["a", "b"], [0, 1], {"reward": [0.5, 1.0]}))
    assert metrics == {"val-core/a/reward/mean@1": 0.5, "val-core/b/reward/mean@1": 1.0}
    assert mean_val_reward({**metrics, "val-aux/a/reward/best@2/mean": 9.0}) == 0.75


# ---- through a validation run -----------------------------------------------------------------
VOTING_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    right = len(solution_str) % 2 == 0
    return {"score": float(right), "acc": right, "pred": solution_str[:1]}
"""


def test_a_validation_run_reports_the_metrics_of_its_samples(tiny_model_path, tmp_path):
    reward = tmp_path / "voting_reward.py"
    reward.write_text(VOTING_REWARD)
    train, val = write_task_files()
    config, keys = load_config([
        f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={train}", f"data.val_files={val}",
        f"custom_reward_function.path={reward}", f"trainer.default_local_dir={tmp_path / 'run'}",
        f"trainer.validation_data_dir={tmp_path / 'val'}", "trainer.val_only=true", "data.max_val_samples=3",
        "data.max_prompt_length=48", "data.max_response_length=5", "actor_rollout_ref.rollout.val_kwargs.n=4",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
    ])
    metrics = run(config, keys)

    samples = [json.loads(line) for line in (tmp_path / "val" / "0.jsonl").read_text().splitlines()]
    per_prompt = [[s["score"] for s in samples[i:i + 4]] for i in range(0, 12, 4)]  # n responses of a prompt are adjacent
    # the dump carries the reward function's extra values per sample, as verl's does
    assert all(s["acc"] == (len(s["output"]) % 2 == 0) and s["pred"] == s["output"][:1] for s in samples)
    ds = "val-core/reinforge/add_one"
    assert metrics[f"{ds}/acc/mean@4"] == pytest.approx(np.mean(per_prompt))
    assert metrics[f"{ds}/acc/best@4/mean"] <= np.mean([max(p) for p in per_prompt]) + 1e-9
    assert f"{ds}/acc/maj@4/mean" in metrics
    for k in (1, 2, 4):
        expected = np.mean([pass_at_k(4, int(sum(p)), k) for p in per_prompt])
        assert metrics[f"val-aux/reinforge/add_one/acc/pass@{k}"] == pytest.approx(expected)
    assert metrics["val-aux/reinforge/add_one/reward/mean@4"] == pytest.approx(np.mean(per_prompt))
    assert metrics["val-aux/reinforge/add_one/score/mean@4"] == pytest.approx(np.mean(per_prompt))  # verl keeps `score` too
    assert not math.isnan(mean_val_reward(metrics))


def test_the_logged_validation_samples_are_picked_as_verl_picks_them(capsys):
    """verl's _maybe_log_val_generations: sort by input, shuffle with RandomState(42), the first N: the same prompts
    whatever order the validation set came in, not just its first rows."""
    from reinforge.config.schema import Config
    from reinforge.trainer.validation import _report_samples

    class Tracker:
        def log_generations(self, samples, step):
            self.logged = [s["input"] for s in samples]

    config = Config()
    config.trainer.log_val_generations = 3
    samples = [{"input": f"prompt {i:02d}", "output": "x", "gts": "y", "score": 0.0, "step": 5} for i in range(20)]
    expected = sorted(s["input"] for s in samples)
    np.random.RandomState(42).shuffle(expected)
    for order in (samples, samples[::-1]):
        tracker = Tracker()
        _report_samples(config, list(order), 5, tracker)
        assert tracker.logged == expected[:3] != ["prompt 00", "prompt 01", "prompt 02"]
    assert capsys.readouterr().out.count("[val sample @ step 5]") == 6


def test_only_sources_whose_rewards_are_plain_numbers_lose_score_as_a_variable():
    """Per data source, not per row, and by what the reward function returned, not by the values: dict results keep
    their score in every row of their source, even {score: 1, acc: True} or {score: s, acc: s}, whose values look like
    a plain number's (verl logs every key of a dict result); a plain-number source has acc alone."""
    from reinforge.reward.manager.naive import NaiveRewardManager
    from reinforge.trainer.validation import _plain_sources_without_score

    sources = ["dicts", "dicts", "plain", "plain"]
    extras = [{"score": 1.0, "acc": True}, {"score": 0.5, "acc": 0.5},
              {"score": 0.5, "acc": 0.5, "pred": None}, {"score": 0.0, "acc": 0.0, "pred": None}]
    kept = _plain_sources_without_score(sources, extras, [False, False, True, True])
    assert kept[:2] == extras[:2]
    assert [sorted(k for k, v in extra.items() if v is not None) for extra in kept[2:]] == [["acc"], ["acc"]]
    # a manager that does not say which rows were plain (a custom one): every key as it gave them
    assert _plain_sources_without_score(sources, extras, [False] * 4) == extras
    # the manager's flags: a dict result is not plain, a number is, a failed row is neither a dict nor in the way
    results = [{"score": 1.0, "acc": True}, 0.5, ValueError("boom")]
    samples = [SimpleNamespace(data_source="s", row=i) for i in range(3)]
    manager = NaiveRewardManager(tokenizer=None, compute_score=lambda **kwargs: 0.0)
    manager._report = lambda *args: "failed"
    _, parsed_extras, plain, _ = manager._parse(samples, results)
    assert plain == [False, True, True] and parsed_extras[1] == {"acc": 0.5}


def test_a_prompt_with_a_missing_pred_takes_no_part_in_the_majority_vote():
    """Prompt 2's third response has no pred: verl leaves that prompt out of maj@k and averages over the other three.
    The expected numbers are verl 0.9.1's process_validation_metrics on this input (run side by side); mean@4 and
    best@4 still count every prompt."""
    acc = [1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 0, 1, 0, 0]
    pred = ["4", "5", "4", "4", "x", "y", "z", "x", "7", "7", None, "8", "1", "2", "1", "1"]
    metrics = process_validation_metrics(["a"] * 16, [i // 4 for i in range(16)], {"acc": acc, "pred": pred})["a"]["acc"]
    assert metrics["maj@4/mean"] == pytest.approx(0.3936666666666666, abs=1e-12)
    assert metrics["maj@2/mean"] == pytest.approx(0.4136666666666667, abs=1e-12)
    assert (metrics["mean@4"], metrics["best@4/mean"]) == (0.5, pytest.approx(0.83125))
