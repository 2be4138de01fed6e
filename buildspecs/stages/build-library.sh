#!/usr/bin/env bash
# Build a setuptools package against the torch in its build environment: a domain library
# (torchvision, torchaudio, ...) or a user's extension.
# Required environment:
#   : "${WF_SRC_DIR:?}"          the package source
#   : "${WF_ENV_DIR:?}"          the build environment (wfbuild.envs); it holds torch, or gets it below
#   : "${WF_OUT_DIR:?}"          the wheel is written here
#   : "${WF_VERSION_SCHEME:?}"   fixed (BUILD_VERSION given), nightly or git
# Optional: WF_TORCH_WHEEL_DIR  this job's torch wheel, installed first (never a torch from an index);
#           its version becomes PYTORCH_VERSION, which pins the library's torch requirement.
#           WF_BUILD_COPY       build from a fresh copy of the source here (extension cells build side
#           by side; setuptools writes build/ and *.egg-info into the tree it builds)
#           MAX_JOBS            compilers at once (default: this machine's cores): ninja and CMake
#           (CMAKE_BUILD_PARALLEL_LEVEL), meson-python (compile-args -jN) and setuptools without ninja
#           (translation units in forked workers: wfbuild.compiling.parallel_compile) all get it
set -euo pipefail
: "${WF_SRC_DIR:?}"
: "${WF_ENV_DIR:?}"
: "${WF_OUT_DIR:?}"
: "${WF_VERSION_SCHEME:?}"
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ -n "${WF_BUILD_COPY:-}" ]]; then
  rm -rf -- "$WF_BUILD_COPY"
  mkdir -p -- "$WF_BUILD_COPY"
  cp -a -- "$WF_SRC_DIR/." "$WF_BUILD_COPY/"
  WF_SRC_DIR="$WF_BUILD_COPY"
fi
wf_nvcc_launcher
tools_python="$(command -v python3)"  # pypa/build lives in the tools' venv, before the environment leads PATH
python="$WF_ENV_DIR/bin/python"
export PATH="$WF_ENV_DIR/bin:$PATH"
if [[ -n "${WF_TORCH_WHEEL_DIR:-}" ]]; then
  shopt -s nullglob
  wheels=("$WF_TORCH_WHEEL_DIR"/torch-*.whl)
  shopt -u nullglob
  [[ ${#wheels[@]} -eq 1 ]] || wf_die "expected one torch wheel in $WF_TORCH_WHEEL_DIR, found ${#wheels[@]}"
  "$python" -m pip install --disable-pip-version-check -- "${wheels[0]}"
  # the installed wheel's version as pip recorded it: torch.__version__'s string, without loading libtorch
  PYTORCH_VERSION="$("$python" -c 'import importlib.metadata as m; print(m.version("torch"))')"
  export PYTORCH_VERSION
  wf_log "building against torch $PYTORCH_VERSION from ${wheels[0]}"
fi
wf_nightly_version BUILD_VERSION
wf_sccache_setup
mkdir -p "$WF_OUT_DIR"
jobs="${MAX_JOBS:-$(nproc)}"
[[ "$jobs" =~ ^[1-9][0-9]{0,3}$ ]] || wf_die "MAX_JOBS must be a whole number of compilers, not '$jobs'"
export MAX_JOBS="$jobs" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$jobs}"
settings=()
backend="$(python3 -m wfbuild.compiling.parallel_compile_tool backend --src "$WF_SRC_DIR")"
case "$backend" in
  mesonpy)
    settings=(--config-setting "compile-args=-j$jobs")
    wf_log "parallel compile: meson-python, compile-args=-j$jobs"
    ;;
  scikit_build_core | skbuild | cmake_build_extension)
    wf_log "parallel compile: CMake ($backend), CMAKE_BUILD_PARALLEL_LEVEL=$CMAKE_BUILD_PARALLEL_LEVEL"
    ;;
  *)
    python3 -m wfbuild.compiling.parallel_compile_tool install --python "$python" >/dev/null
    WF_PARALLEL_LOG="$(mktemp)"
    export WF_COMPILE_JOBS="$jobs" WF_PARALLEL_LOG
    wf_log "parallel compile: $backend; ninja and CMake get MAX_JOBS=$jobs, setuptools without ninja compiles" \
      "up to $jobs translation units at a time (wfbuild.compiling.parallel_compile: forked workers)"
    ;;
esac
marker="$(mktemp)"  # what the build writes under the tree is newer (wfbuild.wheels.built_here)
# The backend's build_wheel hook alone, run by the environment's Python: no build isolation (an isolated
# build would install some other torch from an index), and no metadata hook first (pip's: setup.py twice).
"$tools_python" -m wfbuild.wheels.wheel_build --python "$python" --src "$WF_SRC_DIR" --out "$WF_OUT_DIR" "${settings[@]}"
if [[ -n "${WF_PARALLEL_LOG:-}" ]]; then
  wf_log "parallel compile: $(python3 -m wfbuild.compiling.parallel_compile_tool summary --log "$WF_PARALLEL_LOG")"
  rm -f -- "$WF_PARALLEL_LOG"
fi
if [[ "$backend" == setuptools ]]; then  # builds in the tree; others may build in a temporary folder
  python3 -m wfbuild.wheels.built_here --wheel-dir "$WF_OUT_DIR" --tree "$WF_SRC_DIR" --marker "$marker" ||
    wf_die "the wheel holds binaries this build did not compile (above)"
fi
rm -f -- "$marker"
wf_sccache_stats
ls -l "$WF_OUT_DIR"
