"""The RL loop: generate, score, advantages, update; validate, log, checkpoint.

`RLTrainer.train_step` is the whole algorithm of one step and reads top to bottom:

    prompts -> repeat n -> generate (INFERENCE) -> score (reward) -> [old log-probs] ->
    [reference log-probs] -> [KL in reward] -> advantages (ALGORITHM) -> update actor (TRAINING)

Everything it calls is behind a small interface: a worker group for the model work, a reward
manager for scores, a registry function for advantages. `fit` wraps it with the step/epoch
bookkeeping of verl's `RayPPOTrainer.fit`: validation before training and every `test_freq`
steps, checkpoints every `save_freq` steps, and the last step always validated and saved when
those are on.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from reinforge.algorithm import apply_kl_penalty, compute_advantage, make_kl_controller
from reinforge.batch import Batch
from reinforge.config import batch_arithmetic
from reinforge.config.schema import Config
from reinforge.distributed import WorkerGroup
from reinforge.inference.rollout import PROMPT_KEYS
from reinforge.trainer.checkpoint import resume_folder, save_checkpoint, step_of
from reinforge.trainer.generations import generation_records, write_generations
from reinforge.trainer.metrics import (
    compute_data_metrics,
    compute_throughput_metrics,
    compute_timing_metrics,
    extra_info_metrics,
    timer,
)
from reinforge.trainer.tracking import Tracking
from reinforge.trainer.validation import validate


class RLTrainer:
    def __init__(self, config: Config, actor_rollout_wg: WorkerGroup, reward_fn,
                 train_loader, val_loader, tokenizer, total_training_steps: int):
        self.config = config
        self.actor_rollout_wg = actor_rollout_wg
        self.reward_fn = reward_fn  # one manager for training and validation
        self.train_loader, self.val_loader = train_loader, val_loader
        self.tokenizer = tokenizer
        self.total_training_steps = total_training_steps
        self.run_dir = Path(config.trainer.default_local_dir)
        self.kl_ctrl = make_kl_controller(config.algorithm.kl_ctrl)
        self.global_steps = 0
        self.val_history: list[tuple[int, dict[str, float]]] = []  # (step, validation metrics)
        self.use_reference = config.actor_rollout_ref.actor.use_kl_loss or config.algorithm.use_kl_in_reward
        on_policy = batch_arithmetic(config)["on_policy_single_update"]
        self.recompute_old_log_probs = not on_policy or config.algorithm.use_kl_in_reward

    # ---- one step -----------------------------------------------------------------------------
    def train_step(self, prompts: Batch) -> dict[str, float]:
        cfg, wg = self.config, self.actor_rollout_wg
        metrics: dict[str, float] = {}
        timing: dict[str, float] = {}
        with timer("step", timing):
            prompts["uid"] = [f"{self.global_steps}-{row}" for row in range(len(prompts))]  # one group per prompt
            batch = prompts.repeat(cfg.actor_rollout_ref.rollout.n, interleave=True)
            with timer("gen", timing):
                batch = batch.union(wg.generate_sequences(batch.pop(PROMPT_KEYS)))
            with timer("reward", timing):
                scored = self.reward_fn(batch, return_dict=True)
                batch["token_level_scores"] = scored["reward_tensor"]
                metrics.update(scored.get("reward_metrics", {}))
                metrics.update(extra_info_metrics(scored.get("reward_extra_info", {})))
            if self.recompute_old_log_probs:
                with timer("old_log_prob", timing):
                    batch["old_log_probs"] = wg.compute_log_prob(batch)["old_log_probs"]
            if self.use_reference:
                with timer("ref", timing):
                    batch["ref_log_prob"] = wg.compute_ref_log_prob(batch)["ref_log_prob"]
            with timer("adv", timing):
                batch["token_level_rewards"] = batch["token_level_scores"]
                if cfg.algorithm.use_kl_in_reward:
                    batch["token_level_rewards"], kl_metrics = apply_kl_penalty(
                        batch["token_level_scores"], batch["old_log_probs"], batch["ref_log_prob"],
                        batch["response_mask"], self.kl_ctrl, cfg.algorithm.kl_penalty)
                    metrics.update(kl_metrics)
                batch["advantages"], batch["returns"] = compute_advantage(
                    cfg.algorithm.adv_estimator, token_level_rewards=batch["token_level_rewards"],
                    response_mask=batch["response_mask"].float(), index=batch["uid"],
                    norm_adv_by_std_in_grpo=cfg.algorithm.norm_adv_by_std_in_grpo,
                    gamma=cfg.algorithm.gamma, lam=cfg.algorithm.lam, config=cfg.algorithm)
            with timer("update_actor", timing):
                metrics.update(wg.update_actor(batch).meta_info["metrics"])
        metrics.update(compute_data_metrics(batch, cfg.actor_rollout_ref.rollout.response_length))
        metrics.update(compute_timing_metrics(batch, timing))
        metrics.update(compute_throughput_metrics(batch, timing["step"]))
        if cfg.trainer.rollout_data_dir:
            scores = batch["token_level_scores"].sum(-1).tolist()
            write_generations(cfg.trainer.rollout_data_dir, self.global_steps,
                              generation_records(batch, scores, self.tokenizer, self.global_steps))
        return metrics

    # ---- the loop -----------------------------------------------------------------------------
    def fit(self) -> dict[str, float]:
        """Train to the last step; returns the last validation metrics (empty if none ran)."""
        cfg = self.config.trainer
        self._load_checkpoint()
        if self.global_steps >= self.total_training_steps and not cfg.val_only:
            print(f"reinforge: this run already finished step {self.global_steps} of {self.total_training_steps}; "
                  "nothing to do (raise trainer.total_training_steps or trainer.total_epochs to train on)", flush=True)
            return {}
        tracking = Tracking(self.run_dir, cfg.logger, self.total_training_steps, self.global_steps)
        val_metrics: dict[str, float] = {}
        try:
            if self.val_loader is not None and cfg.val_before_train and (self.global_steps == 0 or cfg.val_only):
                val_metrics = self._validate()
                tracking.log(val_metrics, self.global_steps)
                if cfg.val_only:
                    return val_metrics
            while self.global_steps < self.total_training_steps:
                for prompts in self.train_loader:
                    self.global_steps += 1
                    last = self.global_steps >= self.total_training_steps
                    metrics = self.train_step(Batch.from_dict(prompts))
                    metrics["training/global_step"] = self.global_steps
                    metrics["training/epoch"] = self.train_loader.epoch
                    if self.val_loader is not None and cfg.test_freq > 0 and (last or self.global_steps % cfg.test_freq == 0):
                        val_metrics = self._validate()
                        metrics.update(val_metrics)
                    if cfg.save_freq > 0 and (last or self.global_steps % cfg.save_freq == 0):
                        with timer("save_checkpoint", timing := {}):
                            self._save_checkpoint()
                        metrics["timing_s/save_checkpoint"] = timing["save_checkpoint"]
                    tracking.log(metrics, self.global_steps)
                    if last:
                        break
        finally:
            tracking.close()
        return val_metrics

    def _validate(self) -> dict[str, float]:
        """Validation metrics (with timing_s/testing), remembered in val_history."""
        with timer("testing", timing := {}):
            metrics = validate(self.config, self.actor_rollout_wg, self.reward_fn, self.val_loader, self.tokenizer, self.global_steps)
        self.val_history.append((self.global_steps, metrics))
        return {**metrics, "timing_s/testing": timing["testing"]}

    # ---- checkpoints --------------------------------------------------------------------------
    def _save_checkpoint(self) -> None:
        def write(folder: Path) -> None:
            self.actor_rollout_wg.save_checkpoint(str(folder / "actor"))
            torch.save(self.train_loader.state_dict(), folder / "data.pt")
            state = {"global_steps": self.global_steps, "kl_ctrl": self.kl_ctrl.state_dict()}
            (folder / "trainer_state.json").write_text(json.dumps(state))

        save_checkpoint(self.run_dir, self.global_steps, write, keep=self.config.trainer.max_actor_ckpt_to_keep)

    def _load_checkpoint(self) -> None:
        folder = resume_folder(self.config.trainer)
        if folder is None:
            return
        self.actor_rollout_wg.load_checkpoint(str(folder / "actor"))
        self.train_loader.load_state_dict(torch.load(folder / "data.pt"))
        state = json.loads((folder / "trainer_state.json").read_text())
        self.global_steps = state["global_steps"]
        self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        print(f"resumed from {folder} (step {step_of(folder)}); continuing at step {self.global_steps + 1}", flush=True)

