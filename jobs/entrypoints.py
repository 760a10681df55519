"""Import and call the user's code a job names: ``[model] entry`` and ``[data] entry``.

An entry is ``"package.module:function"``, imported with the job file's folder and the working
directory first on ``sys.path`` (``examples/keras_cnn/job.toml`` finds its ``net.py`` as ``net``); a
module of the same name imported for an earlier job is forgotten, so each job gets its own.

Every failure is one :class:`~jobs.config.JobError` line naming the job file, the key, the value and
what is expected; an exception raised by the user's code shows its type, message and the last line
of the user's code it passed through (``net.py:12``).

No TensorFlow here (the user's module may import it).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobs.config import Job, JobError

__all__ = ["DATA_EXPECTED", "MODEL_EXPECTED", "call", "describe_call", "folders", "model_error", "resolve", "takes",
           "user_error"]

MODEL_EXPECTED = ("a function returning a tf.keras.Model, or a step: a dict or object with loss (a scalar tensor), "
                  "inputs ({name: placeholder}) and optionally update_ops")
DATA_EXPECTED = ("a function fn(iteration, batch_size, rank, ranks) returning {input name: array} or, for a "
                 "Keras model, (x, y)")


def folders(job: Job) -> list[Path]:
    """Where a job's entry modules are looked for first: the job file's folder, then the working directory."""
    found = [job.path.resolve().parent] if job.path is not None else []
    cwd = Path.cwd().resolve()
    return found if cwd in found else [*found, cwd]


def _where(job: Job) -> str:
    names = [str(folder) for folder in folders(job)]
    return " or ".join(names) + " or sys.path"


_ADDED: list[str] = []  # folders put on sys.path for the job built last
_REMOVED: set[str] = set()  # folders put there for an earlier job, since taken away


def _use_folders(paths: list[str]) -> None:
    """Put ``paths`` first on ``sys.path``, taking away those added for an earlier job."""
    for path in [p for p in _ADDED if p not in paths]:
        _ADDED.remove(path)
        _REMOVED.add(path)
        if path in sys.path:
            sys.path.remove(path)
    for path in reversed(paths):
        if path in sys.path:
            sys.path.remove(path)
        elif path not in _ADDED:
            _ADDED.append(path)
        sys.path.insert(0, path)
    importlib.invalidate_caches()


def _folder_of(module: Any) -> str | None:
    file = getattr(module, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    return str(path.parent.parent if path.name == "__init__.py" else path.parent)


def _forget_shadowed(top: str, paths: list[str]) -> None:
    """Drop ``top`` (and its submodules) from ``sys.modules`` if it came from an earlier job's folder, or
    ``paths`` hold another module of that name."""
    cached = sys.modules.get(top)
    if cached is None:
        return
    folder = _folder_of(cached)
    spec = importlib.machinery.PathFinder.find_spec(top, paths)
    earlier_job = folder in _REMOVED and folder not in paths
    if earlier_job or (spec is not None and spec.origin is not None and cached.__file__ != spec.origin):
        for name in [name for name in sys.modules if name == top or name.startswith(top + ".")]:
            del sys.modules[name]


def user_error(error: BaseException, job: Job) -> str:
    """``"ValueError: message (net.py:12)"``: the exception and the last frame in the job's folders."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    roots = [str(folder) for folder in folders(job)]
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if any(frame.filename.startswith(root) for root in roots)]
    if isinstance(error, SyntaxError) and error.filename:
        return f"{text} ({Path(error.filename).name}:{error.lineno})"
    if frames:
        return f"{text} ({Path(frames[-1].filename).name}:{frames[-1].lineno})"
    return text


def model_error(job: Job, problem: str) -> JobError:
    """``"job.toml: model.entry = 'net:build': <problem>; expected <what a model entry returns>"``."""
    return JobError(f"{job.source}: model.entry = {job.entry!r}: {problem}; expected {MODEL_EXPECTED}")


def resolve(job: Job, key: str, entry: str) -> Callable[..., Any]:
    """The function ``entry`` (``"module:function"``) names; ``key`` is its job key (``model.entry``).

    Raises
    ------
    JobError
        No such module, an error while importing it, no such attribute, or not callable.
    """
    module_name, _, attribute = entry.partition(":")
    prefix = f"{job.source}: {key} = {entry!r}"
    paths = [str(folder) for folder in folders(job)]
    _use_folders(paths)
    _forget_shadowed(module_name.split(".")[0], paths)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        parents = {".".join(module_name.split(".")[:i]) for i in range(1, module_name.count(".") + 2)}
        if error.name in parents:
            raise JobError(f"{prefix}: no module {error.name!r} in {_where(job)}; expected 'module:function' "
                           "with the module a .py file (or package) in the job file's folder, the working "
                           "directory or an installed package") from None
        raise JobError(f"{prefix}: importing {module_name!r} raised {user_error(error, job)}; fix the module "
                       "or install what it imports") from error
    except Exception as error:  # the user's module failed: one line, the traceback kept as the cause
        raise JobError(f"{prefix}: importing {module_name!r} raised {user_error(error, job)}; fix the "
                       "module") from error
    missing = object()
    function = getattr(module, attribute, missing)
    origin = getattr(module, "__file__", None) or module_name
    if function is missing:
        raise JobError(f"{prefix}: module {module_name!r} ({origin}) has no attribute {attribute!r}; expected "
                       f"a function {attribute}(...) defined in it")
    if not callable(function):
        raise JobError(f"{prefix}: {module_name}.{attribute} is {type(function).__name__}, not callable; "
                       "expected a function")
    return function


def describe_call(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """``"build(width=32, batch_size=16)"`` for messages."""
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{getattr(function, '__name__', 'function')}({', '.join(shown)})"


def call(job: Job, key: str, entry: str, function: Callable[..., Any], args: tuple[Any, ...],
         kwargs: dict[str, Any], expected: str) -> Any:
    """``function(*args, **kwargs)``; arguments it cannot take or an exception it raises become a JobError.

    ``expected`` says what the function should be (``"a function fn(iteration, batch_size, rank, ranks)"``).
    """
    prefix = f"{job.source}: {key} = {entry!r}"
    try:
        inspect.signature(function).bind(*args, **kwargs)
    except TypeError as error:
        raise JobError(f"{prefix}: cannot call {describe_call(function, args, kwargs)}: {error}; expected "
                       f"{expected}") from None
    except ValueError:  # no signature (a builtin): call and see
        pass
    try:
        return function(*args, **kwargs)
    except JobError:
        raise
    except Exception as error:
        raise JobError(f"{prefix}: {describe_call(function, args, kwargs)} raised {user_error(error, job)}"
                       f"{_hint(error)}") from error


def _hint(error: Exception) -> str:
    """What to do about an error Keras raises in a model entry that pardnn knows the answer to."""
    if "tf.keras.optimizers.legacy.Optimizer when a dype policy with a loss scale" in str(error):
        return ("; under mixed_float16, Keras 2.15's compile in a graph takes only tf.keras.optimizers.legacy "
                "optimizers: compile with tf.keras.optimizers.legacy.<Name>(...) (pardnn trains it with Keras' "
                "<Name> update and dynamic loss scaling), or leave the optimizer to the job file's [train] optimizer")
    if type(error).__name__ == "OperatorNotAllowedInGraphError":
        return ("; pardnn builds the model, its loss and its optimizer's schedule in a graph, where a Python if on a "
                "tensor (the step, a batch value) cannot run: use TensorFlow ops (tf.where, tf.cond)")
    return ""


def takes(function: Callable[..., Any], name: str) -> bool:
    """Whether ``function`` has a parameter called ``name``."""
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
