#!/usr/bin/env bash
# OpenBLAS for aarch64 torch, built as PyTorch's .ci/docker/common/install_openblas.sh builds it.
# Required environment:
#   : "${OPENBLAS_VERSION:?}"   a tag, e.g. v0.3.30
#   : "${OPENBLAS_PREFIX:?}"    e.g. /opt/OpenBLAS
set -euo pipefail
: "${OPENBLAS_VERSION:?}"
: "${OPENBLAS_PREFIX:?}"
[[ "$OPENBLAS_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "bad OPENBLAS_VERSION" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf -- "$work"' EXIT
# The release tarball, checked against checksums.sha256 (a git tag can be moved; these bytes cannot).
release="OpenBLAS-${OPENBLAS_VERSION#v}"
"$(dirname "${BASH_SOURCE[0]}")/fetch_verified.sh" \
  "https://github.com/OpenMathLib/OpenBLAS/releases/download/${OPENBLAS_VERSION}/${release}.tar.gz" "$work/openblas.tar.gz"
tar -xzf "$work/openblas.tar.gz" --no-same-owner -C "$work"
mv "$work/$release" "$work/OpenBLAS"
flags=(NUM_THREADS=128 USE_OPENMP=1 NO_SHARED=0 DYNAMIC_ARCH=1 TARGET=ARMV8 CFLAGS=-O3
  FFLAGS=-Wno-maybe-uninitialized BUILD_BFLOAT16=1 BUILD_SINGLE=1 BUILD_DOUBLE=1
  BUILD_COMPLEX=1 BUILD_COMPLEX16=1)
make -j"$(nproc)" "${flags[@]}" -C "$work/OpenBLAS"
make install "${flags[@]}" PREFIX="$OPENBLAS_PREFIX" -C "$work/OpenBLAS"
ls "$OPENBLAS_PREFIX"/lib/libopenblas.so.0
