"""``--hosts`` / ``--hostfile``: the hostfile parser, the mpirun argv, the options stripped, --dry-run."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import build_parser, main
from launcher.cluster.hosts import forwarded, inner_argv, mpirun_argv, parse_hosts, read_hostfile, run_on_hosts
from launcher.errors import LaunchError

ROOT = Path(__file__).resolve().parents[3]
OPTIONS = [option for action in build_parser()._actions for option in action.option_strings]


def test_hostfile_lines_comments_and_slots(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# the cluster\nnode1 slots=8\n\n  node2   # spare GPUs\nnode3 max_slots=1\n")
    assert read_hostfile(path) == ["node1", "node2", "node3"]


@pytest.mark.parametrize(("text", "message"), [
    (None, r"^--hostfile .*/hosts: no such file; write one host per line"),
    ("# nothing\n\n", r"^--hostfile .*/hosts: no host in it"),
    ("node1 slots=0\n", r"^--hostfile .*/hosts, line 1: 'slots=0': expected 'HOST' or 'HOST slots=N'"),
    ("node1 cpus=4\n", r"line 1: 'cpus=4'")])
def test_bad_hostfiles_fail_in_one_line(tmp_path, text, message):
    path = tmp_path / "hosts"
    if text is not None:
        path.write_text(text)
    with pytest.raises(LaunchError, match=message) as caught:
        read_hostfile(path)
    assert "\n" not in str(caught.value)


def test_parse_hosts():
    assert parse_hosts(" h1, h2 ") == ["h1", "h2"]
    with pytest.raises(LaunchError, match="empty host name"):
        parse_hosts("h1,,h2")
    with pytest.raises(LaunchError, match="no host given"):
        parse_hosts(" ")


def test_mpirun_argv_one_rank_per_host_with_the_environment():
    env = {"PATH": "/bin", "NCCL_DEBUG": "INFO", "HOROVOD_FUSION_THRESHOLD": "0", "PARDNN_EMULATE_NODES": "0",
           "CUDA_VISIBLE_DEVICES": "0,1", "TF_CPP_MIN_LOG_LEVEL": "2", "HOME": "/root", "SECRET": "x"}
    assert forwarded(env) == ["CUDA_VISIBLE_DEVICES", "HOROVOD_FUSION_THRESHOLD", "NCCL_DEBUG", "PARDNN_EMULATE_NODES",
                              "PATH", "TF_CPP_MIN_LOG_LEVEL"]
    argv = mpirun_argv(["h1", "h2"], ["pardnn-launch", "job.toml"], env, ["--mca", "btl", "tcp,self"])
    assert argv == ["mpirun", "-np", "2", "--host", "h1:1,h2:1", "--map-by", "ppr:1:node", "--bind-to", "none",
                    "-x", "CUDA_VISIBLE_DEVICES", "-x", "HOROVOD_FUSION_THRESHOLD", "-x", "NCCL_DEBUG",
                    "-x", "PARDNN_EMULATE_NODES", "-x", "PATH", "-x", "TF_CPP_MIN_LOG_LEVEL",
                    "--mca", "btl", "tcp,self", "pardnn-launch", "job.toml"]
    # A host listed twice (emulation only) gets two slots, mapped by slot.
    assert mpirun_argv(["localhost", "localhost"], ["p"], {})[1:7] == ["-np", "2", "--host", "localhost:2",
                                                                       "--map-by", "slot"]


def test_inner_argv_drops_the_host_options_in_every_spelling():
    argv = ["job.toml", "--hosts", "a,b", "--iterations", "5", "--hostfile=f", "--mpi-args=--oversubscribe",
            "--dry-run", "--hostf", "c", "--out", "runs"]  # --hostf: argparse reads --hostfile
    assert inner_argv(argv, OPTIONS) == ["job.toml", "--iterations", "5", "--out", "runs"]


class Args:
    def __init__(self, **values: object) -> None:
        self.hosts = self.hostfile = self.mpi_args = None
        self.dry_run = True
        self.__dict__.update(values)


def test_run_on_hosts_errors(tmp_path):
    with pytest.raises(LaunchError, match="listed more than once; pardnn-launch runs one rank per host"):
        run_on_hosts(Args(hosts="a,b,a"), [], OPTIONS, {})
    with pytest.raises(LaunchError, match="--hosts and --hostfile both given"):
        run_on_hosts(Args(hosts="a", hostfile="f"), [], OPTIONS, {})
    with pytest.raises(LaunchError, match=r"^--mpi-args '\"x': cannot split it"):
        run_on_hosts(Args(hosts="a", mpi_args='"x'), [], OPTIONS, {})
    with pytest.raises(LaunchError, match=r"^--hosts/--hostfile: mpirun not found on PATH"):
        run_on_hosts(Args(hosts="a", dry_run=False), [], OPTIONS, {"PATH": str(tmp_path)})


def test_dry_run_prints_the_command(capsys, monkeypatch, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("gpu-a slots=8\ngpu-b\n")
    monkeypatch.setenv("PARDNN_MPIRUN_ARGS", "--mca btl_tcp_if_include eth0")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    code = main(["trn-tiny", "--hostfile", str(hostfile), "--iterations", "7", "--mpi-args=--report-bindings",
                 "--dry-run"])
    assert code == 0
    words = shlex.split(capsys.readouterr().out)
    assert words[:7] == ["mpirun", "-np", "2", "--host", "gpu-a:1,gpu-b:1", "--map-by", "ppr:1:node"]
    assert ["-x", "NCCL_SOCKET_IFNAME"] == words[words.index("NCCL_SOCKET_IFNAME") - 1:][:2]
    assert words[-8:] == ["--mca", "btl_tcp_if_include", "eth0", "--report-bindings", "pardnn-launch", "trn-tiny",
                          "--iterations", "7"]


def test_command_line_errors_in_one_line():
    def launch(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "launcher.cli", *argv], capture_output=True, text=True,
                              cwd=ROOT, timeout=120)

    proc = launch("trn-tiny", "--hostfile", "/nonexistent/hosts")
    assert proc.returncode == 1
    assert proc.stderr == ("pardnn-launch: error: --hostfile /nonexistent/hosts: no such file; write one host per "
                           "line, or pass --hosts h1,h2\n")
    proc = launch("trn-tiny", "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr.endswith("error: --mpi-args and --dry-run go with --hosts or --hostfile\n")
