#!/usr/bin/env bash
# Arm Compute Library for aarch64 mkldnn (oneDNN's ACL backend), built with the scons flags of
# PyTorch's .ci/docker/common/install_acl.sh.
# Required environment:
#   : "${ACL_VERSION:?}"   a tag, e.g. v52.6.0, or none: no ACL in this image (a build without oneDNN,
#                          as upstream's aarch64 wheels of torch 1.12 and 1.13)
#   : "${ACL_ROOT:?}"      install dir, e.g. /acl (ACL_ROOT_DIR of the torch build)
set -euo pipefail
: "${ACL_VERSION:?}"
: "${ACL_ROOT:?}"
if [[ "$ACL_VERSION" == none ]]; then
  echo "install_acl: ACL_VERSION=none, no Arm Compute Library in this image"
  exit 0
fi
[[ "$ACL_VERSION" =~ ^v[0-9]+\.[0-9]+(\.[0-9]+)?$ ]] || { echo "bad ACL_VERSION" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf -- "$work"' EXIT
# The tag's source archive, checked against checksums.sha256 as ComputeLibrary-<version>.tar.gz (a
# git tag can be moved; these bytes cannot). ACL's SConscript reads no git metadata it cannot do without.
release="ComputeLibrary-${ACL_VERSION#v}"
"$(dirname "${BASH_SOURCE[0]}")/fetch_verified.sh" \
  "https://github.com/ARM-software/ComputeLibrary/archive/refs/tags/${ACL_VERSION}.tar.gz" \
  "$work/acl.tar.gz" "${release}.tar.gz"
tar -xzf "$work/acl.tar.gz" --no-same-owner -C "$work"
cd "$work/$release"
scons -j"$(nproc)" Werror=0 debug=0 neon=1 opencl=0 embed_kernels=0 os=linux arch=armv8a \
  build=native multi_isa=1 fixed_format_kernels=1 openmp=1 cppthreads=0
mkdir -p "$ACL_ROOT"
cp -r arm_compute include utils support src build "$ACL_ROOT"/
ls "$ACL_ROOT"/build/libarm_compute.so
