#!/usr/bin/env bash
# Functions shared by the stage scripts; sourced, never run. Needs nothing from the environment
# itself; each function names what it reads.
set -euo pipefail

wf_log() {
  printf '[%s] %s\n' "$(basename "$0")" "$*" >&2
}

wf_die() {
  wf_log "error: $*"
  exit 1
}

# The same rules as wfbuild/safety.py: checked again here because these values reach git.
wf_check_ref() {
  local ref="$1"
  [[ "$ref" =~ ^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$ ]] || wf_die "refusing ref '$ref'"
  [[ "$ref" != *..* && "$ref" != *//* && "$ref" != */ && "$ref" != *.lock && "$ref" != *. ]] ||
    wf_die "refusing ref '$ref'"
}

wf_check_url() {
  local url="$1"
  local https='^https://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~-]+)+/?$'
  local file='^file:///[A-Za-z0-9._/-]+$'
  [[ ("$url" =~ $https || "$url" =~ $file) && "$url" != *..* ]] || wf_die "refusing repository URL '$url'"
}

# wf_nightly_version VAR: with WF_VERSION_SCHEME=nightly, export VAR as
# <version.txt up to 'a'>.dev<WF_BUILD_DATE>+<WF_VARIANT> (computed by wfbuild.wheels.versions).
wf_nightly_version() {
  local var="$1" value
  [[ "${WF_VERSION_SCHEME:-}" == nightly ]] || return 0
  value="$(python3 -m wfbuild.wheels.versions nightly --version-file "${WF_SRC_DIR:?}/version.txt" \
    --date "${WF_BUILD_DATE:?}" --variant "${WF_VARIANT:?}")"
  printf -v "$var" '%s' "$value"
  export "${var?}"
  wf_log "$var=$value"
}

# wf_nvcc_launcher: with a CUDA toolkit, PYTORCH_NVCC (torch.utils.cpp_extension's nvcc, sccache's when
# the runner set one) runs behind wfbuild.compiling.nvcc, which adds each .cu file's reproducibility flags (a seed
# and source name from its path under WF_SRC_DIR); CUDA_HOME becomes wfbuild.compiling.cuda_home's shim, whose
# bin/nvcc runs the same launcher and command, for builds that run $CUDA_HOME/bin/nvcc themselves
# (BuildExtension without ninja), and CUDACXX names that nvcc too, for CMake's CUDA language (a setup.py
# that runs cmake; CMake takes CUDACXX before PATH), as does the first nvcc on PATH (a project that names
# its compiler by `command -v nvcc` or finds it with find_program). Call it before a build environment
# leads PATH: the launcher runs under the tools' python3 (PYTHONPATH holds wfbuild). WF_NVCC_LAUNCHER=off
# (a host-mode runner's environment) leaves nvcc as it is: the comparison that shows what it fixes.
wf_nvcc_launcher() {
  [[ -n "${CUDA_HOME:-}" && "${WF_NVCC_LAUNCHER:-on}" != off ]] || return 0
  local python next
  python="$(command -v python3)"
  next="${PYTORCH_NVCC:-$CUDA_HOME/bin/nvcc}"
  PYTORCH_NVCC="$python -m wfbuild.compiling.nvcc $next"
  CUDA_HOME="$("$python" -m wfbuild.compiling.cuda_home --cuda-home "$CUDA_HOME" --python "$python" --next "$next")"
  CUDACXX="$CUDA_HOME/bin/nvcc"
  PATH="$CUDA_HOME/bin:$PATH"
  export PYTORCH_NVCC CUDA_HOME CUDACXX PATH
  wf_log "nvcc: $PYTORCH_NVCC; CUDA_HOME=$CUDA_HOME (its bin/nvcc, also CUDACXX and first on PATH: the same launcher)"
}

# sccache is a cache, not a requirement: without it (or without its bucket) compile directly.
# WF_SCCACHE=on: the runner started the job's server and set the launchers or wrappers (host mode).
wf_sccache_setup() {
  if [[ "${WF_SCCACHE:-}" == on ]]; then
    wf_log "sccache: the job's server, s3://${SCCACHE_BUCKET:-?}/${SCCACHE_S3_KEY_PREFIX:-}"
    return 0
  fi
  if [[ "${CMAKE_C_COMPILER_LAUNCHER:-}" != sccache ]]; then
    return 0
  fi
  if [[ -n "${AWS_ENDPOINT_URL:-}" && -z "${SCCACHE_ENDPOINT:-}" ]]; then
    export SCCACHE_ENDPOINT="$AWS_ENDPOINT_URL"
  fi
  if command -v sccache >/dev/null 2>&1 && sccache --start-server >/dev/null 2>&1; then
    wf_log "sccache: s3://${SCCACHE_BUCKET:-?}/${SCCACHE_S3_KEY_PREFIX:-}"
    return 0
  fi
  wf_log "sccache unavailable: compiling without a cache"
  unset CMAKE_C_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER CMAKE_CUDA_COMPILER_LAUNCHER
}

wf_sccache_stats() {
  if [[ "${WF_SCCACHE:-}" == on ]]; then
    return 0 # the runner records the job's stats in its manifest
  fi
  if command -v sccache >/dev/null 2>&1 && [[ "${CMAKE_C_COMPILER_LAUNCHER:-}" == sccache ]]; then
    sccache --show-stats || true
  fi
}
