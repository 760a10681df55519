"""Sub-commands from other packages: the entry-point group ``pardnn.commands``.

Each entry point is ``name = "module:register"``; ``register(subparsers)`` adds the sub-parser
called ``name`` and sets ``func`` to a callable ``(args) -> int``. ``pardnn`` reads this metadata
only when the command line names a command that is not built in, or none (``pardnn --help`` lists
every command): a built-in command never pays for it.
"""

from __future__ import annotations

import re
from typing import Any

from pardnn.errors import PardnnError

__all__ = ["GROUP", "PluginError", "add_plugins"]

GROUP = "pardnn.commands"


class PluginError(PardnnError):
    """A plugin command that cannot be loaded; the message is one line naming the command and the cure."""

    def __init__(self, command: str, reason: str) -> None:
        super().__init__(f"command {command!r} is unavailable: {reason}")
        self.command, self.reason = command, reason


def _entry_points() -> dict[str, Any]:
    """The group's entry points by name, from every installed distribution; the first on the path wins.

    Not ``importlib.metadata.entry_points``: that reads one distribution per name, so a stale
    ``pardnn.egg-info`` in a checkout (first on the path when run from there) would hide the
    installed entry points.
    """
    import importlib.metadata

    found: dict[str, Any] = {}
    for dist in importlib.metadata.distributions():
        for entry in dist.entry_points:
            if entry.group == GROUP:
                found.setdefault(entry.name, entry)
    return found


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _extra_for(dist: Any, missing: str) -> str | None:
    """The optional-dependency group (extra) of ``dist`` that requires module ``missing``, if any."""
    for requirement in (dist.requires or []) if dist is not None else []:
        spec, _, marker = requirement.partition(";")
        name = _normal(re.split(r"[\s<>=!~\[(]", spec.strip(), maxsplit=1)[0])
        extra = re.search(r"extra\s*==\s*[\"']([^\"']+)[\"']", marker)
        if extra is not None and (name == _normal(missing) or name.startswith(_normal(missing) + "-")):
            return extra.group(1)
    return None


def _missing_message(entry: Any, exc: ImportError) -> str:
    """What is missing and what to install."""
    dist = getattr(entry, "dist", None)
    owner = dist.name if dist is not None else "its package"
    module = entry.value.partition(":")[0]
    missing = exc.name or ""
    if not missing or missing.partition(".")[0] == module.partition(".")[0]:
        return f"its module {module} cannot be imported ({exc}); reinstall {owner} from its checkout: pip install -e ."
    top = missing.partition(".")[0]
    extra = _extra_for(dist, top)
    if extra is None:
        how = f"pip install {top}"
    elif _normal(owner) == "pardnn":
        how = f"pip install -e '.[{extra}]'"
    else:
        how = f"pip install '{owner}[{extra}]'"
    return f"{module} needs {top}, which is not installed; install it: {how}"


def _load(name: str, entry: Any, sub: Any) -> None:
    """Import the entry point and let it add its sub-parser; :class:`PluginError` if it cannot."""
    try:
        register = entry.load()
        register(sub)
    except ImportError as exc:
        raise PluginError(name, _missing_message(entry, exc)) from None
    except Exception as exc:  # a broken plugin must not take the other commands down
        raise PluginError(name, f"loading {entry.value} failed: {type(exc).__name__}: {exc}") from None


def _unavailable(sub: Any, error: PluginError) -> None:
    """A placeholder listed by ``pardnn --help`` for a plugin that failed to load."""
    def fail(args: Any) -> int:
        raise error

    if error.command not in sub.choices:  # a plugin that failed after adding its parser keeps it
        sub.add_parser(error.command, help=f"(unavailable) {error.reason}", add_help=False)
    sub.choices[error.command].set_defaults(func=fail)


def add_plugins(sub: Any, command: str | None, builtin: Any) -> None:
    """Add the plugin sub-commands to ``sub``.

    With ``command`` a plugin's name, load that plugin only and raise :class:`PluginError` if it
    fails. Otherwise (no command, ``--help``, an unknown name) load them all, listing any that fail
    as unavailable so that the others still work and argparse can name every valid command.
    """
    try:
        found = _entry_points()
    except Exception as exc:  # unreadable package metadata
        if command is None:
            return  # --help still lists the built-in commands
        raise PluginError(command, f"cannot read the installed entry points ({type(exc).__name__}: {exc})") from None
    entries = {name: entry for name, entry in found.items() if name not in builtin}
    if command in entries:
        _load(command, entries[command], sub)
        return
    for name, entry in entries.items():
        try:
            _load(name, entry, sub)
        except PluginError as exc:
            _unavailable(sub, exc)
