#!/usr/bin/env bash
# Check out one repository at one ref with all submodules and record the commit.
# Required environment:
#   : "${WF_REPO:?}"          https:// (or file://) repository URL
#   : "${WF_REF:?}"           tag, branch, HEAD or 40-hex commit
#   : "${WF_DEST:?}"          checkout directory
#   : "${WF_COMMIT_FILE:?}"   the checked-out commit SHA is written here, its commit time to <file>.epoch
set -euo pipefail
: "${WF_REPO:?}"
: "${WF_REF:?}"
: "${WF_DEST:?}"
: "${WF_COMMIT_FILE:?}"
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

wf_check_url "$WF_REPO"
wf_check_ref "$WF_REF"
mkdir -p "$WF_DEST" "$(dirname "$WF_COMMIT_FILE")"
git init --quiet -- "$WF_DEST"
if git -C "$WF_DEST" remote get-url origin >/dev/null 2>&1; then
  git -C "$WF_DEST" remote set-url origin -- "$WF_REPO"
else
  git -C "$WF_DEST" remote add origin -- "$WF_REPO"
fi
# Fetching the one ref (not a clone of every branch) works for tags, branches and commit SHAs.
git -C "$WF_DEST" fetch --quiet --depth 1 --no-tags -- origin "$WF_REF"
git -C "$WF_DEST" -c advice.detachedHead=false checkout --quiet --force --detach FETCH_HEAD
git -C "$WF_DEST" submodule sync --quiet --recursive
git -C "$WF_DEST" submodule update --quiet --init --recursive --depth 1 --jobs 8
git -C "$WF_DEST" rev-parse HEAD >"$WF_COMMIT_FILE"
# The build's SOURCE_DATE_EPOCH (wfbuild.wheels.reproducible): the commit's time, not the checkout's.
git -C "$WF_DEST" log -1 --format=%ct HEAD >"$WF_COMMIT_FILE.epoch"
wf_log "$WF_REPO $WF_REF -> $(cat "$WF_COMMIT_FILE")"
