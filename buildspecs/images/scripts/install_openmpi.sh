#!/usr/bin/env bash
# Open MPI from source, so torch builds with USE_MPI=1 and torch.distributed.is_mpi_available().
# Bundled hwloc/libevent/PMIx keep it independent of the base image's packages.
# Required environment:
#   : "${OPENMPI_VERSION:?}"   e.g. 5.0.7
#   : "${OPENMPI_PREFIX:?}"    e.g. /opt/openmpi
# Optional: CUDA_HOME (CUDA-aware build when set). The tarball is checked against checksums.sha256.
set -euo pipefail
: "${OPENMPI_VERSION:?}"
: "${OPENMPI_PREFIX:?}"
[[ "$OPENMPI_VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "bad OPENMPI_VERSION" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf -- "$work"' EXIT
series="${OPENMPI_VERSION%.*}"
url="https://download.open-mpi.org/release/open-mpi/v${series}/openmpi-${OPENMPI_VERSION}.tar.bz2"
"$(dirname "${BASH_SOURCE[0]}")/fetch_verified.sh" "$url" "$work/openmpi.tar.bz2"
tar -xjf "$work/openmpi.tar.bz2" -C "$work"
cd "$work/openmpi-${OPENMPI_VERSION}"
cuda=()
if [[ -n "${CUDA_HOME:-}" ]]; then
  cuda=(--with-cuda="$CUDA_HOME")
fi
./configure --prefix="$OPENMPI_PREFIX" --disable-dependency-tracking --disable-man-pages \
  --with-hwloc=internal --with-libevent=internal --with-pmix=internal "${cuda[@]}"
make -j"$(nproc)"
make install
"$OPENMPI_PREFIX/bin/mpicc" --showme:version
