"""Load the user's own estimators and losses: `algorithm.custom_modules` names Python files or modules.

Importing a module runs its `@register_adv_est` / `@register_policy_loss` decorators, after which
its names can be used in `algorithm.adv_estimator` and `policy_loss.loss_mode` like the built-in
ones. Config validation imports them before it checks those names, so a typo fails at start.
"""

from __future__ import annotations

from reinforge.errors import ConfigError
from reinforge.user_code import import_user_module


def import_custom_modules(paths: list[str] | None) -> None:
    """Import every file or module of `algorithm.custom_modules` (each at most once per process)."""
    for path in paths or []:
        import_user_module(str(path), "algorithm.custom_modules", ConfigError)
