"""Errors caused by what a user gave us (config, data, model, reward code).

The command line prints these as one clear message and exits with status 2, without a traceback
unless asked (`--debug` anywhere on the command line, or REINFORGE_DEBUG=1; `--traceback` and
REINFORGE_TRACEBACK=1 are accepted as older spellings). Anything else is a bug in reinforge and
keeps its traceback. docs/errors.md lists the mistakes users make and the message each gets.
"""

import argparse
import contextlib
import os
import re


class UserError(Exception):
    """A mistake in the user's input; the message says what, where, and what to do."""


class ConfigError(UserError):
    """A config key or value is wrong."""


class DataError(UserError):
    """A data file, row or column is wrong."""


class ModelError(UserError):
    """The model or tokenizer cannot be loaded or used as configured."""


class RewardError(UserError):
    """The reward function cannot be loaded or called."""


class TrainingError(UserError):
    """Training cannot usefully go on as configured (e.g. every update is non-finite); the message says what to change."""


class CheckpointError(UserError):
    """A checkpoint cannot be written where the config says (permissions, a read-only filesystem); the message says where."""


class RankError(RuntimeError):
    """Not a user error: a worker in another process (a Ray actor) raised, or its process died. The message starts
    with the rank, role and method and holds the worker's own traceback; the command line prints it first, exit 1."""


def add_debug_argument(parser: argparse.ArgumentParser) -> None:
    """`--debug` (alias `--traceback`) on `parser`; its SUPPRESS default lets the flag sit before or after a sub-command."""
    parser.add_argument("--debug", "--traceback", dest="debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback of a user error too (or set REINFORGE_DEBUG=1)")


def debug_requested(args: argparse.Namespace) -> bool:
    """Whether tracebacks of user errors are wanted: `--debug`, REINFORGE_DEBUG=1 or REINFORGE_TRACEBACK=1."""
    return getattr(args, "debug", False) or "1" in (os.environ.get("REINFORGE_DEBUG"), os.environ.get("REINFORGE_TRACEBACK"))


def without_colours(text: str) -> str:
    """`text` without terminal colour codes (Ray's and transformers' output), which a log file shows as `[36m`."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@contextlib.contextmanager
def writing(path: os.PathLike | str):
    """An OSError raised inside, while a file is written without naming it (a full disk's write), names `path`."""
    try:
        yield
    except OSError as error:
        if error.filename is None:
            error.filename = str(path)
        raise
