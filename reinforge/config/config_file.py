"""Reading a `--config` YAML file: verl's custom configs start with `hydra: {searchpath: [...]}` and
`defaults: [ppo_trainer, _self_]`; the schema's defaults are verl's base trainer config, so such a file loads as if those
lines were absent. Hydra settings that only say where Hydra looks for configs or writes its own outputs and logs are
ignored; a defaults entry or Hydra setting that would change the config or the job is refused, naming the file and the
entry. config/loading.py turns the mapping read here into overrides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reinforge.errors import ConfigError

# Hydra settings that change no config key and not how the job runs: where Hydra writes its outputs and logs, and how much
# it logs. hydra.searchpath (where Hydra looks for ppo_trainer) is ignored without a note: reinforge's base is built in.
HYDRA_OUTPUT_SETTINGS = ("run", "sweep", "output_subdir", "job_logging", "hydra_logging", "verbose")


def _hydra_settings(file: Path, settings: Any) -> list[str]:
    """The `hydra:` section of a config file: the settings ignored (to be listed as without effect); others refused."""
    if not isinstance(settings, dict):
        raise ConfigError(f"{file}: 'hydra' must be a mapping of Hydra settings, e.g. hydra: {{searchpath: [...]}}")
    return [setting for name, value in settings.items() if (setting := _hydra_setting(str(file), name, value))]


def _hydra_setting(where: str, name: str, value: Any) -> str | None:
    """Hydra's own setting `hydra.<name>: value`: the name to list as without effect, or None (searchpath, where Hydra
    looks for configs, is ignored without a note); a ConfigError naming `where` for one that changes how the job runs."""
    job_name_only = name == "job" and isinstance(value, dict) and set(value) <= {"name", "chdir"} and not value.get("chdir")
    if name == "searchpath":
        return None
    if name in HYDRA_OUTPUT_SETTINGS or job_name_only:
        return f"hydra.{name}"
    raise ConfigError(f"{where}: hydra.{name} cannot be honoured: reinforge does not run through Hydra, and this setting "
                      f"would change how the job runs; remove it (hydra.searchpath, {', '.join(HYDRA_OUTPUT_SETTINGS)} and "
                      "job.name are ignored)")


def command_line_hydra(overrides: list) -> tuple[list, list[str]]:
    """The command line's overrides without Hydra's own settings (`hydra.run.dir=outputs/x`, `hydra/job_logging=disabled`,
    which verl's Hydra entry point takes), and those settings to list as without effect; one that would change how the
    job runs is a ConfigError, as in a config file."""
    kept, ignored = [], []
    for override in overrides:
        key = override.key
        if key.startswith("hydra/"):  # a choice in one of Hydra's config groups: only its logging's change nothing here
            if key.removeprefix("hydra/") not in ("job_logging", "hydra_logging"):
                raise ConfigError(f"{override.text}: Hydra's config group {key} cannot be honoured: reinforge does not run "
                                  "through Hydra; remove it (hydra/job_logging and hydra/hydra_logging are ignored)")
            ignored.append(key)
        elif key == "hydra" or key.startswith("hydra."):
            name, *rest = key.split(".")[1:] or [""]
            value = override.value
            for part in reversed(rest):
                value = {part: value}
            if setting := _hydra_setting(override.text, name, value):
                ignored.append(setting)
        else:
            kept.append(override)
    return kept, ignored


def _defaults_list(file: Path, entries: Any, base: str) -> list[str]:
    """A verl-style `defaults:` list: `base` (`ppo_trainer`, `sft_trainer`) then `_self_` is the schema's defaults under
    the file, which is what reinforge builds anyway; Hydra's own logging groups change no key (returned, to be listed as without effect)."""
    if not isinstance(entries, list):
        raise ConfigError(f"{file}: 'defaults' must be a list (Hydra's defaults list), e.g. defaults: [{base}, _self_]")
    names, ignored = [], []
    for entry in entries:
        if entry in (base, "_self_"):
            names.append(entry)
            continue
        if isinstance(entry, dict) and len(entry) == 1:
            (group, choice), = entry.items()
            if str(group).removeprefix("override ").strip().startswith("hydra/"):  # e.g. override hydra/job_logging: disabled
                ignored.append(str(group).removeprefix("override ").strip())
                continue
            entry = f"{group}: {choice}"
        raise ConfigError(
            f"{file}: the defaults entry {str(entry)!r} cannot be loaded: reinforge builds verl's base trainer config "
            f"({base}) and nothing else, not verl's config groups or other trainer configs. Remove the entry and set "
            "the keys it stands for in the file itself")
    if "_self_" in names and base in names[names.index("_self_"):]:
        raise ConfigError(f"{file}: the defaults list puts _self_ before {base}, so in verl {base}'s values "
                          f"would override this file's own; reinforge applies the file over the base config. Put _self_ "
                          f"last: defaults: [{base}, _self_]")
    return ignored


def read(path: str, base: str) -> tuple[Path, dict, list[str]]:
    """The file, the mapping of keys it holds (without `hydra` and `defaults`), and its ignored Hydra settings;
    `base` is the name of verl's config that the schema's defaults stand for (`ppo_trainer`, `sft_trainer`)."""
    from omegaconf import OmegaConf

    file = Path(path).expanduser()
    if file.is_dir():
        raise ConfigError(f"config file {file} is a folder; give the YAML file in it, e.g. --config {file}/<name>.yaml")
    if not file.is_file():
        raise ConfigError(f"config file not found: {file}")
    try:
        loaded = OmegaConf.to_container(OmegaConf.load(file), resolve=False)
    except Exception as exc:  # yaml syntax errors carry the line
        raise ConfigError(f"cannot read config file {file}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {file} must hold a mapping of keys")
    ignored = _hydra_settings(file, loaded.pop("hydra")) if "hydra" in loaded else []
    if "defaults" in loaded:
        ignored += _defaults_list(file, loaded.pop("defaults"), base)
    return file, loaded, ignored
