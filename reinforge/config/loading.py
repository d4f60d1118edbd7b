"""From command-line overrides (and an optional YAML file) to a validated `Config`.

Overrides use Hydra's grammar as verl users type it: `a.b=c`, `+a.b=c` (add), `++a.b=c`,
`~a.b` (delete: back to the default), lists `'[x,y]'`, `null`. Values that Hydra's parser rejects
but that are plainly a path (`data.train_files=~/x.parquet`) are taken as strings, and a
bracketed list of them (`'[~/a.parquet,~/b.parquet]'`, an item wholly in quotes among them too) as a
list of strings; another rejected value with quotes, brackets or braces in it (an unclosed quote,
`{a:1`) is refused with Hydra's message.

The schema is strict: a key that is not in it fails before anything loads, with the closest
valid key suggested (the same name under another parent first: actor.lr is actor.optim.lr). Keys
under free-form dicts (`reward_kwargs`, `engine_kwargs`, ...) are open. A YAML file (`--config`,
read by config/config_file.py) sets keys under the command line's; an error about a key whose
value comes from the file names the file (`naming_the_file`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import os
import re
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from reinforge.config import quickstart
from reinforge.config.schema import Config
from reinforge.errors import ConfigError

_PLAIN_OVERRIDE = re.compile(r"^(\+{0,2}|~)([A-Za-z_][\w.]*)(?:=(.*))?$", re.S)
_RAW_VALUE = re.compile(r"""^[^'"{}()\[\]]*$""")  # a value Hydra refuses taken as it is: no quotes, brackets, braces
_QUOTED_ITEM = re.compile(r"""^(['"])([^'"]*)\1$""")


@dataclasses.dataclass(frozen=True)
class Override:
    key: str
    value: Any
    kind: str  # "set", "add", "delete" or "unset" (a delete not counted as the user's setting)
    text: str


def parse_overrides(args: list[str]) -> list[Override]:
    """Parse override strings with Hydra's parser (its grammar is what verl users know)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    result = []
    for arg in args:
        try:
            (parsed,) = parser.parse_overrides([arg])
        except OverrideParseException as err:
            match = _PLAIN_OVERRIDE.match(arg)
            if not match or match.group(3) is None and match.group(1) != "~":
                raise ConfigError(
                    f"cannot parse override {arg!r}: expected key=value, +key=value or ~key "
                    "(Hydra's override grammar, as verl uses)"
                ) from None
            prefix, key, value = match.groups()
            listed = value is not None and value.startswith("[") and value.endswith("]")  # a list of such values: [~/a,~/b]
            items = [item.strip() for item in value[1:-1].split(",")] if listed else [value or ""]
            if listed:  # an item in quotes beside bare paths ([~/a.parquet,'~/s/*.parquet']): the text inside them
                items = [quoted.group(2) if (quoted := _QUOTED_ITEM.match(item)) else item for item in items]
            if not all(_RAW_VALUE.match(item) for item in items) or (listed and value != "[]" and not all(items)):
                first = str(err).strip().splitlines()[0] if str(err).strip() else "not Hydra's override grammar"
                raise ConfigError(f"cannot parse override {arg!r}: {first} (Hydra's override grammar, as verl uses; quote "
                                  "a value with spaces or special characters, e.g. key='a b')") from None
            if listed:
                value = [item for item in items if item]
            kind = {"": "set", "+": "add", "++": "add", "~": "delete"}[prefix]
            result.append(Override(key, value, kind, arg))
            continue
        if parsed.is_sweep_override():
            if parsed.key_or_group.endswith("custom_reward_function.path"):  # OpenRLHF's --remote_rm_url a,b
                raise ConfigError(f"{arg}: one reward function file or reward server URL is taken (OpenRLHF's "
                                  "comma-separated --remote_rm_url sends a call for one response to the first); give one")
            raise ConfigError(f"override {arg!r} is a sweep; reinforge train runs one configuration (a list value is "
                              f"written in brackets: '{parsed.key_or_group}=[a,b]')")
        kind = {"CHANGE": "set", "ADD": "add", "FORCE_ADD": "add", "DEL": "delete"}[parsed.type.name]
        value = None if kind == "delete" else parsed.value()
        result.append(Override(parsed.key_or_group, value, kind, arg))
    return result


# ---------------------------------------------------------------------------------------------
@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _dataclass_of(annotation: Any) -> type | None:
    """The dataclass inside `X` or `X | None`, else None."""
    if dataclasses.is_dataclass(annotation):
        return annotation
    for arg in typing.get_args(annotation):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


@cache
def all_keys(root: type = Config) -> tuple[str, ...]:
    """Every leaf key path of the schema `root` ('data.train_files', ...)."""
    keys: list[str] = []

    def walk(cls: type, prefix: str) -> None:
        for name, annotation in _hints(cls).items():
            sub = _dataclass_of(annotation)
            if sub is not None:
                walk(sub, f"{prefix}{name}.")
            else:
                keys.append(prefix + name)

    walk(root, "")
    return tuple(keys)


def field_doc(key: str, root: type = Config) -> str:
    """The documentation of a schema key."""
    cls, *parts = root, *key.split(".")
    for part in parts[:-1]:
        cls = _dataclass_of(_hints(cls)[part])
    return {f.name: f for f in dataclasses.fields(cls)}[parts[-1]].metadata.get("doc", "")


# verl's older names and recipes' own keys, which the closest spelling would not find: (the key's section, its last
# part) -> what to write instead ("{section}" is the key's section; "*" matches any section)
RENAMED = {
    ("*", "use_rmpad"): "'{section}.use_remove_padding'",
    ("actor_rollout_ref.actor", "use_gpg_loss"): "'actor_rollout_ref.actor.policy_loss.loss_mode=gpg'",
    ("reward_model", "overlong_buffer"): "'+reward_model.reward_kwargs.overlong_buffer_cfg' with 'reward_model.reward_manager=dapo' (docs/rewards.md)",
    ("reward_model.overlong_buffer", "*"): ("'+reward_model.reward_kwargs.overlong_buffer_cfg.{leaf}' with "
                                            "'reward_model.reward_manager=dapo' (docs/rewards.md)"),
    # names that descriptions of verl's config use for settings whose keys are spelt otherwise
    ("actor_rollout_ref.rollout", "tools"): ("'actor_rollout_ref.rollout.multi_turn.tool_config_path' (a YAML file "
                                             "listing the tools, with multi_turn.enable=true; docs/agents.md)"),
    ("actor_rollout_ref.rollout", "interactions"): ("'actor_rollout_ref.rollout.multi_turn.interaction_config_path' (a YAML "
                                                    "file listing the interactions; docs/agents.md)"),
    ("data", "chat_template"): "'actor_rollout_ref.model.custom_chat_template' (a Jinja template string)",
    ("data", "custom_chat_template"): "'actor_rollout_ref.model.custom_chat_template' (a Jinja template string)",
    ("", "ray_init"): "'ray_kwargs.ray_init' (verl's newer place)",
    ("ray_init", "*"): "'ray_kwargs.ray_init.{leaf}' (verl's newer place)",
    ("*", "beta1"): "'{section}.betas=[<beta1>,<beta2>]' (AdamW's two betas, as one list)",
    ("*", "beta2"): "'{section}.betas=[<beta1>,<beta2>]' (AdamW's two betas, as one list)",
    ("algorithm", "policy_loss_fn"): "'actor_rollout_ref.actor.policy_loss.loss_mode' (vanilla is PPO's clipped loss)",
    ("reward_model", "reward_format"): ("'custom_reward_function.path' for a scorer of your own; the built-in scorer "
                                        "follows each row's data_source column (docs/rewards.md)"),
}


# settings of verl features this version does not have, which the closest spelling would mistake for another key: start -> feature
_LISTED = ", which is not in this version (docs/algorithms.md lists the estimators and losses there are)"
_SERVER = ("verl's SGLang server mode, which is not in this version: SGLang runs inside the training processes "
           "(actor_rollout_ref.rollout.name=sglang); leave sglang_engine_mode and the server section out")
ABSENT_FEATURES = {
    "algorithm.codapo_": "verl's CoDaPO estimator (algorithm.adv_estimator=codapo)" + _LISTED,
    "actor_rollout_ref.rollout.sglang_engine_mode": _SERVER,
    "actor_rollout_ref.rollout.server.": _SERVER,
    "trainer.remote_backend": "verl's remote training backends (Arctic RL), which are not in this version",
    "remote_backend.": "verl's remote training backends (Arctic RL), which are not in this version",
}


def _renamed(key: str, root: type = Config) -> str | None:
    """What to write instead of `key`, when it is an old verl name or a recipe's own key and what it names is a key of
    `root` (the command's schema: reinforge generate has no actor_rollout_ref, the data section no betas)."""
    section, _, leaf = key.rpartition(".")
    keys = all_keys(root)
    for (where, name), instead in RENAMED.items():
        if where in ("*", section) and name in ("*", leaf):
            text = instead.format(section=section, leaf=leaf)
            target = re.match(r"'\+?([\w.]+)", text).group(1)
            if any(target == known or target.startswith(known + ".") for known in keys):
                return text
    return None


def _suggest(key: str, root: type = Config) -> str:
    renamed = _renamed(key, root)
    if renamed:
        return f"; did you mean {renamed}?"
    feature = next((what for start, what in ABSENT_FEATURES.items() if key.startswith(start)), None)
    if feature:
        return f"; it is a setting of {feature}"
    if "megatron" in key.split("."):  # verl's Megatron-LM backend (actor.megatron.*, ref.megatron.*, critic.megatron.*)
        return ("; it is a setting of verl's Megatron-LM backend, and reinforge trains with FSDP2 (strategy=fsdp): leave "
                "the megatron keys out, or use their fsdp_config counterparts")
    keys = all_keys(root)
    parts, leaf = key.split("."), key.rsplit(".", 1)[-1]
    placed = [k for k in keys if k.endswith("." + leaf) or k == leaf]  # the right name under another parent (actor.lr)
    if placed:  # the one sharing the most leading parts with `key`, then the first in the schema (the actor's first)
        nearest = min(placed, key=lambda known: (-len(os.path.commonprefix([parts, known.split(".")])), keys.index(known)))
        return f"; did you mean '{nearest}'?"
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    if not close:  # a misspelt last part under the right parent
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in keys if k.startswith(key.rsplit(".", 1)[0] + ".")}
        leaf_match = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.6)
        close = [by_leaf[leaf_match[0]]] if leaf_match else []
    return f"; did you mean '{close[0]}'?" if close else ""


def _apply(tree: dict, cls: type, override: Override) -> list[str]:
    """Set, add or delete one key in the nested dict `tree` that mirrors the schema's root dataclass `cls`; returns the
    keys it set (a group given as a mapping, `data.multiturn={enable: true}`, sets the keys the mapping names)."""
    parts = override.key.split(".")
    node, node_cls = tree, cls
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if node_cls is None:  # inside a free-form dict: anything goes
            if last:
                if override.kind in ("delete", "unset"):
                    node.pop(part, None)
                else:
                    node[part] = _merged(node.get(part), override.value)
                return [override.key]
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{override.text!r}: '{'.'.join(parts[:depth + 1])}' is not a mapping")
            continue
        hints = _hints(node_cls)
        if part not in hints:
            where = ".".join(parts[: depth + 1])
            detail = f" ('{where}' is not a key)" if where != override.key else ""
            raise ConfigError(f"unknown config key '{override.key}'{detail}{_suggest(override.key, cls)}")
        annotation = hints[part]
        sub = _dataclass_of(annotation)
        if last:
            if override.kind in ("delete", "unset"):
                node[part] = _default_at(override.key, cls)
            elif sub is not None and not isinstance(override.value, dict) and override.value is not None:
                raise ConfigError(
                    f"'{override.key}' is a group of keys, not a value; set one of: "
                    + ", ".join(f"{override.key}.{name}" for name in _hints(sub))
                )
            else:
                if sub is not None and isinstance(override.value, dict):
                    return [set_key for key, value in override.value.items()
                            for set_key in _apply(tree, cls, Override(f"{override.key}.{key}", value, override.kind, override.text))]
                node[part] = _merged(node.get(part), override.value) if _is_free_dict(annotation) else override.value
            return [override.key]
        if sub is None:
            if _is_free_dict(annotation):
                if node.get(part) is None:
                    node[part] = {}
                node, node_cls = node[part], None
                continue
            raise ConfigError(f"unknown config key '{override.key}' ('{'.'.join(parts[:depth + 1])}' is a value, not a group){_suggest(override.key, cls)}")
        if node.get(part) is None:
            node[part] = dataclasses.asdict(sub())
        node, node_cls = node[part], sub


def _merged(old: Any, new: Any) -> Any:
    """A mapping given to a mapping merges into it, key by key, as Hydra merges `key={...}` into a dict node; any other
    value replaces the old one."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return new
    return {**old, **{key: _merged(old.get(key), value) for key, value in new.items()}}


def _is_free_dict(annotation: Any) -> bool:
    """A mapping of the user's own keys (`dict`, `dict | None`, Any): `+section.key.name=value` adds to it."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation, *others = [arg for arg in typing.get_args(annotation) if arg is not type(None)] or [None]
        if others:
            return False
    return annotation is dict or typing.get_origin(annotation) is dict or annotation is Any


def _default_at(key: str, root: type = Config) -> Any:
    node: Any = dataclasses.asdict(root())
    for part in key.split("."):
        node = node[part] if isinstance(node, dict) else None
    return node


# ---------------------------------------------------------------------------------------------
def _coerce(value: Any, annotation: Any, key: str, root: type = Config) -> Any:
    """Check `value` against the field type; convert the harmless cases (int -> float)."""
    if annotation is Any:
        return value
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, key, root)
            except ConfigError as exc:
                errors.append(exc)
        raise errors[0]
    sub = _dataclass_of(annotation)
    if sub is not None:
        if not isinstance(value, dict):
            raise ConfigError(f"'{key}' must be a group of keys, got {value!r}")
        return _build(sub, value, key + ".", root)
    expected = origin or annotation
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if expected is float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    if expected is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if expected is list and isinstance(value, tuple):
        return list(value)
    if expected is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # as OmegaConf's string fields take them: trainer.experiment_name=2024, model_dtype=32
    if isinstance(value, expected) and not (expected is int and isinstance(value, bool)):
        return value
    type_name = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list", dict: "a mapping"}
    if value == "":  # `key=` with nothing after it, as a shell variable that was never set writes it
        raise ConfigError(f"'{key}' must be {type_name.get(expected, expected)}, got an empty value ('{key}=' with nothing after "
                          f"it, e.g. from an unset shell variable); leave the override out to keep the default "
                          f"{_default_at(key, root)!r} ({field_doc(key, root)})")
    raise ConfigError(f"'{key}' must be {type_name.get(expected, expected)}, got {value!r} ({field_doc(key, root)})")


def _build(cls: type, tree: dict, prefix: str = "", root: type | None = None) -> Any:
    root = root or cls
    hints = _hints(cls)
    kwargs = {}
    for name, value in tree.items():
        if name not in hints:
            raise ConfigError(f"unknown config key '{prefix}{name}'{_suggest(prefix + name, root)}")
        kwargs[name] = _coerce(value, hints[name], prefix + name, root)
    return cls(**kwargs)


BASE_CONFIG = "ppo_trainer"  # verl's base trainer config (verl/trainer/config/ppo_trainer.yaml): `Config`'s defaults


def _from_yaml(path: str, root: type = Config, base: str = BASE_CONFIG) -> tuple[list[Override], list[str]]:
    """The keys a config file sets, and the Hydra settings in it that are ignored (`hydra.run`, ...)."""
    from reinforge.config.config_file import read

    file, loaded, ignored = read(path, base)
    overrides = []

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            full = f"{prefix}{key}"
            if isinstance(value, dict) and value and _is_group(full, root):
                walk(value, full + ".")
            else:
                overrides.append(Override(full, value, "set", f"{file}: {full}"))

    walk(loaded, "")
    return overrides, ignored


def _is_group(key: str, root: type = Config) -> bool:
    return any(k.startswith(key + ".") for k in all_keys(root))


def _as_read(override: Override, null_is_unset: frozenset[str]) -> Override:
    """`override`, or, for a key of `null_is_unset` set to null, a return to its default that is not the user's setting."""
    if override.value is None and override.kind != "delete" and override.key in null_is_unset:
        return dataclasses.replace(override, kind="unset")
    return override


def resolve(root: type, args: list[str] | None = None, config_file: str | None = None, base: str = BASE_CONFIG,
            preset: Callable[[list[str]], dict[str, Any] | None] | None = None,
            null_is_unset: frozenset[str] = frozenset()) -> tuple[Any, list[str], list[str]]:
    """Defaults of the schema `root`, a preset (the values `preset(user_keys)` returns: the quickstart's), a YAML file
    and overrides, into an instance of `root`.

    Returns it, the keys the user set, and the file's ignored Hydra settings (for the report of settings without effect).
    `base` is the name of verl's config that `root`'s defaults stand for, as a file's defaults list names it.
    A key of `null_is_unset` set to null goes back to its default, as `~key` would, and is not counted as set.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from reinforge.config.config_file import command_line_hydra

    file_overrides, ignored = _from_yaml(config_file, root, base) if config_file else ([], [])
    from_file = {id(override) for override in file_overrides}
    given, hydra_settings = command_line_hydra(parse_overrides(list(args or [])))
    ignored = list(dict.fromkeys(ignored + hydra_settings))
    overrides = [override for override in file_overrides + given
                 if override.key.rpartition(".")[2] != "_target_"]  # verl's class for Hydra to build a section: no setting
    defaults = dataclasses.asdict(root())
    tree = copy.deepcopy(defaults) if preset else defaults
    user_keys = []  # the keys the user sets (a group given as a mapping sets the keys it names), which the preset depends on
    for index, given in enumerate(overrides):
        try:
            overrides[index] = override = _as_read(given, null_is_unset)
            user_keys += [key for key in _apply(tree, root, override) if override.kind != "unset"]
        except ConfigError as error:  # a key of the file: the message names it
            raise ConfigError(f"{config_file}: {error}" if id(given) in from_file else str(error)) from None
    values = preset(user_keys) if preset else None
    if values:  # the preset lies under the user's overrides: applied to the defaults, then the overrides again
        tree = defaults
        for key, value in values.items():
            _apply(tree, root, Override(key, value, "set", f"quickstart {key}"))
        for override in overrides:
            _apply(tree, root, override)
    try:
        resolved = OmegaConf.to_container(OmegaConf.create(tree), resolve=True)
    except OmegaConfBaseException as exc:
        where = f" of '{exc.full_key}'" if getattr(exc, "full_key", None) else ""
        raise ConfigError(f"cannot resolve the interpolation{where} in the config: {str(exc).splitlines()[0]}") from None
    return _build(root, resolved), user_keys, ignored


@contextlib.contextmanager
def naming_the_file(config_file: str | None, args: list[str] | None, root: type = Config, base: str = BASE_CONFIG):
    """Within it, a ConfigError that names a key whose value comes from `config_file` (not overridden in `args`) starts
    with the file's name, as one about an unknown key of the file does: a type or range error says where to fix it."""
    try:
        yield
    except ConfigError as error:
        message = str(error)
        if not config_file or message.startswith(f"{config_file}:"):
            raise
        try:
            given = {override.key for override in parse_overrides(list(args or []))}
            keys = {override.key for override in _from_yaml(config_file, root, base)[0]} - given
        except ConfigError:  # the mistake is in reading the overrides or the file: that error as it is
            raise error from None
        named = message.split("; did you mean")[0]  # not a key only suggested
        if any(re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", named) for key in keys):
            raise ConfigError(f"{config_file}: {message}") from None
        raise


def load_config(args: list[str] | None = None, config_file: str | None = None) -> tuple[Config, list[str]]:
    """Resolve defaults, the quickstart preset, a YAML file and overrides into a `Config`.

    Returns the config and the keys the user set, with the file's ignored Hydra settings (for the report of settings
    without effect).
    """
    from reinforge.config.section_checks import NULL_MEANS_DEFAULT
    from reinforge.config.validate import finalize

    with naming_the_file(config_file, args):
        config, user_keys, ignored = resolve(Config, args, config_file, null_is_unset=NULL_MEANS_DEFAULT,
                                             preset=lambda keys: quickstart.values() if quickstart.applies(keys) else None)
        finalize(config, quickstart.applies(user_keys))
    return config, ignored + user_keys


def to_dict(config: Any) -> dict:
    return dataclasses.asdict(config)


def describe(config: Any, unused: list[str]) -> str:
    """What a command's --dry-run prints: the resolved config, then the settings without effect in this run."""
    from omegaconf import OmegaConf

    lines = ["# resolved config", OmegaConf.to_yaml(OmegaConf.create(to_dict(config))).rstrip()]
    if unused:
        lines += ["", "# settings without effect in this run"] + [f"- {line}" for line in unused]
    return "\n".join(lines)
