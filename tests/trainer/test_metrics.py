"""Timing, memory, FLOPs/MFU, generation progress and the end-of-run summary."""

import io
import sys
from types import SimpleNamespace

import pytest
import torch

from reinforge.batch import Batch
from reinforge.config import load_config
from reinforge.errors import ConfigError
from reinforge.inference import HFEngine, SamplingParams, hf
from reinforge.trainer.metrics import compute_timing_metrics, variance_proxy_metrics
from reinforge.training import perf as flops
from reinforge.training.perf import compute_memory_metrics, dense_weights, device_peak_flops, mfu, training_flops

# the tiny model's shape: head_dim 16, grouped-query attention with 2 kv heads
TINY = SimpleNamespace(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       intermediate_size=192, vocab_size=384)


def test_flops_of_a_tiny_config_match_the_hand_computed_count():
    # per layer: q 64x64, k 64x32, v 64x32, o 64x64 = 12288; gate/up/down 3 x 64x192 = 36864
    # N = 2 x 49152 + embedding and LM head 2 x 384 x 64 = 147456
    assert dense_weights(TINY) == 147_456
    # two sequences of 10 and 6 tokens: 6 N x 16 = 14_155_776; attention 12 x (100 + 36) x 16 x 4 heads x 2 layers = 208_896
    assert training_flops(TINY, [10, 6]) == 14_364_672
    # two PPO epochs in 0.5 s on a 1 GFLOP/s device: 57_458_688 FLOP/s achieved
    assert mfu(2 * 14_364_672, 0.5, 1e9) == pytest.approx(0.057458688)
    assert mfu(2 * 14_364_672, 0.5, 1e9, n_devices=2) == pytest.approx(0.028729344)


def test_dense_weights_equal_the_matrix_weights_of_a_real_model(tiny_model_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    matrices = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and "layers." in name)
    embedding = model.get_input_embeddings().weight.numel()
    assert dense_weights(model.config) == matrices + 2 * embedding  # LM head counted even when tied, as verl does


def test_mixture_of_experts_counts_the_active_experts_and_the_router():
    moe = SimpleNamespace(**{**vars(TINY), "num_experts_per_tok": 2, "num_experts": 8, "moe_intermediate_size": 32})
    # MLP per layer: 2 experts x 3 x 64 x 32 = 12288, router 64 x 8 = 512; attention 12288
    assert dense_weights(moe) == 2 * (12288 + 12288 + 512) + 2 * 384 * 64


def test_an_unknown_architecture_gives_no_flops_and_no_mfu():
    odd = SimpleNamespace(n_embd=64, n_layer=2)
    assert training_flops(odd, [10]) is None
    assert mfu(None, 1.0, 1e12) is None
    assert mfu(1e9, 1.0, None) is None


def test_peak_flops_configured_then_gpu_table_then_none(monkeypatch):
    assert device_peak_flops("cpu") is None
    assert device_peak_flops("cpu", 2e12) == 2e12
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name, peak in (("NVIDIA H200", 989e12), ("NVIDIA H20", 148e12), ("NVIDIA L40S", 362.05e12), ("NVIDIA L40", 181.05e12),
                       ("NVIDIA A100-SXM4-80GB", 312e12), ("Some Future GPU", None)):
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device, name=name: name)
        assert device_peak_flops("cuda") == peak, name
    assert device_peak_flops("cuda", 5e14) == 5e14
    assert set(flops.DEVICE_PEAK_FLOPS.values()) >= {989e12, 312e12}


def test_timing_per_token_uses_verls_token_counts():
    # 2 rows: prompts of 3 and 2 tokens, responses of 2 and 1 tokens -> 3 response tokens, 8 tokens in all
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 0, 0]])
    response_mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    batch = Batch({"prompts": torch.zeros(2, 3, dtype=torch.long), "attention_mask": attention_mask, "response_mask": response_mask})
    timing = {"gen": 0.3, "reward": 1.0, "old_log_prob": 0.4, "ref": 0.8, "update_actor": 1.6, "update_weights": 0.0, "step": 5.0}
    metrics = compute_timing_metrics(batch, timing)
    assert {k: metrics[f"timing_s/{k}"] for k in timing} == timing
    per_token = {k: v for k, v in metrics.items() if k.startswith("timing_per_token_ms/")}
    assert per_token == pytest.approx({"timing_per_token_ms/gen": 100.0, "timing_per_token_ms/ref": 100.0,
                                       "timing_per_token_ms/update_actor": 200.0})
    # multi-turn: a tool's answer inside row 0's response is out of the response mask but was generated with it, so
    # gen still counts 3 tokens (verl counts the attention mask); a batch without tokens gets 0, not a division by 1
    batch["response_mask"] = torch.tensor([[1, 0, 0], [1, 0, 0]])
    assert compute_timing_metrics(batch, {"gen": 0.3})["timing_per_token_ms/gen"] == pytest.approx(100.0)
    batch["attention_mask"] = torch.zeros(2, 6, dtype=torch.long)
    assert compute_timing_metrics(batch, {"gen": 0.3, "ref": 0.8})["timing_per_token_ms/gen"] == 0.0


def test_memory_metrics_report_this_process_rss():
    before = compute_memory_metrics("cpu")
    assert set(before) == {"perf/cpu_memory_used_gb"}  # no GPU keys without CUDA
    held = torch.ones(64 * 1024 * 1024, dtype=torch.float32)  # 0.25 GiB, touched
    after = compute_memory_metrics("cpu")["perf/cpu_memory_used_gb"]
    assert after - before["perf/cpu_memory_used_gb"] == pytest.approx(0.25, abs=0.05)
    with open("/proc/self/status") as f:
        vm_rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    assert after == pytest.approx(vm_rss_kib / 1024**2, abs=0.02)
    del held


def test_peak_flops_must_be_positive(tiny_model_path):
    with pytest.raises(ConfigError, match="trainer.peak_flops"):
        load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "trainer.peak_flops=-1"])
    config, _ = load_config([f"actor_rollout_ref.model.path={tiny_model_path}", "trainer.peak_flops=989e12"])
    assert config.trainer.peak_flops == 989e12


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False])
def test_generation_progress_only_on_a_terminal(tty, tiny_model_path, tokenizer, monkeypatch):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    engine = HFEngine(model, tokenizer.pad_token_id, [tokenizer.eos_token_id])
    stderr = _Terminal() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(hf, "PROGRESS_DELAY_S", 0.0)
    outputs = engine.generate_batch([[5, 6, 7], [8, 9]], SamplingParams(max_tokens=4, temperature=1.0, ignore_eos=True))
    assert [len(o.token_ids) for o in outputs] == [4, 4]
    assert ("generate" in stderr.getvalue()) is tty


def test_a_run_logs_mfu_with_a_peak_and_prints_where_its_outputs_are(run_steps, tiny_model_path, tmp_path, capsys):
    from transformers import AutoConfig

    run_dir = tmp_path / "run"
    steps = run_steps("trainer.peak_flops=1e9", "trainer.save_freq=2", f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
                      "actor_rollout_ref.actor.ppo_epochs=2", "trainer.device=cpu", run_dir=run_dir)
    out = capsys.readouterr().out
    weights = dense_weights(AutoConfig.from_pretrained(tiny_model_path))
    for s in steps.values():
        # at least the dense FLOPs of two epochs over the batch's tokens in timing_s/update_actor (which holds the
        # update's own time, the one MFU divides by)
        assert s["perf/mfu/actor"] >= 2 * 6 * weights * s["perf/total_num_tokens"] / s["timing_s/update_actor"] / 1e9
        assert 0 <= s["timing_s/update_weights"] < s["timing_s/update_actor"]
        assert s["perf/cpu_memory_used_gb"] > 0.1
        assert "perf/max_memory_allocated_gb" not in s  # CPU run
    assert f"metrics      {run_dir / 'metrics.jsonl'}" in out
    assert f"checkpoints  {run_dir / 'global_step_2'} (latest)" in out
    assert f"rollouts     {tmp_path / 'rollouts'}" in out
    assert f"reinforge report {run_dir}" in out and str(run_dir / "report" / "report.html") in out


def test_without_a_peak_a_cpu_run_logs_no_mfu(run_steps, tmp_path, capsys):
    steps = run_steps("trainer.total_training_steps=1", "trainer.device=cpu", run_dir=tmp_path / "run")
    assert steps and all(not any(k.startswith("perf/mfu/") for k in s) for s in steps.values())
    out = capsys.readouterr().out
    assert "checkpoints  none saved (trainer.save_freq=-1)" in out
    # without trainer.rollout_data_dir the summary names the samples kept for the report, if the run kept any
    kept = tmp_path / "run" / "rollouts"
    assert (f"rollouts     {kept}" in out) == kept.is_dir()


def test_the_lr_schedule_spans_the_runs_steps_and_logs_the_next_updates_lr(run_steps):
    """As verl: the schedule's length is the run's (optim.total_training_steps is filled in by the trainer), and actor/lr
    is the learning rate after the step's scheduler step. Cosine over 2 steps, no warmup, min_lr_ratio 0, lr 1e-3:
    after step 1, 1e-3 * (1 + cos(pi / 2)) / 2 = 5e-4; after step 2, 1e-3 * (1 + cos(pi)) / 2 = 0."""
    steps = run_steps("actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
                      "actor_rollout_ref.actor.optim.total_training_steps=100")
    assert steps[1]["actor/lr"] == pytest.approx(5e-4) and steps[2]["actor/lr"] == pytest.approx(0.0, abs=1e-12)


def test_a_steps_checkpoint_counts_in_its_time_as_in_verl(run_steps):
    """verl times save_checkpoint inside the step (validation outside it), so timing_s/step and the throughput include it."""
    steps = run_steps("trainer.save_freq=1", "trainer.total_training_steps=1")
    s = steps[1]
    parts = sum(s[f"timing_s/{phase}"] for phase in ("gen", "adv", "update_actor", "save_checkpoint"))
    assert s["timing_s/save_checkpoint"] > 0 and s["timing_s/step"] >= parts
    assert s["perf/time_per_step"] == s["timing_s/step"]
    assert s["perf/throughput"] == pytest.approx(s["perf/total_num_tokens"] / s["timing_s/step"])


def test_numeric_reward_extra_info_is_averaged_numpy_values_included():
    import numpy as np

    from reinforge.trainer.metrics import extra_info_metrics

    metrics = extra_info_metrics({"score": [1.0, 0.0, 1.0], "acc": [np.True_, np.False_, True], "n": [np.int64(3), 1, None],
                                  "err": [np.float32(0.5), 0.25, 0.0], "pred": ["7", "8", "9"]})
    assert metrics == {"reward/acc/mean": 2 / 3, "reward/n/mean": 2.0, "reward/err/mean": 0.25}


def test_length_clip_ratios_are_the_shares_at_the_limits():
    from reinforge.trainer.metrics import compute_data_metrics

    prompt_mask = torch.tensor([[0, 0, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]])  # prompts of 1, 2, 3, 3 tokens (left-padded)
    response_mask = torch.tensor([[1, 1], [1, 0], [1, 1], [0, 0]])
    zeros = torch.zeros(4, 2)
    batch = Batch.from_dict({"prompts": torch.zeros(4, 3, dtype=torch.long), "attention_mask": torch.cat([prompt_mask, response_mask], 1),
                             "response_mask": response_mask, "token_level_scores": zeros, "token_level_rewards": zeros,
                             "advantages": zeros, "returns": zeros})
    metrics = compute_data_metrics(batch, max_response_length=2, max_prompt_length=3)
    assert metrics["prompt_length/clip_ratio"] == 0.5 and metrics["prompt_length/mean"] == 2.25
    assert metrics["response_length/clip_ratio"] == 0.5
    assert compute_data_metrics(batch, max_response_length=2, max_prompt_length=4)["prompt_length/clip_ratio"] == 0.0


def test_a_conversation_cut_by_the_budget_counts_as_clipped_in_all_its_tokens():
    """As verl (the attention mask): a multi-turn response whose model, tool and user tokens together reached
    rollout.response_length is clipped, though its response_mask (model tokens) holds fewer; response_length/* counts
    all of them too."""
    from reinforge.trainer.metrics import compute_data_metrics

    prompt_mask = torch.ones(2, 2, dtype=torch.long)
    attention = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])  # row 0: model, tool, tool, model tokens: the whole budget of 4
    response_mask = torch.tensor([[1, 0, 0, 1], [1, 1, 0, 0]])
    zeros = torch.zeros(2, 4)
    batch = Batch.from_dict({"prompts": torch.zeros(2, 2, dtype=torch.long), "attention_mask": torch.cat([prompt_mask, attention], 1),
                             "response_mask": response_mask, "token_level_scores": zeros, "token_level_rewards": zeros,
                             "advantages": zeros, "returns": zeros})
    metrics = compute_data_metrics(batch, max_response_length=4, max_prompt_length=2)
    assert metrics["response_length/clip_ratio"] == 0.5
    assert metrics["response_length/mean"] == 3.0 and metrics["response_length/max"] == 4.0
    assert metrics["response_length/min"] == 2.0 and metrics["response/aborted_ratio"] == 0.0


def test_aborted_responses_leave_the_scores_and_the_non_aborted_lengths():
    """verl's aborted responses (no tokens at all): counted in response_length/* and response/aborted_ratio, left out
    of critic/score/*, critic/rewards/* and response_length_non_aborted/*."""
    from reinforge.trainer.metrics import compute_data_metrics

    attention = torch.tensor([[1, 1, 1], [0, 0, 0], [1, 0, 0], [0, 0, 0]])  # responses of 3, 0, 1 and 0 tokens
    scores = torch.tensor([[0.0, 0.0, 2.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    zeros = torch.zeros(4, 3)
    batch = Batch.from_dict({"prompts": torch.zeros(4, 1, dtype=torch.long),
                             "attention_mask": torch.cat([torch.ones(4, 1, dtype=torch.long), attention], 1),
                             "response_mask": attention, "token_level_scores": scores, "token_level_rewards": scores * 2,
                             "advantages": zeros, "returns": zeros})
    metrics = compute_data_metrics(batch, max_response_length=3, max_prompt_length=1)
    assert metrics["response/aborted_ratio"] == 0.5
    assert metrics["response_length/mean"] == 1.0 and metrics["response_length/min"] == 0.0
    assert metrics["response_length/clip_ratio"] == 0.25
    assert metrics["response_length_non_aborted/mean"] == 2.0 and metrics["response_length_non_aborted/min"] == 1.0
    assert metrics["response_length_non_aborted/clip_ratio"] == 0.5
    assert (metrics["critic/score/mean"], metrics["critic/score/min"], metrics["critic/score/max"]) == (1.5, 1.0, 2.0)
    assert (metrics["critic/rewards/mean"], metrics["critic/rewards/min"]) == (3.0, 2.0)


def test_a_step_whose_responses_are_all_aborted_gives_nan_scores_and_says_so(capsys):
    import math

    from reinforge.trainer.metrics import compute_data_metrics

    zeros = torch.zeros(2, 2)
    batch = Batch.from_dict({"prompts": torch.zeros(2, 1, dtype=torch.long),
                             "attention_mask": torch.tensor([[1, 0, 0], [1, 0, 0]]), "response_mask": zeros.long(),
                             "token_level_scores": zeros, "token_level_rewards": zeros, "advantages": zeros, "returns": zeros,
                             "values": zeros})
    metrics = compute_data_metrics(batch, max_response_length=2, max_prompt_length=1)
    assert metrics["response/aborted_ratio"] == 1.0 and metrics["response_length/mean"] == 0.0
    assert all(math.isnan(metrics[k]) for k in ("critic/score/mean", "critic/rewards/max", "response_length_non_aborted/mean"))
    # no token to average: the keys are still there, nan, as verl logs them (dashboards keep their series)
    assert all(math.isnan(metrics[k]) for k in ("critic/advantages/mean", "critic/returns/min", "critic/values/max",
                                                 "critic/vf_explained_var"))
    assert "all 2 responses of this step are empty (aborted)" in capsys.readouterr().err


def test_agent_metrics_of_a_batch_that_mixes_loops_are_over_the_rows_that_report_them():
    from reinforge.trainer.metrics import agent_metrics

    batch = Batch.from_dict({"attention_mask": torch.ones(3, 1)})
    batch["__num_turns__"] = [4, 3, 2]
    batch["agent_metrics"] = [{"generate_s": 1.0, "tool_calls": 2, "tool_errors": 1, "tool_s": 0.5},  # tool_agent
                              {"generate_s": 3.0, "user_turns": 1},  # env_agent
                              {"generate_s": 2.0, "tool_calls": 0, "tool_errors": 0, "tool_s": 0.0, "interaction_errors": 1}]
    metrics = agent_metrics(batch)
    assert (metrics["tool_call_counts/mean"], metrics["tool_call_counts/max"], metrics["tool_errors/mean"]) == (1.0, 2.0, 0.5)
    assert metrics["interaction_errors/mean"] == 1.0
    assert metrics["timing_s/agent_loop/tool_calls/mean"] == 0.25 and metrics["timing_s/agent_loop/generate_sequences/mean"] == 2.0


def test_variance_proxies_against_hand_arithmetic():
    """Row 0: two tokens, pi = 0.5 and 0.25 with sum pi^2 = 0.5 and 0.25, so W = (1 - 1 + 0.5) + (1 - 0.5 + 0.25) = 1.25,
    a = 2; row 1: three tokens with pi = sum pi^2 = 1, so W = 0, a = -1; row 2 has no token: a = W = 0, and it counts
    in the means and in N = 3, as in verl."""
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    batch = Batch({"response_mask": mask, "old_log_probs": torch.tensor([[0.5, 0.25, 0.9], [1.0, 1.0, 1.0], [0.3, 0.3, 0.3]]).log(),
                   "sum_pi_squared": torch.tensor([[0.5, 0.25, 0.9], [1.0, 1.0, 1.0], [0.3, 0.3, 0.3]]),
                   "advantages": torch.tensor([[2.0, 2.0, 7.0], [-1.0, -1.0, -1.0], [5.0, 5.0, 5.0]])})
    got = variance_proxy_metrics(batch, grad_norm=1.0)
    assert got == pytest.approx({
        "variance_proxy/proxy1_signal_strength": 1.0,
        "variance_proxy/proxy2_total_power": (4 * 1.25 + 1 * 0 + 0) / 3,
        "variance_proxy/proxy3_pure_noise": (5 / 3 - 1.0) / (3 - 1),
        "variance_proxy/expected_a_squared": (4 + 1 + 0) / 3,
        "variance_proxy/expected_w": (1.25 + 0 + 0) / 3,
    }, rel=1e-6)
    # rollout importance weights rho: W's terms times rho^2 (row 0: 0.5 * 4 + 0.75 * 1 = 2.75), and the total power
    # weighs each row's unweighted W by its token-mean rho squared (row 0: ((2 + 1) / 2)^2 = 2.25); no grad norm
    batch["rollout_is_weights"] = torch.tensor([[2.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    assert variance_proxy_metrics(batch, grad_norm=None) == pytest.approx({
        "variance_proxy/proxy1_signal_strength": 0.0,
        "variance_proxy/proxy2_total_power": (2.25 * 4 * 1.25 + 1 * 1 * 0 + 0) / 3,
        "variance_proxy/proxy3_pure_noise": 0.0,
        "variance_proxy/expected_a_squared": 5 / 3,
        "variance_proxy/expected_w": (2.75 + 0 + 0) / 3,
    }, rel=1e-6)
    # nothing without the actor's sum of squared probabilities
    batch.pop(["sum_pi_squared"])
    assert variance_proxy_metrics(batch, grad_norm=1.0) == {}


def test_global_seqlen_metrics_are_verls_per_rank_token_counts():
    from reinforge.trainer.metrics import seqlen_balance_metrics

    lengths = torch.tensor([9, 8, 1, 2])  # consecutive halves: 17 and 3 tokens; balanced: the longest of each block of 2
    metrics = seqlen_balance_metrics(lengths, 2)  # rows 0,1 -> ranks by length, then rows 2,3 to the lighter rank first
    assert (metrics["global_seqlen/min"], metrics["global_seqlen/max"], metrics["global_seqlen/minmax_diff"]) == (3, 17, 14)
    assert (metrics["global_seqlen/balanced_min"], metrics["global_seqlen/balanced_max"]) == (10, 10)  # 9+1 and 8+2
    assert metrics["global_seqlen/mean"] == 10.0
    assert seqlen_balance_metrics(lengths, 1)["global_seqlen/balanced_max"] == 20  # one rank: everything
