"""``pardnn-launch --hosts h1,h2 JOB`` / ``--hostfile FILE``: start the MPI job on those hosts, without Slurm.

:func:`start` (the first thing ``pardnn-launch`` calls) returns ``None`` without those options; with them
:func:`run_on_hosts` runs :func:`mpirun_argv` (one rank per host, the ranks' environment forwarded, the
same job and options minus the host ones) in place of this process, or prints it with ``--dry-run``.
Extra ``mpirun`` arguments: ``--mpi-args "..."`` or ``$PARDNN_MPIRUN_ARGS``. Rules: docs/notes-launcher.md.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from launcher.env import EMULATE_NODES, emulate_nodes
from launcher.errors import LaunchError

__all__ = ["HOST_OPTIONS", "MPIRUN_ARGS", "add_options", "forwarded", "inner_argv", "mpirun_argv", "parse_hosts",
           "read_hostfile", "requested", "run_on_hosts", "start"]

HOST_OPTIONS = {"--hosts": True, "--hostfile": True, "--mpi-args": True, "--dry-run": False}  # takes a value?
MPIRUN_ARGS = "PARDNN_MPIRUN_ARGS"
FORWARD_NAMES = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV")
FORWARD_PREFIXES = ("NCCL_", "HOROVOD_", "PARDNN_", "OMPI_MCA_", "CUDA_", "TF_", "XLA_")
PROGRAM = ("pardnn-launch",)


def parse_hosts(text: str, where: str = "--hosts") -> list[str]:
    """``"h1,h2"`` → ``["h1", "h2"]``; an empty list or an empty name is an error."""
    hosts = [part.strip() for part in text.split(",")]
    if not any(hosts):
        raise LaunchError(f"{where}: no host given; pass --hosts h1,h2 or --hostfile FILE")
    if not all(hosts):
        raise LaunchError(f"{where} {text!r}: an empty host name; separate hosts with single commas: h1,h2")
    return hosts


def read_hostfile(path: str | Path) -> list[str]:
    """The hosts of a hostfile: one per line, ``#`` comments, optional ``slots=N`` / ``max_slots=N``."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise LaunchError(f"--hostfile {path}: no such file; write one host per line, or pass --hosts h1,h2") from None
    except (OSError, UnicodeDecodeError) as error:
        raise LaunchError(f"--hostfile {path}: cannot read it ({error}); pass a text file, one host per line") from None
    hosts = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        for word in words[1:]:
            key, _, value = word.partition("=")
            if key not in ("slots", "max_slots") or not value.isdigit() or int(value) < 1:
                raise LaunchError(f"--hostfile {path}, line {number}: {word!r}: expected 'HOST' or 'HOST slots=N' "
                                  "(N >= 1; pardnn-launch runs one rank per host whatever N is)")
        hosts.append(words[0])
    if not hosts:
        raise LaunchError(f"--hostfile {path}: no host in it; write one host per line ('#' starts a comment)")
    return hosts


def check_hosts(hosts: Sequence[str], where: str, environ: Mapping[str, str]) -> None:
    """A host listed twice is an error unless ``PARDNN_EMULATE_NODES=1``."""
    twice = sorted({host for host in hosts if hosts.count(host) > 1})
    if twice and not emulate_nodes(environ):
        raise LaunchError(f"{where}: {', '.join(twice)} listed more than once; pardnn-launch runs one rank per host "
                          f"(it drives all of a host's GPUs): list each host once ({EMULATE_NODES}=1 lets ranks on "
                          "one host stand for nodes, for testing)")


def forwarded(environ: Mapping[str, str]) -> list[str]:
    """Names of the variables ``mpirun -x`` passes to the ranks (those set in ``environ``), sorted."""
    return sorted(name for name in environ if name in FORWARD_NAMES or name.startswith(FORWARD_PREFIXES))


def mpirun_argv(hosts: Sequence[str], program: Sequence[str], environ: Mapping[str, str],
                extra: Sequence[str] = (), mpirun: str = "mpirun") -> list[str]:
    """``mpirun`` running ``program`` once per host (hosts listed twice run twice: emulation)."""
    slots: dict[str, int] = {}
    for host in hosts:
        slots[host] = slots.get(host, 0) + 1
    mapping = "ppr:1:node" if all(count == 1 for count in slots.values()) else "slot"
    argv = [mpirun, "-np", str(len(hosts)), "--host", ",".join(f"{h}:{n}" for h, n in slots.items()),
            "--map-by", mapping, "--bind-to", "none"]
    for name in forwarded(environ):
        argv += ["-x", name]
    return [*argv, *extra, *program]


def _resolve(token: str, options: Iterable[str]) -> str | None:
    """The option ``token`` names as argparse reads it (exact, ``--name=value`` or a unique prefix)."""
    if not token.startswith("--") or token == "--":
        return None
    name = token.split("=", 1)[0]
    options = list(options)
    if name in options:
        return name
    matches = [option for option in options if option.startswith(name)]
    return matches[0] if len(matches) == 1 else None


def requested(argv: Sequence[str], options: Iterable[str]) -> bool:
    """Whether ``argv`` has ``--hosts`` or ``--hostfile`` (``options``: every option string of the parser)."""
    options = list(options)
    for token in argv:
        if token == "--":
            return False
        if _resolve(token, options) in ("--hosts", "--hostfile"):
            return True
    return False


def inner_argv(argv: Sequence[str], options: Iterable[str]) -> list[str]:
    """``argv`` without the options of this module (and their values), for the ranks to run."""
    options, kept, index = list(options), [], 0
    while index < len(argv):
        token = argv[index]
        if token == "--":
            kept += argv[index:]
            break
        option = _resolve(token, options)
        index += 1
        if option in HOST_OPTIONS:
            if HOST_OPTIONS[option] and "=" not in token:
                index += 1  # its value
            continue
        kept.append(token)
    return kept


def run_on_hosts(args: object, argv: Sequence[str], options: Iterable[str],
                 environ: Mapping[str, str] | None = None) -> int:
    """Build the ``mpirun`` command for ``args.hosts`` / ``args.hostfile``; print it or become it.

    Returns 0 after ``--dry-run``; otherwise does not return (``os.execvp``). Raises
    :class:`LaunchError` for bad hosts, a bad hostfile, bad ``--mpi-args`` or no ``mpirun``.
    """
    environ = os.environ if environ is None else environ
    hosts_text, hostfile = getattr(args, "hosts", None), getattr(args, "hostfile", None)
    if hosts_text is not None and hostfile is not None:
        raise LaunchError("--hosts and --hostfile both given; pass one of them")
    hosts = parse_hosts(hosts_text) if hosts_text is not None else read_hostfile(hostfile)  # type: ignore[arg-type]
    where = "--hosts" if hosts_text is not None else f"--hostfile {hostfile}"
    check_hosts(hosts, where, environ)
    extra = []
    for source, text in ((MPIRUN_ARGS, environ.get(MPIRUN_ARGS)), ("--mpi-args", getattr(args, "mpi_args", None))):
        try:
            extra += shlex.split(text or "")
        except ValueError as error:
            raise LaunchError(f"{source} {text!r}: cannot split it ({error}); quote as in a shell") from None
    mpirun = shutil.which("mpirun", path=environ.get("PATH"))
    command = mpirun_argv(hosts, [*PROGRAM, *inner_argv(argv, options)], environ, extra, "mpirun")
    if getattr(args, "dry_run", False):
        print(shlex.join(command))
        return 0
    if mpirun is None:
        raise LaunchError("--hosts/--hostfile: mpirun not found on PATH; install Open MPI (openmpi-bin) or put its "
                          "bin directory on PATH")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(mpirun, [mpirun, *command[1:]], dict(environ))
    return 1  # not reached


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--hosts``, ``--hostfile``, ``--mpi-args`` and ``--dry-run`` (the group "hosts without Slurm")."""
    group = parser.add_argument_group("hosts without Slurm (pardnn-launch starts mpirun itself, one rank per host)")
    group.add_argument("--hosts", metavar="H1,H2", help="run on these hosts, one rank each")
    group.add_argument("--hostfile", metavar="FILE", help="run on the hosts of FILE: one per line, '#' comments")
    group.add_argument("--mpi-args", metavar="ARGS", help=f"extra mpirun arguments, split as a shell would "
                       f"(write --mpi-args='--oversubscribe ...'; also ${MPIRUN_ARGS})")
    group.add_argument("--dry-run", action="store_true", help="print the mpirun command instead of running it")


def start(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int | None:
    """With ``--hosts``/``--hostfile`` in ``argv``: :func:`run_on_hosts` (its exit code); else ``None``.

    ``--mpi-args`` or ``--dry-run`` without hosts is a usage error (exit 2).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    options = [option for action in parser._actions for option in action.option_strings]
    if not requested(argv, options):
        if any(_resolve(token, options) in HOST_OPTIONS for token in argv[: [*argv, "--"].index("--")]):
            parser.error("--mpi-args and --dry-run go with --hosts or --hostfile")
        return None
    args = parser.parse_args(argv)
    try:
        return run_on_hosts(args, argv, options)
    except LaunchError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
