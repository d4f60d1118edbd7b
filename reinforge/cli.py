"""The `reinforge` command.

    reinforge train [--dry-run] [--config FILE.yaml] [key=value ...]
    reinforge generate [--dry-run] [--config FILE.yaml] [key=value ...]   (verl's main_generation)
    reinforge eval [--dry-run] [--config FILE.yaml] [key=value ...]       (verl's main_eval)
    reinforge sft [--dry-run] [--config FILE.yaml] [key=value ...]
    reinforge data {gsm8k,math,countdown} [--local_dir DIR] [--input PATH ...] [...]
    reinforge report RUN_DIR [RUN_DIR ...] [--out DIR]
    reinforge merge CHECKPOINT OUT_DIR   (or verl's --backend fsdp --local_dir CHECKPOINT --target_dir OUT_DIR)

Overrides use verl's key paths and Hydra's grammar, so a verl command line works with
`reinforge train` in place of `python3 -m verl.trainer.main_ppo`. Mistakes in config, data, model
or reward code print one message and exit with status 2 (docs/errors.md lists them); `--debug`,
before or after the sub-command (or REINFORGE_DEBUG=1), shows the full traceback too. SIGINT/SIGTERM during training save the
finished step and exit 130/143 with a message on how to resume (reinforge/trainer/stop.py). A failure in a
Ray worker prints the rank, role and method and the worker's traceback, exit 1 (reinforge/distributed/ray_group.py).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback

from reinforge import __version__
from reinforge.environment.preprocess import add_data_arguments, run_data_command
from reinforge.errors import ConfigError, RankError, UserError, add_debug_argument, debug_requested
from reinforge.trainer.stop import RunStopped


def _train(args: argparse.Namespace) -> int:
    from reinforge.config import load_config
    from reinforge.trainer.startup import PROCESS_PHASE, StartupClock

    startup = StartupClock()

    config, user_keys = load_config(args.overrides, _config_file(args))
    startup.mark(PROCESS_PHASE)
    if args.dry_run:
        from reinforge.trainer.main import describe

        print(describe(config, user_keys))
        return 0
    from reinforge.trainer.main import run

    run(config, user_keys, startup)
    return 0


# verl's packaged configs (verl/trainer/config/<name>.yaml, which `--config-path=config` names beside verl's entry
# points): for each command, the ones that are its defaults, and the other training backends' ones
VERL_BASE_CONFIGS = {"train": {"ppo_trainer"}, "sft": {"sft_trainer", "sft_trainer_engine"},
                     "generate": {"generation", "ppo_trainer"}, "eval": {"evaluation"}}
VERL_BACKEND_CONFIGS = {"ppo_megatron_trainer": "Megatron-LM", "ppo_torchtitan_trainer": "TorchTitan",
                        "ppo_veomni_trainer": "VeOmni"}


def _config_file(args: argparse.Namespace) -> str | None:
    """--config, or Hydra's --config-path and --config-name. verl's own packaged config (`--config-path=config
    --config-name=ppo_trainer`, as verl's scripts give it) is reinforge's defaults: no file to read, unless one of that
    name is there."""
    if args.config and args.config_name:
        raise ConfigError(f"--config {args.config} and --config-name {args.config_name} both name a config file; give one "
                          "(put the keys of one into the other, or on the command line)")
    if args.config_path and not args.config_name:
        raise ConfigError(f"--config-path {args.config_path} needs --config-name, the file in it to read")
    if not args.config_name:
        return args.config
    name = args.config_name.removesuffix(".yaml")
    path = os.path.join(args.config_path or ".", name + ".yaml")
    if os.path.exists(path) or os.path.normpath(args.config_path or "config") != "config":
        return path
    if name in VERL_BASE_CONFIGS.get(args.command, ()):
        print(f"reinforge: note: --config-name={args.config_name} is verl's packaged config, whose values are "
              f"reinforge's defaults (there is no {path} to read)", flush=True)
        return None
    if name in VERL_BACKEND_CONFIGS:
        raise ConfigError(f"--config-name={args.config_name} is verl's packaged config for its {VERL_BACKEND_CONFIGS[name]} "
                          f"training backend; reinforge trains with FSDP2: drop --config-path/--config-name and the "
                          f"backend's keys (actor_rollout_ref.actor.megatron.* and the like)")
    return path


def _add_config_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("overrides", nargs="*", help="key=value, +key=value, ~key (Hydra grammar)")
    command.add_argument("--dry-run", action="store_true", help="validate, print the resolved config, exit")
    command.add_argument("--config", help="a YAML file of config keys (overrides on the command line win)")
    command.add_argument("--config-path", help="Hydra-style: folder of --config-name")
    command.add_argument("--config-name", help="Hydra-style: YAML file name (without .yaml) in --config-path")
    add_debug_argument(command)


def _sft(args: argparse.Namespace) -> int:
    from reinforge.config.sft_schema import load_sft_config

    config, notes = load_sft_config(args.overrides, _config_file(args), int(os.environ.get("WORLD_SIZE", "1")))
    if args.dry_run:
        from reinforge.config.loading import describe

        print(describe(config, notes))
        return 0
    from reinforge.trainer.sft_trainer import main as sft_main  # the training stack (torch, transformers): only to run

    return sft_main(config, notes)


def _generate(args: argparse.Namespace) -> int:
    from reinforge.config.generation_schema import describe_generation, load_generation_config

    config, user_keys = load_generation_config(args.overrides, _config_file(args))
    if args.dry_run:
        print(describe_generation(config, user_keys))
        return 0
    from reinforge.trainer.generate import run_generation

    run_generation(config, user_keys)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from reinforge.config.evaluation_schema import describe_evaluation, load_evaluation_config

    config, user_keys = load_evaluation_config(args.overrides, _config_file(args))
    if args.dry_run:
        print(describe_evaluation(config, user_keys))
        return 0
    from reinforge.trainer.evaluate import run_evaluation

    run_evaluation(config, user_keys)
    return 0


def _report(args: argparse.Namespace) -> int:
    from reinforge.report import write_report

    page = write_report(args.run_dirs, args.out)
    print(f"reinforge: report written to {page.resolve()}")
    return 0


def _merge(args: argparse.Namespace) -> int:
    from reinforge.errors import ConfigError
    from reinforge.training.merge import merge_checkpoint

    if args.backend == "megatron":
        raise ConfigError("--backend megatron: reinforge saves checkpoints in the FSDP layout only; use --backend fsdp")
    if args.hf_upload_path:
        raise ConfigError(f"--hf_upload_path {args.hf_upload_path}: reinforge merge writes a local folder only; upload it "
                          "afterwards (e.g. `hf upload <repo> <target_dir>`)")
    if args.checkpoint == "test" or args.test_hf_dir:
        raise ConfigError("verl's `test` subcommand (merge and compare with --test_hf_dir) is not in reinforge merge: merge, "
                          "then compare the two folders' weights with transformers")
    if args.checkpoint == "merge" and (args.out_dir or args.local_dir):  # verl's subcommand, typed after reinforge merge
        args.checkpoint, args.out_dir = args.out_dir, None
    positional = [folder for folder in (args.checkpoint, args.out_dir) if folder]
    if args.local_dir and args.target_dir and positional or len(positional) > 1 and (args.local_dir or args.target_dir):
        raise ConfigError(f"reinforge merge: {' and '.join(positional)} beside --local_dir/--target_dir; give the folders one way")
    if args.local_dir:  # verl's form; a positional folder beside it is the output
        checkpoint, out_dir = args.local_dir, args.target_dir or (positional[0] if positional else "tmp")  # verl's default
    else:
        checkpoint, out_dir = (positional + [None, None])[:2]
        out_dir = args.target_dir or out_dir
    if not checkpoint or not out_dir:
        raise ConfigError("reinforge merge needs the checkpoint folder (.../global_step_<N>/actor) and the output folder: "
                          "CHECKPOINT OUT_DIR, or verl's --local_dir CHECKPOINT --target_dir OUT_DIR")
    out = merge_checkpoint(checkpoint, out_dir, trust_remote_code=args.trust_remote_code, overwrite=args.overwrite)
    print(f"reinforge: Hugging Face model written to {out.resolve()}")
    return 0


DATA_EXAMPLES = """examples:
  reinforge data gsm8k --input ./gsm8k        # a local copy, written to ~/data/gsm8k
  reinforge data math --input ./MATH          # the original JSON tree, written to ~/data/math
  reinforge data countdown --generate --num_train 20000 --num_test 512
  reinforge train data.train_files=$HOME/data/gsm8k/train.parquet data.val_files=$HOME/data/gsm8k/test.parquet ...

`reinforge data <dataset> --help` lists a dataset's options; docs/data.md describes the files."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reinforge", description="RL post-training for language models (verl-compatible).")
    parser.add_argument("--version", action="version", version=f"reinforge {__version__}")
    add_debug_argument(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="PPO-family training (GRPO, ...) from verl-style overrides",
                                description="Train with verl's config keys as overrides, e.g. algorithm.adv_estimator=grpo "
                                            "data.train_files=train.parquet actor_rollout_ref.model.path=/models/x. "
                                            "With no model and no data: the built-in quickstart.")
    _add_config_arguments(train)
    train.set_defaults(func=_train)
    sft = commands.add_parser("sft", help="supervised fine-tuning from verl-style overrides (verl's fsdp_sft_trainer)",
                              description="Fine-tune model.partial_pretrain on data.train_files with verl's sft_trainer keys, "
                                          "e.g. data.prompt_key=question data.response_key=answer, or "
                                          "data.multiturn.enable=true for conversations. Several ranks: torchrun "
                                          "--nproc_per_node=N -m reinforge sft ... (docs/sft.md).")
    _add_config_arguments(sft)
    sft.set_defaults(func=_sft)
    generate = commands.add_parser("generate", help="responses to every prompt of a file, as verl's main_generation",
                                   description="Generate data.n_samples responses to every prompt of data.path with verl's "
                                               "main_generation keys (data.*, model.path, rollout.*) and write "
                                               "data.output_path: the input's columns plus `responses` (docs/generate_eval.md).")
    _add_config_arguments(generate)
    generate.set_defaults(func=_generate)
    evaluate = commands.add_parser("eval", help="score a file of responses per data source, as verl's main_eval",
                                   description="Score every response of data.path (data.response_key) with the reward "
                                               "function (custom_reward_function.*, or the built-in scorer of each data "
                                               "source) and print test_score/<data_source> (docs/generate_eval.md).")
    _add_config_arguments(evaluate)
    evaluate.set_defaults(func=_eval)
    data = commands.add_parser("data", help="write verl-schema parquet files of GSM8K, MATH or Countdown",
                               description="Preprocess a dataset (a local copy, the hub, or generated Countdown tasks)\n"
                                           "into train.parquet and test.parquet for data.train_files / data.val_files.",
                               epilog=DATA_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_debug_argument(data)
    add_data_arguments(data)
    data.set_defaults(func=run_data_command)
    report = commands.add_parser("report", help="an HTML page and PNG plots of one run, or several overlaid",
                                 description="Write report.html (self-contained: opens with no network) and one PNG per "
                                             "plot from run folders (trainer.default_local_dir). Several runs overlay "
                                             "in the same plots.")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run folder (has metrics.jsonl, config.yaml)")
    report.add_argument("--out", help="output folder (default: <first RUN_DIR>/report)")
    add_debug_argument(report)
    report.set_defaults(func=_report)
    merge = commands.add_parser("merge", help="a checkpoint's model as a Hugging Face model folder (safetensors)",
                                description="Reassemble the model of a checkpoint saved by any number of ranks and write "
                                            "it where AutoModelForCausalLM.from_pretrained (a critic: "
                                            "AutoModelForTokenClassification) loads it, with the run's tokenizer and "
                                            "generation config.")
    merge.add_argument("checkpoint", metavar="CHECKPOINT", nargs="?", help="a worker folder of a saved step: .../global_step_<N>/actor")
    merge.add_argument("out_dir", metavar="OUT_DIR", nargs="?", help="the Hugging Face model folder to write")
    merge.add_argument("--overwrite", action="store_true", help="write over a model already in OUT_DIR (refused without it)")
    verl = merge.add_argument_group("verl's model merger options (python -m verl.model_merger merge ...)")
    verl.add_argument("--local_dir", help="CHECKPOINT, as verl names it")
    verl.add_argument("--target_dir", help="OUT_DIR, as verl names it (default there and here: tmp)")
    verl.add_argument("--backend", choices=("fsdp", "megatron"), default="fsdp", help="fsdp: reinforge's checkpoint layout")
    verl.add_argument("--trust-remote-code", dest="trust_remote_code", action="store_true",
                      help="let the checkpoint's model config run its own code")
    verl.add_argument("--hf_upload_path", help="refused: merge writes a local folder (no hub access)")
    verl.add_argument("--test_hf_dir", help="refused: verl's test subcommand (compare with a reference folder) is not here")
    for flag, what in (("--private", "an upload's visibility"), ("--tie-word-embedding", "Megatron only"),
                       ("--is-value-model", "Megatron only; a critic is recognised by its value head"),
                       ("--use_cpu_initialization", "merging runs on the CPU anyway")):
        verl.add_argument(flag, action="store_true", help=f"accepted, no effect ({what})")
    verl.add_argument("--lora_alpha", type=int, help="accepted, no effect: LoRA adapters are merged into the weights with "
                                                     "the scaling they were trained with")
    add_debug_argument(merge)
    merge.set_defaults(func=_merge)
    return parser


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, config overrides allowed after options too (`train a=1 --debug b=2`, as Hydra takes them)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    overrides = [word for word in extra if not word.startswith("-") and ("=" in word or word.startswith("~"))]
    if overrides != extra or (extra and not hasattr(args, "overrides")):
        parser.parse_args(argv)  # argparse's own message for the words that are neither options nor overrides
    if extra:
        args.overrides += extra
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    show_traceback = debug_requested(args)
    try:
        return args.func(args)
    except UserError as exc:
        if show_traceback:
            traceback.print_exc()
            if getattr(exc, "worker_traceback", None):  # raised in a Ray worker: where it was raised there
                print(exc.worker_traceback, file=sys.stderr)
        print(f"reinforge: error: {exc}", file=sys.stderr)
        return 2
    except RankError as exc:  # a Ray worker's failure: its own traceback is in the message, the driver's is noise
        if show_traceback:
            traceback.print_exc()
        print(f"reinforge: error: {exc}", file=sys.stderr)
        return 1
    except RunStopped as stopped:  # SIGINT/SIGTERM during training (reinforge/trainer/stop.py)
        print(f"reinforge: {stopped}", file=sys.stderr)
        return stopped.exit_status
    except KeyboardInterrupt:  # Ctrl-C outside the training loop (loading, validation-only runs, other commands)
        print("reinforge: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a full or read-only disk outside a checkpoint's save (which handles its own): no traceback
        from reinforge.trainer.checkpoint import DISK_FULL

        if exc.errno not in DISK_FULL | {errno.EROFS}:
            raise
        if show_traceback:
            traceback.print_exc()
        print(f"reinforge: error: cannot write {exc.filename or 'a file'}: {exc.strerror}. Free some space or make the "
              "folder writable, then run the same command again (reinforge train resumes from its latest checkpoint)",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
