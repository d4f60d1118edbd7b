"""The `trainer.*` section of the config schema (config/schema.py assembles the whole): the training loop's
length, validation and checkpoint cadence, logging, resuming and the worker layout."""

from __future__ import annotations

from dataclasses import dataclass

from reinforge.config.fields import Node, _f


@dataclass
class TrainerConfig(Node):
    total_epochs: int = _f(30, "Passes over the training data.")
    total_training_steps: int | None = _f(None, "Stop after this many steps (overrides total_epochs when smaller).")
    project_name: str = _f("verl_examples", "Project name: trackers and the default run folder.")
    experiment_name: str = _f("gsm8k", "Experiment name: trackers and the default run folder.")
    logger: list | str = _f(["console"], "Where metrics go, a list or one name: console, file/jsonl, tensorboard, wandb, mlflow, "
                      "swanlab, trackio (docs/observability.md). metrics.jsonl in the run folder is always written.")
    log_val_generations: int = _f(0, "Validation samples printed after each validation and logged as a table "
                                  "(wandb, mlflow) or text (tensorboard, swanlab).")
    rollout_data_dir: str | None = _f(None, "Write each step's rollouts as JSONL here (<dir>/<step>.jsonl). null: the run "
                                            "folder keeps the 8 best and 8 worst of the latest 3 steps in rollouts/, "
                                            "for `reinforge report`.")
    validation_data_dir: str | None = _f(None, "Write validation generations as JSONL here.")
    nnodes: int = _f(1, "Nodes of the Ray cluster the run uses (docs/distributed.md); world size = nnodes x n_gpus_per_node.")
    n_gpus_per_node: int | None = _f(None, "Ranks per node: GPUs with device=cuda (one per rank), worker processes with "
                                           "device=cpu. null: every visible GPU on cuda, 1 on cpu (verl's default is 8). "
                                           "World size 1 without a Ray address runs in this process; more ranks run as "
                                           "Ray actors (docs/distributed.md).")
    device: str | None = _f(None, "cuda or cpu; null: cuda when a GPU is present, else cpu.")
    save_freq: int = _f(-1, "Save a checkpoint every this many steps (-1: never; the last step is saved when > 0).")
    save_on_stop: bool = _f(True, "reinforge only (verl has no such key): on SIGINT/SIGTERM, finish the current step, "
                                  "save it as a checkpoint, and exit 130/143; the same command then resumes "
                                  "(trainer.resume_mode=auto).")
    test_freq: int = _f(-1, "Validate every this many steps (-1: never; the last step is validated when > 0).")
    val_before_train: bool = _f(True, "Validate before the first step.")
    val_only: bool = _f(False, "Validate once and exit.")
    critic_warmup: int = _f(0, "The first this many steps update only the critic, not the actor.")
    max_nonfinite_steps: int = _f(5, "Stop the run after this many training steps in a row in which every optimizer step "
                                  "was skipped for a NaN/inf loss or gradient (0: never stop).")
    default_local_dir: str | None = _f(None, "The run folder; null: checkpoints/<project_name>/<experiment_name>.")
    default_hdfs_dir: str | None = _f(None, "Accepted for verl compatibility; no HDFS copy.")
    resume_mode: str = _f("auto", "auto: continue from the latest checkpoint in the run folder; disable; resume_path.")
    resume_from_path: str | None = _f(None, "A global_step_<N> folder to resume from (resume_mode=resume_path).")
    del_local_ckpt_after_load: bool = _f(False, "Accepted for verl compatibility (verl deletes a downloaded copy of the "
                                                "checkpoint after loading it); checkpoints are read in place and kept.")
    max_actor_ckpt_to_keep: int | None = _f(None, "Keep at most this many actor checkpoints (null, 0 or less: all).")
    max_critic_ckpt_to_keep: int | None = _f(None, "Keep at most this many critic checkpoints (null, 0 or less: all).")
    remove_previous_ckpt_in_save: bool = _f(False, "verl's deprecated switch: true keeps one actor and one critic checkpoint "
                                                   "(max_actor_ckpt_to_keep=max_critic_ckpt_to_keep=1), as verl reads it.")
    balance_batch: bool = _f(True, "Balance tokens across data-parallel ranks: of every world-size rows, the longest "
                                   "goes to the rank with the fewest tokens so far (each rank still gets its share of "
                                   "every mini-batch); no effect with one rank.")
    use_legacy_worker_impl: str | bool = _f("auto", "Accepted for verl compatibility (which of verl's two worker implementations); "
                                             "reinforge has one.")
    esi_redundant_time: float = _f(0.0, "Accepted for verl compatibility (seconds kept free before an Elastic Server Instance "
                                      "expires, to save a checkpoint in time); no effect here.")
    profile_steps: list | None = _f(None, "Accepted for verl compatibility (verl 0.4/0.5: the steps Nsight profiles; newer verl: "
                                          "global_profiler.steps); no profiler integration here, the timing_s/* metrics "
                                          "give each phase's seconds per step.")
    controller_nsight_options: dict = _f({}, "Accepted for verl compatibility (verl 0.4/0.5's Nsight options of the driver); "
                                             "no effect here.")
    worker_nsight_options: dict = _f({}, "Accepted for verl compatibility (verl 0.4/0.5's Nsight options of the workers); no "
                                         "effect here.")
    ray_wait_register_center_timeout: int = _f(300, "Accepted for verl compatibility (seconds Ray workers wait for verl's "
                                                    "register center); there is none here.")
    hang_dump_s: float = _f(600, "reinforge only: when a call to the Ray workers runs this many seconds, every rank still "
                                 "in it dumps its Python stacks into the log and the driver names the ranks that have "
                                 "not answered (repeated each period; 0: never).")
    seed: int = _f(1, "Seed of model-side randomness (dropout, and sampling: every rollout row samples with its own "
                      "seed derived from this one, the step and the row's index, so ranks and batching do not change it).")
    balance_keep_minibatch: bool = _f(False, "Accepted for verl compatibility (balance each mini-batch's rows over the "
                                      "ranks separately); no effect here: balance_batch always keeps every mini-batch's "
                                      "rows, each rank getting its share of each.")
    checkpoint_callback_class: str | None = _f(None, "Accepted for verl compatibility (a class whose on_save hook runs after "
                                               "each checkpoint); no effect here: there are no checkpoint callbacks.")
    use_v1: bool = _f(True, "Accepted for verl compatibility (verl's newer trainer); reinforge has one trainer, synchronous "
                            "as verl's sync mode.")
    v1: dict = _f({}, "verl's newer trainer's modes (trainer_mode: sync, colocate_async or separate_async; their warmup, "
                      "parameter sync and off-policy sampler settings), a free-form mapping; only trainer_mode=sync in "
                      "this version (the asynchronous modes, which train on older policies' rollouts, are an error).")
    peak_flops: float | None = _f(None, "Peak FLOP/s of one device, for perf/mfu/* (e.g. 989e12 for an H100 in BF16); null: "
                                        "the known peak of the CUDA GPU, and no MFU on CPU or an unknown GPU.")
