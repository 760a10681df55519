#!/usr/bin/env bash
# One-shot setup of a fresh (Debian/Ubuntu) machine for pardnn:
#   1. system packages: openmpi-bin libopenmpi-dev cmake g++ shellcheck
#      (apt-get, as root or via passwordless sudo; skipped when mpirun, mpicxx,
#      cmake and a C++ compiler are already on PATH)
#   2. python -m pip install -e ".[dev,tf,dist]"   (from the repo root; the
#      latest stack: -e ".[test,tf-latest,dist]"), through uv: pip installs
#      uv into the environment, uv the packages (the same versions in about a
#      quarter of pip's time; pip's index, find-links and constraint settings
#      are passed on). PARDNN_INSTALLER=pip installs with pip alone.
#   3. scripts/install-horovod.sh                  (builds horovod 0.28.1, or
#      installs the wheel it built before with the same inputs; skips
#      if a working build is already installed; on the latest stack it says in
#      one line that Horovod does not build there, and mpi4py is used)
#   4. pardnn warmup                                (compiles the numba kernels
#      into their cache now, not inside the first placement or job)
#
# Usage: scripts/setup.sh [--tf pinned|latest] [--no-horovod] [--no-apt]
#   --tf pinned   TensorFlow 2.15.1 (tf.keras is Keras 2) + horovod 0.28.1 built
#                 against it; Python 3.11. The default on Python 3.11.
#   --tf latest   TensorFlow 2.21 + tf-keras 2.21 (Keras 2 as tf.keras), gradients
#                 averaged through mpi4py (Horovod does not build against it);
#                 Python 3.11-3.13. The default on Python >= 3.12.
#   --no-horovod  skip step 3 (the horovod build)
#   --no-apt      skip step 1 (install the system packages yourself)
#
# Environment: PYTHON (default: python, else python3); PARDNN_INSTALLER (uv, the
# default, or pip); the HOROVOD_* variables documented in
# scripts/install-horovod.sh are passed through.
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
stack=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --no-horovod) do_horovod=0 ;;
        --no-apt) do_apt=0 ;;
        --tf)
            [[ $# -ge 2 ]] || die "--tf needs a value: pinned or latest"
            stack="$2"
            shift
            ;;
        --tf=*) stack="${1#--tf=}" ;;
        -h | --help)
            sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done
[[ -z "$stack" || "$stack" == pinned || "$stack" == latest ]] || die "--tf $stack: expected pinned or latest"

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
py_minor=$("$PYTHON" -c 'import sys; print(sys.version_info[1] if sys.version_info[0] == 3 else 99)')
if [[ -z "$stack" ]]; then
    if ((py_minor > 11)); then
        stack=latest
        step "Python 3.$py_minor is newer than TensorFlow 2.15 supports: the latest stack (--tf latest)"
    else
        stack=pinned
    fi
elif [[ "$stack" == pinned ]] && ((py_minor > 11)); then
    die "--tf pinned needs Python 3.11 (TensorFlow 2.15.1 has no wheel for Python 3.$py_minor); use --tf latest"
fi
if [[ "$stack" == latest ]]; then
    extras="test,tf-latest,dist"
    step "stack: latest (TensorFlow 2.21 + tf-keras; gradients averaged through mpi4py)"
else
    extras="dev,tf,dist"
    step "stack: pinned (TensorFlow 2.15.1 + horovod 0.28.1)"
fi

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
# uv installs what pip would (the same resolver inputs: pip's index, extra index, find-links and constraint
# settings, from its configuration files and PIP_* variables, with pip's rule of the best version across all
# indexes): 5 s of CPU with warm caches (pinned stack). Neither compiles the packages' bytecode here: Python
# compiles a module when it is first imported and keeps it (about 4,000 of the pinned stack's 10,000 modules,
# 15 s of CPU once, against 46 s to compile them all at install).
installer="${PARDNN_INSTALLER:-uv}"
[[ "$installer" == uv || "$installer" == pip ]] || die "PARDNN_INSTALLER=$installer: expected uv or pip"
uv_options() {  # pip's settings as uv's options, one per line (scripts/uv_options.py)
    "$PYTHON" -m pip config list 2>/dev/null | "$PYTHON" "$ROOT/scripts/uv_options.py"
}
install_packages() {
    if [[ "$installer" == uv ]]; then
        if "$PYTHON" -m pip install --progress-bar off -q uv; then
            local options=()
            mapfile -t options < <(uv_options)
            step "$PYTHON -m uv pip install -e \".[$extras]\" ${options[*]}  (in $ROOT)"
            if "$PYTHON" -m uv pip install --python "$PYTHON" "${options[@]}" -e ".[$extras]"; then
                return 0
            fi
            step "uv's install failed (above); installing with pip instead"
        else
            step "pip could not install uv (above); installing with pip instead"
        fi
    fi
    step "$PYTHON -m pip install --no-compile -e \".[$extras]\"  (in $ROOT)"
    "$PYTHON" -m pip install --progress-bar off --no-compile -e ".[$extras]"
}
# The install writes pardnn.egg-info into the checkout: two setups of one checkout at once (CI sets up both
# stacks side by side) take turns here.
install_lock="${TMPDIR:-/tmp}/pardnn-setup-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1).lock"
(
    if have flock; then
        exec 9>"$install_lock"
        flock 9
    fi
    cd "$ROOT" && install_packages
) || die "installing \".[$extras]\" failed"

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
