"""Reading verl's tool config YAML: `tools: [{class_name, config, tool_schema}]` -> tools by name (beside the function
tools of `multi_turn.function_tool_path`: `functions.py`).

`class_name` is a dotted import path (`my_pkg.tools.SearchTool`, found from the current directory
too, as under `python -m`), a Python file and class (`path/to/tools.py:SearchTool`, a relative path
from the current directory, else from the YAML file's folder), or a
built-in's short name (`calculator`, `python`, `gsm8k`; verl's `verl.tools.gsm8k_tool.Gsm8kTool`, as
its example YAMLs name it, is the built-in `gsm8k`). `tool_schema` is the OpenAI function
schema, kept as verl's pydantic model keeps it (`verl_tool_schema`: the fields it knows); built-ins
have a default one. A tool is called by its schema's `function.name`. Every
mistake, an entry's unknown key and a tool whose `__init__` raises included, raises ConfigError
naming the file and the entry.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from reinforge.errors import ConfigError
from reinforge.inference.tools.base import BaseTool, ToolSchema, schema_name, verl_tool_schema
from reinforge.inference.tools.builtin import CalculatorTool, Gsm8kTool, PythonTool
from reinforge.inference.tools.functions import KEY as FUNCTION_KEY
from reinforge.inference.tools.functions import load_function_tools
from reinforge.user_code import class_label, import_module, import_user_module, user_call

BUILTIN_TOOLS = {"calculator": CalculatorTool, "python": PythonTool, "gsm8k": Gsm8kTool,
                 # verl's example YAMLs name its own class (older ones under verl.workers.tool): ours does the same
                 "verl.tools.gsm8k_tool.Gsm8kTool": Gsm8kTool, "verl.workers.tool.gsm8k_tool.Gsm8kTool": Gsm8kTool}
KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"


def import_class(spec: str, where: str, folder: Path | None = None) -> type:
    """The class named by `module.Class` or `file.py:Class` (`where` says where it was named, for errors); a relative
    file that is not in the current directory is looked for in `folder` (that of the config file naming it)."""
    if ":" in spec:
        path, name = spec.rsplit(":", 1)
        file = Path(path).expanduser()
        if folder is not None and not file.is_absolute() and not file.exists() and (folder / file).exists():
            path = str(folder / file)
        module = import_user_module(path, where, ConfigError)
    else:
        path, _, name = spec.rpartition(".")
        if not path:
            raise ConfigError(f"{where}: class {spec!r} must be a dotted path (package.module.Class) or file.py:Class")
        try:
            module = import_module(path)
        except ImportError as err:
            raise ConfigError(f"{where}: cannot import module {path!r} for class {spec!r}: {err}") from err
        except Exception as err:  # the module raised while being imported
            raise ConfigError(f"{where}: importing module {path!r} for class {spec!r} failed: {type(err).__name__}: {err}") from err
    if not isinstance(getattr(module, name, None), type):
        raise ConfigError(f"{where}: {path!r} has no class {name!r}")
    return getattr(module, name)


def read_yaml(path: str | Path, key: str) -> tuple[Path, Any]:
    """The file named by config `key` and its parsed YAML; a ConfigError naming both when it is missing or not YAML."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"{key}={path!r}: no such file")
    try:
        return file, yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{key}: {file} is not valid YAML: {err}") from err


def config_entries(path: str | Path, key: str, section: str, entry_fields: tuple[str, ...],
                   builtins: dict[str, type]) -> Iterator[tuple[str, dict, type]]:
    """(where, entry, class) for each entry of the list under `section:` in the YAML file named by config `key`.

    An entry's `class_name` is a built-in's short name, `package.module.Class` or `file.py:Class`, and its `config`
    a mapping; a ConfigError names the key, the file and the entry when the file, the list, a class or a config is wrong."""
    file, document = read_yaml(path, key)
    document = document or {}
    entries = document.get(section) if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"{key}: {file} must hold a list under '{section}:' (entries with {', '.join(entry_fields)})")
    for i, entry in enumerate(entries):
        where = f"{file}, {section}[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
            raise ConfigError(f"{where}: each entry needs a class_name")
        unknown = [key for key in entry if key not in entry_fields]
        if unknown:  # a misspelt key would leave its setting at the default unnoticed
            named = [f"{key!r}" + (f" (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(str(key), entry_fields, n=1))
                                   else "") for key in unknown]
            raise ConfigError(f"{where}: unknown key{'s' * (len(unknown) > 1)} {', '.join(named)}; an entry has {', '.join(entry_fields)}")
        _check_mapping(where, entry, "config", "the keyword settings given to the class, e.g. {timeout_s: 5}")
        name = entry["class_name"]
        short = sorted(b for b in builtins if "." not in b)
        if name not in builtins and "." not in name and ":" not in name:  # neither a built-in nor a path: a typo?
            close = difflib.get_close_matches(name, short, n=1)
            raise ConfigError(f"{where}: class_name {name!r} is not a built-in {section.removesuffix('s')} ({', '.join(short)}"
                              f"{f'; did you mean {close[0]!r}?' if close else ''}) nor a class path (package.module.Class "
                              "or file.py:Class)")
        try:
            yield where, entry, builtins.get(name) or import_class(name, where, file.parent)
        except ConfigError as err:
            if not name.startswith("verl."):
                raise
            raise ConfigError(f"{err} (verl is not a dependency of reinforge: its {name.rsplit('.', 1)[-1]} needs verl "
                              f"installed; reinforge's built-in ones are {', '.join(short)})") from err


def _check_mapping(where: str, entry: dict, field: str, meaning: str) -> None:
    value = entry.get(field)
    if value is not None and not isinstance(value, dict):
        raise ConfigError(f"{where}: {field} must be a mapping ({meaning}), not {value!r} ({type(value).__name__})")


def build(cls: type, where: str, *args: Any) -> Any:
    """`cls(*args)`, a class from a config file: an exception its __init__ raises becomes a ConfigError naming the entry."""
    with user_call(f"{where}: building {class_label(cls)}", ConfigError):
        return cls(*args)


def load_all_tools(tool_config_path: str | Path | None, function_tool_path: str | Path | None) -> dict[str, BaseTool]:
    """The tools of the tool config file and of the function tool file (either may be None), by name; a name in both
    is a ConfigError."""
    tools = load_tools(tool_config_path) if tool_config_path else {}
    functions = load_function_tools(function_tool_path) if function_tool_path else {}
    both = sorted(set(tools) & set(functions))
    if both:
        raise ConfigError(f"{FUNCTION_KEY}: the function tools {both} have the names of tools of {KEY}={tool_config_path}; "
                          "each tool name must be unique: rename one")
    return {**tools, **functions}


def load_tools(path: str | Path) -> dict[str, BaseTool]:
    """The tools of a tool config file, by the name the model calls them."""
    tools: dict[str, BaseTool] = {}
    for where, entry, cls in config_entries(path, KEY, "tools", ("class_name", "config", "tool_schema"), BUILTIN_TOOLS):
        if not issubclass(cls, BaseTool) and not hasattr(cls, "execute"):
            raise ConfigError(f"{where}: {entry['class_name']} has no execute method; tools implement BaseTool's interface")
        _check_mapping(where, entry, "tool_schema", "an OpenAI function schema: {type: function, function: {name, description, "
                                                     "parameters}}")
        schema = entry.get("tool_schema")
        tool = build(cls, where, entry.get("config") or {}, None if schema is None else ToolSchema(verl_tool_schema(schema)))
        name = schema_name(tool.get_openai_tool_schema())
        if not name:
            raise ConfigError(f"{where}: the tool has no tool_schema.function.name to be called by")
        if name in tools:
            raise ConfigError(f"{where}: a second tool named {name!r}")
        tools[name] = tool
    return tools
