#!/usr/bin/env bash
# sccache (compiler cache on S3) from the project's release binaries, checked against the sha256
# pinned in checksums.sha256 (PyTorch builds the same tag from source; the binary is the same program).
# Required environment:
#   : "${SCCACHE_VERSION:?}"   e.g. v0.10.0
set -euo pipefail
: "${SCCACHE_VERSION:?}"
[[ "$SCCACHE_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "bad SCCACHE_VERSION" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf -- "$work"' EXIT
name="sccache-${SCCACHE_VERSION}-$(uname -m)-unknown-linux-musl"
base="https://github.com/mozilla/sccache/releases/download/${SCCACHE_VERSION}"
"$(dirname "${BASH_SOURCE[0]}")/fetch_verified.sh" "$base/$name.tar.gz" "$work/$name.tar.gz"
tar -xzf "$work/$name.tar.gz" -C "$work"
install -m 0755 "$work/$name/sccache" /usr/local/bin/sccache
sccache --version
