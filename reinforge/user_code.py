"""Import the user's Python code named in the config (a reward function, a Dataset class, algorithms), and call it.

`import_user_module(path, key, error)` takes a Python file or an importable module name. A file
is imported under a unique module name (two files both called `reward.py` do not collide),
with its own folder on `sys.path` while it runs so that it can import its siblings; importing
the same file again returns the module already loaded. A module name is imported with the current
directory on `sys.path` (`import_module`), as `python -m` has it: the `reinforge` console script
starts with its own folder there instead, so `my_module` or `my_pkg.tools` beside the config would
otherwise not be found. Every failure raises `error` (a
`UserError` kind) naming the config key, the file, and for an exception inside the file the
line it came from.

`load_user_class(path, name, path_key, name_key)` is the class a config names by file or module and
class name (a Dataset, a sampler, a data generator), with verl's `file://` and `pkg://` prefixes.

`check_keywords(cls, kwargs, where, error)` says, before the call, that a user's class cannot be
built as verl builds it; `user_call(where, error)` wraps a call into user code, so that an exception
it raises becomes `error` "<where> failed: <type>: <message>" (the traceback kept as its cause,
shown with --debug) while reinforge's own `UserError`s pass through.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from reinforge.errors import DataError, UserError


def import_user_module(path: str, key: str, error: type[UserError]) -> ModuleType:
    """The module of the Python file or importable module `path` (given as config key `key`)."""
    file = Path(path).expanduser()
    if file.exists() or path.endswith(".py") or "/" in path:
        return _import_file(file.resolve(), key, error)
    try:
        return import_module(path)
    except ModuleNotFoundError as err:
        if err.name and path.startswith(err.name):
            raise error(f"{key}={path!r} is neither a file nor an importable module") from None
        raise error(f"{key}={path!r}: importing it failed: {type(err).__name__}: {err}") from err
    except Exception as err:  # the module raised while being imported
        raise error(f"{key}={path!r}: importing it failed: {type(err).__name__}: {err}") from err


def import_module(name: str) -> ModuleType:
    """`importlib.import_module(name)` with the current directory on `sys.path` while it imports, as under `python -m`."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _import_file(path: Path, key: str, error: type[UserError]) -> ModuleType:
    if not path.is_file():
        problem = "is a folder, not a Python file" if path.is_dir() else "does not exist"
        raise error(f"{key}: {path} {problem}")
    module_name = f"reinforge_user_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise error(f"{key}: {path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickle look the module up here
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:
        sys.modules.pop(module_name, None)
        raise error(f"{key}: importing {path} failed: {_describe(err, path)}") from err
    finally:
        sys.path.remove(str(path.parent))
    return module


def class_label(cls: type) -> str:
    """Where the user's class is, for messages: `path/file.py:Class` for one imported from a file (its module name is
    reinforge's own), else `module.Class`."""
    module = sys.modules.get(cls.__module__)
    if cls.__module__.startswith("reinforge_user_") and getattr(module, "__file__", None):
        return f"{module.__file__}:{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _describe(err: BaseException, path: Path) -> str:
    """The error with the line of `path` where it happened, e.g. `line 3: import foo -> ModuleNotFoundError: ...`."""
    message = f"{type(err).__name__}: {err}"
    if isinstance(err, SyntaxError) and err.filename == str(path):
        return f"line {err.lineno}: {(err.text or '').strip()} -> {type(err).__name__}: {err.msg}"
    frames = [frame for frame in traceback.extract_tb(err.__traceback__) if frame.filename == str(path)]
    if frames:
        return f"line {frames[-1].lineno}: {(frames[-1].line or '').strip()} -> {message}"
    return message


def check_keywords(cls: type, kwargs: dict[str, Any], where: str, error: type[UserError]) -> None:
    """`error` when the user's class `cls` (named by `where`) cannot be called with these keyword arguments."""
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as err:
        *first, last = kwargs
        names = f"{', '.join(first)} and {last}" if first else last
        raise error(f"{where} must accept the keyword arguments {names} (as verl calls it): {err}") from None


@contextmanager
def user_call(where: str, error: type[UserError]) -> Iterator[None]:
    """Run a call into the user's code: an exception it raises becomes `error` naming `where`."""
    try:
        yield
    except UserError:
        raise
    except Exception as err:
        raise error(f"{where} failed: {type(err).__name__}: {err}") from err


def load_user_class(path: str, name: str | None, path_key: str, name_key: str) -> type:
    """The class `name` defined in the Python file or importable module `path`, with verl's prefixes: `file://` before a
    file's path, `pkg://` before a module's dotted or slashed path (`pkg://pkg/module` is `pkg.module`).

    Errors are DataErrors that name the config keys `path_key` and `name_key` and list the classes the file defines.
    """
    source = str(path)
    if source.startswith("pkg://"):
        source = source.removeprefix("pkg://").replace("/", ".")
    module = import_user_module(source.removeprefix("file://"), path_key, DataError)
    defined = sorted(k for k, v in vars(module).items() if isinstance(v, type) and v.__module__ == module.__name__)
    where = f"{path_key}={path!r}"
    if not name or not hasattr(module, name):
        missing = f"{name_key} is not set" if not name else f"it defines no {name!r} ({name_key})"
        raise DataError(f"{where}: {missing}; the classes it defines are: {', '.join(defined) or '(none)'}.")
    cls = getattr(module, name)
    if not isinstance(cls, type):
        text = repr(cls)
        raise DataError(f"{where}: {name!r} ({name_key}) is not a class; it is {type(cls).__name__} "
                        f"{text if len(text) <= 120 else text[:120] + '...'}.")
    return cls


def checked_subclass(cls: type, namespace: dict) -> type:
    """A subclass of the user's class `cls` with the methods in `namespace` (which check what the user's code does), named
    as `cls` (so messages, `isinstance` and `type(x).__name__` read as the user's) and pickled as `cls`: a copy in
    another process is the user's class as it is."""
    def reduce_ex(self, protocol):
        return _remade, (cls, self.__getstate__() if hasattr(self, "__getstate__") else dict(vars(self)))

    return type(cls.__name__, (cls,), {**namespace, "__reduce_ex__": reduce_ex, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})


def _remade(cls: type, state):
    """An instance of `cls` with the pickled `state` (what `checked_subclass`'s instances unpickle as)."""
    made = cls.__new__(cls)
    if hasattr(made, "__setstate__"):
        made.__setstate__(state)
        return made
    attributes, slots = state if isinstance(state, tuple) else (state, None)  # (dict, slots) for a class with __slots__
    if attributes:
        vars(made).update(attributes)
    for name, value in (slots or {}).items():
        object.__setattr__(made, name, value)
    return made
