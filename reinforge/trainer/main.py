"""Assemble a run from a config: data, reward, workers, trainer (verl's TaskRunner.run)."""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from reinforge.config import Config, batch_arithmetic, quickstart, to_dict, unused_settings
from reinforge.config.derived import generation_batch
from reinforge.trainer.run_folder import hold_run_folder, unwritable, write_run_config
from reinforge.trainer.startup import StartupClock

if TYPE_CHECKING:
    from reinforge.distributed import WorkerPool

ARITHMETIC_NOTES = {
    "prompts_per_step": "data.train_batch_size (data.gen_batch_size when set apart without algorithm.filter_groups)",
    "trajectories_per_step": "prompts x actor_rollout_ref.rollout.n",
    "trajectories_per_mini_batch": "actor.ppo_mini_batch_size x rollout.n",
    "data_parallel_ranks": "trainer.nnodes x trainer.n_gpus_per_node",
    "trajectories_per_rank_mini_batch": "each rank's share of a mini-batch",
    "mini_batches_per_epoch": "optimizer steps per PPO epoch",
    "optimizer_steps_per_step": "mini-batches x actor.ppo_epochs",
    "trajectories_per_micro_batch": "actor.ppo_micro_batch_size_per_gpu (null: the rank's whole share)",
    "gradient_accumulation": "micro-batches per optimizer step on each rank",
    "max_tokens_per_micro_batch": "micro-batch x (max_prompt_length + response_length); "
                                  "use_dynamic_bsz: actor.ppo_max_token_len_per_gpu real tokens",
    "on_policy_single_update": "true: old log-probs come from the update's own forward pass (an old-log-prob pass still runs "
                               "for KL in the reward, a rollout correction, or an estimator that takes old_log_probs)",
}


def describe(config: Config, user_keys: list[str]) -> str:
    """What --dry-run prints: the resolved config, the batch arithmetic, and settings without effect."""
    from omegaconf import OmegaConf

    lines = ["# resolved config", OmegaConf.to_yaml(OmegaConf.create(to_dict(config))).rstrip(), "", "# batch arithmetic (per training step)"]
    for key, value in batch_arithmetic(config).items():
        lines.append(f"{key + ':':<36}{str(value):<8}# {ARITHMETIC_NOTES[key]}")
    if quickstart.applies(user_keys):
        lines += ["", f"# {quickstart.description(config.algorithm.adv_estimator)}"]
    unused = unused_settings(config, user_keys)
    if unused:
        lines += ["", "# settings without effect in this run"] + [f"- {line}" for line in unused]
    return "\n".join(lines)


def run(config: Config, user_keys: list[str], startup: StartupClock | None = None) -> dict[str, float]:
    """Train as configured; returns the final validation metrics.

    `startup` times the start (reinforge/trainer/startup.py); its breakdown is printed when the first step begins."""
    import transformers.modeling_utils  # noqa: F401  (model loading's imports, ~1 s, timed as "imports", not in the phase that first uses them)

    startup = startup or StartupClock(from_process_start=False)  # called as a library: time from here
    startup.mark("imports")
    _quiet_transformers()
    run_dir = Path(config.trainer.default_local_dir).resolve()
    print(f"reinforge: run folder {run_dir}", flush=True)
    if quickstart.applies(user_keys):
        print(f"reinforge: {quickstart.description(config.algorithm.adv_estimator)}", flush=True)
        quickstart.prepare(config)
    for line in unused_settings(config, user_keys):
        print(f"reinforge: note: {line}", flush=True)
    for key in ("rollout_data_dir", "validation_data_dir"):  # absolute in config.yaml, which `reinforge report` reads
        if setting := getattr(config.trainer, key):
            folder = Path(setting).expanduser().resolve()
            try:  # made now: a file in its place or a read-only parent stops the run here, not at its first dump
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise unwritable(setting, folder, error, f"trainer.{key}", "the samples' folder") from None
            setattr(config.trainer, key, str(folder))
    with hold_run_folder(run_dir, config.trainer.default_local_dir):  # this process's alone until the run ends
        return _run_in(run_dir, config, user_keys, startup)


def _run_in(run_dir: Path, config: Config, user_keys: list[str], startup: StartupClock) -> dict[str, float]:
    """`run`, from writing the run folder's config.yaml on."""
    from reinforge.distributed import LocalPool, open_worker_pool
    from reinforge.environment.dataloader import PromptLoader
    from reinforge.environment.dataset import collate_fn, create_rl_dataset
    from reinforge.environment.multimodal import check_image_run
    from reinforge.environment.sampler import create_rl_sampler
    from reinforge.errors import ConfigError, RankError
    from reinforge.reward import get_compute_score, make_reward_manager
    from reinforge.reward.manager.base import is_users
    from reinforge.trainer.checkpoint import check_resume_folder, loads_of, resume_folder
    from reinforge.trainer.ppo_trainer import RLTrainer
    from reinforge.trainer.stop import latest_checkpoint
    from reinforge.training.checkpoint_io import seed_rngs
    from reinforge.training.model import load_tokenizer, model_source, model_text_settings
    from reinforge.training.vision import load_processor

    # no global_step_<N> folder to resume, or a fresh start over a saved run: before anything is written or loaded
    resumed = resume_folder(config.trainer)
    resume = None if resumed is None else (resumed, *check_resume_folder(resumed, config.critic.enable, loads_of(config)))
    write_run_config(run_dir, to_dict(config), config.trainer.default_local_dir)
    seed_rngs(config.trainer.seed)
    startup.mark("run folder" + (" and quickstart files" if quickstart.applies(user_keys) else ""))

    if not config.data.train_files and not config.data.custom_cls.path:  # a user's Dataset class may not read files
        raise ConfigError("data.train_files is not set; set it to a data file (.parquet, .json, .jsonl) or a list of them "
                          "(`reinforge data --help` writes GSM8K, MATH or Countdown files)")
    if not config.actor_rollout_ref.model.path:
        raise ConfigError("actor_rollout_ref.model.path is not set; set it to a Hugging Face model folder (or a model name "
                          "on the Hub, when this machine can reach it)")
    data = config.data
    tokenizer = load_tokenizer(config)
    processor = load_processor(model_source(config.actor_rollout_ref.model.path), tokenizer,
                               config.actor_rollout_ref.model.trust_remote_code)
    train_set = create_rl_dataset(data.train_files, data, tokenizer, processor, is_train=True, max_samples=data.max_samples)
    collate = collate_fn(tokenizer.pad_token_id)
    batch_key, batch_size = generation_batch(config)
    draws = 2 if data.dataloader_num_workers > 0 else 1  # verl's loader with workers draws two permutations an epoch
    train_loader = PromptLoader(train_set, batch_size, collate, shuffle=data.shuffle, seed=data.seed, drop_last=True,
                                batch_key=batch_key, sampler=create_rl_sampler(data, train_set), draws_per_epoch=draws)
    val_loader = None
    if data.val_files:
        val_set = create_rl_dataset(data.val_files, data, tokenizer, processor, is_train=False,
                                    max_samples=data.max_val_samples)
        val_loader = PromptLoader(val_set, data.val_batch_size or len(val_set), collate, shuffle=data.validation_shuffle,
                                  seed=data.seed, drop_last=False, batch_key="data.val_batch_size")

    _note_string_prompts(config, user_keys, train_set, val_loader.dataset if val_loader else None)
    for line in check_image_run(config, [train_set, val_loader.dataset if val_loader else None], processor):
        print(f"reinforge: note: {line}", flush=True)
    vocab_size, positions = model_text_settings(config.actor_rollout_ref.model, "vocab_size", "max_position_embeddings")
    if isinstance(positions, int) and data.max_prompt_length + data.max_response_length > positions:
        print(f"reinforge: warning: data.max_prompt_length + data.max_response_length = {data.max_prompt_length} + "
              f"{data.max_response_length} is more than the model's max_position_embeddings={positions} "
              f"(actor_rollout_ref.model.path={config.actor_rollout_ref.model.path}): positions past it are ones the model "
              "was not trained on (a model with learned position embeddings fails on them); lower the lengths unless "
              "the model is meant to run longer", file=sys.stderr, flush=True)
    for dataset in (train_set, val_loader.dataset if val_loader else None):
        if vocab_size is not None and hasattr(dataset, "check_token_ids"):  # not a user's Dataset class
            dataset.check_token_ids(vocab_size, f"actor_rollout_ref.model.path={config.actor_rollout_ref.model.path}")
        rollout = config.actor_rollout_ref.rollout
        if hasattr(dataset, "located_rows") and (
                rollout.multi_turn.enable or any(row.get("agent_name") for row, *_ in dataset.located_rows())):
            from reinforge.inference.agent import check_agent_rows  # each row's agent loop, interaction and environment exist

            check_agent_rows(dataset.located_rows(), rollout, data.prompt_key)

    # total_training_steps, when set, is the length of the LR schedule and training ends after total_epochs, as verl's;
    # past the data's epochs the last step is the data's last (verl then neither saves nor validates it: no last step)
    schedule_steps = config.trainer.total_training_steps or len(train_loader) * config.trainer.total_epochs
    total_steps = min(schedule_steps, len(train_loader) * config.trainer.total_epochs)

    startup.mark("data")
    rm = config.reward_model
    reward_fn = None  # a reward model alone needs no manager and no scorer (docs/rewards.md)
    if not rm.enable or config.custom_reward_function.path:
        compute_score = get_compute_score(config)
        manager, options = _manager_for(compute_score, rm.reward_manager, data, rm.reward_kwargs)
        _check_reward_data(data, compute_score, is_users(manager), train_set, val_loader.dataset if val_loader else None)
        # one manager for training and validation: a failing reward function's traceback is shown once per run
        reward_fn = make_reward_manager(manager, tokenizer, compute_score, reward_fn_key=data.reward_fn_key,
                                        reward_workers=config.reward.num_workers, **rm.reward_kwargs, **options)

    _check_teacher_routing(config.distillation, train_set, data.train_files)
    if rm.enable and rm.judge.enable:  # a template with {ground_truth} needs it in every row
        from reinforge.reward.models.judge import check_judge_rows

        for dataset in (train_set, val_loader.dataset if val_loader else None):
            if hasattr(dataset, "located_rows"):  # not a user's Dataset class
                check_judge_rows(rm.judge, dataset.located_rows())
    startup.mark("reward")
    with contextlib.ExitStack() as cleanup:  # on every way out: the reward manager's processes, then the workers
        if hasattr(reward_fn, "close"):
            cleanup.callback(reward_fn.close)
        pool = open_worker_pool(config)  # in this process, or one Ray actor per rank (trainer.nnodes x n_gpus_per_node)
        cleanup.callback(pool.close)
        if not isinstance(pool, LocalPool):
            startup.mark("Ray and worker processes")
        actor_rollout_wg, critic_wg, reward_fn = _start_workers(pool, config, schedule_steps, reward_fn)
        if hasattr(reward_fn, "close"):  # a reward model scorer wraps the manager: closing it closes both
            cleanup.callback(reward_fn.close)
        startup.mark("models")
        trainer = RLTrainer(config, actor_rollout_wg, reward_fn, train_loader, val_loader, tokenizer, total_steps, critic_wg,
                            resume)
        _report_first_step(trainer, startup)
        if trainer.rollout_cache is not None:
            print(f"reinforge: rollout skip: {trainer.rollout_cache.describe()}", flush=True)
        print(f"reinforge: {len(train_set)} training prompts, {total_steps} steps; ready in {startup.elapsed():.1f}s", flush=True)
        try:
            metrics = trainer.fit()
        except RankError as error:  # a worker process failed or died: say where the run can go on from
            latest = latest_checkpoint(run_dir)
            where = (f"resume point: {latest}; run the same command again to continue from it (trainer.resume_mode=auto)"
                     if latest else "no checkpoint saved yet: the same command starts afresh")
            raise RankError(f"{error}\n\n{where}") from None
    print(f"reinforge: done in {startup.elapsed():.1f}s", flush=True)  # from process start, as the breakdown
    print("\n".join(run_summary(config, run_dir)), flush=True)
    history = _validations(run_dir) or trainer.val_history
    if len(history) > 1:
        (first_step, first), (last_step, last) = history[0], history[-1]
        print(f"reinforge: validation reward {mean_val_reward(first):.3f} (step {first_step}) -> "
              f"{mean_val_reward(last):.3f} (step {last_step})", flush=True)
    return metrics


def _start_workers(pool: WorkerPool, config: Config, schedule_steps: int, reward_fn):
    """The worker groups of a run, their models loaded: actor+rollout(+ref), the critic when the estimator uses values,
    and the reward model (wrapping `reward_fn`) when enabled; returns (actor_rollout_wg, critic_wg or None, reward_fn)."""
    from reinforge.config.unused import uses_reference
    from reinforge.reward.models import RewardModelScorer, RewardModelWorker
    from reinforge.training.workers import ActorRolloutRefWorker, CriticWorker

    role = "actor_rollout_ref" if uses_reference(config) else "actor_rollout"
    actor_rollout_wg = pool.group("actor_rollout_ref", ActorRolloutRefWorker, config, role)
    actor_rollout_wg.init_model(schedule_steps)
    critic_wg = None
    if config.critic.enable:
        critic_wg = pool.group("critic", CriticWorker, config)
        critic_wg.init_model(schedule_steps)
    if config.reward_model.enable:  # the reward model's score, plus the custom reward function's when one is set (docs/rewards.md)
        rm_wg = pool.group("reward_model", RewardModelWorker, config)
        rm_wg.init_model()
        reward_fn = RewardModelScorer(rm_wg, reward_fn)
    for group in (actor_rollout_wg, critic_wg):
        if group is not None:  # several ranks: even out their token counts (distributed/layout.py)
            group.balance_batch = config.trainer.balance_batch
    return actor_rollout_wg, critic_wg, reward_fn


def _report_first_step(trainer, startup: StartupClock) -> None:
    """Print the startup breakdown when the first training step begins, and that step's duration when it ends."""
    train_step = trainer.train_step

    def first_step(prompts):
        trainer.train_step = train_step  # later steps run unwrapped
        startup.mark("resume, trackers" + (" and validation before training" if trainer.val_history else ""))
        print(f"reinforge: {startup.summary()}", flush=True)
        begun = time.perf_counter()
        metrics = train_step(prompts)
        print(f"reinforge: first step took {time.perf_counter() - begun:.1f}s", flush=True)
        return metrics

    trainer.train_step = first_step


def run_summary(config: Config, run_dir: Path) -> list[str]:
    """The end-of-run lines saying where the metrics, checkpoints, generation dumps and the report are."""
    from reinforge.report.runs import RECENT_ROLLOUTS
    from reinforge.trainer.checkpoint import TRACKER

    tracker = run_dir / TRACKER
    if tracker.is_file():
        checkpoints = f"{run_dir / ('global_step_' + tracker.read_text().strip())} (latest)"
    else:  # with saves due, each that failed said why (a warning, checkpoint/save_failed)
        failed = "; a save that failed said why above" if config.trainer.save_freq > 0 else ""
        checkpoints = f"none saved (trainer.save_freq={config.trainer.save_freq}{failed})"
    lines = [f"  metrics      {run_dir / 'metrics.jsonl'}", f"  checkpoints  {checkpoints}"]
    recent = run_dir / RECENT_ROLLOUTS  # without trainer.rollout_data_dir, the latest steps' samples kept for the report
    rollouts = config.trainer.rollout_data_dir or (recent if recent.is_dir() else None)
    for label, folder in (("rollouts", rollouts), ("validation", config.trainer.validation_data_dir)):
        if folder:
            lines.append(f"  {label:<12} {Path(folder).resolve()}")
    lines.append(f"  report       reinforge report {run_dir}  (writes {run_dir / 'report' / 'report.html'})")
    return ["reinforge: run summary", *lines]


def _note_string_prompts(config, user_keys: list[str], *datasets) -> None:
    """A note naming the chat-template settings the user set when every prompt is a string (the model's input text as
    it is, TRL's standard format), which no template renders."""
    from reinforge.environment.data_files import is_text_prompt

    keys = [key for key in ("actor_rollout_ref.model.custom_chat_template", "data.apply_chat_template_kwargs")
            if any(user_key == key or user_key.startswith(key + ".") for user_key in user_keys)]
    located = [dataset for dataset in datasets if hasattr(dataset, "located_rows")]
    if keys and located and not config.actor_rollout_ref.rollout.multi_turn.enable and all(
            is_text_prompt(row.get(config.data.prompt_key)) for dataset in located for row, *_ in dataset.located_rows()):
        print(f"reinforge: note: {', '.join(keys)} without effect: every prompt is a string, the model's input text as it "
              "is (TRL's standard format); chat-message prompts go through the chat template", flush=True)


def _manager_for(compute_score, manager: str, data, reward_kwargs: dict) -> tuple[str, dict]:
    """The reward manager that calls `compute_score`, and its options beyond reward_model.reward_kwargs: TRL reward
    functions are called by the `trl` manager (in place of the default naive), with the data's prompt and image columns
    named, and a function written for OpenRLHF by the `openrlhf` one."""
    from reinforge.errors import ConfigError
    from reinforge.reward.manager.calls import function_name
    from reinforge.reward.manager.openrlhf import OpenRLHFRewardFunction
    from reinforge.reward.manager.trl import TRLRewardFunctions

    kind = ("openrlhf" if isinstance(compute_score, OpenRLHFRewardFunction)
            else "trl" if isinstance(compute_score, TRLRewardFunctions) else None)
    if kind is None:
        return manager, {}
    if manager not in ("naive", kind):
        what, framework, them = ((f"TRL reward functions ({', '.join(compute_score.names)})", "TRL's trainer", "them")
                                 if kind == "trl" else (f"{function_name(compute_score)}, written for OpenRLHF", "OpenRLHF", "it"))
        raise ConfigError(f"reward_model.reward_manager={manager}: custom_reward_function names {what}, which the {kind} "
                          f"reward manager calls as {framework} does (chosen for {them}); leave reward_model.reward_manager "
                          f"at naive or set it to {kind}")
    if kind == "openrlhf":
        return kind, {}
    if "prompt_key" in reward_kwargs:
        raise ConfigError("reward_model.reward_kwargs.prompt_key: the trl reward manager reads the prompt column that "
                          "data.prompt_key names; set that instead")
    return kind, {"prompt_key": data.prompt_key, "image_key": data.image_key}


def _check_reward_data(data, compute_score, users_manager: bool, *datasets) -> None:
    """Fail before any model work when a row cannot be scored: no data.reward_fn_key value or ground truth
    (`RLDataset.check_reward_columns`), with the built-in scorers a data_source without one (unless a reward manager of
    the user's scores: it may not call them), and with TRL reward functions the columns they take and none named as their
    arguments (`check_rows`; they need no ground truth)."""
    from reinforge.errors import RewardError
    from reinforge.reward import default_compute_score, find_scorer
    from reinforge.reward.manager.openrlhf import OpenRLHFRewardFunction
    from reinforge.reward.manager.trl import TRLRewardFunctions, check_rows

    key = data.reward_fn_key
    built_in = getattr(compute_score, "func", compute_score) is default_compute_score and not users_manager  # (a partial)
    if isinstance(compute_score, TRLRewardFunctions):  # training and validation rows together: one prompt form for both
        located = [dataset.located_rows() for dataset in datasets if hasattr(dataset, "located_rows")]
        check_rows(compute_score, itertools.chain(*located), data.prompt_key)
        return
    for dataset, files in zip(datasets, (data.train_files, data.val_files), strict=True):
        if not hasattr(dataset, "check_reward_columns"):  # a user's Dataset class: its rows are checked when scored
            continue
        # an OpenRLHF function's label is optional ("" without); data.label_key is checked when the rows are read
        dataset.check_reward_columns(key, ground_truth=not isinstance(compute_score, OpenRLHFRewardFunction))
        if not built_in:  # a custom reward function takes every data_source
            continue
        for source, source_files in sorted(dataset.data_source_files(key).items()):
            try:
                find_scorer(source)
            except RewardError as exc:
                note = "rows without a data_source, or with an empty one, count as 'unknown': " if source == "unknown" else ""
                raise RewardError(f"{', '.join(source_files) or files}: {note}{exc}") from None


def _check_teacher_routing(distillation, dataset, files) -> None:
    """With several teachers, each training row's distillation.teacher_key value names one: else a DataError naming the
    files and the value before any model work (the teachers are asked only after the first rollout)."""
    from reinforge.config.distillation_schema import no_teacher, resolve_teachers
    from reinforge.errors import DataError

    if not distillation.enabled or not hasattr(dataset, "data_source_files"):
        return
    keys = {teacher.key for teacher in resolve_teachers(distillation)}
    if len(keys) < 2:
        return
    for value, value_files in sorted(dataset.data_source_files(distillation.teacher_key).items()):
        if value == "unknown" and distillation.teacher_key != "data_source":
            raise DataError(f"{', '.join(value_files) or files}: rows with no value in column {distillation.teacher_key!r}, "
                            "which distillation.teacher_key names as the one that picks each row's teacher")
        if value not in keys:
            raise no_teacher(f"{', '.join(value_files) or files}: ", distillation.teacher_key, [value], keys)


def _validations(run_dir: Path) -> list[tuple[int, dict]]:
    """(step, metrics) of the validations in the run folder's metrics.jsonl: a resumed run's from before the resume too."""
    from reinforge.errors import UserError
    from reinforge.report.runs import NON_FINITE, load_run

    try:
        records = load_run(run_dir, sample_steps=0).records
    except UserError:
        return []
    return [(record["step"], {key: float(value) if value in NON_FINITE else value for key, value in record.items()})
            for record in records if any(key.startswith(("val-core/", "val-aux/")) for key in record)]


def mean_val_reward(metrics: dict[str, float]) -> float:
    """Mean over data sources of val-*/<source>/reward/mean@n."""
    values = [v for k, v in metrics.items() if k.startswith(("val-core/", "val-aux/")) and "/reward/mean@" in k]
    return float(np.mean(values)) if values else float("nan")


def _quiet_transformers() -> None:
    """No per-file progress bars or advisory warnings from transformers in the run log."""
    from transformers.utils import logging as hf_logging

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

