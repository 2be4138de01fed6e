#!/usr/bin/env bash
# sccache (compiler cache on S3) from the project's release binaries, checked against the
# published checksum (PyTorch builds the same tag from source; the binary is the same program).
# Required environment:
#   : "${SCCACHE_VERSION:?}"   e.g. v0.10.0
# Optional: SCCACHE_SHA256 (pins the archive; otherwise the release's .sha256 file is used)
set -euo pipefail
: "${SCCACHE_VERSION:?}"
[[ "$SCCACHE_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "bad SCCACHE_VERSION" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf -- "$work"' EXIT
name="sccache-${SCCACHE_VERSION}-$(uname -m)-unknown-linux-musl"
base="https://github.com/mozilla/sccache/releases/download/${SCCACHE_VERSION}"
curl --fail --silent --show-error --location --retry 5 --output "$work/$name.tar.gz" "$base/$name.tar.gz"
expected="${SCCACHE_SHA256:-}"
if [[ -z "$expected" ]]; then
  expected="$(curl --fail --silent --show-error --location --retry 5 "$base/$name.tar.gz.sha256" | cut -d' ' -f1)"
fi
echo "${expected}  $work/$name.tar.gz" | sha256sum --check --strict
tar -xzf "$work/$name.tar.gz" -C "$work"
install -m 0755 "$work/$name/sccache" /usr/local/bin/sccache
sccache --version
