#!/usr/bin/env bash
# The CUDA toolkit of a builder image: install_cuda.py assembles /usr/local/cuda-<version> from the lock
# scripts/cuda/cuda-<version>-<machine>.toml (every archive and wheel checked against its sha256; the
# libraries are the job's nvidia-* pins, so the build compiles against what its users install).
# Required environment:
#   : "${CUDA_VERSION:?}"        e.g. 12.8 (a catalog toolkit with a lock for this machine)
#   : "${CUDA_REQUIREMENTS?}"    the job's toolkit requirement lines, one per line (may be empty)
set -euo pipefail
: "${CUDA_VERSION:?}"
: "${CUDA_REQUIREMENTS?}"
[[ "$CUDA_VERSION" =~ ^[0-9]+\.[0-9]+$ ]] || { echo "bad CUDA_VERSION" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf -- "$work"' EXIT
printf '%s\n' "$CUDA_REQUIREMENTS" >"$work/requirements.txt"
python3 "$(dirname "${BASH_SOURCE[0]}")/install_cuda.py" --cuda "$CUDA_VERSION" \
  --prefix "/usr/local/cuda-${CUDA_VERSION}" --requirements "$work/requirements.txt"
ln -sfn "cuda-${CUDA_VERSION}" /usr/local/cuda
/usr/local/cuda/bin/nvcc --version
