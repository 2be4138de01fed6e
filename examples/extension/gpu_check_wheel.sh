#!/usr/bin/env bash
# Check a wheel the farm built on a GPU machine, as its user would meet it: install it beside that
# machine's torch (no index, no dependencies pulled: the machine's torch and nvidia-* libraries are the
# user's), show which build the loader picked, then run gpu_check.py (the CUDA kernels and the cuBLAS
# matmul against torch) and the example's tests.
#
# Required environment:
: "${WHEEL:?the wheel to check, e.g. a merged wf_example_ops wheel from wheelfoundry local run}"
: "${OUT_DIR:?a scratch folder for the install and the test run}"
# Optional: PYTHON (default python3: the interpreter holding the machine's CUDA torch).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
site="$OUT_DIR/site"
"$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "on", torch.cuda.get_device_name(0))'
"$python" -m pip install --quiet --no-index --no-deps --target "$site" "$WHEEL"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
cd "$OUT_DIR"
# -P: the script's folder (the source tree) must not shadow the installed wheel.
"$python" -P -c 'import wf_example_ops._C as c; print("loaded build:", c.__wheelfoundry_build__, "from", c.__file__)'
"$python" -P "$here/gpu_check.py"
"$python" -P -m pytest -q -p no:cacheprovider --import-mode=importlib --rootdir "$OUT_DIR" -c /dev/null "$here/tests"
