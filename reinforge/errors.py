"""Errors caused by what a user gave us (config, data, model, reward code).

The command line prints these as one clear message and exits non-zero, without a traceback
unless asked (`--traceback` or REINFORGE_TRACEBACK=1). Anything else is a bug in reinforge and
keeps its traceback.
"""


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
