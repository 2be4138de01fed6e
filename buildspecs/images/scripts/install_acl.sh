#!/usr/bin/env bash
# Arm Compute Library for aarch64 mkldnn (oneDNN's ACL backend), built with the scons flags of
# PyTorch's .ci/docker/common/install_acl.sh.
# Required environment:
#   : "${ACL_VERSION:?}"   a tag, e.g. v52.6.0
#   : "${ACL_ROOT:?}"      install dir, e.g. /acl (ACL_ROOT_DIR of the torch build)
set -euo pipefail
: "${ACL_VERSION:?}"
: "${ACL_ROOT:?}"
[[ "$ACL_VERSION" =~ ^v[0-9]+\.[0-9]+(\.[0-9]+)?$ ]] || { echo "bad ACL_VERSION" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf -- "$work"' EXIT
# ACL publishes no source tarball checksum: the tag's commit is pinned in checksums.sha256 as
# "<commit>  git:ComputeLibrary@<tag>" (fill it with: git ls-remote <repo> "refs/tags/<tag>^{}").
pin="$(awk -v n="git:ComputeLibrary@${ACL_VERSION}" '$1 !~ /^#/ && $2 == n {print $1}' \
  "$(dirname "${BASH_SOURCE[0]}")/checksums.sha256")"
[[ "$pin" =~ ^[0-9a-f]{40}$ ]] || { echo "no pinned commit for ComputeLibrary $ACL_VERSION; refusing" >&2; exit 1; }
git clone --quiet --depth 1 --shallow-submodules --branch "$ACL_VERSION" -- \
  https://github.com/ARM-software/ComputeLibrary.git "$work/acl"
cd "$work/acl"
[[ "$(git rev-parse HEAD)" == "$pin" ]] || { echo "ComputeLibrary $ACL_VERSION is not commit $pin" >&2; exit 1; }
scons -j"$(nproc)" Werror=0 debug=0 neon=1 opencl=0 embed_kernels=0 os=linux arch=armv8a \
  build=native multi_isa=1 fixed_format_kernels=1 openmp=1 cppthreads=0
mkdir -p "$ACL_ROOT"
cp -r arm_compute include utils support src build "$ACL_ROOT"/
ls "$ACL_ROOT"/build/libarm_compute.so
