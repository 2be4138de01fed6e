#!/usr/bin/env bash
# Download URL to DEST and check its sha256 against checksums.sha256 (by NAME, default the URL's
# file name: GitHub's tag archives are all called <tag>.tar.gz, so those pass a project-qualified NAME).
# An unlisted file or a mismatch removes the download and fails: nothing unverified is used.
#   fetch_verified.sh URL DEST [NAME]
set -euo pipefail
url="${1:?usage: fetch_verified.sh URL DEST [NAME]}"
dest="${2:?usage: fetch_verified.sh URL DEST [NAME]}"
name="${3:-${url##*/}}"
[[ "$name" =~ ^[A-Za-z0-9._+-]+$ ]] || { echo "fetch_verified: bad file name in $url" >&2; exit 1; }
sums="$(dirname "${BASH_SOURCE[0]}")/checksums.sha256"
expected="$(awk -v n="$name" '$1 !~ /^#/ && $2 == n {print $1}' "$sums")"
if [[ ! "$expected" =~ ^[0-9a-f]{64}$ ]]; then
  echo "fetch_verified: no pinned sha256 for $name in $sums; refusing to use it" >&2
  exit 1
fi
curl --fail --silent --show-error --location --retry 5 --proto '=https' --output "$dest" "$url"
if ! echo "${expected}  ${dest}" | sha256sum --check --strict --quiet; then
  rm -f -- "$dest"
  echo "fetch_verified: $name does not match its pinned sha256 $expected" >&2
  exit 1
fi
