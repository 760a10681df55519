#!/usr/bin/env bash
# One-shot setup of a fresh (Debian/Ubuntu) machine for pardnn:
#   1. system packages: openmpi-bin libopenmpi-dev cmake g++ shellcheck
#      (apt-get, as root or via passwordless sudo; skipped when mpirun, mpicxx,
#      cmake and a C++ compiler are already on PATH)
#   2. python -m pip install -e ".[dev,tf,dist]"   (from the repo root)
#   3. scripts/install-horovod.sh                  (builds horovod 0.28.1; skips
#      if a working build is already installed)
#   4. pardnn warmup                                (compiles the numba kernels
#      into their cache now, not inside the first placement or job)
#
# Usage: scripts/setup.sh [--no-horovod] [--no-apt]
#   --no-horovod  skip step 3 (the horovod build)
#   --no-apt      skip step 1 (install the system packages yourself)
#
# Environment: PYTHON (default: python, else python3); the HOROVOD_* variables
# documented in scripts/install-horovod.sh are passed through.
# Works from any directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
APT_PACKAGES=(openmpi-bin libopenmpi-dev cmake g++ shellcheck)

step() { echo "==> [setup] $*"; }
die() {
    echo "==> [setup] ERROR: $*" >&2
    exit 1
}
on_error() { echo "==> [setup] FAILED (exit $1) at line $2: $3" >&2; }
trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR

do_horovod=1
do_apt=1
for arg in "$@"; do
    case "$arg" in
        --no-horovod) do_horovod=0 ;;
        --no-apt) do_apt=0 ;;
        -h | --help)
            sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) die "unknown argument: $arg (see --help)" ;;
    esac
done

if [[ -z "${PYTHON:-}" ]]; then
    if command -v python >/dev/null 2>&1; then
        PYTHON=python
    elif command -v python3 >/dev/null 2>&1; then
        PYTHON=python3
    else
        die "no python/python3 on PATH (or set PYTHON=/path/to/python)"
    fi
fi
export PYTHON
step "repo: $ROOT"
step "python: $(command -v "$PYTHON") ($("$PYTHON" --version 2>&1))"

# ---- 1. system packages ------------------------------------------------------
have() { command -v "$1" >/dev/null 2>&1; }

if [[ $do_apt -eq 0 ]]; then
    step "--no-apt: not installing system packages (${APT_PACKAGES[*]})"
elif have mpirun && have mpicxx && have cmake && { have g++ || have c++; }; then
    step "mpirun, mpicxx, cmake and a C++ compiler found; skipping apt-get"
    have shellcheck || step "note: shellcheck not found (only needed for linting the scripts): apt-get install shellcheck"
else
    if ! have apt-get; then
        die "mpirun/mpicxx/cmake/g++ missing and no apt-get here; install Open MPI (with dev headers), cmake and g++ yourself, then rerun (--no-apt)"
    fi
    if [[ $EUID -eq 0 ]]; then
        sudo_cmd=()
    elif have sudo && sudo -n true 2>/dev/null; then
        sudo_cmd=(sudo -n)
    else
        die "need root or passwordless sudo to run: apt-get install -y ${APT_PACKAGES[*]}  (run that yourself, then rerun with --no-apt)"
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt_opts=(-y -q -o DPkg::Lock::Timeout=600)
    step "${sudo_cmd[*]:+${sudo_cmd[*]} }apt-get update"
    ${sudo_cmd[@]+"${sudo_cmd[@]}"} apt-get "${apt_opts[@]}" update
    step "${sudo_cmd[*]:+${sudo_cmd[*]} }apt-get install ${APT_PACKAGES[*]}"
    ${sudo_cmd[@]+"${sudo_cmd[@]}"} apt-get "${apt_opts[@]}" install "${APT_PACKAGES[@]}"
    for tool in mpirun mpicxx cmake; do
        have "$tool" || die "$tool still not on PATH after apt-get install"
    done
fi

# ---- 2. python packages ------------------------------------------------------
step "$PYTHON -m pip install -e \".[dev,tf,dist]\"  (in $ROOT)"
(cd "$ROOT" && "$PYTHON" -m pip install --progress-bar off -e ".[dev,tf,dist]") ||
    die "pip install -e \".[dev,tf,dist]\" failed"

# ---- 3. horovod --------------------------------------------------------------
if [[ $do_horovod -eq 1 ]]; then
    step "bash scripts/install-horovod.sh"
    bash "$ROOT/scripts/install-horovod.sh" || die "horovod install failed (see above)"
else
    step "--no-horovod: skipping the horovod build"
fi

# ---- 4. numba kernels --------------------------------------------------------
step "pardnn warmup  (numba kernels into their on-disk cache)"
(cd "$ROOT" && "$PYTHON" -m pardnn warmup) || die "pardnn warmup failed (see above)"

step "done"
