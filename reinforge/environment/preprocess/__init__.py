"""`reinforge data <dataset>`: turn a public dataset into verl-schema RL parquet files.

    reinforge data gsm8k     --local_dir ~/data/gsm8k     [--input DIR_OR_FILES ...] [--variant multiturn_w_tool ...]
    reinforge data math      --local_dir ~/data/math      [--input DIR_OR_FILES ...]
    reinforge data countdown --local_dir ~/data/countdown [--input FILE | --generate ...] [--template base|chat]
    reinforge data geo3k     --local_dir ~/data/geo3k     [--input DIR_OR_FILES ...]

Each writes `<local_dir>/train.parquet` and `<local_dir>/test.parquet` with the columns
`data_source`, `prompt`, `ability`, `reward_model` and `extra_info` that verl's
`examples/data_preprocess` scripts (and TinyZero's, for countdown) write, so the files feed
`data.train_files`/`data.val_files` and the built-in scorers. `--input` reads a local copy of the
original dataset (see `splits.py` for the layouts); without it the hub copy is loaded with the
`datasets` library when it is installed. `--max_train`/`--max_test` keep the first N rows of a
split. verl's own option names `--local_save_dir` and `--local_dataset_path` are accepted too.

The math and geo3k modules are imported only when their command runs (its scorer pulls in torch), so `reinforge --help` stays
fast. `reinforge data gsm8k --variant` writes the forms of verl's multi-turn and SFT GSM8K scripts (`gsm8k.py`).
"""

from __future__ import annotations

import argparse
import importlib

from reinforge.environment.preprocess import countdown, gsm8k
from reinforge.errors import ConfigError, add_debug_argument

DATASETS = {
    "gsm8k": "GSM8K grade-school maths (openai/gsm8k, config main)",
    "math": "MATH competition maths (DigitalLearningGmbH/MATH-lighteval, or the original JSON tree)",
    "countdown": "Countdown number puzzles (Jiayi-Pan/Countdown-Tasks-3to4, or generated)",
    "geo3k": "Geometry3K diagrams and questions, rows with images (hiyouga/geometry3k)",
}


GENERATION_OPTIONS = {"seed": "random seed", "min_numbers": "fewest numbers in a task", "max_numbers": "most numbers in a task",
                      "max_target": "largest target"}
GENERATION_DEFAULTS = {"seed": 42, "min_numbers": 3, "max_numbers": 4, "max_target": 100}


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def add_data_arguments(data: argparse.ArgumentParser) -> None:
    """Add one sub-command per dataset, with its options, to the `data` command's parser."""
    datasets = data.add_subparsers(dest="dataset", required=True, metavar="{" + ",".join(DATASETS) + "}")
    for name, summary in DATASETS.items():
        parser = datasets.add_parser(name, help=summary, description=f"Write verl-schema train/test parquet files of {summary}.")
        parser.add_argument("--local_dir", "--local_save_dir", dest="local_dir", default=f"~/data/{name}", metavar="DIR",
                            help="output folder for train.parquet and test.parquet (default: ~/data/" + name +
                                 ("; ~/data/gsm8k_sft for --variant multiturn_sft" if name == "gsm8k" else "") + ")")
        parser.add_argument("--input", "--local_dataset_path", dest="input", nargs="+", metavar="PATH",
                            help="a local copy of the original dataset: files or folders, split by the word train or "
                                 "test in their names (default: load from the hub with the `datasets` library)")
        parser.add_argument("--max_train", type=_count, metavar="N", help="keep only the first N train rows")
        parser.add_argument("--max_test", type=_count, metavar="N", help="keep only the first N test rows (0: no test file)")
        add_debug_argument(parser)
    gsm8k_options = datasets.choices["gsm8k"]
    gsm8k_options.set_defaults(local_dir=None)  # the variant's folder
    gsm8k_options.add_argument("--variant", default="gsm8k", choices=gsm8k.VARIANTS,
                               help="the form of verl's script of that name: " + "; ".join(
                                   f"{name}: {what}" for name, (what, _) in gsm8k.VARIANTS.items()) + " (default: %(default)s)")
    options = datasets.choices["countdown"]
    options.add_argument("--template", "--template_type", dest="template", default="base", choices=countdown.TEMPLATES,
                         help="base: TinyZero's base-model prompt; qwen-instruct: TinyZero's with the Qwen chat's turns "
                              "written out; chat: the user's request only (default: %(default)s)")
    options.add_argument("--num_train", "--train_size", dest="num_train", type=_count, default=countdown.TRAIN_SIZE,
                         metavar="N", help="train tasks: generated, or the first rows of a one-split copy (default: %(default)s)")
    options.add_argument("--num_test", "--test_size", dest="num_test", type=_count, default=countdown.TEST_SIZE, metavar="N",
                         help="test tasks, after the train ones (default: %(default)s)")
    generation = options.add_argument_group("generated tasks (--generate)")
    generation.add_argument("--generate", action="store_true", help="generate tasks solvable by construction instead of reading them")
    for option, help_text in GENERATION_OPTIONS.items():
        generation.add_argument(f"--{option}", type=int, default=GENERATION_DEFAULTS[option], metavar="N",
                                help=f"{help_text} (default: %(default)s)")


def run_data_command(args: argparse.Namespace) -> int:
    """Run `reinforge data <dataset>` with parsed arguments; returns the exit status."""
    if args.dataset == "countdown":
        ignored = [f"--{option}" for option, default in GENERATION_DEFAULTS.items() if getattr(args, option) != default]
        if ignored and not args.generate:
            raise ConfigError(f"{' '.join(ignored)}: the generation options only apply with --generate; add --generate, "
                              "or drop them to read a copy of the dataset.")
        countdown.preprocess(args.local_dir, args.input, args.generate, args.template, args.num_train, args.num_test,
                             args.seed, args.min_numbers, args.max_numbers, args.max_target, args.max_train, args.max_test)
    elif args.dataset == "gsm8k":
        gsm8k.preprocess(args.input, args.local_dir, args.max_train, args.max_test, args.variant)
    else:  # math and geo3k: imported here, as the MATH scorer pulls in the reward package (and torch)
        module = importlib.import_module(f"{__name__}.{args.dataset}")
        module.preprocess(args.input, args.local_dir, args.max_train, args.max_test)
    return 0
