#!/usr/bin/env bash
# Install a runtime image's wheels into a venv, every file checked against the sha256 the private
# index publishes: pip --require-hashes with a complete lock (--no-deps, then pip check).
# The same script runs in the Dockerfiles' install stage and in host mode (wfbuild.images.runtime_image).
#   install_wheels.sh REQUIREMENTS VENV
# Optional environment:
#   WF_PYTHON       interpreter the venv is made from (default python3)
#   WF_FIND_LINKS   a folder of the wheels (the image job downloaded them from the index): no index is read
#   WF_INDEX_URL    a PEP 503 index instead (the run's channel through `wheelfoundry index serve`)
#   WF_BASE_SITE    host mode only: a site-packages whose packages the venv sees (a .pth), like the
#                   smoke test's base envs; pip check then runs on the lock's packages only
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: install_wheels.sh REQUIREMENTS VENV" >&2
  exit 2
fi
requirements=$1
venv=$2
python=${WF_PYTHON:-python3}

# The venv gets no pip: the runtime image holds what the lock names and nothing to install more with.
# pip runs from the base interpreter into it (pip >= 22.3 --python).
"$python" -m venv --without-pip "$venv"
pip=("$python" -m pip --python "$venv/bin/python")
if [[ -n "${WF_BASE_SITE:-}" ]]; then
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  printf '%s\n' "$WF_BASE_SITE" >"$site/wf-base.pth"
fi
args=(--require-hashes --no-deps --only-binary=:all: --no-cache-dir --disable-pip-version-check)
if [[ -n "${WF_FIND_LINKS:-}" ]]; then
  args+=(--no-index --find-links "$WF_FIND_LINKS")
elif [[ -n "${WF_INDEX_URL:-}" ]]; then
  args+=(--index-url "$WF_INDEX_URL")
fi
"${pip[@]}" install "${args[@]}" -r "$requirements"
if [[ -z "${WF_BASE_SITE:-}" ]]; then
  "${pip[@]}" check # the lock is complete: every dependency is pinned in it
fi
