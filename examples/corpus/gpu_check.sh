#!/usr/bin/env bash
# Install corpus wheels from their published bytes beside a machine's CUDA torch, check them on its GPU.
# Usage: gpu_check.sh WHEEL_DIR BASE_PYTHON MODULE...
#   WHEEL_DIR    the wheels as the farm published them (with their sha256 file, SHA256SUMS, from the index)
#   BASE_PYTHON  an interpreter whose environment holds the CUDA torch (e.g. /opt/torch/.venv/bin/python)
# The venv sees the base environment's torch through a .pth file (as wfbuild.envs' thin environments do)
# and gets the wheels with pip from the files, offline, after their sha256 is checked.
set -euo pipefail
wheels="${1:?wheel folder}"; base="${2:?base python}"; shift 2
: "${1:?at least one module to check}"
here="$(cd "$(dirname "$0")" && pwd)"
venv="$(mktemp -d)/venv"
(cd "$wheels" && sha256sum --check --strict SHA256SUMS)
"$base" -m venv "$venv"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
base_site="$("$base" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf 'import site; site.addsitedir("%s")\n' "$base_site" > "$site/_wf_base.pth"
"$venv/bin/python" -m pip install --quiet --no-index --find-links "$wheels" "$@"
cd "$(mktemp -d)"  # never the source tree: the installed wheels are what imports
"$venv/bin/python" "$here/gpu_check.py" "${@//-/_}"
