#!/usr/bin/env bash
# Build the torch wheel for one Python from the shared source tree.
# Required environment:
#   : "${WF_SRC_DIR:?}"          the pytorch checkout (one tree for every Python of the job)
#   : "${WF_ENV_DIR:?}"          this Python's build environment (wfbuild.envs)
#   : "${WF_OUT_DIR:?}"          the wheel is written here
#   : "${WF_VERSION_SCHEME:?}"   fixed (PYTORCH_BUILD_VERSION given), nightly or git
# Plus the job's build variables (USE_CUDA, TORCH_CUDA_ARCH_LIST, BLAS, MAX_JOBS, ...), passed
# through untouched to setup.py, which reads them.
set -euo pipefail
: "${WF_SRC_DIR:?}"
: "${WF_ENV_DIR:?}"
: "${WF_OUT_DIR:?}"
: "${WF_VERSION_SCHEME:?}"
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

python="$WF_ENV_DIR/bin/python"
export PATH="$WF_ENV_DIR/bin:$PATH"
wf_nightly_version PYTORCH_BUILD_VERSION
wf_sccache_setup
cd "$WF_SRC_DIR"
# A later Python reuses this tree: drop only the CMake cache (so CMake finds the new interpreter)
# and the previous interpreter's extension modules; ninja keeps every object whose command line
# did not change, which is everything but the Python bindings.
shopt -s nullglob
rm -f -- build/CMakeCache.txt torch/_C*.so torch/_C_flatbuffer*.so functorch/_C*.so
rm -rf -- build/lib.* build/bdist.*
shopt -u nullglob
mkdir -p "$WF_OUT_DIR"
"$python" setup.py bdist_wheel --dist-dir "$WF_OUT_DIR"
wf_sccache_stats
ls -l "$WF_OUT_DIR"
