"""verl's rollout skip: training steps' generations kept on disk and read back instead of generating."""

import json

import numpy as np
import pytest
import torch

from reinforge.batch import Batch
from reinforge.config import load_config, unused_settings
from reinforge.errors import ConfigError
from reinforge.trainer.rollout_cache import RolloutCache


def cache_of(small_run, tmp_path, *extra):
    config, _ = load_config([*small_run, "actor_rollout_ref.rollout.skip.enable=true",
                             f"actor_rollout_ref.rollout.skip.dump_dir={tmp_path / 'dumps'}", *extra])
    return RolloutCache(config)


class Generator:
    """Stands in for the engine: generation k is a batch whose every value is k, and every call is counted."""

    def __init__(self):
        self.calls = 0

    def __call__(self) -> Batch:
        self.calls += 1
        return Batch({"responses": torch.full((2, 3), self.calls)}, {"extra_info": np.array([{"k": self.calls}] * 2, dtype=object)})


def prompts_of(step: int, rows: int = 2) -> Batch:
    """A step's prompt batch (small_run's data.train_batch_size is 2)."""
    return Batch({"input_ids": torch.full((rows, 4), step)}, {"uid": np.array([f"step-{step}"] * rows, dtype=object)})


def taken(pair: tuple[Batch, Batch]) -> int:
    prompts, batch = pair
    value = int(batch["responses"][0, 0])
    assert batch["extra_info"][1] == {"k": value}  # the data columns come back with the tensors
    return value, prompts["uid"][0]


def test_dumped_steps_are_read_back_and_repeated_in_turn(small_run, tmp_path):
    cache, engine = cache_of(small_run, tmp_path, "actor_rollout_ref.rollout.skip.max_dump_step=2"), Generator()
    assert cache.folder == tmp_path / "dumps" / "gsm8k_verl_examples" / "GBS2_N2_in48_out4"  # verl's folder naming
    # each reused step brings the prompts it was generated from, not the ones the loader drew for it
    assert [taken(cache.generation(step, 0, prompts_of(step), engine)) for step in (1, 2, 3, 4, 5)] == [
        (1, "step-1"), (2, "step-2"), (1, "step-1"), (2, "step-2"), (1, "step-1")]
    assert engine.calls == 2 and cache.dumped_steps() == [1, 2]
    # another run (a new cache over the same folder) generates nothing for the dumped steps
    again, engine = cache_of(small_run, tmp_path, "actor_rollout_ref.rollout.skip.max_dump_step=2"), Generator()
    assert [taken(again.generation(step, 0, prompts_of(step), engine))[0] for step in (1, 2, 3)] == [1, 2, 1]
    assert engine.calls == 0
    # a second generation round of a step (algorithm.filter_groups) is kept apart from the first
    assert taken(again.generation(1, 1, prompts_of(1), engine))[0] == 1 and engine.calls == 1
    assert taken(again.generation(1, 1, prompts_of(1), Generator()))[0] == 1


@pytest.mark.parametrize(("action", "expected", "calls"), [("cache", [1, 2, 3, 4], 4), ("repeat_last", [1, 2, 2, 2], 2)])
def test_later_steps_follow_the_action(small_run, tmp_path, action, expected, calls):
    cache = cache_of(small_run, tmp_path, "actor_rollout_ref.rollout.skip.max_dump_step=2",
                     f"actor_rollout_ref.rollout.skip.action={action}")
    engine = Generator()
    assert [taken(cache.generation(step, 0, prompts_of(step), engine))[0] for step in (1, 2, 3, 4)] == expected
    assert engine.calls == calls


def test_a_run_reuses_its_first_generation_and_another_run_reads_it(run_steps, tmp_path):
    """skip.max_dump_step=1, repeat: step 2 trains on step 1's prompts and responses; a second run with another
    reward function generates nothing and scores the same responses its own way."""
    def responses(run: str) -> list[list[tuple[str, str]]]:
        steps = []
        for step in (1, 2):
            rows = [json.loads(line) for line in (tmp_path / run / "gen" / f"{step}.jsonl").read_text().splitlines()]
            steps.append([(row["input"], row["output"]) for row in rows])
        return steps

    dumps = tmp_path / "dumps"
    first = run_steps("actor_rollout_ref.rollout.skip_rollout=true", f"actor_rollout_ref.rollout.skip_dump_dir={dumps}",
                      "actor_rollout_ref.rollout.temperature=3.0", f"trainer.rollout_data_dir={tmp_path / 'a' / 'gen'}",
                      run_dir=tmp_path / "a")
    step1, step2 = responses("a")
    assert step1 == step2 and len(set(step1)) > 1  # the same prompts and responses, and they differ from one another
    assert len(list(dumps.rglob("step_000001_round_0.pt"))) == 1 and not list(dumps.rglob("step_000002_*"))
    reward = tmp_path / "length_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return float(len(solution_str))\n")
    second = run_steps("actor_rollout_ref.rollout.skip.enable=true", f"actor_rollout_ref.rollout.skip.dump_dir={dumps}",
                       f"custom_reward_function.path={reward}", f"trainer.rollout_data_dir={tmp_path / 'b' / 'gen'}",
                       run_dir=tmp_path / "b")
    assert responses("b") == [step1, step1]  # read back, though this run samples at temperature 1
    assert second[1]["critic/score/mean"] != first[1]["critic/score/mean"]  # scored afresh by the new reward


def test_the_folder_is_named_after_the_prompts_a_generation_batch_holds(small_run, tmp_path):
    """verl names it after its loader's batch: data.gen_batch_size, or data.train_batch_size (2 here) without it."""
    assert cache_of(small_run, tmp_path).folder.name == "GBS2_N2_in48_out4"
    assert cache_of(small_run, tmp_path, "data.gen_batch_size=6").folder.name == "GBS6_N2_in48_out4"
    dynamic = cache_of(small_run, tmp_path, "data.gen_batch_size=6", "algorithm.filter_groups.enable=true")
    assert dynamic.folder.name == "GBS6_N2_in48_out4"


def test_a_dumped_batch_of_another_size_stops_the_run(small_run, tmp_path):
    cache, engine = cache_of(small_run, tmp_path), Generator()
    cache.generation(1, 0, prompts_of(1, rows=3), engine)  # a batch of 3 prompts where the run draws 2
    with pytest.raises(ConfigError, match=r"step_000001_round_0.pt holds a generation of 3 prompts, and this run generates "
                                          r"batches of 2: delete it or set actor_rollout_ref.rollout.skip.dump_dir"):
        cache_of(small_run, tmp_path).generation(1, 0, prompts_of(1), engine)


def test_nothing_dumped_leaves_only_the_cache_action(small_run, tmp_path):
    with pytest.raises(ConfigError, match="skip.max_dump_step=0 dumps no step, so action=repeat would have nothing to read back"):
        cache_of(small_run, tmp_path, "actor_rollout_ref.rollout.skip.max_dump_step=0")
    cache, engine = cache_of(small_run, tmp_path, "actor_rollout_ref.rollout.skip.max_dump_step=0",
                             "actor_rollout_ref.rollout.skip.action=cache"), Generator()
    assert [taken(cache.generation(step, 0, prompts_of(step), engine))[0] for step in (1, 2)] == [1, 2]
    assert not cache.folder.exists()


def test_config_of_the_rollout_skip(small_run):
    config, keys = load_config([*small_run, "actor_rollout_ref.rollout.skip.max_dump_step=3",
                                "actor_rollout_ref.rollout.skip_dump_dir=/tmp/x"])
    notes = unused_settings(config, keys)
    for key in ("actor_rollout_ref.rollout.skip.max_dump_step", "actor_rollout_ref.rollout.skip_dump_dir"):
        assert f"{key}: acts only with actor_rollout_ref.rollout.skip.enable=true (or verl's earlier skip_rollout=true)" in notes
    with pytest.raises(ConfigError, match="actor_rollout_ref.rollout.skip.action='again' is not one of: cache, repeat, repeat_last"):
        load_config([*small_run, "actor_rollout_ref.rollout.skip.action=again"])


def test_remax_scores_its_greedy_baseline_on_the_prompts_read_back(run_steps, tmp_path):
    """With a learning rate of 0 the policy stays put, so step 2, which reuses step 1's generation, must see step 1's
    greedy baselines too (they are generated for the prompts read back) and so the same advantages."""
    steps = run_steps("algorithm.adv_estimator=remax", "actor_rollout_ref.actor.optim.lr=0",
                      "actor_rollout_ref.rollout.skip.enable=true", f"actor_rollout_ref.rollout.skip.dump_dir={tmp_path / 'd'}")
    assert "timing_s/gen_max" in steps[2]
    for key in ("critic/score/mean", "critic/advantages/mean", "critic/advantages/max", "critic/advantages/min"):
        assert steps[2][key] == pytest.approx(steps[1][key], abs=1e-6), key
    assert steps[1]["critic/advantages/max"] > steps[1]["critic/advantages/min"]
