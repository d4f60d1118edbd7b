"""reward_model.launch_reward_fn_async: scoring overlaps the log-prob passes and changes nothing else."""

from reinforge.config import load_config, unused_settings

SLEEPY_REWARD = """
import time

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(0.02)
    return sum(map(ord, solution_str)) % 7 / 7
"""

# measured: times, memory, and the MFU (FLOPs over a time; on a GPU, which has a peak to divide by)
TIMING = ("timing_s/", "timing_per_token_ms/", "perf/time_per_step", "perf/throughput", "perf/cpu_memory_used_gb", "perf/mfu/",
          "perf/max_memory_")


def phases_s(metrics: dict) -> float:
    """The step's phases one after another: generation, scoring (the scorer's own time), the passes, the updates."""
    outside = ("timing_s/step", "timing_s/reward_wait", "timing_s/testing", "timing_s/save_checkpoint")
    return sum(v for k, v in metrics.items() if k.startswith("timing_s/") and k not in outside)


def test_async_scoring_overlaps_the_log_prob_passes_and_changes_no_metric(run_steps, tmp_path):
    reward = tmp_path / "sleepy_reward.py"
    reward.write_text(SLEEPY_REWARD)
    # old log-probs (two mini-batches) and reference log-probs (KL loss), one trajectory per forward: work to overlap
    common = [f"custom_reward_function.path={reward}", "data.train_batch_size=4", "actor_rollout_ref.actor.use_kl_loss=true",
              "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
              "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1", "trainer.total_training_steps=1"]
    sync = run_steps(*common, run_dir=tmp_path / "sync")
    overlapped = run_steps(*common, "reward_model.launch_reward_fn_async=true", run_dir=tmp_path / "async")

    assert sorted(sync) == sorted(overlapped) == [1]
    s, a = sync[1], overlapped[1]
    assert {k: v for k, v in s.items() if not k.startswith(TIMING)} == {k: v for k, v in a.items() if not k.startswith(TIMING)}
    assert "timing_s/reward_wait" not in s and a["timing_s/reward"] >= 8 * 0.02  # eight responses, 20 ms each
    # synchronous: the step lasts at least its phases one after another
    assert s["timing_s/step"] >= phases_s(s)
    # asynchronous: scoring hides behind the passes; at best by the shorter of the two, required here: half that
    hideable = min(a["timing_s/reward"], a["timing_s/old_log_prob"] + a["timing_s/ref"])
    assert a["timing_s/reward"] - a["timing_s/reward_wait"] > 0.5 * hideable
    assert a["timing_s/step"] < phases_s(a) - 0.5 * hideable


def test_dynamic_sampling_keeps_scoring_synchronous_and_says_so():
    keys = ["reward_model.launch_reward_fn_async=true", "algorithm.filter_groups.enable=true", "actor_rollout_ref.rollout.n=2"]
    config, user_keys = load_config(keys)
    assert any(line.startswith("reward_model.launch_reward_fn_async: algorithm.filter_groups needs each generation batch's "
                               "scores") for line in unused_settings(config, user_keys))
    config, user_keys = load_config(keys[:1])
    assert not any(line.startswith("reward_model.launch_reward_fn_async") for line in unused_settings(config, user_keys))
