"""The trainer seeds every generated row from (trainer.seed, train or validation, step, generation round, row),
so what a row samples does not depend on how generation is batched (or split over ranks)."""

import pytest

from reinforge.inference.seeds import TRAIN, VALIDATION, derive_seed
from reinforge.training import workers

WALL_CLOCK_PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/")


@pytest.fixture
def generation_calls(monkeypatch):
    """(validate, seeds or None, greedy) of every generate_sequences call the actor worker makes."""
    calls = []
    real = workers.generate_sequences

    def recording(engine, prompts, params, pad_token_id):
        seeds = prompts.get("sample_seeds")
        calls.append((bool(prompts.meta_info.get("validate")), None if seeds is None else seeds.tolist(), params.greedy))
        return real(engine, prompts, params, pad_token_id)

    monkeypatch.setattr(workers, "generate_sequences", recording)
    return calls


def expected_seeds(purpose: int, step: int, round_: int, rows: int, seed: int = 1) -> list[int]:
    return [derive_seed(seed, purpose, step, round_, row) for row in range(rows)]


def test_train_and_validation_rows_get_seeds_of_their_step_and_the_greedy_baseline_none(run_steps, generation_calls):
    run_steps("trainer.val_before_train=true", "trainer.test_freq=1", "algorithm.adv_estimator=remax",
              "actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.rollout.val_kwargs.temperature=1.0")
    # SMALL_RUN: 2 prompts x n=2 per step, 4 validation prompts in one batch; ReMax adds a greedy rollout per step
    assert generation_calls == [
        (True, expected_seeds(VALIDATION, 0, 0, 4), False),
        (False, expected_seeds(TRAIN, 1, 0, 4), False), (False, None, True), (True, expected_seeds(VALIDATION, 1, 0, 4), False),
        (False, expected_seeds(TRAIN, 2, 0, 4), False), (False, None, True), (True, expected_seeds(VALIDATION, 2, 0, 4), False),
    ]


def test_each_dynamic_sampling_round_has_its_own_seeds(run_steps, generation_calls, tmp_path):
    from reinforge.errors import ConfigError

    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n")
    with pytest.raises(ConfigError, match="after 3 generation batches"):  # no group ever varies: three rounds in step 1
        run_steps(f"custom_reward_function.path={reward}", "algorithm.filter_groups.enable=true",
                  "algorithm.filter_groups.max_num_gen_batches=3", "trainer.seed=5")
    assert [seeds for _, seeds, _ in generation_calls] == [expected_seeds(TRAIN, 1, r, 4, seed=5) for r in range(3)]
    assert len({s for _, seeds, _ in generation_calls for s in seeds}) == 12


def test_a_run_samples_the_same_whatever_the_rollout_micro_batch(run_steps, tmp_path):
    """One generation batch of 4 rows or micro-batches of 1: the same responses, hence the same training."""
    whole = run_steps("actor_rollout_ref.rollout.temperature=1.5", run_dir=tmp_path / "whole")
    split = run_steps("actor_rollout_ref.rollout.temperature=1.5", "actor_rollout_ref.rollout.micro_batch_size_per_gpu=1",
                      run_dir=tmp_path / "split")
    assert whole.keys() == split.keys() == {1, 2}
    # the engine's log-probs of the same tokens differ in the last bits with the padding of another micro-batch, so the
    # train/inference mismatch measures (differences of the order of 1e-9, perplexities) are compared with a tolerance
    noise = ("training/rollout_", "rollout_corr/")
    for step in whole:
        same = {k: v for k, v in whole[step].items() if not k.startswith(WALL_CLOCK_PREFIXES + noise)}
        assert same == {k: v for k, v in split[step].items() if not k.startswith(WALL_CLOCK_PREFIXES + noise)}
        for key in (k for k in whole[step] if k.startswith(noise)):
            assert split[step][key] == pytest.approx(whole[step][key], rel=1e-6, abs=1e-5), key  # 1e-6 apart on a GPU
    assert all(s["critic/score/max"] > s["critic/score/min"] for s in whole.values())  # the rows sampled different texts
