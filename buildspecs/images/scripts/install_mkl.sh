#!/usr/bin/env bash
# MKL for x86_64 torch builds, from the pip wheels mkl-static / mkl-include, unpacked into a
# fixed prefix the way PyTorch's .ci/docker/common/install_mkl.sh does (no conda).
# Required environment:
#   : "${MKL_VERSION:?}"   e.g. 2024.2.0
#   : "${MKL_ROOT:?}"      install prefix (include/ and lib/ go there), e.g. /opt/intel
set -euo pipefail
: "${MKL_VERSION:?}"
: "${MKL_ROOT:?}"

work="$(mktemp -d)"
trap 'rm -rf -- "$work"' EXIT
# --require-hashes: pip refuses any wheel whose sha256 is not the one in mkl-requirements.txt.
[[ "$MKL_VERSION" == 2024.2.0 ]] || { echo "MKL $MKL_VERSION has no pinned hashes (mkl-requirements.txt)" >&2; exit 1; }
python3 -m pip download --no-deps --require-hashes --only-binary=:all: --dest "$work" \
  -r "$(dirname "${BASH_SOURCE[0]}")/mkl-requirements.txt"
mkdir -p "$MKL_ROOT"
for wheel in "$work"/*.whl; do
  python3 -m wheel unpack --dest "$work/unpacked" "$wheel"
done
# The wheels keep their payload under <name>-<version>.data/data/{lib,include}.
for data in "$work"/unpacked/*/*.data/data; do
  cp -a "$data"/. "$MKL_ROOT"/
done
ls "$MKL_ROOT/include/mkl.h" "$MKL_ROOT"/lib/libmkl_core.a
