"""The RL loop: generate, score, advantages, update; validate, log, checkpoint.

`RLTrainer.train_step` is the whole algorithm of one step and reads top to bottom:

    prompts -> rollout (repeat n, generate, score; INFERENCE + reward) -> [old log-probs] ->
    [train/inference mismatch and rollout correction] -> [reference log-probs] -> [teacher log-probs] -> [values] ->
    [KL in reward] -> advantages (ALGORITHM) -> [update critic] -> update actor (TRAINING)

Everything it calls is behind a small interface: worker groups for the model work, a reward
manager for scores, registry functions for advantages and losses. What runs follows from the
config and from what the estimator's signature asks for (values: a critic; reward_baselines: a
greedy baseline rollout, as ReMax does), never from an algorithm's name. `_rollout` also holds
DAPO's dynamic sampling: with `algorithm.filter_groups.enable` it keeps drawing batches of
prompts until enough groups have a reward that varies.

With `reward_model.launch_reward_fn_async` the reward manager scores in a background thread,
started right after generation and joined just before advantages, so scoring overlaps the
old-log-prob, reference and value passes. `timing_s/reward` is then the scorer's own time and
`timing_s/reward_wait` the time the step still waited for it; the scores and every other metric
are the same as when scoring synchronously. Dynamic sampling needs each batch's scores before it
can decide what to keep, so with `algorithm.filter_groups.enable` scoring stays synchronous (the
ReMax greedy baseline is always scored synchronously, during generation).

`fit` wraps the step with the bookkeeping of verl's `RayPPOTrainer.fit`: validation before
training and every `test_freq` steps, checkpoints every `save_freq` steps, and the last step
always validated and saved when those are on.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch

from reinforge.algorithm import (
    apply_kl_penalty,
    batch_entropy,
    compute_advantage,
    keep_groups,
    kl_penalty,
    make_kl_controller,
    needs_critic,
    needs_old_log_probs,
    needs_reward_baselines,
    pf_ppo_resample,
)
from reinforge.algorithm.filter import SUMMED_REWARD
from reinforge.algorithm.rollout_correction import (
    compute_rollout_correction,
    correction_active,
    mismatch_metrics,
    rollout_probs_diff_metrics,
)
from reinforge.batch import Batch
from reinforge.config import batch_arithmetic, wants_sum_pi_squared
from reinforge.config.schema import Config
from reinforge.distributed import WorkerGroup
from reinforge.errors import ConfigError
from reinforge.inference.rollout import AGENT_INPUT_KEYS, PROMPT_KEYS, SEED_KEY, concat_trajectories, rollout_inputs
from reinforge.inference.seeds import BASELINE, RESAMPLE, TRAIN, derive_seed, row_seeds
from reinforge.report.rollouts import keep_recent_rollouts
from reinforge.trainer.checkpoint import (
    check_resume_folder,
    due,
    loads_of,
    read_step_record,
    resume_folder,
    save_checkpoint,
    save_step_record,
    save_torch,
    step_of,
)
from reinforge.trainer.generations import EXTRA, generation_records, reward_extra_info, write_generations
from reinforge.trainer.metrics import (
    compute_data_metrics,
    compute_throughput_metrics,
    compute_timing_metrics,
    extra_info_metrics,
    seqlen_balance_metrics,
    timer,
    variance_proxy_metrics,
)
from reinforge.trainer.rollout_cache import RolloutCache, skip_settings
from reinforge.trainer.stop import (
    RunStopped,
    StopSignals,
    count_nonfinite_step,
    latest_checkpoint,
    stop_if_every_reward_failed,
    stop_if_nonfinite,
)
from reinforge.trainer.tracking import Tracking, logged_step
from reinforge.trainer.validation import trainer_state, validate


class DataExhausted(Exception):
    """The prompt stream ended (trainer.total_epochs served) before a step could be made; the message says how far
    the step had come."""


class RLTrainer:
    def __init__(self, config: Config, actor_rollout_wg: WorkerGroup, reward_fn, train_loader, val_loader, tokenizer,
                 total_training_steps: int, critic_wg: WorkerGroup | None = None, resume: tuple[Path, dict, dict] | None = None):
        self.config = config
        self.actor_rollout_wg, self.critic_wg = actor_rollout_wg, critic_wg
        self.reward_fn = reward_fn  # one manager for training and validation
        self.train_loader, self.val_loader = train_loader, val_loader
        self.tokenizer, self.total_training_steps = tokenizer, total_training_steps
        self.run_dir = Path(config.trainer.default_local_dir)
        self.kl_ctrl = make_kl_controller(config.algorithm.kl_ctrl)
        self.global_steps = 0
        self.resume = resume  # (step folder, loader state, trainer state) checked by trainer/main.py; None: _load_checkpoint finds it
        self._saved_step: int | None = None  # the step this process last checkpointed
        self.nonfinite_steps = 0  # training steps in a row whose every optimizer step was skipped (NaN/inf)
        self.val_history: list[tuple[int, dict[str, float]]] = []  # (step, validation metrics)
        actor = config.actor_rollout_ref.actor
        # reference log-probs for a sampled-token KL; the exact (full) KL loss runs the reference inside the update
        self.use_reference = (actor.use_kl_loss and actor.kl_loss_type != "full") or config.algorithm.use_kl_in_reward
        on_policy = batch_arithmetic(config)["on_policy_single_update"]
        self.correction = config.algorithm.rollout_correction
        # decoupled correction weighs pi_old against pi_rollout before the update; bypass mode uses pi_rollout as pi_old
        needs_old = (not on_policy or config.algorithm.use_kl_in_reward or correction_active(self.correction)
                     or needs_old_log_probs(config.algorithm.adv_estimator) or wants_sum_pi_squared(config))
        self.recompute_old_log_probs = needs_old and not self.correction.bypass_mode
        self.greedy_baseline = needs_reward_baselines(config.algorithm.adv_estimator)
        self.pf_ppo = config.algorithm.use_pf_ppo and needs_critic(config.algorithm.adv_estimator)  # verl: after GAE only
        self.prompt_stream = self._prompt_batches()
        self.rollout_cache = RolloutCache(config) if skip_settings(config)[0] else None  # verl's rollout skip
        score_async = config.reward_model.launch_reward_fn_async and not config.algorithm.filter_groups.enable
        self.reward_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reinforge-reward") if score_async else None

    # ---- one step -----------------------------------------------------------------------------
    def train_step(self, prompts: Batch) -> dict[str, float]:
        cfg, wg, algo = self.config, self.actor_rollout_wg, self.config.algorithm
        metrics: dict[str, float] = {}
        timing: dict[str, float] = {}
        with timer("step", timing):
            batch, pending_scores = self._rollout(prompts, metrics, timing)
            if cfg.trainer.balance_batch:  # of the batch as generated, before a PF-PPO redraw, as verl logs them
                metrics.update(seqlen_balance_metrics(batch["attention_mask"].sum(-1), wg.world_size))
            if self.recompute_old_log_probs:
                with timer("old_log_prob", timing):
                    batch = batch.union(wg.compute_log_prob(batch))  # old_log_probs, entropys (and sum_pi_squared)
                actor = cfg.actor_rollout_ref.actor  # verl's actor/entropy: of this pass, before the update
                metrics["actor/entropy"] = batch_entropy(batch.pop(["entropys"])["entropys"], batch["response_mask"],
                                                         actor.loss_agg_mode, actor.loss_scale_factor)
            # verl applies the KL penalty in the reward before the rollout correction: rejected tokens keep it in the
            # scores the outcome estimators sum (the correction replaces response_mask, it does not change it in place)
            kl_mask = batch["response_mask"]
            self._rollout_mismatch(batch, metrics, timing)
            if self.use_reference:
                with timer("ref", timing):
                    batch = batch.union(wg.compute_ref_log_prob(batch))
            if cfg.distillation.enabled:  # the teachers' log-probs on these rollouts (training/distill.py)
                with timer("teacher", timing):
                    batch = batch.union(wg.compute_teacher_log_prob(batch))
            if self.critic_wg is not None:
                with timer("values", timing):
                    batch["values"] = self.critic_wg.compute_values(batch)["values"]
            if pending_scores is not None:  # reward_model.launch_reward_fn_async: scored beside the passes above
                with timer("reward_wait", timing):
                    timed_scores = pending_scores.result()
                self._add_scores(batch, timed_scores, metrics, timing)
            extra = reward_extra_info(batch)  # what the reward function returned besides the score
            with timer("adv", timing):
                batch["token_level_rewards"] = batch["token_level_scores"]
                if algo.use_kl_in_reward:
                    kld = batch.get("full_kl")
                    if kld is None:
                        kld = kl_penalty(batch["old_log_probs"], batch["ref_log_prob"], algo.kl_penalty)
                    batch["token_level_rewards"], kl_metrics = apply_kl_penalty(  # before rejection, as verl's order
                        batch["token_level_scores"], kld, kl_mask, self.kl_ctrl)
                    metrics.update(kl_metrics)
                batch["advantages"], batch["returns"] = compute_advantage(
                    algo.adv_estimator, token_level_rewards=batch["token_level_rewards"],
                    response_mask=batch["response_mask"].float(), index=batch["uid"], values=batch.get("values"),
                    reward_baselines=batch.get("reward_baselines"), norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
                    gamma=algo.gamma, lam=algo.lam, epsilon=1e-6, config=algo,  # epsilon: every estimator's default, as in verl
                    old_log_probs=batch.get("old_log_probs"), sum_pi_squared=batch.get("sum_pi_squared"),
                    rollout_is_weights=batch.get("rollout_is_weights"), reward_components=extra)
                if self.pf_ppo:  # PF-PPO: redraw the trajectories by score, after the critic's advantages (verl's order)
                    draw = torch.Generator().manual_seed(derive_seed(cfg.trainer.seed, RESAMPLE, self.global_steps))
                    batch = batch.index(pf_ppo_resample(batch["token_level_scores"].sum(-1), algo.pf_ppo.reweight_method,
                                                        algo.pf_ppo.weight_pow, draw))
            if self.critic_wg is not None:
                with timer("update_critic", timing):
                    metrics.update(self.critic_wg.update_critic(batch).meta_info["metrics"])
            if self.critic_wg is None or self.global_steps > cfg.trainer.critic_warmup:  # the first critic_warmup steps train only the critic
                with timer("update_actor", timing):
                    metrics.update(wg.update_actor(batch).meta_info["metrics"])
                with timer("update_weights", timing):  # hf shares them; vllm/sglang get them when the next rollout wakes the engine
                    wg.update_weights()
        metrics.update(compute_data_metrics(batch, cfg.actor_rollout_ref.rollout.response_length, cfg.data.max_prompt_length))
        metrics.update(extra_info_metrics(extra, algo.gdpo_reward_keys if algo.adv_estimator == "gdpo" else None))
        metrics.update(compute_timing_metrics(batch, timing))
        metrics.update(compute_throughput_metrics(batch, timing["step"], wg.world_size))
        metrics.update(variance_proxy_metrics(batch, metrics.get("actor/grad_norm")))
        scores = batch["token_level_scores"].sum(-1).tolist()
        if cfg.trainer.rollout_data_dir:
            write_generations(cfg.trainer.rollout_data_dir, self.global_steps,
                              generation_records(batch, scores, self.tokenizer, self.global_steps))
        else:  # for `reinforge report`: the best and worst responses of the latest steps, in <run_dir>/rollouts/
            keep_recent_rollouts(self.run_dir, batch, scores, self.tokenizer, self.global_steps)
        self.train_loader.on_batch_end(batch)  # a curriculum sampler and a data generator learn from the scored batch
        return metrics

    def _rollout(self, prompts: Batch, metrics: dict, timing: dict) -> tuple[Batch, Future | None]:
        """n scored responses per prompt; with filter_groups, only groups whose metric varies, drawing more prompts as needed.
        With asynchronous scoring the batch comes back unscored, with the Future of its (scores, seconds)."""
        batch = self._generate(prompts, 0, timing)
        groups = self.config.algorithm.filter_groups
        if not groups.enable:
            if self.reward_thread is not None:
                return batch, self.reward_thread.submit(self._timed_reward, batch.select())  # a copy: this thread adds fields
            self._add_scores(batch, self._timed_reward(batch), metrics, timing)
            return batch, None
        self._add_scores(batch, self._timed_reward(batch), metrics, timing)
        n, wanted = self.config.actor_rollout_ref.rollout.n, self.config.data.train_batch_size
        kept: list[Batch] = []
        generated = dropped = kept_groups = 0
        for gen_batches in itertools.count(1):
            values = batch["token_level_scores"].sum(-1).tolist() if groups.metric in SUMMED_REWARD else batch.get(EXTRA + groups.metric)
            if values is None:
                raise ConfigError(f"algorithm.filter_groups.metric={groups.metric!r}: the reward function returns no such key; "
                                  f"use seq_reward or one of {sorted(reward_extra_info(batch))}")
            keep = keep_groups(batch["uid"], values, groups.filter_type, groups.tolerance, groups.lower_bound, groups.upper_bound)
            generated += len(batch) // n
            dropped += int((~keep).sum()) // n
            kept_groups += int(keep.sum()) // n
            kept.append(batch.index(keep))
            if kept_groups >= wanted:
                break
            if 0 < groups.max_num_gen_batches <= gen_batches:
                passing = (f"a varying {groups.metric}" if groups.filter_type == "same_value" else
                           f"a mean {groups.metric} within [{groups.lower_bound}, {groups.upper_bound}] (band_pass)")
                raise ConfigError(f"step {self.global_steps}: after {gen_batches} generation batches only {kept_groups} of "
                                  f"{wanted} prompt groups had {passing} (algorithm.filter_groups); the prompts may be too "
                                  "easy or too hard for the model. Raise algorithm.filter_groups.max_num_gen_batches (0: no "
                                  "limit) or data.gen_batch_size")
            prompts = next(self.prompt_stream, None)
            if prompts is None:
                raise DataExhausted(f"algorithm.filter_groups had kept {kept_groups} of {wanted} prompt groups from "
                                    f"{gen_batches} generation batches when")
            batch = self._generate(prompts, gen_batches, timing)
            self._add_scores(batch, self._timed_reward(batch), metrics, timing)
        metrics.update({"train/num_gen_batches": gen_batches, "train/num_generated_groups": generated,
                        "train/num_dropped_groups": dropped})
        columns = {key for part in kept for key in part.keys() if key.startswith(EXTRA)}  # a batch may lack a reward key
        for part in kept:
            for key in columns - set(part.keys()):
                part[key] = [None] * len(part)
        return concat_trajectories(kept, self.tokenizer.pad_token_id).index(slice(0, wanted * n)), None

    def _generate(self, prompts: Batch, gen_batch: int, timing: dict) -> Batch:
        """Repeat each prompt n times and generate (and, for ReMax, score a greedy response per prompt). Each row's sampling
        seed follows from (trainer.seed, step, generation round, row), so a row samples the same tokens however the rows
        are split over ranks, and a resumed run samples what the straight run did; a generative judge's seeds follow."""
        wg, n = self.actor_rollout_wg, self.config.actor_rollout_ref.rollout.n
        prompts.meta_info["trainer_state"] = state = trainer_state(self, self.global_steps - 1)  # TRL reward functions read it
        prompts["uid"] = [f"{self.global_steps}-{gen_batch}-{row}" for row in range(len(prompts))]  # one group per prompt
        batch = prompts.repeat(n, interleave=True)
        batch[SEED_KEY] = row_seeds(len(batch), self.config.trainer.seed, TRAIN, self.global_steps, gen_batch)

        def generate() -> Batch:
            return batch.union(wg.generate_sequences(rollout_inputs(batch)))

        with timer("gen", timing):
            if self.rollout_cache is None:
                batch = generate()
            else:  # a generation read back brings its own prompts
                prompts, batch = self.rollout_cache.generation(self.global_steps, gen_batch, prompts, generate)
                batch.meta_info["trainer_state"] = state  # a generation read back has its own step's
        if self.greedy_baseline:  # ReMax: the score of a greedy response to each prompt
            with timer("gen_max", timing):
                greedy = prompts.select([*PROMPT_KEYS, *AGENT_INPUT_KEYS])  # agent loops read the row's messages and extra_info
                greedy.meta_info["do_sample"] = False
                baseline = prompts.select([k for k in prompts.keys() if k not in PROMPT_KEYS]).union(wg.generate_sequences(greedy))
                baseline[SEED_KEY] = row_seeds(len(baseline), self.config.trainer.seed, BASELINE, self.global_steps, gen_batch)
                batch["reward_baselines"] = self.reward_fn(baseline).sum(-1).repeat_interleave(n)
        return batch

    def _rollout_mismatch(self, batch: Batch, metrics: dict, timing: dict) -> None:
        """Compare the actor's old log-probs with the engine's (training/rollout_probs_diff_*, rollout_corr/*) and apply
        algorithm.rollout_correction: IS weights and rejection (decoupled), or the engine's log-probs as old (bypass).
        On-policy without a correction there is no old-log-prob pass: the actor measures the same in its update."""
        if "rollout_log_probs" not in batch:
            return
        corr = self.correction
        if corr.bypass_mode:
            if corr.debug_rollout_actor_probs:  # an extra pass, only to see the mismatch
                with timer("old_log_prob", timing):
                    actor_log_probs = self.actor_rollout_wg.compute_log_prob(batch)["old_log_probs"]
                metrics.update(rollout_probs_diff_metrics(actor_log_probs, batch["rollout_log_probs"], batch["response_mask"]))
            batch["old_log_probs"] = batch["rollout_log_probs"]
            return
        if "old_log_probs" not in batch:
            return
        if not correction_active(corr):
            metrics.update(mismatch_metrics(batch["old_log_probs"], batch["rollout_log_probs"], batch["response_mask"]))
            return
        # the correction's metrics include the off-policy ones mismatch_metrics would add: only the probs diff is missing
        metrics.update(rollout_probs_diff_metrics(batch["old_log_probs"], batch["rollout_log_probs"], batch["response_mask"]))
        weights, batch["response_mask"], corr_metrics = compute_rollout_correction(
            batch["old_log_probs"], batch["rollout_log_probs"], batch["response_mask"], corr)
        if weights is not None:
            batch["rollout_is_weights"] = weights
        metrics.update(corr_metrics)

    def _timed_reward(self, batch: Batch) -> tuple[dict, float]:
        """The reward manager's result for `batch` and the seconds it took."""
        start = time.perf_counter()
        scored = self.reward_fn(batch, return_dict=True)
        return scored, time.perf_counter() - start

    def _add_scores(self, batch: Batch, timed_scores: tuple[dict, float], metrics: dict, timing: dict) -> None:
        """`token_level_scores` and the reward's extra values per row into `batch`; its counts and time into the step's."""
        scored, seconds = timed_scores
        timing["reward"] = timing.get("reward", 0.0) + seconds
        stop_if_every_reward_failed(self.global_steps, len(batch), scored.get("reward_metrics", {}), self.reward_fn)
        batch["token_level_scores"] = scored["reward_tensor"]
        for key, value in scored.get("reward_metrics", {}).items():  # counts: summed over generation batches
            metrics[key] = metrics.get(key, 0) + value
        for key, values in scored.get("reward_extra_info", {}).items():  # score too: filter_groups.metric=score reads it
            batch[EXTRA + key] = values

    # ---- the loop -----------------------------------------------------------------------------
    def _prompt_batches(self) -> Iterator[Batch]:
        """Batches of prompts from the loader, epoch after epoch, until trainer.total_epochs are served (which
        algorithm.filter_groups can reach before total_training_steps: a step may draw several batches)."""
        while self.train_loader.epoch < self.config.trainer.total_epochs:
            for prompts in self.train_loader:
                yield Batch.from_dict(prompts)

    def fit(self) -> dict[str, float]:
        """Train to the last step; returns the last validation metrics (empty if none ran).

        Raises RunStopped on SIGINT/SIGTERM, after saving the last finished step (reinforge/trainer/stop.py).
        """
        with StopSignals(saving=self.config.trainer.save_on_stop) as stop:
            try:
                return self._fit(stop)
            except KeyboardInterrupt:
                if stop.requested is None:
                    raise
                raise RunStopped(signal.SIGINT, self.global_steps, latest_checkpoint(self.run_dir), True, self._resume_hint()) from None

    def _fit(self, stop: StopSignals) -> dict[str, float]:
        cfg = self.config.trainer
        unlogged = self._load_checkpoint()
        finished = self.global_steps >= self.total_training_steps
        if finished and not cfg.val_only and unlogged is None:
            print(f"reinforge: this run already finished step {self.global_steps} of {self.total_training_steps}; "
                  "nothing to do (raise trainer.total_training_steps or trainer.total_epochs to train on)", flush=True)
            return {}
        tracking = Tracking(self.run_dir, cfg.logger, self.total_training_steps, self.global_steps, config=self.config)
        val_metrics: dict[str, float] = {}
        try:
            if unlogged is not None:  # the run stopped after saving this step, before logging it: its validation, then the record
                print(f"reinforge: step {self.global_steps} was saved but not logged; logging it now", flush=True)
                val_metrics = self._save_and_validate(unlogged, tracking, False, finished or due(self.global_steps, cfg.test_freq))
                tracking.log(unlogged, self.global_steps)
                if finished and not cfg.val_only:
                    return val_metrics
            # val_only validates once and exits whatever val_before_train says (verl would train a whole run with
            # val_before_train=False); config checks refuse val_only without validation data
            if self.val_loader is not None and (cfg.val_only or (cfg.val_before_train and self.global_steps == 0)):
                val_metrics = self._validate(tracking)
                tracking.log(val_metrics, self.global_steps)
                if cfg.val_only:
                    return val_metrics
            first_step = self.global_steps
            while self.global_steps < self.total_training_steps:
                if stop.requested is not None:
                    self._stop_run(stop.requested, first_step)
                prompts = next(self.prompt_stream, None)
                self.global_steps += 1
                last = self.global_steps >= self.total_training_steps
                try:
                    if prompts is None:
                        raise DataExhausted("")
                    metrics = self.train_step(prompts)
                except DataExhausted as end:  # as verl's loop over total_epochs: the run ends after the last whole step
                    self.global_steps -= 1
                    val_metrics = self._end_of_data(str(end), first_step, tracking) or val_metrics
                    break
                self.nonfinite_steps = count_nonfinite_step(self.nonfinite_steps, metrics)
                metrics["training/global_step"] = self.global_steps
                metrics["training/epoch"] = self.train_loader.epoch
                val_metrics = self._save_and_validate(metrics, tracking, last or due(self.global_steps, cfg.save_freq),
                                                      last or due(self.global_steps, cfg.test_freq)) or val_metrics
                tracking.log(metrics, self.global_steps)
                stop_if_nonfinite(self.nonfinite_steps, self.global_steps, cfg.max_nonfinite_steps)
        finally:
            tracking.close()
            if self.reward_thread is not None:
                self.reward_thread.shutdown(cancel_futures=True)
        return val_metrics

    def _end_of_data(self, during_step: str, first_step: int, tracking: Tracking) -> dict[str, float]:
        """Say that the data ran out and, unless done at the last step, checkpoint and validate it; returns the
        validation metrics (empty if none ran)."""
        cfg, step = self.config.trainer, self.global_steps
        during = f" during step {step + 1}: {during_step}" if during_step else ":"
        print(f"reinforge: the training data ran out{during} the {cfg.total_epochs} epochs (trainer.total_epochs) of "
              f"data.train_files were used up; training ends after step {step}, as verl's does (raise trainer.total_epochs "
              "to train on)", flush=True)
        if step == first_step:
            return {}
        metrics: dict[str, float] = {}
        val_metrics = self._save_and_validate(metrics, tracking, self._saved_step != step, not due(step, cfg.test_freq))
        if metrics:
            tracking.log(metrics, step)
        return val_metrics

    def _save_and_validate(self, metrics: dict, tracking: Tracking, save: bool, validate: bool) -> dict[str, float]:
        """Checkpoint the current step (when `save` and save_freq > 0), then validate it (when `validate`, test_freq > 0 and
        there are validation data), as verl orders them; adds to `metrics` and returns the validation metrics."""
        cfg, val_metrics = self.config.trainer, {}
        if cfg.save_freq > 0 and save:
            with timer("save_checkpoint", timing := {}):
                saved = self._save_checkpoint(metrics)
            metrics["timing_s/save_checkpoint"] = seconds = timing["save_checkpoint"]
            if "timing_s/step" in metrics:  # verl times the save within the step (validation outside it)
                step_s = metrics["timing_s/step"]
                metrics["timing_s/step"] = metrics["perf/time_per_step"] = step_s + seconds
                metrics["perf/throughput"] *= step_s / (step_s + seconds)
            metrics["checkpoint/save_failed"] = 0 if saved else 1  # 1: skipped, the disk was full
            if saved:
                save_step_record(self.run_dir / f"global_step_{self.global_steps}", metrics)
        if self.val_loader is not None and cfg.test_freq > 0 and validate:
            val_metrics = self._validate(tracking)
            metrics.update(val_metrics)
        return val_metrics

    def _stop_run(self, signum: int, first_step: int) -> None:
        """Save the last finished step (unless saved, or trainer.save_on_stop=false) and raise RunStopped."""
        if self.config.trainer.save_on_stop and self.global_steps > first_step and self._saved_step != self.global_steps:
            self._save_checkpoint()
        raise RunStopped(signum, self.global_steps, latest_checkpoint(self.run_dir), False, self._resume_hint())

    def _resume_hint(self) -> str:
        if self.config.trainer.resume_mode == "auto":
            return "Run the same command again to continue from it (trainer.resume_mode=auto, the default)."
        return "Run the same command with trainer.resume_mode=auto to continue from it."

    def _validate(self, tracking: Tracking | None = None) -> dict[str, float]:
        """Validation metrics (with timing_s/testing), remembered in val_history."""
        with timer("testing", timing := {}):
            metrics = validate(self.config, self.actor_rollout_wg, self.reward_fn, self.val_loader, self.tokenizer, self.global_steps,
                               tracking, trainer_state(self, self.global_steps))
        self.val_history.append((self.global_steps, metrics))
        return {**metrics, "timing_s/testing": timing["testing"]}

    # ---- checkpoints --------------------------------------------------------------------------
    def _save_checkpoint(self, metrics: dict | None = None) -> bool:
        """Checkpoint the current step with its `metrics` so far; False when the disk was full and it was skipped (warned)."""
        def write(folder: Path) -> None:
            self.actor_rollout_wg.save_checkpoint(str(folder / "actor"))
            if self.critic_wg is not None:
                self.critic_wg.save_checkpoint(str(folder / "critic"))
            save_torch(self.train_loader.state_dict(), folder / "data.pt")
            state = {"global_steps": self.global_steps, "kl_ctrl": self.kl_ctrl.state_dict(),
                     "nonfinite_steps": self.nonfinite_steps}
            (folder / "trainer_state.json").write_text(json.dumps(state))
            if metrics is not None:  # as the step ends, so far (a kill may come before the save's timing joins them)
                save_step_record(folder, {**metrics, "checkpoint/save_failed": 0})

        trainer = self.config.trainer
        folder = save_checkpoint(self.run_dir, self.global_steps, write, keep=trainer.max_actor_ckpt_to_keep,
                                 keep_critic=trainer.max_critic_ckpt_to_keep)
        if folder is not None:
            self._saved_step = self.global_steps
        return folder is not None

    def _load_checkpoint(self) -> dict | None:
        """Resume from the configured checkpoint, if any; returns its step's saved metrics when metrics.jsonl lacks them."""
        if self.resume is None:
            folder = resume_folder(self.config.trainer)
            if folder is None:
                return None
            self.resume = (folder, *check_resume_folder(folder, self.critic_wg is not None, loads_of(self.config)))
        folder, loader_state, state = self.resume
        notes = self.actor_rollout_wg.load_checkpoint(str(folder / "actor"))  # settings the command line changed
        if self.critic_wg is not None:
            notes += self.critic_wg.load_checkpoint(str(folder / "critic"))
        for note in notes:
            print(f"reinforge: note: {note}", flush=True)
        self.train_loader.load_state_dict(loader_state)
        self.global_steps = state["global_steps"]
        self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        self.nonfinite_steps = state.get("nonfinite_steps", 0)  # absent in checkpoints written before the key existed
        print(f"resumed from {folder} (step {step_of(folder)}); continuing at step {self.global_steps + 1}", flush=True)
        own = folder.resolve().parent == self.run_dir.resolve()  # (another run's step was logged in its own folder)
        return read_step_record(folder) if own and not logged_step(self.run_dir, self.global_steps) else None
