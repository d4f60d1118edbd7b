"""Reading verl's tool config YAML: `tools: [{class_name, config, tool_schema}]` -> tools by name.

`class_name` is a dotted import path (`my_pkg.tools.SearchTool`), a Python file and class
(`path/to/tools.py:SearchTool`), or a built-in's short name (`calculator`, `python`, `gsm8k`).
`tool_schema` is the OpenAI function schema; built-ins have a default one. A tool is called by
its schema's `function.name`. Every mistake raises ConfigError naming the file and the entry.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import yaml

from reinforge.errors import ConfigError
from reinforge.inference.tools.base import BaseTool
from reinforge.inference.tools.builtin import CalculatorTool, Gsm8kTool, PythonTool
from reinforge.user_code import import_user_module

BUILTIN_TOOLS = {"calculator": CalculatorTool, "python": PythonTool, "gsm8k": Gsm8kTool}
KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"


def import_class(spec: str, key: str, where: str) -> type:
    """The class named by `module.Class` or `file.py:Class` (`where` says where it was named, for errors)."""
    if ":" in spec:
        path, name = spec.rsplit(":", 1)
        module = import_user_module(path, key, ConfigError)
    else:
        path, _, name = spec.rpartition(".")
        if not path:
            raise ConfigError(f"{where}: class {spec!r} must be a dotted path (package.module.Class) or file.py:Class")
        try:
            module = importlib.import_module(path)
        except ImportError as err:
            raise ConfigError(f"{where}: cannot import module {path!r} for class {spec!r}: {err}") from err
    if not isinstance(getattr(module, name, None), type):
        raise ConfigError(f"{where}: {path!r} has no class {name!r}")
    return getattr(module, name)


def config_entries(path: str | Path, key: str, section: str, entry_fields: str,
                   builtins: dict[str, type]) -> Iterator[tuple[str, dict, type]]:
    """(where, entry, class) for each entry of the list under `section:` in the YAML file named by config `key`.

    An entry's `class_name` is a built-in's short name, `package.module.Class` or `file.py:Class`; a ConfigError
    names the key, the file and the entry when the file, the list or a class is wrong."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"{key}={path!r}: no such file")
    try:
        document = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{key}: {file} is not valid YAML: {err}") from err
    entries = document.get(section) if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"{key}: {file} must hold a list under '{section}:' (entries with {entry_fields})")
    for i, entry in enumerate(entries):
        where = f"{file}, {section}[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
            raise ConfigError(f"{where}: each entry needs a class_name")
        yield where, entry, builtins.get(entry["class_name"]) or import_class(entry["class_name"], key, where)


def load_tools(path: str | Path) -> dict[str, BaseTool]:
    """The tools of a tool config file, by the name the model calls them."""
    tools: dict[str, BaseTool] = {}
    for where, entry, cls in config_entries(path, KEY, "tools", "class_name, config, tool_schema", BUILTIN_TOOLS):
        if not issubclass(cls, BaseTool) and not hasattr(cls, "execute"):
            raise ConfigError(f"{where}: {entry['class_name']} has no execute method; tools implement BaseTool's interface")
        tool = cls(entry.get("config") or {}, entry.get("tool_schema"))
        name = (tool.get_openai_tool_schema() or {}).get("function", {}).get("name")
        if not name:
            raise ConfigError(f"{where}: the tool has no tool_schema.function.name to be called by")
        if name in tools:
            raise ConfigError(f"{where}: a second tool named {name!r}")
        tools[name] = tool
    return tools
