#!/usr/bin/env bash
# Build and install Horovod 0.28.1 from source against the installed TensorFlow
# 2.15.x and Open MPI (TensorFlow frontend + MPI controller; no PyTorch/MXNet).
#
# Idempotent: if horovod 0.28.1 is importable as horovod.tensorflow, was built
# with MPI and against the TensorFlow version installed now, nothing is done.
# Otherwise (missing, or broken e.g. after a TensorFlow upgrade) it is rebuilt.
#
# On TensorFlow 2.16 or later it builds nothing: it says so in one line and exits 0
# (pardnn-launch then averages gradients through mpi4py).
#
# The wheel it builds is kept in a cache folder, named by everything the build
# depends on (horovod, TensorFlow, Python, platform, MPI, compiler and the
# HOROVOD_* choices below); a later install with the same inputs (a new virtual
# environment on the same machine) installs that wheel, checks it as above, and
# builds only if the check fails.
#
# Usage: scripts/install-horovod.sh [--force]
#   --force   rebuild even if a working build or a cached wheel is present (and
#             try even on a newer TensorFlow)
#
# Environment:
#   PYTHON                  interpreter to build for (default: python, else python3)
#   HOROVOD_GPU_OPERATIONS  passed through to the build, for GPU clusters:
#                           NCCL (needs CUDA + NCCL; point HOROVOD_CUDA_HOME /
#                           HOROVOD_NCCL_HOME at them if not in default places)
#                           or MPI (CUDA-aware MPI). Unset/empty = CPU-only build.
#   HOROVOD_WITH_GLOO=1     also build the Gloo controller (default: without Gloo;
#                           we always launch with mpirun, and Gloo adds build time)
#   MAKEFLAGS               parallelism of the native build (default: -j$(nproc))
#   PIP_VERBOSE=1           show the full cmake/compiler output of the build
#   PARDNN_WHEEL_CACHE      the wheel cache folder (default:
#                           ${XDG_CACHE_HOME:-~/.cache}/pardnn/wheels); "off": none
#
# Prerequisites (checked below): TensorFlow 2.15.x importable; mpicxx, mpirun
# (Debian: openmpi-bin libopenmpi-dev); cmake >= 3.13; a C++ compiler (g++).
# scripts/setup.sh installs all of them on a fresh Debian/Ubuntu machine.
set -euo pipefail

HOROVOD_VERSION=0.28.1
TF_SERIES=2.15

log() { echo "[install-horovod] $*"; }
die() {
    echo "[install-horovod] ERROR: $*" >&2
    exit 1
}

force=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        -h | --help)
            sed -n '2,36p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
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
command -v "$PYTHON" >/dev/null 2>&1 || die "PYTHON=$PYTHON not found"

# Quieter TensorFlow C++ logging for the import checks below.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

# Prints why the installed horovod is not usable and exits 1; exits 0 if it is.
horovod_ok() {
    "$PYTHON" - "$HOROVOD_VERSION" <<'EOF'
import json, os, sys, warnings
want = sys.argv[1]
try:
    import tensorflow as tf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import horovod
        import horovod.tensorflow as hvd
except Exception as e:  # ImportError, undefined symbols, version mismatch, ...
    print(f"horovod.tensorflow is not importable: {type(e).__name__}: {e}".splitlines()[0])
    sys.exit(1)
if horovod.__version__ != want:
    print(f"horovod {horovod.__version__} is installed, want {want}")
    sys.exit(1)
if not hvd.mpi_built():
    print("horovod was built without MPI (horovod.tensorflow.mpi_built() is False)")
    sys.exit(1)
meta = os.path.join(os.path.dirname(horovod.__file__), "metadata.json")
try:
    with open(meta) as f:
        built_tf = json.load(f).get("tensorflow")
except OSError:
    built_tf = None
if built_tf != tf.__version__:
    print(f"horovod was built against TensorFlow {built_tf}, installed is {tf.__version__}")
    sys.exit(1)
print(f"horovod {horovod.__version__}: TensorFlow {tf.__version__}, mpi_built={hvd.mpi_built()}, "
      f"gloo_built={hvd.gloo_built()}, nccl_built={hvd.nccl_built()}")
EOF
}

# Horovod 0.28.1 is its last release and builds against TensorFlow 2.15 at the latest (2.16 breaks its
# TensorFlow ops; from 2.18 its xla_mpi_ops.cc needs headers the wheel no longer ships). On a newer
# TensorFlow, say so in one line and stop cleanly: pardnn-launch averages gradients through mpi4py.
tf_version=$("$PYTHON" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null || true)
if [[ $force -eq 0 && "$tf_version" =~ ^([0-9]+)\.([0-9]+)\. ]] &&
    ((BASH_REMATCH[1] > 2 || (BASH_REMATCH[1] == 2 && BASH_REMATCH[2] > 15))); then
    log "TensorFlow $tf_version: horovod $HOROVOD_VERSION does not build against TensorFlow >= 2.16, so it is not" \
        "built; pardnn-launch averages gradients through mpi4py instead (--allreduce auto picks it)"
    exit 0
fi

if [[ $force -eq 0 ]]; then
    if status=$(horovod_ok 2>/dev/null); then
        log "already installed, skipping build: $status"
        exit 0
    fi
    log "building horovod $HOROVOD_VERSION: ${status:-horovod check failed}"
else
    log "--force: rebuilding horovod $HOROVOD_VERSION"
fi

# ---- prerequisites -----------------------------------------------------------
log "checking prerequisites (python: $(command -v "$PYTHON"))"
problems=()

if ! tf_version=$("$PYTHON" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null); then
    problems+=("TensorFlow is not importable by $PYTHON.
      Fix: $PYTHON -m pip install 'tensorflow-cpu==2.15.1' 'numpy<2'   (or: pip install -e '.[tf]')")
elif [[ "$tf_version" != "$TF_SERIES".* ]]; then
    problems+=("TensorFlow $tf_version found, horovod $HOROVOD_VERSION is built here against $TF_SERIES.x.
      Fix: $PYTHON -m pip install 'tensorflow-cpu==2.15.1' 'numpy<2'")
fi

missing_apt=()
command -v mpicxx >/dev/null 2>&1 || missing_apt+=(libopenmpi-dev)
command -v mpirun >/dev/null 2>&1 || missing_apt+=(openmpi-bin)
if ! command -v cmake >/dev/null 2>&1 && [[ -z "${HOROVOD_CMAKE:-}" ]]; then
    missing_apt+=(cmake)
fi
if ! command -v "${CXX:-g++}" >/dev/null 2>&1 && ! command -v c++ >/dev/null 2>&1; then
    missing_apt+=(g++)
fi
if [[ ${#missing_apt[@]} -gt 0 ]]; then
    problems+=("missing build tools (mpicxx/mpirun/cmake/C++ compiler).
      Fix (Debian/Ubuntu): apt-get install -y ${missing_apt[*]}
      or run scripts/setup.sh, which installs them")
fi

if ! "$PYTHON" -c 'import setuptools, wheel' >/dev/null 2>&1; then
    # Needed because of --no-build-isolation; cheap, so just install them.
    log "installing setuptools and wheel (needed for --no-build-isolation)"
    "$PYTHON" -m pip install setuptools wheel ||
        problems+=("setuptools/wheel missing. Fix: $PYTHON -m pip install setuptools wheel")
fi

if [[ -n "${HOROVOD_GPU_OPERATIONS:-}" && ! "$HOROVOD_GPU_OPERATIONS" =~ ^(NCCL|MPI)$ ]]; then
    problems+=("HOROVOD_GPU_OPERATIONS=$HOROVOD_GPU_OPERATIONS is invalid; use NCCL, MPI, or leave it unset")
fi

if [[ ${#problems[@]} -gt 0 ]]; then
    for p in "${problems[@]}"; do
        echo "[install-horovod] ERROR: $p" >&2
    done
    exit 1
fi
log "TensorFlow $tf_version; $(mpirun --version 2>&1 | sed -n 1p); $(cmake --version 2>&1 | sed -n 1p)"

# ---- build -------------------------------------------------------------------
export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1
export HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
if [[ "${HOROVOD_WITH_GLOO:-}" == 1 ]]; then
    unset HOROVOD_WITHOUT_GLOO
else
    export HOROVOD_WITHOUT_GLOO=1
fi
if [[ -n "${HOROVOD_GPU_OPERATIONS:-}" ]]; then
    export HOROVOD_GPU_OPERATIONS
else
    unset HOROVOD_GPU_OPERATIONS
fi
# horovod's setup.py defaults to make -j8, too many for small machines.
export MAKEFLAGS="${MAKEFLAGS:--j$(nproc 2>/dev/null || echo 2)}"

# The wheel's cache key: everything its native build depends on.
cache_root="${PARDNN_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pardnn/wheels}"
cache_dir=""
if [[ "$cache_root" != off ]]; then
    key=$( {
        echo "horovod $HOROVOD_VERSION tensorflow $tf_version"
        "$PYTHON" -c 'import sys, sysconfig; print(sys.version, sysconfig.get_platform(), sys.abiflags)'
        mpirun --version 2>&1 | sed -n 1p
        "${CXX:-g++}" --version 2>&1 | sed -n 1p
        env | grep -E '^HOROVOD_' | sort
        command -v nvcc >/dev/null 2>&1 && nvcc --version 2>&1 | tail -n 1
    } | sha256sum | cut -c1-16)
    cache_dir="$cache_root/horovod-$HOROVOD_VERSION-$key"
fi

install_wheel() {
    # its dependencies first (a fresh environment has none), then the wheel over any horovod already there
    "$PYTHON" -m pip install "$1" && "$PYTHON" -m pip install --no-deps --force-reinstall "$1"
}

if [[ $force -eq 0 && -n "$cache_dir" ]] && compgen -G "$cache_dir/horovod-*.whl" >/dev/null; then
    wheel=$(compgen -G "$cache_dir/horovod-*.whl" | head -n 1)
    log "installing the wheel built here before with the same inputs: $wheel"
    if install_wheel "$wheel" && status=$(horovod_ok); then
        log "OK: $status"
        exit 0
    fi
    log "the cached wheel does not work here (${status:-install failed}); removing it and building"
    rm -rf "$cache_dir"
fi

log "$PYTHON -m pip wheel --no-build-isolation --no-deps horovod==$HOROVOD_VERSION  (takes a few minutes)"
build_dir=$(mktemp -d "${TMPDIR:-/tmp}/pardnn-horovod.XXXXXX")
trap 'rm -rf "$build_dir"' EXIT
start=$SECONDS
"$PYTHON" -m pip wheel --no-build-isolation --no-deps --no-cache-dir -w "$build_dir" "horovod==$HOROVOD_VERSION" ||
    die "building horovod failed (see the output above; rerun with PIP_VERBOSE=1 for the full build log)"
log "build took $((SECONDS - start)) s"
wheel=$(compgen -G "$build_dir/horovod-*.whl" | head -n 1) || die "pip wheel made no horovod wheel in $build_dir"
install_wheel "$wheel" || die "installing the horovod wheel just built failed (see above)"

# ---- verify ------------------------------------------------------------------
if ! status=$(horovod_ok); then
    die "horovod installed but not usable: $status"
fi
log "OK: $status"
if [[ -n "$cache_dir" ]] && mkdir -p "$cache_dir" && cp "$wheel" "$cache_dir/"; then
    log "wheel kept for the next install with the same inputs: $cache_dir/$(basename "$wheel")"
fi
